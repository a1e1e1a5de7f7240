#!/usr/bin/env bash
# scaling_check.sh BENCH_TRAIN: scripts/scaling.sh at 1, 2 and 4 ranks on a small MLP (2 layers,
# depth 256) prints its table with one row per strategy and rank count, and the figures are
# those of the strategies: data-parallel holds every parameter and, at this batch of 8, gathers
# each weight gradient's two operands over data instead of all-reducing the gradient
# (nn/einsum.h, einsum_toward): exactly (n-1) x (8/n) x depth x 4 bytes per operand per step,
# plus the loss's few bytes, far less than the ring all-reduce (2 (n-1)/n of 4 depth^2 bytes per
# weight); tensor-parallel and FSDP hold 1/n of them, 2-D 1/model; FSDP computes each weight
# gradient in its own split from moved factors, sending less than a reduce-scatter of them.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
jsonl=$(mktemp)
trap 'rm -f "$jsonl"' EXIT
table=$(TESSERA_BENCH_TRAIN=$1 bash "$root/scripts/scaling.sh" --ranks "1 2 4" --out "$jsonl" -- \
  --layers 2 --depth 256 --steps 2 --warmup 1 --measure-seconds 0.02 --copy-mib 1)
echo "$table"
/usr/bin/python3 - "$jsonl" "$table" <<'PY'
import json, sys
rows = {(r["strategy"], r["ranks"]): r for r in map(json.loads, open(sys.argv[1]))}
want = [("all", 1), ("dp", 2), ("dp", 4), ("tp", 2), ("tp", 4), ("fsdp", 2), ("fsdp", 4), ("2d", 4)]
assert sorted(rows) == sorted(want), sorted(rows)
layers, depth = 2, 256
total = 2 * layers * depth * depth
for (s, n), r in rows.items():
    assert "refused" not in r, r
    held = total if s in ("all", "dp") else total / (n // 2 if s == "2d" else n)
    assert r["params_per_rank"] == held, (s, n, r["params_per_rank"], held)
    assert r["ms_median"] > 0 and r["floor_ms"] > 0, r
    if s == "dp":
        gathers = 2 * layers * 2 * (n - 1) * (8 // n) * depth * 4
        assert abs(r["comm_mb_per_rank"] * 1e6 - gathers) <= 500 + 64, (n, r["comm_mb_per_rank"], gathers)  # printed to 1 kB
        # FSDP's weight gradients are computed in their own split from moved factors too: it
        # sends less than one reduce-scatter of its gradients would.
        scatter = 2 * layers * ((n - 1) * 4 * depth * depth // n)
        assert 0 < rows[("fsdp", n)]["comm_mb_per_rank"] * 1e6 < scatter, (n, rows[("fsdp", n)], scatter)
    if s in ("tp", "2d"):
        assert r["comm_mb_per_rank"] > 0, r
assert rows[("all", 1)]["comm_mb_per_rank"] == 0
lines = [l for l in sys.argv[2].splitlines() if l.startswith("| ") and "---" not in l]
assert len(lines) == 1 + len(want), lines  # the header and one row each
assert lines[1].startswith("| all (one rank) | 1 | data=1,model=1 |"), lines[1]
# Eleven columns a row; the same-placement ratio and the probe as bench_train printed them.
one = rows[("all", 1)]
cells = [c.strip() for c in lines[1].strip().strip("|").split("|")]
assert len(cells) == 11 and all(len([c for c in l.strip().strip("|").split("|")]) == 11 for l in lines), lines
placed = "n/a" if one["ratio_same_placement"] is None else f"{one['ratio_same_placement']:.2f}"
assert cells[6] == placed and cells[7] == f"{one['cpu_pair_ns']:.0f}", (cells, one)
assert any(l.startswith("| FSDP | 4 | data=4,model=1 |") for l in lines), lines
assert any(l.startswith("| 2-D (data x model) | 4 | data=2,model=2 |") for l in lines), lines
print("ok: 8 rows, parameters per rank and data-parallel bytes as the strategies give")
PY

# A model too large for this machine's memory gets bench_train's refusal in its row (a depth of
# 100000: 2 x 10^10 parameters); a bad argument ends the script with exit 2 and bench_train's
# message, where until 2026-11-28 it became a row "not run" per configuration.
big=$(TESSERA_BENCH_TRAIN=$1 bash "$root/scripts/scaling.sh" --ranks 1 -- --layers 2 --depth 100000 --steps 1 2>/dev/null)
grep -qE '^\| all \(one rank\) \| 1 \| \| not run: needs [0-9.]+ GiB per rank, this machine has [0-9.]+ GiB \|' <<<"$big" ||
  { echo "FAIL: no refused row for a model that does not fit:"; echo "$big"; exit 1; }
set +e
bad=$(TESSERA_BENCH_TRAIN=$1 bash "$root/scripts/scaling.sh" --ranks 1 -- --depth -5 2>&1 >/dev/null)
rc=$?
set -e
want="scaling.sh: bench_train refused the arguments on 1 ranks (dp): --batch, --depth and --layers must be >= 1"
[ "$rc" = 2 ] && [ "$(tail -1 <<<"$bad")" = "$want" ] ||
  { echo "FAIL: a bad argument gave exit $rc and: $bad"; exit 1; }
echo "ok: a model that does not fit is a row; a bad argument ends the script with exit 2"
