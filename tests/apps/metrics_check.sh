#!/usr/bin/env bash
# metrics_check.sh WORKDIR LAYERS DEPTH COMMAND...: COMMAND (train_mlp under mpirun on
# data=2,model=2) trains with --metrics; every line must carry the time split and the bytes, and
# they must add up:
#   - compute_ms + comm_ms + optimizer_ms = ms (to the printed rounding);
#   - comm_bytes has "<collective>/<axes>" keys and is the same every step (a deterministic step);
#   - the weight gradients of the batch of 8 come from their operands all-gathered over data
#     (nn/einsum.h, einsum_toward), not from all-reducing DEPTH x DEPTH/2 gradient blocks: each
#     of LAYERS x 2 kernels gathers a (8/2) x DEPTH block (the layer's input, or the output's
#     cotangent) and a (8/2) x DEPTH/2 one (the hidden activation, or its cotangent), 4 bytes an
#     element: LAYERS x 2 x 6 x 8 x DEPTH bytes in all (all_gather sends (n - 1) B, n = 2); the
#     only all-reduce over data is the loss's 4 bytes;
#   - the end-of-run table's step total and bytes per step equal the sums of the lines.
set -uo pipefail
work=$1
layers=$2
depth=$3
shift 3
rm -rf "$work" && mkdir -p "$work"
"$@" --layers "$layers" --depth "$depth" --steps 4 --metrics "$work/run.jsonl" >"$work/stdout" ||
  { echo "FAIL: training run" >&2; exit 1; }
/usr/bin/python3 - "$work/run.jsonl" "$work/stdout" "$layers" "$depth" <<'PY'
import json, re, sys
metrics, stdout, layers, depth = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rows = [json.loads(line) for line in open(metrics)]
assert len(rows) == 4, f"{len(rows)} lines, expected 4"
for r in rows:
    for field in ("step", "loss", "ms", "compute_ms", "comm_ms", "optimizer_ms", "slowest_rank", "comm_bytes"):
        assert field in r, f"step {r.get('step')}: no field {field}: {r}"
    parts = r["compute_ms"] + r["comm_ms"] + r["optimizer_ms"]
    assert abs(parts - r["ms"]) <= 0.005, f"step {r['step']}: spans sum to {parts}, ms is {r['ms']}"
    assert min(r["compute_ms"], r["comm_ms"], r["optimizer_ms"]) >= 0, r
    assert 0 <= r["slowest_rank"] < 4, r
    for key, value in r["comm_bytes"].items():
        assert re.fullmatch(r"[a-z_]+/([a-z_]+(\+[a-z_]+)*|-)", key), f"bad key {key!r}"
        assert isinstance(value, int) and value >= 0, (key, value)
    assert r["comm_bytes"] == rows[0]["comm_bytes"], f"step {r['step']}: bytes differ from step 1"
want = layers * 2 * (4 * depth + 4 * depth // 2) * 4
got = rows[0]["comm_bytes"].get("all_gather/data")
assert got == want, f"all_gather/data sends {got} bytes per step, expected {want}"
loss = rows[0]["comm_bytes"].get("all_reduce/data")
assert loss == 4, f"all_reduce/data sends {loss} bytes per step, expected the loss's 4"
assert rows[0]["comm_bytes"].get("all_reduce/model", 0) > 0, rows[0]["comm_bytes"]
table = open(stdout).read()
m = re.search(r"^  step +([0-9.]+) ms +100\.0%", table, re.M)
assert m, "no step line in the end table:\n" + table
total = sum(r["ms"] for r in rows)
assert abs(float(m.group(1)) - total) <= 0.05 + 0.001 * total, f"table says {m.group(1)} ms, lines sum to {total}"
m = re.search(r"^  total +([0-9]+) ", table, re.M)
assert m and int(m.group(1)) == sum(rows[0]["comm_bytes"].values()), "table's bytes/step differ from the lines"
print(f"ok: {len(rows)} steps, spans add up, all_gather/data {got} bytes/step, table consistent")
PY
