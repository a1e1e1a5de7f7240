#!/usr/bin/env bash
# The test command: setup if needed, configure, build, run every suite with ctest.
# Exits non-zero on any failure; ends with ctest's summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
# MPI suites oversubscribe the cores themselves; two ctest jobs keep both cores busy.
ctest --test-dir build --output-on-failure -j 2 "$@"
