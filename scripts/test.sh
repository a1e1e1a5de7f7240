#!/usr/bin/env bash
# The test command: setup if needed, configure, build, run every suite with ctest.
# Then the AddressSanitizer + UBSan build (build-sanitize/: clang, TESSERA_SANITIZE=ON, -O1, and
# TESSERA_FUZZ=ON so the same build holds the libFuzzer targets) and its suite at 1 and 2 ranks;
# TESSERA_TEST_SANITIZE=0 skips it for quick local runs (CI runs it).
# Then the fuzz step (scripts/fuzz.sh, on build-sanitize/; on build-fuzz/ when the sanitizer step
# was skipped); TESSERA_SKIP_FUZZ=1 leaves it out.
# Arguments go to both ctest runs. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/generator.sh
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

fuzz_build=()
if [ "${TESSERA_TEST_SANITIZE:-1}" != 0 ]; then
  echo "== sanitizer build (build-sanitize/, clang, ASan + UBSan, with the fuzz targets) =="
  # A build-sanitize/ of an earlier layout (GCC, or another generator) is made again from scratch.
  if [ -f build-sanitize/CMakeCache.txt ] &&
     { ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' build-sanitize/CMakeCache.txt ||
       ! grep -qx 'TESSERA_FUZZ:BOOL=ON' build-sanitize/CMakeCache.txt; }; then
    rm -rf build-sanitize
  fi
  CC=clang CXX=clang++ cmake -S . -B build-sanitize $(generator_for build-sanitize) $(compiler_launcher) \
    -DCMAKE_BUILD_TYPE=Release -DTESSERA_SANITIZE=ON -DTESSERA_FUZZ=ON -DTESSERA_NATIVE=OFF >/dev/null
  cmake --build build-sanitize -j "$(nproc)"
  ctest --test-dir build-sanitize --output-on-failure -j 2 "$@"
  fuzz_build=(env TESSERA_FUZZ_BUILD=build-sanitize)
fi

# The fuzz step (scripts/fuzz.sh): replays tests/fuzz/corpus through every libFuzzer target, then
# fuzzes each for FUZZ_SECONDS, here 10 s unless set (fuzz.sh alone: 25 s), as many targets at a
# time as cores. TESSERA_SKIP_FUZZ=1 leaves it out.
if [ "${TESSERA_SKIP_FUZZ:-0}" != 1 ]; then
  FUZZ_SECONDS=${FUZZ_SECONDS:-10} "${fuzz_build[@]}" bash scripts/fuzz.sh
fi
