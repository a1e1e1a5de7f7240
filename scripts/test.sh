#!/usr/bin/env bash
# The test command: setup if needed, configure, build, run every suite with ctest.
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
# MPI suites oversubscribe the cores themselves; two ctest jobs keep both cores busy.
ctest --test-dir build --output-on-failure -j 2 "$@"
# The fuzz step (its own clang build in build-fuzz/): replays tests/fuzz/corpus through every
# libFuzzer target, then fuzzes each for FUZZ_SECONDS (25 s). TESSERA_SKIP_FUZZ=1 leaves it out.
if [ "${TESSERA_SKIP_FUZZ:-0}" != 1 ]; then
  bash scripts/fuzz.sh
fi
