#!/usr/bin/env bash
# readme_figures.sh README WORKDIR RUN8 -- RUN4 -- TRAIN_MLP: runs the commands of the README's
# "bf16 and rematerialisation" tables (RUN8 and RUN4 launch 8 and 4 ranks, TRAIN_MLP is the
# binary) and checks every figure of those two tables against what the runs print, so that a
# change that moves a byte count, a peak of tensor storage or a loss fails here until the README
# says so:
#   - bytes by collective and their total, and the peaks of tensor bytes: exact. The f32 peak of
#     the default model depends on the build (a weight updated in one pass writes no panel of its
#     gradient; without AVX-512 a panel of 1 MiB is written): its cell gives both, and the run's
#     must be one of them;
#   - losses: within 2e-5 of the README's 5 decimals, and relatively within 1e-6 of its 17 digits
#     (other vector widths round the sums differently); the remat run's "the same bits" exactly.
set -uo pipefail
readme=$1
work=$2
shift 2
run8=()
while [ "$1" != "--" ]; do run8+=("$1"); shift; done
shift
run4=()
while [ "$1" != "--" ]; do run4+=("$1"); shift; done
shift
train_mlp=$1
rm -rf "$work" && mkdir -p "$work"
run() {
  local name=$1
  shift
  "$@" --quiet --metrics "$work/$name.jsonl" >"$work/$name.out" 2>&1 ||
    { echo "FAIL: the $name run exited with $?" >&2; cat "$work/$name.out" >&2; exit 1; }
}
run f32 "${run8[@]}" "$train_mlp" --steps 3 --dtype f32
run bf16 "${run8[@]}" "$train_mlp" --steps 3 --dtype bf16
deep=(--mesh data=2,model=2 --batch 4096 --depth 256 --layers 8 --steps 3)
run plain "${run4[@]}" "$train_mlp" "${deep[@]}"
run remat "${run4[@]}" "$train_mlp" "${deep[@]}" --remat
/usr/bin/python3 - "$readme" "$work" <<'PY'
import json, re, sys
readme, work = sys.argv[1], sys.argv[2]
lines = open(readme).read().splitlines()

def table(header):
    """The rows below the header row `header` (its first cell), as {first cell: [other cells]}."""
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == header:
            rows = {}
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                c = [x.strip() for x in row.strip().strip("|").split("|")]
                rows[c[0]] = c[1:]
            return rows
    sys.exit(f"FAIL: no table headed '{header}' in {readme}")

def row(rows, start):
    found = [cells for first, cells in rows.items() if first.startswith(start)]
    assert len(found) == 1, f"{len(found)} rows start with '{start}'"
    return found[0]

def numbers(cell):
    return [float(x) for x in re.findall(r"\d+(?:\.\d+)?", cell.replace(",", " "))]

def steps(name):
    return [json.loads(l) for l in open(f"{work}/{name}.jsonl")]

def last(name):
    return steps(name)[-1]

checked = 0
t1 = table("default model, `data=2,model=4`")
f32, bf16 = last("f32"), last("bf16")
for key in ("all_gather/data", "all_reduce/data", "all_reduce/model"):
    for col, got in ((0, f32), (1, bf16)):
        want = numbers(row(t1, f"`{key}` bytes per step")[col])[0]
        assert got["comm_bytes"][key] == want, f"{key}: the README says {want:.0f} bytes, the run sent {got['comm_bytes'][key]}"
        checked += 1
for col, got in ((0, f32), (1, bf16)):
    want = numbers(row(t1, "total bytes per step")[col])[0]
    assert sum(got["comm_bytes"].values()) == want, f"total: the README says {want:.0f}, the run sent {sum(got['comm_bytes'].values())}"
    want = numbers(row(t1, "loss at step 3")[col])[0]
    assert abs(got["loss"] - want) <= 2e-5, f"loss at step 3: the README says {want}, the run gave {got['loss']}"
    checked += 2
peaks = [x for x in numbers(row(t1, "peak tensor bytes")[0]) if x >= 1e6]
assert f32["peak_tensor_bytes"] in peaks, f"f32 peak: the README gives {peaks}, the run {f32['peak_tensor_bytes']}"
want = numbers(row(t1, "peak tensor bytes")[1])[0]
assert bf16["peak_tensor_bytes"] == want, f"bf16 peak: the README says {want:.0f}, the run {bf16['peak_tensor_bytes']}"
checked += 2

t2 = table("8 layers, batch 4096, depth 256")
plain, remat = steps("plain"), steps("remat")
for col, got in ((0, plain[-1]), (1, remat[-1])):
    want = numbers(row(t2, "peak tensor bytes per step (rank 0)")[col])[0]
    assert got["peak_tensor_bytes"] == want, f"peak: the README says {want:.0f}, the run {got['peak_tensor_bytes']}"
    want = numbers(row(t2, "`all_reduce/model` bytes per step")[col])[0]
    assert got["comm_bytes"]["all_reduce/model"] == want, f"all_reduce/model: the README says {want:.0f}, the run {got['comm_bytes']['all_reduce/model']}"
    checked += 2
losses = row(t2, "losses (steps 1-3)")
readme_losses = numbers(losses[0].split("(")[0])  # the three losses, not the note after them
assert len(readme_losses) == 3 == len(plain), (readme_losses, len(plain))
for step, (want, got) in enumerate(zip(readme_losses, plain), 1):
    assert abs(got["loss"] - want) <= 1e-6 * want, f"step {step}: the README says loss {want}, the run {got['loss']}"
assert losses[1] == "the same bits", losses[1]
assert [s["loss"] for s in remat] == [s["loss"] for s in plain], "remat: not the same bits"
checked += 4
print(f"ok: {checked} figures of the README's two tables match the runs (f32 peak {f32['peak_tensor_bytes']})")
PY
