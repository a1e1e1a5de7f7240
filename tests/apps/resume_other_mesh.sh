#!/usr/bin/env bash
# resume_other_mesh.sh WORKDIR COMMAND_A... -- COMMAND_B...: COMMAND_A (a training app on one
# mesh) runs 10 steps straight, then 5 steps saving a checkpoint; COMMAND_B (another mesh)
# resumes it to step 10, twice from copies of the same directory. The resumed losses of steps
# 6..10 match the straight run's within 1e-4 (another mesh sums in another order) and the two
# resumed runs are identical, bit for bit, as are their final checkpoints' parameters.
set -uo pipefail
work=$1
shift
a=()
while [ "$1" != "--" ]; do a+=("$1"); shift; done
shift
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
"${a[@]}" --steps 10 --metrics "$work/straight.jsonl" >/dev/null || fail "straight run"
"${a[@]}" --steps 5 --ckpt-dir "$work/ckpt1" >/dev/null || fail "first half"
cp -r "$work/ckpt1" "$work/ckpt2"
for i in 1 2; do
  "$@" --steps 10 --ckpt-dir "$work/ckpt$i" --resume --metrics "$work/resumed$i.jsonl" >"$work/resumed$i.log" 2>&1 ||
    { cat "$work/resumed$i.log"; fail "resume $i"; }
done
grep -q "resumed from .*ckpt_00000005.h5 at step 5" "$work/resumed1.log" || fail "did not resume at step 5"
losses() { sed -E 's/.*"step":([0-9]+),"loss":([^,]+),.*/\1 \2/' "$1"; }
cmp <(losses "$work/resumed1.jsonl") <(losses "$work/resumed2.jsonl") || fail "two resumes on the same mesh differ"
cmp "$work/ckpt1/ckpt_00000010.h5" "$work/ckpt2/ckpt_00000010.h5" >/dev/null ||
  h5diff "$work/ckpt1/ckpt_00000010.h5" "$work/ckpt2/ckpt_00000010.h5" /params /params ||
  fail "the two resumed runs' parameters differ"
paste <(losses "$work/straight.jsonl" | tail -n 5) <(losses "$work/resumed1.jsonl") | awk '
  { n++; d = $2 - $4; if (d < 0) d = -d; printf "step %d: straight %.9g resumed %.9g\n", $1, $2, $4
    if ($1 != $3 || !(d <= 1e-4 * $2)) bad = 1 }
  END { if (n != 5 || bad) { print "FAIL: " n " resumed steps, or losses beyond 1e-4"; exit 1 } }' || exit 1
echo "ok: resumed on another mesh, steps 6..10 match the straight run; two resumes identical"
