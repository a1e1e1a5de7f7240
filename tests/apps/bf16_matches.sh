#!/usr/bin/env bash
# bf16_matches.sh WORKDIR COMMAND...: COMMAND (train_mlp or train_lm under mpirun) trains with
# --dtype f32 and with --dtype bf16 from the same seed; then
#   - every step's bf16 loss is within 2% of the f32 loss (bf16 keeps 8 significant bits: 0.4%
#     per rounding), and the bf16 loss falls (mean of the last 5 steps < 0.8 x the first 5);
#   - bytes per step, by default (train_mlp on data=2,model=2): every collective of the bf16 run
#     sends exactly half the f32 run's bytes, except the loss's scalar all-reduce over data, which
#     stays f32 (4 bytes in both runs). With BF16_MAX_BYTES_RATIO=r (train_lm, whose embedding
#     gradient and vocabulary-parallel loss stay f32): the bf16 run's total is at most r x f32's,
#     and no collective sends more than in the f32 run.
set -uo pipefail
work=$1
shift
rm -rf "$work" && mkdir -p "$work"
for dtype in f32 bf16; do
  "$@" --dtype "$dtype" --metrics "$work/$dtype.jsonl" >"$work/$dtype.out" ||
    { echo "FAIL: the $dtype run exited with $?" >&2; cat "$work/$dtype.out" >&2; exit 1; }
done
grep -q "dtype bf16 (f32 parameters and Adam moments, bf16 compute)" "$work/bf16.out" ||
  { echo "FAIL: the bf16 run does not announce its policy" >&2; exit 1; }
/usr/bin/python3 - "$work/f32.jsonl" "$work/bf16.jsonl" <<'PY'
import json, os, sys
f32 = [json.loads(l) for l in open(sys.argv[1])]
bf16 = [json.loads(l) for l in open(sys.argv[2])]
assert len(f32) == len(bf16) >= 10, (len(f32), len(bf16))
worst = 0.0
for a, b in zip(f32, bf16):
    rel = abs(b["loss"] - a["loss"]) / abs(a["loss"])
    worst = max(worst, rel)
    assert rel <= 0.02, f"step {a['step']}: bf16 loss {b['loss']} vs f32 {a['loss']} ({rel:.4f} > 0.02)"
assert any(a["loss"] != b["loss"] for a, b in zip(f32, bf16)), "the bf16 run gave the f32 losses: bf16 did not run"
first = sum(r["loss"] for r in bf16[:5]) / 5
last = sum(r["loss"] for r in bf16[-5:]) / 5
assert last < 0.8 * first, f"bf16 loss did not fall: first 5 {first}, last 5 {last}"
bytes32, bytes16 = f32[0]["comm_bytes"], bf16[0]["comm_bytes"]
assert set(bytes32) == set(bytes16), (bytes32, bytes16)
tot32, tot16 = sum(bytes32.values()), sum(bytes16.values())
ratio = os.environ.get("BF16_MAX_BYTES_RATIO")
if ratio is None:
    scalar = {"all_reduce/data": 4}  # the f32 loss: all_reduce over data=2 sends its 4 bytes
    for key, b32 in bytes32.items():
        s = scalar.get(key, 0)
        assert b32 - s == 2 * (bytes16[key] - s), f"{key}: f32 {b32} bytes, bf16 {bytes16[key]} (scalar {s})"
    detail = f"half of {tot32 - 4} plus the f32 loss's 4"
else:
    for key, b32 in bytes32.items():
        assert bytes16[key] <= b32, f"{key}: bf16 sends {bytes16[key]} bytes, more than f32's {b32}"
    assert tot16 <= float(ratio) * tot32, f"bf16 sends {tot16} bytes per step, over {ratio} x f32's {tot32}"
    detail = f"{tot16 / tot32:.3f} of f32's, limit {ratio}"
print(f"ok: {len(f32)} steps, bf16 loss within {worst:.4%} of f32; bytes per step f32 {tot32}, bf16 {tot16} "
      f"({detail})")
PY
