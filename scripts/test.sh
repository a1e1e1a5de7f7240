#!/usr/bin/env bash
# The test command: setup if needed, configure, build, run every suite with ctest.
# Then the AddressSanitizer + UBSan build (build-sanitize/, TESSERA_SANITIZE=ON, -O1) and its
# suite at 1 and 2 ranks; TESSERA_TEST_SANITIZE=0 skips it for quick local runs (CI runs it).
# Arguments go to both ctest runs. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
# MPI suites oversubscribe the cores themselves; two ctest jobs keep both cores busy.
ctest --test-dir build --output-on-failure -j 2 "$@"

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
