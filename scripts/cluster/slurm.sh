#!/usr/bin/env bash
# slurm.sh DIR COMMAND...: run a Slurm client (sbatch, squeue, sinfo, sacct...) against the
# Slurm of slurm_up.sh DIR, from host1 (the login node).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=env.sh
. "$here/env.sh"
dir=$1
shift
SLURM_CONF=$dir/slurm.conf tcl_enter host1 "$@"
