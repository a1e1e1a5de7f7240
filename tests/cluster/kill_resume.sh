#!/usr/bin/env bash
# kill_resume.sh BUILD WORK: SIGKILL of a rank on host2 in the middle of a 2 hosts x 4 ranks run
# ends the whole job (non-zero) within 10 s, and --resume from its last checkpoint reproduces
# the uninterrupted run's losses bit for bit (same mesh, same placement).
set -uo pipefail
. "$(dirname "$0")/common.sh"
cluster_require
build=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
run() { bash "$ROOT/scripts/cluster/mpirun.sh" 2 8 "$build/apps/train_mlp" --mesh data=2,model=4 --depth 256 \
          --steps 100 --quiet "$@"; }
run --metrics "$work/straight.jsonl" >/dev/null || { echo "FAIL: uninterrupted run" >&2; exit 1; }
run --save-every 5 --ckpt-dir "$work/ckpt" --metrics "$work/killed.jsonl" > "$work/killed.out" 2>&1 &
job=$!
# Wait for step 7 (a checkpoint at step 5 is written), then kill one train_mlp of host2.
victim=
for _ in $(seq 1 600); do
  if [ "$(wc -l 2>/dev/null < "$work/killed.jsonl" || echo 0)" -ge 7 ]; then
    for pid in $(ip netns pids "$(tcl_ns host2)"); do
      [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = train_mlp ] && { victim=$pid; break; }
    done
    break
  fi
  kill -0 "$job" 2>/dev/null || break
  sleep 0.05
done
if [ -z "$victim" ]; then kill "$job" 2>/dev/null; wait "$job"; echo "FAIL: no rank of host2 found to kill" >&2; exit 1; fi
kill -KILL "$victim"
killed_at=$(date +%s.%N)
ended=
for _ in $(seq 1 100); do
  kill -0 "$job" 2>/dev/null || { ended=1; break; }
  sleep 0.1
done
if [ -z "$ended" ]; then
  echo "FAIL: the job still runs 10 s after a rank on host2 was killed" >&2
  kill -TERM "$job" 2>/dev/null; wait "$job"; exit 1
fi
wait "$job"
rc=$?
secs=$(echo "$(date +%s.%N) - $killed_at" | bc)
steps_done=$(wc -l < "$work/killed.jsonl")
echo "killed rank pid $victim on host2 after step >= 7: job ended with exit code $rc within ${secs}s, $steps_done steps logged"
# mpirun passes on the signal of the rank that died: 128 + SIGKILL.
[ "$rc" -eq 137 ] || { echo "FAIL: the killed job exited $rc, not 137" >&2; exit 1; }
[ "$steps_done" -lt 100 ] || { echo "FAIL: the job finished all steps: nothing was interrupted" >&2; exit 1; }
ls "$work/ckpt" | grep -q . || { echo "FAIL: no checkpoint left to resume from" >&2; exit 1; }
run --save-every 5 --ckpt-dir "$work/ckpt" --resume --metrics "$work/resumed.jsonl" > "$work/resumed.out" \
  || { cat "$work/resumed.out"; echo "FAIL: resume" >&2; exit 1; }
grep "resumed from" "$work/resumed.out"
# Every loss the resumed run printed (steps after its checkpoint) equals the uninterrupted one's.
same_losses <(grep -F -f <(losses "$work/resumed.jsonl" | awk '{print "\"step\":" $1 ","}') "$work/straight.jsonl") \
  "$work/resumed.jsonl" 0 || { echo "FAIL: resumed losses differ from the uninterrupted run's" >&2; exit 1; }
last=$(losses "$work/resumed.jsonl" | tail -1 | cut -d' ' -f1)
[ "$last" = 100 ] || { echo "FAIL: the resumed run ended at step $last" >&2; exit 1; }
echo "ok: resumed run's $(wc -l < "$work/resumed.jsonl") losses (to step 100) identical to the uninterrupted run's"
