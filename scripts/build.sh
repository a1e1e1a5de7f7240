#!/usr/bin/env bash
# Configures and builds tessera into build/ (Release, -O2). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. scripts/generator.sh
cmake -S . -B build $(generator_for build) $(compiler_launcher) -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j "$(nproc)"
