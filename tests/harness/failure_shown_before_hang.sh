#!/usr/bin/env bash
# failure_shown_before_hang.sh LIMIT COMMAND...: runs COMMAND (2 ranks of fail_then_hang) under a
# LIMIT-second timeout. Passes only if the job hung (killed by the timeout) AND rank 1's failure
# message was printed, prefixed with its rank, before it was killed.
set -uo pipefail
limit=$1
shift
out=$(timeout -k 5 "$limit" "$@" 2>&1)
rc=$?
echo "$out"
if [ "$rc" -ne 124 ]; then
  echo "FAIL: exit code $rc, expected 124 (the helper must hang until the timeout)" >&2
  exit 1
fi
# gtest's summary spans lines: the prefixed first line, then the user message.
if ! grep -qE '^\[rank 1\] .*fail_then_hang\.cpp:[0-9]+: ' <<<"$out" || ! grep -q 'rank 1 fails on purpose' <<<"$out"; then
  echo "FAIL: rank 1's failure message was not printed before the timeout" >&2
  exit 1
fi
echo "ok: the job hung and rank 1's message was shown"
