#!/usr/bin/env bash
# scaling.sh [--ranks "1 2 4 8"] [--out FILE] [-- BENCH_TRAIN_ARGS...]: the scaling table of the
# README. Runs build/apps/bench_train for each parallelism strategy (dp, tp, fsdp, 2d; see
# bench_train --help) at each rank count on this machine (scripts/mpirun/local.sh), and prints
# one Markdown table: step time (median), its floor and their ratio, the ratio against the floor
# of the steps' placement of the CPUs and that placement's probe (docs/design.md, "Where the host
# runs the CPUs"), the bytes each rank sends per step, the parameters each rank holds and its
# peak resident memory. One rank runs once (every
# strategy is the same program there); 2d needs 4 ranks or more; a configuration whose train state
# does not fit in this machine's memory gets bench_train's refusal in its row instead of figures.
# Any other refusal of bench_train (exit 2: a bad BENCH_TRAIN_ARG) ends it with exit 2 and the
# message; any other failure with exit 1.
# BENCH_TRAIN_ARGS replace the model (default: the B8 L8 D4096 MLP, 3 timed steps after 1).
# --out FILE also keeps every bench_train JSON line there.
#   bash scripts/scaling.sh
#   bash scripts/scaling.sh --ranks "1 2" -- --layers 2 --depth 256
set -euo pipefail
# Paths the user gives (--out, TESSERA_BENCH_TRAIN) are the caller's: resolved before the cd to
# the repository (until 2026-11-28 `--out README.md` from another directory overwrote the
# repository's README).
caller=$PWD
cd "$(dirname "$0")/.."
in_caller() { case $1 in /*) printf '%s' "$1" ;; *) printf '%s/%s' "$caller" "$1" ;; esac; }
ranks_list="1 2 4 8"
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks|--out)
      [ $# -ge 2 ] || { echo "scaling.sh: $1 needs a value" >&2; exit 2; }
      if [ "$1" = --ranks ]; then ranks_list=$2; else out=$2; fi
      shift 2 ;;
    --) shift; break ;;
    *) echo "scaling.sh: unknown argument '$1' (usage: scaling.sh [--ranks \"1 2 4 8\"] [--out FILE] [-- BENCH_TRAIN_ARGS...])" >&2; exit 2 ;;
  esac
done
[ -n "${ranks_list// /}" ] || { echo "scaling.sh: --ranks needs at least one rank count" >&2; exit 2; }
# Each count as the launcher takes it (mpirun reads the count as an int: 4294967298 ran 2 ranks).
source scripts/mpirun/launch_checks.sh
for r in $ranks_list; do check_rank_count "scaling.sh: --ranks" "$r"; done
model_args=("$@")
if [ ${#model_args[@]} -eq 0 ]; then model_args=(--layers 8 --depth 4096 --steps 3 --warmup 1); fi
if [ -n "${TESSERA_BENCH_TRAIN:-}" ]; then bench=$(in_caller "$TESSERA_BENCH_TRAIN"); else bench=build/apps/bench_train; fi
[ -x "$bench" ] || { echo "scaling.sh: $bench is missing: build first (bash scripts/build.sh)" >&2; exit 2; }
# --out is checked before any run: a directory or a file that cannot be written was found only
# after every benchmark had run.
if [ -n "$out" ]; then
  out=$(in_caller "$out")
  if [ -d "$out" ]; then echo "scaling.sh: --out '$out' is a directory" >&2; exit 2; fi
  if ! { [ -e "$out" ] && [ -w "$out" ]; } && ! { [ ! -e "$out" ] && [ -d "$(dirname "$out")" ] && [ -w "$(dirname "$out")" ]; }; then
    echo "scaling.sh: --out '$out' cannot be written" >&2; exit 2
  fi
fi

lines=$(mktemp)
trap 'rm -f "$lines"' EXIT
for r in $ranks_list; do
  for s in dp tp fsdp 2d; do
    if [ "$r" = 1 ] && [ "$s" != dp ]; then continue; fi          # one rank: one program
    if [ "$s" = 2d ] && { [ "$r" -lt 4 ] || [ $((r % 2)) != 0 ]; }; then continue; fi
    label=$([ "$r" = 1 ] && echo all || echo "$s")
    echo "scaling.sh: $label on $r ranks" >&2
    if result=$(bash scripts/mpirun/local.sh "$r" "$bench" --strategy "$s" "${model_args[@]}" 2>&1); then
      line=$(echo "$result" | grep '"bench":"train_step"' || true)
      if [ -z "$line" ]; then  # e.g. -- --help: bench_train printed no step
        echo "scaling.sh: bench_train printed no train_step line on $r ranks ($s) with: ${model_args[*]}" >&2; exit 2
      fi
      echo "$line" | sed "s/\"strategy\":\"$s\"/\"strategy\":\"$label\"/" >> "$lines"
    else
      rc=$?
      message=$(echo "$result" | grep -v '^{' | head -1)
      message=${message#bench_train: }
      if [ "$rc" != 2 ]; then echo "scaling.sh: bench_train failed on $r ranks ($s), exit $rc: $message" >&2; exit 1; fi
      # Exit 2 is also bad input (a flag after --): only the refusal of a model too large for this
      # machine's memory (apps::check_memory) becomes a row; any other ends the table.
      if ! [[ "$message" =~ needs\ [0-9.]+\ GiB\ per\ rank,\ this\ machine\ has ]]; then
        echo "scaling.sh: bench_train refused the arguments on $r ranks ($s): $message" >&2; exit 2
      fi
      /usr/bin/python3 -c 'import json, sys; print(json.dumps({"bench": "train_step", "strategy": sys.argv[1], "ranks": int(sys.argv[2]), "refused": sys.argv[3]}))' \
        "$label" "$r" "$message" >> "$lines"
    fi
  done
done
[ -z "$out" ] || cat "$lines" >"$out"

/usr/bin/python3 - "$lines" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
names = {"all": "all (one rank)", "dp": "data-parallel", "tp": "tensor-parallel", "fsdp": "FSDP", "2d": "2-D (data x model)"}
first = next((r for r in rows if "refused" not in r), None)
if first:
    print(f"MLP batch {first['batch']}, {first['layers']} layers, depth {first['depth']}, Adam, f32; "
          "bench_train --strategy, on this machine's cores (more ranks than cores are oversubscribed)\n")
print("| strategy | ranks | mesh | ms per step | floor ms | ratio | ratio, steps' placement | CPU pair ns | "
      "MB sent per rank per step | parameters per rank | peak GB per rank |")
print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
order = {"all": 0, "dp": 1, "tp": 2, "fsdp": 3, "2d": 4}
for r in sorted(rows, key=lambda r: (order[r["strategy"]], r["ranks"])):
    name = names[r["strategy"]]
    if "refused" in r:
        print(f"| {name} | {r['ranks']} | | not run: {r['refused']} | | | | | | | |")
        continue
    mesh = r["mesh"].replace(": ", "=").replace(" ", "")
    # The ratio against the floor of the placement the host gave the CPUs during the steps
    # (bench_train's ratio_same_placement, null where no measurement saw it), and that placement's
    # probe (cpu_pair_ns: on this machine about 40 ns on one die of the host, 200 on two).
    placed = "n/a" if r["ratio_same_placement"] is None else f"{r['ratio_same_placement']:.2f}"
    print(f"| {name} | {r['ranks']} | {mesh} | {r['ms_median']:.1f} | {r['floor_ms']:.1f} | {r['ratio']:.2f} | "
          f"{placed} | {r['cpu_pair_ns']:.0f} | "
          f"{r['comm_mb_per_rank']:.1f} | {r['params_per_rank'] / 1e6:.1f} M | {r['peak_rss_mb'] / 1e3:.2f} |")
PY
