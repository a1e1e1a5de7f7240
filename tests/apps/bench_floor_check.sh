#!/usr/bin/env bash
# bench_floor_check.sh COMMAND...: COMMAND (bench_train under mpirun) prints its gemm, copy,
# adam_stream and train_step lines, and the step's floor is the one docs/design.md defines:
#   floor_ms = 1e3 * (gflop_per_rank / gemm rate + mb_per_rank * 1e-3 / max(copy, adam_stream) GB/s)
# with the gemm rate the fastest of the MLP's three products (forward, input gradient, weight
# gradient; all three printed and positive), within 1% (the fields are printed to 3 or 4
# digits), and ratio = ms_median / floor_ms.
set -uo pipefail
out=$("$@") || { echo "FAIL: bench_train exited with $?" >&2; exit 1; }
echo "$out"
/usr/bin/python3 - "$out" <<'PY'
import json, sys
lines = {}
for line in sys.argv[1].splitlines():
    if line.startswith("{"):
        d = json.loads(line)
        lines[d["bench"]] = d
for name in ("gemm", "copy", "adam_stream", "train_step"):
    assert name in lines, f"no {name} line"
gemm, copy, stream, step = lines["gemm"], lines["copy"], lines["adam_stream"], lines["train_step"]
assert stream["gb_per_s_per_rank"] > 0 and stream["elements"] > 0, stream
bw = max(copy["gb_per_s_per_rank"], stream["gb_per_s_per_rank"])
rates = [gemm["gflops_per_rank"], gemm["input_grad_gflops_per_rank"], gemm["weight_grad_gflops_per_rank"]]
assert min(rates) > 0, gemm
floor = 1e3 * (step["gflop_per_rank"] / max(rates) + step["mb_per_rank"] * 1e-3 / bw)
assert abs(floor - step["floor_ms"]) <= 1e-2 * floor, (floor, step["floor_ms"])  # printed to 3-4 digits
assert abs(step["ms_median"] / step["floor_ms"] - step["ratio"]) <= 1e-2 * step["ratio"], step
print(f"ok: floor {step['floor_ms']} ms = {floor:.3f} from the printed rates")
PY
