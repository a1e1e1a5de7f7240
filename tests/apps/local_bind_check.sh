#!/usr/bin/env bash
# local_bind_check.sh ROOT: scripts/mpirun/local.sh binds rank r to the (r mod C)-th of the C CPUs
# it may use when N is a whole multiple of C greater than C, and leaves every other launch
# unbound (each rank may run on all C), as TESSERA_LOCAL_BIND=none does; another value of that
# variable stops it with exit 2 and one message. Runs under `taskset` to two CPUs where the
# machine has more, so the cases are the same everywhere.
set -euo pipefail
root=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail() { echo "FAIL: $*" >&2; exit 1; }
local_sh="$root/scripts/mpirun/local.sh"
mine=$(grep Cpus_allowed_list /proc/self/status | cut -f2)
# Two CPUs this process may use (the first two of its list), or one where it has only one.
cpus=$(python3 -c "
import os
print(','.join(str(c) for c in sorted(os.sched_getaffinity(0))[:2]))")
run() { taskset -c "$cpus" bash "$local_sh" "$@"; }
# Each rank's "rank:cpus it may run on", in rank order.
allowed() { run "$1" bash -c 'echo "$OMPI_COMM_WORLD_RANK:$(grep Cpus_allowed_list /proc/self/status | cut -f2)"' |
            sort -n | tr '\n' ' '; }
first=${cpus%%,*}
second=${cpus##*,}
if [ "$first" = "$second" ]; then
  echo "skip: one CPU ($mine)"
  exit 0
fi
both=$(taskset -c "$cpus" grep Cpus_allowed_list /proc/self/status | cut -f2)
for n in 1 2 3; do
  want=$(for ((r = 0; r < n; r++)); do printf '%d:%s ' "$r" "$both"; done)
  got=$(allowed $n)
  [ "$got" = "$want" ] || fail "local.sh $n on CPUs $cpus: ranks $got, want $want (unbound)"
done
for n in 4 8; do
  want=$(for ((r = 0; r < n; r++)); do printf '%d:%s ' "$r" "$([ $((r % 2)) = 0 ] && echo "$first" || echo "$second")"; done)
  got=$(allowed $n)
  [ "$got" = "$want" ] || fail "local.sh $n on CPUs $cpus: ranks $got, want $want (bound in turn)"
done
echo "ok: bound in turn at 4 and 8 ranks on two CPUs, unbound at 1, 2 and 3"
want=$(for ((r = 0; r < 4; r++)); do printf '%d:%s ' "$r" "$both"; done)
got=$(TESSERA_LOCAL_BIND=none allowed 4)
[ "$got" = "$want" ] || fail "TESSERA_LOCAL_BIND=none local.sh 4: ranks $got, want $want"
echo "ok: TESSERA_LOCAL_BIND=none leaves 4 ranks unbound"
rc=0
out=$(TESSERA_LOCAL_BIND=core run 4 true 2>&1) || rc=$?
[ "$rc" = 2 ] || fail "TESSERA_LOCAL_BIND=core: exit $rc, 2 expected ($out)"
[ "$out" = "local.sh: TESSERA_LOCAL_BIND must be unset, auto or none, got 'core'" ] || fail "TESSERA_LOCAL_BIND=core: '$out'"
echo "ok: TESSERA_LOCAL_BIND=core stops local.sh with exit 2"
