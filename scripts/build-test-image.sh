#!/usr/bin/env bash
# build-test-image.sh builds the small images the Docker provider's tests use,
# offline (no registry is reachable), with `docker import` of a root
# filesystem made from Debian's static busybox and bash:
#
#   runbox-test:busybox          busybox applets, /bin/sh (busybox ash) and /bin/bash (bash-static)
#   runbox-test:busybox-nobash   the same without bash, for the sh fallback
#   runbox-test:tools            runbox-test:busybox plus git and python3, copied from
#                                this machine's installed Debian packages and every
#                                package they depend on (docs, man pages and locales
#                                left out), for the conformance cases that need them
#                                (GitNoPrompt, LoopbackListener)
#
# Both have relative symlinks for every applet, a small /bin/nohup script
# (busybox-static has no nohup applet), /etc/passwd and /etc/group (root,
# nobody), a world-writable /tmp and a /root. The script is
# idempotent: an image whose recorded input digest matches is left alone.
#
# Usage: scripts/build-test-image.sh [REPOSITORY]   (default runbox-test)
#
# RUNBOX_IMAGE_CLI is the command that imports and inspects images (default
# docker); for Podman it is podman, or, for another user's (rootless)
# service, podman --remote --url unix:///run/user/UID/podman/podman.sock:
# the same tarballs, imported with `podman import`. Several commands,
# separated by ';', import each tarball into every engine they name
# (scripts/podman-service.sh does this for its two services).
#
# It needs that CLI and the busybox-static, bash-static, git and
# python3 packages; when they are missing and it runs as root with apt-get,
# it installs them.
set -euo pipefail

repo=${1:-runbox-test}
IFS=';' read -ra clis <<<"${RUNBOX_IMAGE_CLI:-docker}"

need_pkgs=()
for c in "${clis[@]}"; do
	read -ra cli <<<"$c"
	command -v "${cli[0]}" >/dev/null || { echo "build-test-image: ${cli[0]} is missing (apt-get install docker.io, or podman)" >&2; exit 1; }
done
dpkg -s busybox-static >/dev/null 2>&1 || need_pkgs+=(busybox-static)
dpkg -s bash-static >/dev/null 2>&1 || need_pkgs+=(bash-static)
dpkg -s git >/dev/null 2>&1 || need_pkgs+=(git)
dpkg -s python3 >/dev/null 2>&1 || need_pkgs+=(python3)
if [ ${#need_pkgs[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need_pkgs[@]}"
	else
		echo "build-test-image: install ${need_pkgs[*]} first (apt-get install ${need_pkgs[*]})" >&2
		exit 1
	fi
fi

# The packages' own file lists say where the binaries are (/bin or /usr/bin).
busybox=$(dpkg -L busybox-static | grep -E '/bin/busybox$' | head -n1)
bash_static=$(dpkg -L bash-static | grep -E '/bin/bash-static$' | head -n1)
for f in "$busybox" "$bash_static"; do
	[ -n "$f" ] && [ -x "$f" ] || { echo "build-test-image: static binary not found ($f)" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/runbox-test-image.XXXXXX")
trap 'rm -rf "$work"' EXIT

# mkroot DIR WITH_BASH lays out a root filesystem in DIR.
mkroot() {
	local root=$1 with_bash=$2
	mkdir -p "$root"/{bin,etc,root,tmp,usr,dev,proc,sys}
	chmod 1777 "$root/tmp"
	chmod 0700 "$root/root"
	install -m 0755 "$busybox" "$root/bin/busybox"
	local applet
	for applet in $("$busybox" --list); do
		case $applet in
		busybox | bash) continue ;; # never let busybox pose as bash
		esac
		ln -s busybox "$root/bin/$applet"
	done
	if [ "$with_bash" = yes ]; then
		install -m 0755 "$bash_static" "$root/bin/bash"
	fi
	# Debian's busybox has no nohup applet; agents' commands use it, and so
	# do the tests. This one does what coreutils' does: ignore SIGHUP, send
	# output to nohup.out when it would go to a terminal, then exec.
	cat >"$root/bin/nohup" <<-'EOF'
		#!/bin/sh
		# nohup COMMAND [ARG]...: run COMMAND immune to hangups.
		if [ $# -eq 0 ]; then
			echo "usage: nohup COMMAND [ARG]..." >&2
			exit 125
		fi
		trap '' HUP
		if [ -t 1 ]; then
			exec >>nohup.out || exec >>"$HOME/nohup.out" || exit 125
		fi
		if [ -t 2 ]; then
			exec 2>&1
		fi
		exec "$@"
	EOF
	chmod 0755 "$root/bin/nohup"
	ln -s bin "$root/sbin"
	ln -s ../bin "$root/usr/bin"
	ln -s ../bin "$root/usr/sbin"
	cat >"$root/etc/passwd" <<-'EOF'
		root:x:0:0:root:/root:/bin/sh
		nobody:x:65534:65534:nobody:/nonexistent:/bin/false
	EOF
	cat >"$root/etc/group" <<-'EOF'
		root:x:0:
		nogroup:x:65534:
	EOF
	chmod 0644 "$root/etc/passwd" "$root/etc/group"
}

# closure PKG... prints the installed packages PKG... depend on, directly
# or not (Depends and Pre-Depends; of alternatives, the first installed),
# themselves included, one per line.
closure() {
	local -A seen=()
	local queue=("$@") p dep alt name
	while [ ${#queue[@]} -gt 0 ]; do
		p=${queue[0]}
		queue=("${queue[@]:1}")
		[ -n "${seen[$p]:-}" ] && continue
		dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' || continue
		seen[$p]=1
		while IFS= read -r dep; do
			IFS='|' read -ra alt <<<"$dep"
			for name in "${alt[@]}"; do
				name=$(sed 's/([^)]*)//; s/\[[^]]*\]//; s/[[:space:]]//g; s/:any$//' <<<"$name")
				[ -n "$name" ] || continue
				if dpkg-query -W -f='${db:Status-Abbrev}' "$name" 2>/dev/null | grep -q '^ii'; then
					queue+=("$name")
					break
				fi
			done
		done < <(dpkg-query -W -f='${Depends}, ${Pre-Depends}\n' "$p" | tr ',' '\n')
	done
	printf '%s\n' "${!seen[@]}" | sort
}

# addpkgs ROOT PKG... copies the files of the installed packages PKG... and
# of everything they depend on into ROOT (documentation, man pages and
# locales left out; what busybox already put there is kept).
addpkgs() {
	local root=$1
	shift
	local list="$work/files-$$"
	closure "$@" | xargs dpkg-query -L 2>/dev/null |
		grep -Ev '^/usr/share/(doc|man|info|locale|lintian|bug)(/|$)' |
		while IFS= read -r f; do
			[ -e "$f" ] || [ -L "$f" ] || continue
			[ -d "$f" ] && [ ! -L "$f" ] && continue # made as needed
			# Debian's usr-merge: /bin, /sbin and /lib* are links into
			# /usr; copy the files by their /usr paths.
			case $f in /bin/* | /sbin/* | /lib/* | /lib64/*) [ -e "/usr$f" ] || [ -L "/usr$f" ] && f=/usr$f ;; esac
			printf '%s\n' "${f#/}"
		done | sort -u >"$list"
	tar -C / --no-recursion -cf - -T "$list" | tar -C "$root" --keep-old-files -xf - 2>/dev/null || true
	# The dynamic loader and libraries where Debian's programs look for them.
	for d in lib lib64; do
		[ -e "$root/$d" ] || [ ! -d "$root/usr/$d" ] || ln -s "usr/$d" "$root/$d"
	done
	rm -f "$list"
}

# build TAG WITH_BASH [PKG...] makes the image TAG unless it is already up
# to date; PKG... are Debian packages added to it.
build() {
	local tag=$1 with_bash=$2 root="$work/root-${1//:/_}" tarball="$work/rootfs-${1//:/_}.tar"
	shift 2
	mkroot "$root" "$with_bash"
	if [ $# -gt 0 ]; then
		addpkgs "$root" "$@"
	fi
	# A reproducible tar: sorted, fixed owner and times, so its digest only
	# changes when the inputs do.
	tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$root" -cf "$tarball" .
	local digest comment have
	digest=$(sha256sum "$tarball" | cut -d' ' -f1)
	comment="runbox test image rootfs sha256:$digest"
	local c cli
	for c in "${clis[@]}"; do
		read -ra cli <<<"$c"
		have=$("${cli[@]}" image inspect -f '{{.Comment}}' "$tag" 2>/dev/null || true)
		if [ "$have" = "$comment" ]; then
			echo "$tag is up to date in ${cli[*]} ($digest)"
			continue
		fi
		"${cli[@]}" import \
			--message "$comment" \
			--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
			--change 'CMD ["/bin/sh"]' \
			"$tarball" "$tag" >/dev/null
		echo "built $tag in ${cli[*]} ($digest)"
	done
}

build "$repo:busybox" yes
build "$repo:busybox-nobash" no
build "$repo:tools" yes git python3
