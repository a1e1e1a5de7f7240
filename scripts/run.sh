#!/usr/bin/env bash
# The main job: setup, build, then train the Flax tutorial's MLP (batch 8, 4 layers, depth 1024)
# on 8 ranks of this machine, mesh data=2,model=4, on synthetic teacher data, saving a
# checkpoint to build/checkpoints when the build has the io layer. Extra arguments go to
# train_mlp and override the defaults here (e.g. `bash scripts/run.sh --steps 50 --scan`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
steps=${TESSERA_RUN_STEPS:-200}
args=(--mesh data=2,model=4 --steps "$steps" --metrics build/train_mlp_metrics.jsonl)
if cmake --build build --target help | grep -q '\btessera_io\b'; then
  args+=(--ckpt-dir build/checkpoints --save-every 100 --keep 2)
else
  echo "run.sh: this build has no io layer; training without checkpoints"
fi
bash scripts/mpirun/local.sh 8 build/apps/train_mlp "${args[@]}" "$@"
