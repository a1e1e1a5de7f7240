#!/usr/bin/env bash
# expect_error.sh RC PATTERN COMMAND...: runs COMMAND (an mpirun line) with a 10 s limit and
# checks that it exits with RC and prints a line matching PATTERN exactly once (rank 0 alone).
set -uo pipefail
want_rc=$1
pattern=$2
shift 2
out=$(timeout 10 "$@" 2>&1)
rc=$?
echo "$out"
if [ "$rc" -eq 124 ]; then
  echo "FAIL: no exit within 10 s (hang?)" >&2
  exit 1
fi
if [ "$rc" -ne "$want_rc" ]; then
  echo "FAIL: exit code $rc, expected $want_rc" >&2
  exit 1
fi
count=$(grep -cE -- "$pattern" <<<"$out")
if [ "$count" -ne 1 ]; then
  echo "FAIL: '$pattern' printed $count times, expected once" >&2
  exit 1
fi
echo "ok: exit $rc, message printed once"
