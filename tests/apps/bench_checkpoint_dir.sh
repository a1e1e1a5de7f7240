#!/usr/bin/env bash
# bench_checkpoint_dir.sh WORKDIR COMMAND...: COMMAND (bench_checkpoint under mpirun, a small
# state) runs with --dir WORKDIR/given, which already holds a file and a checkpoint of another
# run (a file named as one). Both must be there afterwards, unchanged, and nothing else: the run
# saves, prunes and removes only in a directory of its own, which is gone when it ends. Its
# result line's medians, ranges, paired ratios and restore phases must agree with each other.
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
# Each median lies in its range, and each paired ratio (the median of the repeats' ratios) between
# the ratios the ranges allow.
python3 - "$work/out.json" <<'PY' || fail "inconsistent figures in $(cat "$work/out.json")"
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    for name in ("save_s", "restore_s", "plain_write_s", "plain_read_s"):
        low, high = d[name + "_range"]
        assert 0 < low <= d[name] <= high, name
    for ratio, plain, timed in (("save_vs_plain_write_paired", "plain_write_s", "save_s"),
                                ("restore_vs_plain_read_paired", "plain_read_s", "restore_s")):
        value = d[ratio]
        assert d[plain + "_range"][0] / d[timed + "_range"][1] <= value * (1 + 1e-3), ratio
        assert value <= d[plain + "_range"][1] / d[timed + "_range"][0] * (1 + 1e-3), ratio
    # The restore's phases as its slowest rank saw them, each repeat's in order and within the
    # restore's own time, so their medians too (the first rank done reading before the last).
    p = d["restore_phases_s"]
    assert 0 < p["planned"] <= p["read"] <= p["returned"], p
    assert 0 < p["first_read"] <= p["read"], p
    assert p["returned"] <= d["restore_s"] * (1 + 1e-3), (p, d["restore_s"])
PY
[ "$(cat "$work/given/notes.txt")" = "keep me" ] || fail "notes.txt was changed or removed"
[ "$(cat "$work/given/ckpt_00000001.h5")" = "a checkpoint of another run" ] ||
  fail "ckpt_00000001.h5 was changed or removed"
left=$(ls -A "$work/given" | sort | tr '\n' ' ')
[ "$left" = "ckpt_00000001.h5 notes.txt " ] || fail "--dir holds afterwards: $left"
echo "ok: --dir kept what it held; the run's own directory is gone"
