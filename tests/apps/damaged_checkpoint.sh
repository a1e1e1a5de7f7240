#!/usr/bin/env bash
# damaged_checkpoint.sh WORKDIR DAMAGE EDIT LINES PATTERN SAVE... -- CHECK...: SAVE (train_mlp
# under mpirun, given --ckpt-dir WORKDIR/ckpt) writes a checkpoint; `DAMAGE FILE EDIT`
# (ckpt_damage; EDIT may hold a value after a comma: count,-5) edits it; CHECK (with @CKPT@
# replaced by the checkpoint directory) must end within 10 s with exit code $EXPECT_RC (default 2;
# 3 for a checkpoint that fails its integrity checks) and print PATTERN exactly once; LINES "one" also wants that to be the only non-empty line printed ("once": the
# program may print its usual header before it).
set -uo pipefail
work=$1
damage=$2
edit=$3
lines_rule=$4
pattern=$5
shift 5
save=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do save+=("$1"); shift; done
shift
check=()
for a in "$@"; do check+=("${a//@CKPT@/$work/ckpt}"); done
rm -rf "$work" && mkdir -p "$work"
"${save[@]}" --ckpt-dir "$work/ckpt" >/dev/null || { echo "FAIL: saving run" >&2; exit 1; }
file=$(ls "$work"/ckpt/ckpt_*.h5 | tail -1)
IFS=, read -r -a edit_args <<<"$edit"
"$damage" "$file" "${edit_args[@]}" || { echo "FAIL: ckpt_damage $file $edit" >&2; exit 1; }
out=$(timeout 10 "${check[@]}" 2>&1)
rc=$?
echo "$out"
[ $rc -ne 124 ] || { echo "FAIL: no exit within 10 s (hang?)" >&2; exit 1; }
expect_rc=${EXPECT_RC:-2}
[ $rc -eq "$expect_rc" ] || { echo "FAIL: exit code $rc, expected $expect_rc" >&2; exit 1; }
lines=$(grep -c . <<<"$out")
if [ "$lines_rule" = one ] && [ "$lines" -ne 1 ]; then
  echo "FAIL: $lines lines printed, expected one" >&2
  exit 1
fi
count=$(grep -cE -- "$pattern" <<<"$out")
[ "$count" -eq 1 ] || { echo "FAIL: '$pattern' printed $count times, expected once" >&2; exit 1; }
echo "ok: exit $expect_rc, the message once"
