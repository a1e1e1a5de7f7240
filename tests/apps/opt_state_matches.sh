#!/usr/bin/env bash
# opt_state_matches.sh WORKDIR COMMAND...: COMMAND (train_lm under mpirun, a mesh with data or seq)
# trains with Adam's state replicated and with --opt-state sharded from the same seed. The losses
# must be identical bit for bit (one node: both sums take the ranks in order), every step's peak
# of tensor storage lower when sharded, and the sharded run's gradients reduce-scattered and its
# weights all-gathered over the batch's axes, where the replicated run all-reduces them. A
# checkpoint of the sharded run then resumes with the state replicated, on the losses of the
# replicated run.
set -uo pipefail
work=$1
shift
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $1" >&2; shift; for f in "$@"; do cat "$f" >&2; done; exit 1; }
"$@" --steps 6 --metrics "$work/replicated.jsonl" >"$work/replicated.out" || fail "replicated run" "$work/replicated.out"
"$@" --steps 6 --opt-state sharded --metrics "$work/sharded.jsonl" >"$work/sharded.out" || fail "sharded run" "$work/sharded.out"
grep -q "Adam's state sharded over the batch's axes" "$work/sharded.out" || fail "the sharded run does not announce it" "$work/sharded.out"
"$@" --steps 3 --opt-state sharded --ckpt-dir "$work/ckpt" >"$work/first.out" || fail "first half" "$work/first.out"
"$@" --steps 6 --ckpt-dir "$work/ckpt" --resume --metrics "$work/resumed.jsonl" >"$work/resumed.out" ||
  fail "resumed half" "$work/resumed.out"
/usr/bin/python3 - "$work/replicated.jsonl" "$work/sharded.jsonl" "$work/resumed.jsonl" <<'PY'
import json, sys
rep, sh, res = ([json.loads(l) for l in open(p)] for p in sys.argv[1:4])
assert len(rep) == len(sh) == 6, (len(rep), len(sh))
for a, b in zip(rep, sh):
    assert a["loss"] == b["loss"], f"step {a['step']}: loss {b['loss']} sharded, {a['loss']} replicated"
    assert b["peak_tensor_bytes"] < a["peak_tensor_bytes"], (a["peak_tensor_bytes"], b["peak_tensor_bytes"])
    ca, cb = a["comm_bytes"], b["comm_bytes"]
    # The gradients' reductions over the batch's axes: all-reduces when replicated; when sharded,
    # reduce-scatters and the weights' all-gathers, with at most the loss's scalars all-reduced.
    batch = lambda op, c: sum(v for k, v in c.items() if k.startswith(op + "/") and ("data" in k or "seq" in k))
    assert batch("all_reduce", ca) > 10000 and batch("reduce_scatter", ca) == 0, ca
    assert batch("all_reduce", cb) < 64 and batch("reduce_scatter", cb) > 10000 and batch("all_gather", cb) > 10000, cb
assert [r["step"] for r in res] == [4, 5, 6], [r["step"] for r in res]
for r in res:
    want = rep[r["step"] - 1]["loss"]
    assert r["loss"] == want, f"step {r['step']}: resumed loss {r['loss']}, straight {want}"
p, s = rep[-1]["peak_tensor_bytes"], sh[-1]["peak_tensor_bytes"]
print(f"ok: 6 steps, identical losses; peak tensor bytes {p} replicated, {s} sharded ({s / p:.2f}); resumed replicated from a sharded checkpoint on the same losses")
PY
