#!/usr/bin/env bash
# ckpt_across.sh BUILD WORK: a checkpoint saved on 2 hosts (data=2,model=4) restores on 1 host
# onto another mesh (data=2,model=2, 4 ranks) bit for bit: that run saves what it restored and
# h5diff finds every parameter and optimizer array identical to the 2-host file.
set -uo pipefail
. "$(dirname "$0")/common.sh"
cluster_require
build=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
args=(--depth 256 --quiet)
bash "$ROOT/scripts/cluster/mpirun.sh" 2 8 "$build/apps/train_mlp" --mesh data=2,model=4 "${args[@]}" \
  --steps 5 --ckpt-dir "$work/two" >/dev/null || { echo "FAIL: 2-host run" >&2; exit 1; }
mkdir -p "$work/one" && cp -r "$work/two"/. "$work/one/"  # the 1-host run resumes from (and saves to) a copy
bash "$ROOT/scripts/cluster/mpirun.sh" 1 4 "$build/apps/train_mlp" --mesh data=2,model=2 "${args[@]}" \
  --steps 5 --resume --ckpt-dir "$work/one" > "$work/one.out" || { cat "$work/one.out"; echo "FAIL: 1-host restore" >&2; exit 1; }
grep -q "resumed from .* at step 5" "$work/one.out" || { cat "$work/one.out"; echo "FAIL: no resume at step 5" >&2; exit 1; }
a=$(ls "$work/two"/*.h5 | tail -1) b=$(ls "$work/one"/*.h5 | tail -1)
[ -n "$a" ] && [ -n "$b" ] || { echo "FAIL: checkpoint files missing" >&2; exit 1; }
n=0
for ds in $(h5ls -r "$a" | awk '$2 == "Dataset" { print $1 }'); do
  h5diff "$a" "$b" "$ds" "$ds" >/dev/null || { echo "FAIL: $ds differs after restoring on another mesh" >&2; h5diff -r "$a" "$b" "$ds" "$ds" | head; exit 1; }
  n=$((n + 1))
done
[ "$n" -gt 0 ] || { echo "FAIL: no datasets in $a" >&2; exit 1; }
echo "ok: $n arrays saved on 2 hosts (data=2,model=4) identical after restoring on 1 host (data=2,model=2)"
