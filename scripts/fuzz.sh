#!/usr/bin/env bash
# The fuzz step (also run by scripts/test.sh): builds the libFuzzer targets of tests/fuzz into
# build-fuzz/ with clang (every library with -fsanitize=fuzzer-no-link,address,undefined), replays
# the whole seed corpus through each target (any crash fails), then fuzzes each target for
# FUZZ_SECONDS (default 25) seconds. New inputs go to build-fuzz/corpus/<target>/, never into the
# source tree; a crashing input is left in build-fuzz/artifacts/ and fails the run.
#   bash scripts/fuzz.sh [target ...]     (default: every target)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-25}
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(parse_spec parse_shape_string mesh_shape_parse parse_rules parse_signature plan_reshard checkpoint)
fi

launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
start=$SECONDS
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Release -DTESSERA_FUZZ=ON \
  -DTESSERA_BUILD_TESTS=OFF "${launcher[@]}" >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target fuzz_all
echo "fuzz: build took $((SECONDS - start)) s"

# The checkpoint target initialises MPI as a singleton; Open MPI refuses root without these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p build-fuzz/artifacts
flags=(-rss_limit_mb=2048 -timeout=10 -print_final_stats=0)
for t in "${targets[@]}"; do
  program=build-fuzz/tests/fuzz/${t}_fuzz
  # Open MPI and HDF5 (the checkpoint target) keep allocations until exit that LeakSanitizer
  # would report; the parser targets run with leak detection.
  if [ "$t" = checkpoint ]; then export ASAN_OPTIONS=detect_leaks=0; else export ASAN_OPTIONS=detect_leaks=1; fi
  seeds=tests/fuzz/corpus/$t
  [ -d "$seeds" ] || { echo "fuzz: no corpus $seeds" >&2; exit 1; }
  # Replay: every seed (valid, invalid and past crashes) once.
  start=$SECONDS
  if ! "$program" "${flags[@]}" -runs=0 "$seeds" >build-fuzz/replay_$t.log 2>&1; then
    cat build-fuzz/replay_$t.log >&2
    echo "fuzz: $t crashed while replaying $seeds" >&2
    exit 1
  fi
  echo "fuzz: $t replayed $(find "$seeds" -type f | wc -l) seeds in $((SECONDS - start)) s"
  # Bounded fuzzing from the seeds; what it finds new stays under build-fuzz/corpus.
  mkdir -p build-fuzz/corpus/$t
  if ! "$program" "${flags[@]}" -max_total_time="$seconds" -artifact_prefix=build-fuzz/artifacts/$t- \
       build-fuzz/corpus/$t "$seeds" >build-fuzz/fuzz_$t.log 2>&1; then
    tail -60 build-fuzz/fuzz_$t.log >&2
    echo "fuzz: $t crashed; the input is in build-fuzz/artifacts/ (add it to $seeds after the fix)" >&2
    exit 1
  fi
  echo "fuzz: $t: $(grep -E '^Done [0-9]+ runs' build-fuzz/fuzz_$t.log | tail -1), corpus $(ls build-fuzz/corpus/$t | wc -l) inputs"
done
echo "fuzz: all ${#targets[@]} targets clean"
