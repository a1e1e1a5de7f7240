#!/usr/bin/env bash
# The fuzz step (also run by scripts/test.sh): builds the libFuzzer targets of tests/fuzz with
# clang (every library with -fsanitize=fuzzer-no-link,address,undefined), replays the whole seed
# corpus through each target (any crash fails), then fuzzes each target for FUZZ_SECONDS (default
# 25; 0: the replay alone) seconds, FUZZ_JOBS targets at a time (default: the number of cores).
#   bash scripts/fuzz.sh [target ...]     (default: every target)
# The build goes to build-fuzz/, or to TESSERA_FUZZ_BUILD, a folder already configured with
# clang, -DTESSERA_FUZZ=ON and -DTESSERA_SANITIZE=ON (scripts/test.sh passes build-sanitize/, so
# the sanitized tests and the fuzz targets share one build). New inputs go to
# <build>/corpus/<target>/, never into the source tree; a crashing input is left in
# <build>/artifacts/ and fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-25}
parallel=${FUZZ_JOBS:-$(nproc)}
if ! [[ "$seconds" =~ ^[0-9]{1,6}$ ]]; then echo "fuzz.sh: FUZZ_SECONDS must be an integer from 0 to 999999, got '$seconds'" >&2; exit 2; fi
# 0 made the throttle below spin for ever.
if ! [[ "$parallel" =~ ^[1-9][0-9]{0,2}$ ]]; then echo "fuzz.sh: FUZZ_JOBS must be an integer from 1 to 999, got '$parallel'" >&2; exit 2; fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(parse_spec parse_shape_string mesh_shape_parse parse_rules parse_signature plan_reshard checkpoint)
fi

build=${TESSERA_FUZZ_BUILD:-build-fuzz}
start=$SECONDS
if [ -z "${TESSERA_FUZZ_BUILD:-}" ]; then
  . scripts/generator.sh
  CC=clang CXX=clang++ cmake -S . -B "$build" $(generator_for "$build") $(compiler_launcher) -DCMAKE_BUILD_TYPE=Release \
    -DTESSERA_FUZZ=ON -DTESSERA_BUILD_TESTS=OFF >/dev/null
elif ! grep -qx 'TESSERA_FUZZ:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  echo "fuzz: TESSERA_FUZZ_BUILD=$build is not a build configured with -DTESSERA_FUZZ=ON" >&2
  exit 1
fi
cmake --build "$build" -j "$(nproc)" --target fuzz_all
echo "fuzz: build took $((SECONDS - start)) s"

# The checkpoint target initialises MPI as a singleton; Open MPI refuses root without these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$build/artifacts" "$build/fuzz_results"
rm -f "$build"/fuzz_results/*
flags=(-rss_limit_mb=2048 -timeout=10 -print_final_stats=0)

# fuzz_one TARGET: replays the target's seeds, then fuzzes it; its report lines go to
# <build>/fuzz_results/TARGET (the last line "ok" or "failed").
fuzz_one() {
  local t=$1 out="$build/fuzz_results/$1"
  local program=$build/tests/fuzz/${t}_fuzz seeds=tests/fuzz/corpus/$t began=$SECONDS
  # Open MPI and HDF5 (the checkpoint target) keep allocations until exit that LeakSanitizer
  # would report; the parser targets run with leak detection.
  local leaks=1
  [ "$t" = checkpoint ] && leaks=0
  export ASAN_OPTIONS=detect_leaks=$leaks
  {
    if [ ! -d "$seeds" ]; then
      echo "fuzz: no corpus $seeds"
      echo failed
      return
    fi
    # Replay: every seed (valid, invalid and past crashes) once.
    if ! "$program" "${flags[@]}" -runs=0 "$seeds" >"$build/replay_$t.log" 2>&1; then
      cat "$build/replay_$t.log"
      echo "fuzz: $t crashed while replaying $seeds"
      echo failed
      return
    fi
    echo "fuzz: $t replayed $(find "$seeds" -type f | wc -l) seeds in $((SECONDS - began)) s"
    # FUZZ_SECONDS=0: the replay alone (libFuzzer takes -max_total_time=0 as no limit, and fuzzed
    # for ever until the forty-fourth session).
    if [ "$seconds" -eq 0 ]; then
      echo ok
      return
    fi
    # Bounded fuzzing from the seeds; what it finds new stays under <build>/corpus.
    mkdir -p "$build/corpus/$t"
    if ! "$program" "${flags[@]}" -max_total_time="$seconds" -artifact_prefix="$build/artifacts/$t-" \
         "$build/corpus/$t" "$seeds" >"$build/fuzz_$t.log" 2>&1; then
      tail -60 "$build/fuzz_$t.log"
      echo "fuzz: $t crashed; the input is in $build/artifacts/ (add it to $seeds after the fix)"
      echo failed
      return
    fi
    echo "fuzz: $t: $(grep -E '^Done [0-9]+ runs' "$build/fuzz_$t.log" | tail -1), corpus $(ls "$build/corpus/$t" | wc -l) inputs"
    echo ok
  } >"$out" 2>&1
}

for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
  fuzz_one "$t" &
done
wait
failed=0
for t in "${targets[@]}"; do
  report=$build/fuzz_results/$t
  if [ "$(tail -1 "$report" 2>/dev/null)" = ok ]; then
    sed '$d' "$report"
  else
    sed '$d' "$report" >&2 2>/dev/null || echo "fuzz: $t left no report" >&2
    failed=$((failed + 1))
  fi
done
if [ "$failed" -ne 0 ]; then
  echo "fuzz: $failed of ${#targets[@]} targets failed" >&2
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets clean"
