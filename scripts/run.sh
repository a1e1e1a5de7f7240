#!/usr/bin/env bash
# The main job: setup, build, then train the Flax tutorial's MLP (batch 8, 4 layers, depth 1024)
# with Adam on 8 ranks of this machine, mesh data=2,model=4, on synthetic teacher data, for 300
# steps, checkpointing to build/checkpoints every 100 steps (the last 2 kept). Extra arguments go
# to train_mlp and override the defaults here (e.g. `bash scripts/run.sh --steps 50 --scan`);
# `--resume` continues the last run, and a `--ckpt-dir` of the user's is never overwritten;
# `--help` and `--version` print train_mlp's and end.
set -euo pipefail
# The repository's own paths are named from its root; the caller's working directory is left as
# it is, so that the paths given as arguments (--metrics, --ckpt-dir) are the caller's (until the
# forty-fourth session the script moved to the root first, and `--metrics README.md` from another
# directory truncated the repository's README).
root=$(cd "$(dirname "$0")/.." && pwd)
# The build as one progress line; its whole log only when it fails.
build_log=$(mktemp)
trap 'rm -f "$build_log"' EXIT
if ! bash "$root/scripts/build.sh" 2>&1 | tee "$build_log" | while IFS= read -r line; do
  if [[ $line =~ ^\[\ *([0-9]+)%\] ]]; then printf '\rbuild: %3d%%' "${BASH_REMATCH[1]}"; fi
done; then
  printf '\n'
  cat "$build_log" >&2
  echo "run.sh: the build failed (log above)" >&2
  exit 1
fi
printf '\rbuild: done\n'
steps=${TESSERA_RUN_STEPS:-300}
# What the extra arguments name: a checkpoint directory of the user's own, --resume, a metrics file.
own_ckpt_dir=0 resume=0 metrics=$root/build/train_mlp_metrics.jsonl
for ((i = 1; i <= $#; i++)); do
  arg=${!i}
  case $arg in
    # train_mlp prints and trains nothing: no run, no plots (an earlier run's would pass for this one's).
    # The exec leaves no shell for the EXIT trap: the build log goes first.
    -h | --help | --version)
      rm -f "$build_log"
      exec bash "$root/scripts/mpirun/local.sh" 1 "$root/build/apps/train_mlp" "$@"
      ;;
    --ckpt-dir | --ckpt-dir=*) own_ckpt_dir=1 ;;
    --resume) resume=1 ;;
    --metrics) j=$((i + 1)); metrics=${!j:-$metrics} ;;
    --metrics=*) metrics=${arg#--metrics=} ;;
  esac
done
# A fresh run each time in build/checkpoints, the job's own directory: --overwrite deletes the last
# run's checkpoints there (train_mlp refuses a fresh run into a directory holding some). Never in
# a --ckpt-dir given here (its checkpoints are not this script's to delete: pass --overwrite to
# start over there), and never with --resume, which continues the run.
args=(--mesh data=2,model=4 --steps "$steps" --metrics "$root/build/train_mlp_metrics.jsonl"
      --ckpt-dir "$root/build/checkpoints" --save-every 100 --keep 2)
if [ "$own_ckpt_dir" = 0 ] && [ "$resume" = 0 ]; then args+=(--overwrite); fi
bash "$root/scripts/mpirun/local.sh" 8 "$root/build/apps/train_mlp" "${args[@]}" "$@"
echo "plots of this run:"
"$root/scripts/plot_metrics" -o "$root/build/plots" "$metrics"
