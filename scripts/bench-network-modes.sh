#!/bin/bash
# Usage: WORKDIR=DIR [ROUNDS=8] scripts/bench-network-modes.sh, with runbox, runbox-full and
# runboxd in PATH (and RUNBOX_HOME set as you like). Prints medians in microseconds.
# Interleaved create / exec / rm cost of local sandboxes by network mode.
: "${WORKDIR:?set WORKDIR to a private directory (mode 0755, yours)}"
ms() { date +%s%N; }
declare -A up ex rm
for round in $(seq 1 ${ROUNDS:-8}); do
  for net in host none private; do
    t0=$(ms); sb=$(runbox up --provider local --workdir "$WORKDIR" --network $net); t1=$(ms)
    for i in 1 2 3 4 5; do runbox exec $sb -- true; done; t2=$(ms)
    runbox rm $sb >/dev/null; t3=$(ms)
    up[$net]+="$(( (t1-t0)/1000 )) "; ex[$net]+="$(( (t2-t1)/5000 )) "; rm[$net]+="$(( (t3-t2)/1000 )) "
  done
done
med() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
for net in host none private; do
  echo "$net up_us=$(echo ${up[$net]} | med) exec_us=$(echo ${ex[$net]} | med) rm_us=$(echo ${rm[$net]} | med)"
done
