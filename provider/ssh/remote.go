package ssh

// The shell scripts the provider runs on the remote host, each with
// /bin/sh -c and its arguments as $1...: POSIX sh, coreutils and procfs,
// nothing else. Keeping them here, whole, keeps what runs remotely
// reviewable in one place.

// sumFunction defines sum FILE, which prints the file's SHA-256 in hex.
const sumFunction = `
sum() {
	if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1
	elif command -v shasum >/dev/null 2>&1; then shasum -a 256 "$1" | cut -d' ' -f1
	else echo "no sha256sum (coreutils) on the remote host to check runboxd with" >&2; exit 4
	fi
}
`

// probeScript prints, one per line: the machine (uname -m), the cache
// directory, and the SHA-256 of the cached runboxd for $1 (the binary's
// SHA-256), or "none" when it is not there.
const probeScript = sumFunction + `
set -e
uname -m
cache=${XDG_CACHE_HOME:-$HOME/.cache}/runbox
printf '%s\n' "$cache"
if [ -f "$cache/runboxd-$1" ]; then sum "$cache/runboxd-$1"; else echo none; fi
`

// installScript reads runboxd ($2 bytes) from stdin into the cache as
// runboxd-$1, checks its size and SHA-256 ($1), and only then renames it in
// place, so a binary that arrived damaged is never run.
const installScript = sumFunction + `
set -e
umask 077
cache=${XDG_CACHE_HOME:-$HOME/.cache}/runbox
mkdir -p "$cache"
tmp=$cache/.runboxd-$1.$$
trap 'rm -f "$tmp"' EXIT
cat > "$tmp"
size=$(wc -c < "$tmp" | tr -d ' ')
if [ "$size" != "$2" ]; then echo "runboxd upload: got $size bytes, sent $2" >&2; exit 3; fi
got=$(sum "$tmp")
if [ "$got" != "$1" ]; then echo "runboxd upload: SHA-256 $got, sent $1" >&2; exit 3; fi
chmod 700 "$tmp"
mv -f "$tmp" "$cache/runboxd-$1"
trap - EXIT
`

// startScript makes the sandbox's state directory (under
// $XDG_STATE_HOME/runbox, or /tmp/runbox-UID where that path would make
// the socket's too long), and starts runboxd ($2) in a new session,
// detached from the SSH session, with the secret's hash ($3), in the
// workdir ($4, created if absent; "" is $HOME), with the remaining
// arguments. It waits (up to 30 s) until the socket is there or runboxd
// has exited, so that the first dial finds it, and prints the state
// directory, runboxd's pid and start time (field 22 of its stat), the
// workdir and the boot id.
// RUNBOX_SANDBOX=<id> in runboxd's environment is inherited by every
// command, so what outlives a killed runboxd can still be found.
const startScript = `
set -e
sandbox=$1 bin=$2 auth=$3 workdir=$4
shift 4
mask=$(umask)
umask 077
dir=${XDG_STATE_HOME:-$HOME/.local/state}/runbox/sandboxes/$sandbox
if [ ${#dir} -gt 90 ]; then
	base=/tmp/runbox-$(id -u)
	mkdir -p "$base"
	if [ ! -O "$base" ] || [ -L "$base" ]; then echo "$base belongs to someone else" >&2; exit 5; fi
	chmod 700 "$base"
	dir=$base/$sandbox
fi
mkdir -p "$dir"
umask "$mask"
if [ -z "$workdir" ]; then workdir=$HOME; fi
mkdir -p "$workdir"
cd "$workdir"
workdir=$(pwd -P)
set -- "$bin" serve --socket "$dir/runboxd.sock" --auth-sha256 "$auth" --dir "$workdir" \
	--state-dir "$dir/state" --spill-dir "$dir/spill" "$@"
if command -v setsid >/dev/null 2>&1; then set -- setsid "$@"; fi
RUNBOX_SANDBOX=$sandbox nohup "$@" </dev/null >>"$dir/runboxd.log" 2>&1 &
pid=$!
start=$(sed 's/^.*) //' "/proc/$pid/stat" | cut -d' ' -f20)
running() { state=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -c1) && [ -n "$state" ] && [ "$state" != Z ]; }
i=0
while [ ! -S "$dir/runboxd.sock" ] && running && [ "$i" -lt 600 ]; do sleep 0.05; i=$((i+1)); done
printf '%s\n' "$dir" "$pid" "$start" "$workdir"
cat /proc/sys/kernel/random/boot_id
`

// statusScript prints "alive" when process $1 runs and started at $2
// (field 22 of its stat: pids are reused), else "gone"; with $3 (the state
// directory) set, then the tail of runboxd's log.
const statusScript = `
state=gone
if [ -r "/proc/$1/stat" ]; then
	rest=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null) || rest=
	set -- "$1" "$2" "$3" $rest
	# $4 is field 3 (state), field 22 (start time) is ${23}.
	if [ "$#" -ge 23 ] && [ "${23}" = "$2" ] && [ "$4" != Z ] && [ "$4" != X ]; then state=alive; fi
fi
echo "$state"
if [ -n "$3" ] && [ -f "$3/runboxd.log" ]; then tail -c 1500 "$3/runboxd.log"; fi
`

// cleanupScript waits up to $5 seconds for runboxd ($1, started at $2) to
// exit, kills it if it still runs, then kills every process whose
// environment carries RUNBOX_SANDBOX=$3 (what a killed runboxd's commands
// leave; a plain user can read only its own processes' environments),
// round after round until two in a row, 50 ms apart, find none (a process
// inside an exec shows an empty environment for a moment: the second
// round sees it), and removes the state directory ($4). It prints how
// many processes it killed.
const cleanupScript = `
pid=$1 start=$2 sandbox=$3 dir=$4 wait=$5
alive() {
	rest=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null) || return 1
	set -- $rest
	[ "$#" -ge 20 ] && [ "${20}" = "$start" ] && [ "$1" != Z ] && [ "$1" != X ]
}
i=0
while [ "$i" -lt "$((wait * 20))" ] && alive; do sleep 0.05; i=$((i+1)); done
killed=0
if alive; then kill -KILL "$pid" 2>/dev/null && killed=1; fi
empty=0
for round in 1 2 3 4 5 6 7 8 9 10; do
	found=0
	for e in $(grep -lsxz "RUNBOX_SANDBOX=$sandbox" /proc/[0-9]*/environ); do
		p=${e#/proc/}; p=${p%/environ}
		[ "$p" = "$$" ] && continue
		kill -KILL "$p" 2>/dev/null && found=$((found+1))
	done
	killed=$((killed+found))
	if [ "$found" = 0 ]; then
		empty=$((empty+1))
		[ "$empty" = 2 ] && break
		sleep 0.05
	else
		empty=0
		sleep 0.1
	fi
done
case "$dir" in
*/runbox/sandboxes/"$sandbox"|/tmp/runbox-*/"$sandbox") rm -rf "$dir" ;;
*) echo "refusing to remove $dir: not a runbox state directory" >&2; exit 6 ;;
esac
echo "$killed"
`
