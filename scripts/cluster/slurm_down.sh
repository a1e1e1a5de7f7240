#!/usr/bin/env bash
# slurm_down.sh DIR: stop the Slurm daemons and munged that slurm_up.sh DIR started (by their
# pid files), idempotently. scripts/cluster/down.sh also kills anything left in the hosts.
set -uo pipefail
if [ $# -ne 1 ]; then echo "usage: $0 DIR" >&2; exit 2; fi
dir=$1
pids=()
# A pid file names a daemon only while that process runs: a stale one (after a reboot, say) may
# name any process by now, so only a process whose command is the daemon's is signalled (until
# 2026-11-28 whatever the file named was killed).
for f in "$dir"/spool/*/slurmd.pid "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
  [ -r "$f" ] || continue
  pid=$(cat "$f")
  [[ "$pid" =~ ^[1-9][0-9]*$ ]] || continue
  daemon=$(basename "$f" .pid)
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$daemon" ] || continue
  kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
done
for _ in $(seq 1 50); do
  alive=0
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
  [ "$alive" = 0 ] && break
  sleep 0.1
done
for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
echo "slurm: down"
