#!/usr/bin/env bash
# podman-service.sh starts Podman's Docker-compatible API service twice, for
# the docker provider's tests against Podman (docs/podman.md):
#
#   rootful   as root, on $DIR/root.sock, its storage under $DIR/storage
#   rootless  as the plain user $RUNBOX_PODMAN_USER (default
#             runbox-podman-test, made with subuid/subgid ranges when
#             missing), on /run/user/UID/podman/podman.sock, Podman's usual
#             rootless path, with XDG_RUNTIME_DIR=/run/user/UID
#
# and imports the offline test images into both with `podman import`
# (scripts/build-test-image.sh, the same tarballs as Docker's), unless
# RUNBOX_PODMAN_NO_IMAGES=1: then add $RUNBOX_PODMAN_IMAGE_CLI (from env) to
# build-test-image.sh's RUNBOX_IMAGE_CLI, so the tarballs are built once for
# every engine.
#
# Neither touches the machine's network: containers.conf makes "none" the
# default network mode, and nothing here creates a network, so Podman's
# default bridge (10.88.0.0/16) is never made; `start` fails if a podman or
# CNI interface appears anyway.
#
# The containers' default nofile and nproc limits are this shell's hard
# limits (nproc at most 32768, where Podman caps its own): rootful Podman
# otherwise raises them to 1048576 and more, which fails (EPERM from runc's
# setrlimit) where root lacks CAP_SYS_RESOURCE.
#
# Usage: scripts/podman-service.sh start|stop|env   (run as root)
#   start may run again: it first does what stop does.
#   stop removes both services' containers (they are these tests' only),
#   stops the services and the rootless user's pause process, each by the
#   PID recorded for it; nothing else is touched. CI runs it at exit.
#   env prints the variables the tests read (eval it):
#   RUNBOX_PODMAN_ROOTFUL_HOST, RUNBOX_PODMAN_ROOTLESS_USER, and
#   RUNBOX_PODMAN_IMAGE_CLI.
set -euo pipefail

dir=${RUNBOX_PODMAN_DIR:-/var/tmp/runbox-podman}
user=${RUNBOX_PODMAN_USER:-runbox-podman-test}
here=$(cd "$(dirname "$0")" && pwd)

[ "$(id -u)" = 0 ] || { echo "podman-service: run as root" >&2; exit 1; }

# userenv is the command prefix that runs a command as the rootless user,
# in a login-like environment (set by start).
userenv=()
set_userenv() {
	local uid
	uid=$(id -u "$user")
	userenv=(setpriv --reuid="$uid" --regid="$(id -g "$user")" --init-groups
		env -i -C / HOME="$(getent passwd "$user" | cut -d: -f6)" USER="$user" LOGNAME="$user"
		PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin XDG_RUNTIME_DIR="/run/user/$uid"
		CONTAINERS_CONF="$dir/containers.conf" CONTAINERS_STORAGE_CONF="$dir/storage-user.conf")
}

# wait_sock SOCK LOG waits for a service to answer on SOCK.
wait_sock() {
	for _ in $(seq 100); do
		podman --remote --url "unix://$1" version >/dev/null 2>&1 && return 0
		sleep 0.3
	done
	echo "podman-service: nothing answers on $1" >&2
	tail -n 30 "$2" >&2
	return 1
}

# image_cli is RUNBOX_IMAGE_CLI for scripts/build-test-image.sh: podman
# import into both services.
image_cli() {
	echo "podman --remote --url unix://$dir/root.sock;podman --remote --url unix:///run/user/$(id -u "$user")/podman/podman.sock"
}

# is_podman PID reports whether PID is a live podman process (not a
# process that took over a recorded PID since).
is_podman() {
	[ -n "$1" ] && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q '^\(/usr/bin/\)\?podman'
}

# stop_pid FILE stops the podman process whose PID FILE records, waiting
# up to 10 s for it to end before it kills it, and removes FILE.
stop_pid() {
	local f=$1 p
	[ -f "$f" ] || return 0
	p=$(cat "$f")
	if is_podman "$p"; then
		kill "$p" 2>/dev/null || true
		for _ in $(seq 40); do
			is_podman "$p" || break
			sleep 0.25
		done
		! is_podman "$p" || kill -9 "$p" 2>/dev/null || true
	fi
	rm -f "$f"
}

# do_stop removes every container of both services (they serve these
# tests only; a test binary killed by its timeout leaves its sandboxes),
# stops the services, and ends the rootless user's pause process (which
# holds its user namespace), each by the PID recorded for it.
do_stop() {
	local uid="" url
	if id "$user" >/dev/null 2>&1; then uid=$(id -u "$user"); fi
	for url in "unix://$dir/root.sock" ${uid:+"unix:///run/user/$uid/podman/podman.sock"}; do
		[ -S "${url#unix://}" ] || continue
		timeout 120 podman --remote --url "$url" rm --all --force --time 0 >/dev/null 2>&1 || true
	done
	stop_pid "$dir/root.pid"
	stop_pid "$dir/user.pid"
	if [ -n "$uid" ] && [ -f "/run/user/$uid/libpod/tmp/pause.pid" ]; then
		local p
		p=$(cat "/run/user/$uid/libpod/tmp/pause.pid")
		if is_podman "$p" && [ "$(stat -c %u "/proc/$p")" = "$uid" ]; then
			kill "$p" 2>/dev/null || true
		fi
		rm -f "/run/user/$uid/libpod/tmp/pause.pid"
	fi
}

case ${1:-} in
start)
	command -v podman >/dev/null || { echo "podman-service: apt-get install podman uidmap first" >&2; exit 1; }
	links_before=$(ip -o link show | cut -d: -f2 | sort)
	mkdir -p "$dir"
	chmod 0755 "$dir"
	# Podman caps its own nproc at 32768; a container may not ask for more
	# than the service holds without CAP_SYS_RESOURCE.
	nofile=$(ulimit -Hn)
	nproc=$(ulimit -Hu)
	if [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; then nproc=32768; fi
	if [ "$nofile" = unlimited ] || [ "$nofile" -gt 1048576 ]; then nofile=1048576; fi
	cat >"$dir/containers.conf" <<-EOF
		[containers]
		netns = "none"
		default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
		[engine]
		cgroup_manager = "cgroupfs"
		events_logger = "file"
	EOF
	# Kernel overlay (rootless too: a 5.13+ kernel mounts it in a user
	# namespace); without a storage.conf Podman picks vfs rootless, which
	# copies the whole image for every container.
	cat >"$dir/storage.conf" <<-EOF
		[storage]
		driver = "overlay"
		graphroot = "$dir/storage"
		runroot = "$dir/run"
	EOF
	printf '[storage]\ndriver = "overlay"\n' >"$dir/storage-user.conf"
	chmod 0644 "$dir"/*.conf

	# The rootless user, with subordinate ids for its containers.
	id "$user" >/dev/null 2>&1 || useradd -m -s /bin/bash "$user"
	grep -q "^$user:" /etc/subuid || usermod --add-subuids 300000-365535 "$user"
	grep -q "^$user:" /etc/subgid || usermod --add-subgids 300000-365535 "$user"
	uid=$(id -u "$user")
	install -d -m 0700 -o "$user" -g "$(id -g "$user")" "/run/user/$uid"
	install -d -m 0700 -o "$user" -g "$(id -g "$user")" "/run/user/$uid/podman"

	# Idempotent: what an earlier start left (services, containers) goes
	# first.
	do_stop
	(
		cd /
		CONTAINERS_CONF="$dir/containers.conf" CONTAINERS_STORAGE_CONF="$dir/storage.conf" \
			podman system service --time=0 "unix://$dir/root.sock" </dev/null >"$dir/root.log" 2>&1 &
		echo $! >"$dir/root.pid"
	)
	set_userenv
	"${userenv[@]}" podman system service --time=0 "unix:///run/user/$uid/podman/podman.sock" </dev/null >"$dir/user.log" 2>&1 &
	echo $! >"$dir/user.pid"
	wait_sock "$dir/root.sock" "$dir/root.log"
	wait_sock "/run/user/$uid/podman/podman.sock" "$dir/user.log"

	[ "${RUNBOX_PODMAN_NO_IMAGES:-}" = 1 ] || RUNBOX_IMAGE_CLI=$(image_cli) "$here/build-test-image.sh"

	links_after=$(ip -o link show | cut -d: -f2 | sort)
	if [ "$links_before" != "$links_after" ]; then
		echo "podman-service: network interfaces changed:" >&2
		diff <(echo "$links_before") <(echo "$links_after") >&2 || true
		exit 1
	fi
	;;
stop)
	do_stop
	;;
env)
	echo "export RUNBOX_PODMAN_ROOTFUL_HOST=unix://$dir/root.sock"
	echo "export RUNBOX_PODMAN_ROOTLESS_USER=$user"
	echo "export RUNBOX_PODMAN_IMAGE_CLI='$(image_cli)'"
	;;
*)
	echo "usage: $0 start|stop|env" >&2
	exit 2
	;;
esac
