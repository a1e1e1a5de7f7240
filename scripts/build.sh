#!/usr/bin/env bash
# Configures and builds tessera into build/ (Release, -O2). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# ccache, when installed, makes rebuilds of unchanged files (another clone, another build type)
# nearly free; it is optional and never changes what is built.
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
. scripts/generator.sh
cmake -S . -B build $(generator_for build) -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "$@" >/dev/null
cmake --build build -j "$(nproc)"
