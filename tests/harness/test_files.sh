#!/usr/bin/env bash
# test_files.sh [--filters] FILE... -- COMMAND...: the test program that COMMAND runs, one that
# holds several test files (tests/CMakeLists.txt), splits into the FILEs exactly. Each test the
# program lists (--gtest_list_tests) is listed under --tessera_test_file=F for exactly one F of the
# FILEs. With --filters, also: under a --gtest_filter as well, the first file lists those of its
# own tests that the filter selects (four more runs of the program).
set -uo pipefail
filters=0
if [ "${1:-}" = "--filters" ]; then
  filters=1
  shift
fi
files=()
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
  files+=("$1")
  shift
done
[ "$#" -gt 0 ] && shift  # --
command=("$@")
if [ "${#files[@]}" -eq 0 ] || [ "${#command[@]}" -eq 0 ]; then
  echo "usage: test_files.sh [--filters] FILE... -- COMMAND..." >&2
  exit 2
fi

# The tests that COMMAND ARGS... lists, as Suite.Test lines ("Suite." lines, then "  Test" lines);
# exits (the command substitution it runs in) with 1 where the program fails.
list() {
  local out
  out=$("${command[@]}" "$@" --gtest_list_tests) || { echo "FAIL: '${command[*]} $*' exited with $?" >&2; exit 1; }
  awk '/^[^ ]/ {suite = $1} /^  [^ ]/ {print suite $1}' <<<"$out"
}

all=$(list) || exit 1
all=$(sort <<<"$all")
total=$(grep -c . <<<"$all")
if [ "$total" -eq 0 ]; then
  echo "FAIL: the program lists no test" >&2
  exit 1
fi
lists=()  # each file's tests, in the order of files
union=""
for f in "${files[@]}"; do
  mine=$(list --tessera_test_file="$f") || exit 1
  echo "$f: $(grep -c . <<<"$mine") tests"
  lists+=("$mine")
  union+="$mine"$'\n'
done
union=$(grep . <<<"$union" | sort)
if [ "$union" != "$all" ]; then
  echo "FAIL: the files' tests are not the program's $total tests, each once (< program, > files):" >&2
  diff <(echo "$all") <(echo "$union") >&2
  exit 1
fi

if [ "$filters" -eq 0 ]; then
  echo "ok: $total tests in ${#files[@]} files, each test in one file"
  exit 0
fi

# FILTER EXPECTED: the first file under --gtest_filter=FILTER lists EXPECTED.
check_filter() {
  local got
  got=$(list --tessera_test_file="${files[0]}" --gtest_filter="$1") || exit 1
  if [ "$got" != "$2" ]; then
    echo "FAIL: --gtest_filter='$1' with --tessera_test_file=${files[0]} lists '$got', expected '$2'" >&2
    exit 1
  fi
}
first=${lists[0]}
one=$(head -1 <<<"$first")
other=$(head -1 <<<"${lists[-1]}")  # another file's first test, where there is another file
check_filter '*' "$first"
check_filter "$one:$other" "$one"
check_filter "-$one" "$(tail -n +2 <<<"$first")"
check_filter "*-$one" "$(tail -n +2 <<<"$first")"
echo "ok: $total tests in ${#files[@]} files, each test in one file; --gtest_filter keeps to the file"
