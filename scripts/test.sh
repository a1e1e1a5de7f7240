#!/usr/bin/env bash
# The test command: setup if needed, configure, build, run every suite with ctest.
# Then the AddressSanitizer + UBSan build (build-sanitize/, TESSERA_SANITIZE=ON, -O1) and its
# suite at 1 and 2 ranks; TESSERA_TEST_SANITIZE=0 skips it for quick local runs (CI runs it).
# Then the fuzz step (scripts/fuzz.sh, build-fuzz/); TESSERA_SKIP_FUZZ=1 leaves it out.
# Arguments go to both ctest runs. Exits non-zero on any failure.
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

if [ "${TESSERA_TEST_SANITIZE:-1}" != 0 ]; then
  echo "== sanitizer build (build-sanitize/, ASan + UBSan) =="
  launcher=()
  if command -v ccache >/dev/null 2>&1; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  fi
  cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=Release -DTESSERA_SANITIZE=ON -DTESSERA_NATIVE=OFF \
    "${launcher[@]}" >/dev/null
  cmake --build build-sanitize -j "$(nproc)"
  ctest --test-dir build-sanitize --output-on-failure -j 2 "$@"
fi

# The fuzz step (its own clang build in build-fuzz/): replays tests/fuzz/corpus through every
# libFuzzer target, then fuzzes each for FUZZ_SECONDS (25 s). TESSERA_SKIP_FUZZ=1 leaves it out.
if [ "${TESSERA_SKIP_FUZZ:-0}" != 1 ]; then
  bash scripts/fuzz.sh
fi
