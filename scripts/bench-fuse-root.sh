#!/bin/bash
# What docs/performance.md reports for the local sandbox's FUSE root (issue 27):
# two builds side by side, /tmp/rb0 (before) and /tmp/rb1 (after), in
# interleaved rounds, with a vendored copy of this repository at
# /tmp/benchws/src as the workspace (git archive HEAD, then go mod vendor).
# Interleaved rounds: v0 = main (id-mapped kernel overlay), v1 = fuse root.
# Prints one line per measurement: version what milliseconds.
rounds=${1:-3}
cd /tmp/benchws
ms() { local s=$(date +%s%N); "$@" >/dev/null 2>&1; local e=$(date +%s%N); echo $(( (e-s)/1000000 )); }
for r in $(seq $rounds); do
  for v in 0 1; do
    export RUNBOX_HOME=/tmp/benchhome$v
    rb=/tmp/rb$v
    # create -> first exec
    s=$(date +%s%N)
    id=$($rb/runbox-full up --provider local --workdir /tmp/benchws/src)
    $rb/runbox exec $id -- true
    e=$(date +%s%N); echo "v$v create+first_exec $(( (e-s)/1000000 ))"
    # 20 x exec true (by id: the front)
    s=$(date +%s%N); for i in $(seq 20); do $rb/runbox exec $id -- true; done; e=$(date +%s%N)
    echo "v$v exec_true $(( (e-s)/20000000 ))"
    echo "v$v find_usr $(ms $rb/runbox exec $id -- 'find /usr -xdev | wc -l')"
    echo "v$v tar_python $(ms $rb/runbox exec $id -- 'tar c /usr/lib/python3 | wc -c')"
    echo "v$v go_build $(ms $rb/runbox exec $id --timeout 20m -- 'cd /workspace && GOCACHE=/var/tmp/gocache GOFLAGS=-mod=vendor /usr/local/go/bin/go build -o /var/tmp/runboxd ./cmd/runboxd')"
    $rb/runbox-full rm -f $id >/dev/null
  done
done
