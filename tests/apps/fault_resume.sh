#!/usr/bin/env bash
# fault_resume.sh WORKDIR CKPT_TOOL KILL COMMAND...: COMMAND (train_mlp under mpirun) trains 12
# steps straight; then again saving every 4 steps while one rank SIGKILLs itself at KILL
# (TESSERA_CHECKPOINT_TEST_KILL, "<point>:<rank>": step<S> mid-step, after_write@<S> or
# before_rename@<S> mid-save). The killed job must end within 10 s, failed; every complete
# checkpoint left must verify and `latest` must name one of them; --resume must then reproduce
# the uninterrupted run's losses bit for bit, and leave the metrics file it appends to (the killed
# run's) with one line a step, as the uninterrupted run's.
set -uo pipefail
work=$1
tool=$2
kill_at=$3
shift 3
rm -rf "$work" && mkdir -p "$work"
dir="$work/ckpt"
fail() { echo "FAIL ($kill_at): $*" >&2; exit 1; }
"$@" --steps 12 --metrics "$work/straight.jsonl" >/dev/null || fail "straight run"

start=$(date +%s%N)
TESSERA_CHECKPOINT_TEST_KILL=$kill_at timeout 10 "$@" --steps 12 --save-every 4 --ckpt-dir "$dir" \
  --metrics "$work/killed.jsonl" >"$work/killed.out" 2>&1
rc=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
seconds=$(printf '%d.%03d' $((elapsed_ms / 1000)) $((elapsed_ms % 1000)))
[ $rc -ne 124 ] || fail "the job did not end within 10 s after the kill"
[ $rc -ne 0 ] || fail "the job with a killed rank exited 0"
grep -q "TESSERA_CHECKPOINT_TEST_KILL: rank" "$work/killed.out" || fail "the kill point was never reached"
echo "killed job ended in ${seconds}s with exit $rc"

complete=$(cd "$dir" && ls ckpt_*.h5 2>/dev/null)
[ -n "$complete" ] || fail "no complete checkpoint left (the kill should come after the first save)"
for f in $complete; do
  "$tool" verify "$dir/$f" >/dev/null 2>&1 || fail "$f is taken as complete but does not verify"
done
if [ -e "$dir/latest" ]; then
  [ -f "$dir/$(cat "$dir/latest")" ] || fail "latest names $(cat "$dir/latest"), which does not exist"
fi

# The resume appends to the killed run's metrics file, as a rerun of the same command would: the
# lines of the steps after the restored checkpoint, which it trains again, are dropped first.
before=$(wc -l <"$work/killed.jsonl")
"$@" --steps 12 --save-every 4 --ckpt-dir "$dir" --resume --metrics "$work/killed.jsonl" >"$work/resumed.out" ||
  fail "resume"
losses() { sed -E 's/.*"step":([0-9]+),"loss":([^,]+),.*/\1 \2/' "$1"; }
resumed_at=$(sed -nE 's/^resumed from .* at step ([0-9]+)$/\1/p' "$work/resumed.out")
[ -n "$resumed_at" ] || fail "the resume did not say its step"
n=$((12 - resumed_at))
[ "$n" -ge 1 ] || fail "the resumed run computed no step"
# One line a step, in order, each the uninterrupted run's loss bit for bit.
if ! diff <(losses "$work/killed.jsonl") <(losses "$work/straight.jsonl"); then
  fail "the metrics file after the resume differs from the uninterrupted run's"
fi
dropped=$(sed -nE 's/.*: ([0-9]+) lines? after step [0-9]+ dropped .*/\1/p' "$work/resumed.out")
[ "${dropped:-0}" -eq $((before - resumed_at)) ] ||
  fail "the resume dropped ${dropped:-0} metrics lines, the killed run wrote $((before - resumed_at)) after step $resumed_at"
echo "ok ($kill_at): ended in ${seconds}s, $(echo $complete | wc -w) complete checkpoint(s) verify, resumed $n steps bit for bit, ${dropped:-0} metrics lines dropped"
