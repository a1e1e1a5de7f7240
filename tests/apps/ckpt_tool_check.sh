#!/usr/bin/env bash
# ckpt_tool_check.sh WORKDIR CKPT_TOOL COMMAND...: COMMAND (train_mlp under mpirun) saves a
# checkpoint; ckpt_tool lists its arrays and verifies it (exit 0); after one flipped byte in the
# data, verify fails (exit 1) naming the dataset and the checksum.
set -uo pipefail
work=$1
tool=$2
shift 2
rm -rf "$work" && mkdir -p "$work"
"$@" --steps 2 --ckpt-dir "$work/ckpt" >/dev/null || { echo "FAIL: training run" >&2; exit 1; }
listing=$("$tool" list "$work/ckpt") || { echo "FAIL: list exited $?" >&2; exit 1; }
for want in "step    2" "params/DotReluDot_0/Dense_0/kernel" "opt_state/nu/DotReluDot_0/W2" "opt_state/count" \
            "P(None, model)" "mesh    data: 1, model: 2"; do
  grep -qF "$want" <<<"$listing" || { echo "FAIL: list lacks '$want'" >&2; echo "$listing" >&2; exit 1; }
done
"$tool" verify "$work/ckpt" >/dev/null || { echo "FAIL: verify of a good checkpoint" >&2; exit 1; }
file=$(ls "$work"/ckpt/ckpt_*.h5 | head -1)
size=$(stat -c %s "$file")
# Flip one byte in the middle of the file (inside a chunk of array data).
offset=$((size / 2))
byte=$(od -An -tu1 -j "$offset" -N1 "$file" | tr -d ' ')
printf "$(printf '\\x%02x' $((byte ^ 255)))" | dd of="$file" bs=1 seek="$offset" conv=notrunc status=none
out=$("$tool" verify "$work/ckpt" 2>&1)
rc=$?
[ $rc -eq 1 ] || { echo "FAIL: verify of a corrupted file exited $rc" >&2; echo "$out" >&2; exit 1; }
grep -q "Fletcher32" <<<"$out" || { echo "FAIL: verify did not name the checksum" >&2; echo "$out" >&2; exit 1; }
echo "ok: list, verify, and a flipped byte caught"
