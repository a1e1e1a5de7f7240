#!/usr/bin/env bash
# check.sh BUILD_DIR WORK_DIR LAUNCHER: installs the tessera built in BUILD_DIR into
# WORK_DIR/prefix, builds tests/downstream against it with only find_package(tessera) (no source
# tree on any path), and runs it on 2 ranks through LAUNCHER (scripts/mpirun/local.sh).
set -euo pipefail
build=$1
work=$2
launch=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
for f in lib/cmake/tessera/tesseraConfig.cmake lib/cmake/tessera/tesseraConfigVersion.cmake \
         include/tessera/core/tensor.h include/tessera/io/checkpoint.h include/tessera/models/mlp.h \
         lib/libtessera_core.a lib/libtessera_models.a; do
  [ -e "$work/prefix/$f" ] || { echo "FAIL: the install lacks $f" >&2; exit 1; }
done
# A copy outside the source tree, so nothing can reach tessera's sources by a relative path.
cp "$here/CMakeLists.txt" "$here/main.cpp" "$work/"
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$work" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" "${launcher[@]}" >"$work/configure.log" ||
  { cat "$work/configure.log" >&2; echo "FAIL: find_package(tessera)" >&2; exit 1; }
cmake --build "$work/build" >"$work/build.log" 2>&1 || { cat "$work/build.log" >&2; echo "FAIL: build" >&2; exit 1; }
out=$(bash "$launch" 2 "$work/build/downstream" "$work/ckpt")
echo "$out"
grep -q "downstream ok" <<<"$out" || { echo "FAIL: the downstream program's values differ" >&2; exit 1; }
echo "ok: installed, found with find_package(tessera), built and run on 2 ranks"
