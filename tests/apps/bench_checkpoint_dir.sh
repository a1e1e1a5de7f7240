#!/usr/bin/env bash
# bench_checkpoint_dir.sh WORKDIR COMMAND...: COMMAND (bench_checkpoint under mpirun, a small
# state) runs with --dir WORKDIR/given, which already holds a file and a checkpoint of another
# run (a file named as one). Both must be there afterwards, unchanged, and nothing else: the run
# saves, prunes and removes only in a directory of its own, which is gone when it ends.
set -euo pipefail
work=$1
shift
rm -rf "$work"
mkdir -p "$work/given"
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
printf 'keep me\n' >"$work/given/notes.txt"
printf 'a checkpoint of another run\n' >"$work/given/ckpt_00000001.h5"
"$@" --dir "$work/given" >"$work/out.json" || fail "bench_checkpoint exited with $?"
grep -q '"bench": "checkpoint"' "$work/out.json" || fail "no result line in $(cat "$work/out.json")"
[ "$(cat "$work/given/notes.txt")" = "keep me" ] || fail "notes.txt was changed or removed"
[ "$(cat "$work/given/ckpt_00000001.h5")" = "a checkpoint of another run" ] ||
  fail "ckpt_00000001.h5 was changed or removed"
left=$(ls -A "$work/given" | sort | tr '\n' ' ')
[ "$left" = "ckpt_00000001.h5 notes.txt " ] || fail "--dir holds afterwards: $left"
echo "ok: --dir kept what it held; the run's own directory is gone"
