#!/usr/bin/env bash
# train_matches.sh BUILD WORK: train_mlp on 2 hosts x 4 ranks (data=2,model=4, ranks over TCP
# between hosts) gives the losses of a 1-rank run within 1e-5 relative.
set -uo pipefail
. "$(dirname "$0")/common.sh"
cluster_require
build=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
args=(--depth 256 --steps 8 --quiet)
bash "$ROOT/scripts/mpirun/local.sh" 1 "$build/apps/train_mlp" --mesh data=1,model=1 "${args[@]}" \
  --metrics "$work/one.jsonl" >/dev/null || { echo "FAIL: 1-rank run" >&2; exit 1; }
bash "$ROOT/scripts/cluster/mpirun.sh" 2 8 "$build/apps/train_mlp" --mesh data=2,model=4 "${args[@]}" \
  --metrics "$work/cluster.jsonl" > "$work/cluster.out" || { cat "$work/cluster.out"; echo "FAIL: 2x4 run" >&2; exit 1; }
grep -q "over 8 ranks" "$work/cluster.out" || { echo "FAIL: not 8 ranks" >&2; exit 1; }
same_losses "$work/one.jsonl" "$work/cluster.jsonl" 1e-5 || { echo "FAIL: losses differ" >&2; exit 1; }
echo "ok: 8 losses of 2 hosts x 4 ranks equal the 1-rank run's within 1e-5"
paste <(losses "$work/one.jsonl") <(losses "$work/cluster.jsonl" | cut -d' ' -f2)
