#!/usr/bin/env bash
# The test command: setup if needed, configure, build, run every suite with ctest.
# Exits non-zero on any failure; ends with ctest's summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
# The cluster tests (label cluster: a simulated 2-host cluster in network namespaces and a real
# Slurm on it) need root and network namespaces; elsewhere they are left out, with the reason.
extra=()
. tests/cluster/common.sh
if why=$(cluster_allowed); then
  echo "test: cluster tests run (simulated hosts in network namespaces)"
else
  echo "test: cluster tests skipped: $why"
  extra=(-LE cluster)
fi
# MPI suites oversubscribe the cores themselves; two ctest jobs keep both cores busy.
ctest --test-dir build --output-on-failure -j 2 "${extra[@]}" "$@"
