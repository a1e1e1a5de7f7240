#!/usr/bin/env bash
# slurm_down_check.sh ROOT: scripts/cluster/slurm_down.sh signals a pid file's process only when its
# command is the daemon's. Stand-ins, no cluster needed (nothing of a running cluster test is touched):
# a copy of sleep named slurmd behind a slurmd pid file (stopped), a plain sleep behind munged's (a
# stale pid file that names another process by now: left running), and a slurmctld pid file that
# holds no number (ignored).
set -uo pipefail
root=$1
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

mkdir -p "$work/bin" "$work/spool/host1" "$work/munge"
cp "$(command -v sleep)" "$work/bin/slurmd"
"$work/bin/slurmd" 300 &
daemon=$!
sleep 300 &
other=$!
pids+=("$daemon" "$other")
echo "$daemon" >"$work/spool/host1/slurmd.pid"
echo "$other" >"$work/munge/munged.pid"
echo "not a pid" >"$work/slurmctld.pid"
# The stand-in's command must read as the daemon's, or the check below proves nothing.
for _ in $(seq 1 50); do [ "$(cat "/proc/$daemon/comm" 2>/dev/null)" = slurmd ] && break; sleep 0.1; done
[ "$(cat "/proc/$daemon/comm")" = slurmd ] || fail "the stand-in's command is '$(cat "/proc/$daemon/comm")', not slurmd"

out=$(bash "$root/scripts/cluster/slurm_down.sh" "$work" 2>&1)
rc=$?
[ "$rc" -eq 0 ] || fail "slurm_down.sh exited $rc: $out"
[ "$out" = "slurm: down" ] || fail "slurm_down.sh printed '$out'"
wait "$daemon" 2>/dev/null
kill -0 "$daemon" 2>/dev/null && fail "the slurmd stand-in (pid $daemon) still runs"
kill -0 "$other" 2>/dev/null || fail "the process a stale munged.pid names (pid $other, a sleep) was signalled"
echo "slurm_down.sh: stopped the daemon its pid file names, left the other process and the bad pid file alone"
