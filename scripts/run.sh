#!/usr/bin/env bash
# The main job: setup, build, then run on 8 ranks of this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
bash scripts/mpirun/local.sh 8 build/apps/demo_mesh "$@"
