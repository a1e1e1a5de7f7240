#!/usr/bin/env bash
# The main job: setup, build, then train the Flax tutorial's MLP (batch 8, 4 layers, depth 1024)
# with Adam on 8 ranks of this machine, mesh data=2,model=4, on synthetic teacher data, for 300
# steps, checkpointing to build/checkpoints every 100 steps (the last 2 kept). Extra arguments go
# to train_mlp and override the defaults here (e.g. `bash scripts/run.sh --steps 50 --scan`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
steps=${TESSERA_RUN_STEPS:-300}
# A fresh run each time: --overwrite deletes the last run's checkpoints (train_mlp refuses a
# fresh run into a directory holding some; use --resume instead to continue one).
args=(--mesh data=2,model=4 --steps "$steps" --metrics build/train_mlp_metrics.jsonl
      --ckpt-dir build/checkpoints --save-every 100 --keep 2 --overwrite)
bash scripts/mpirun/local.sh 8 build/apps/train_mlp "${args[@]}" "$@"
