#!/usr/bin/env bash
# remat_matches.sh WORKDIR COMMAND...: COMMAND (train_mlp or train_lm under mpirun) trains without and with
# --remat from the same seed; the losses must be identical bit for bit (printed with 17 digits),
# every step's peak of tensor storage lower with --remat, and --remat must send more bytes (each
# layer's forward collectives run again in the backward pass).
set -uo pipefail
work=$1
shift
rm -rf "$work" && mkdir -p "$work"
"$@" --metrics "$work/plain.jsonl" >"$work/plain.out" || { echo "FAIL: plain run" >&2; cat "$work/plain.out" >&2; exit 1; }
"$@" --remat --metrics "$work/remat.jsonl" >"$work/remat.out" || { echo "FAIL: remat run" >&2; cat "$work/remat.out" >&2; exit 1; }
grep -q "remat per \(layer\|block\)" "$work/remat.out" || { echo "FAIL: the remat run does not announce it" >&2; exit 1; }
/usr/bin/python3 - "$work/plain.jsonl" "$work/remat.jsonl" <<'PY'
import json, sys
plain = [json.loads(l) for l in open(sys.argv[1])]
remat = [json.loads(l) for l in open(sys.argv[2])]
assert len(plain) == len(remat) >= 3, (len(plain), len(remat))
for a, b in zip(plain, remat):
    assert a["loss"] == b["loss"], f"step {a['step']}: loss {b['loss']} with remat, {a['loss']} without"
    assert b["peak_tensor_bytes"] < a["peak_tensor_bytes"], (a["peak_tensor_bytes"], b["peak_tensor_bytes"])
    assert sum(b["comm_bytes"].values()) > sum(a["comm_bytes"].values()), (a["comm_bytes"], b["comm_bytes"])
p, r = plain[-1]["peak_tensor_bytes"], remat[-1]["peak_tensor_bytes"]
print(f"ok: {len(plain)} steps, identical losses; peak tensor bytes per step {p} plain, {r} remat ({r / p:.2f})")
PY
