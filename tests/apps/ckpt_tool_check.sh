#!/usr/bin/env bash
# ckpt_tool_check.sh WORKDIR CKPT_TOOL CKPT_DAMAGE COMMAND...: COMMAND (train_mlp under mpirun)
# saves a checkpoint; ckpt_tool lists its arrays and verifies it (exit 0); after one flipped byte
# in a chunk of data (ckpt_damage flip-chunk), verify fails (exit 3) naming the dataset and the
# checksum; flipped metadata fails too (exit 3).
set -uo pipefail
work=$1
tool=$2
damage=$3
shift 3
rm -rf "$work" && mkdir -p "$work"
"$@" --steps 2 --ckpt-dir "$work/ckpt" >/dev/null || { echo "FAIL: training run" >&2; exit 1; }
listing=$("$tool" list "$work/ckpt") || { echo "FAIL: list exited $?" >&2; exit 1; }
for want in "step    2" "params/DotReluDot_0/Dense_0/kernel" "opt_state/nu/DotReluDot_0/W2" "opt_state/count" \
            "P(None, model)" "mesh    data: 1, model: 2"; do
  grep -qF "$want" <<<"$listing" || { echo "FAIL: list lacks '$want'" >&2; echo "$listing" >&2; exit 1; }
done
"$tool" verify "$work/ckpt" >/dev/null || { echo "FAIL: verify of a good checkpoint" >&2; exit 1; }
file=$(ls "$work"/ckpt/ckpt_*.h5 | head -1)
"$damage" "$file" flip-chunk params/DotReluDot_1/W2 || { echo "FAIL: ckpt_damage" >&2; exit 1; }
out=$("$tool" verify "$work/ckpt" 2>&1)
rc=$?
[ $rc -eq 3 ] || { echo "FAIL: verify of a corrupted file exited $rc" >&2; echo "$out" >&2; exit 1; }
grep -q "FAILED /params/DotReluDot_1/W2: .*Fletcher32" <<<"$out" || { echo "FAIL: verify did not name the checksum" >&2; echo "$out" >&2; exit 1; }
# A chunk that was never written (zeros, and a zero checksum that HDF5's filter accepts) is caught
# by the digest.
"$damage" "$file" zero-chunk params/DotReluDot_2/W2 || { echo "FAIL: ckpt_damage" >&2; exit 1; }
out=$("$tool" verify "$work/ckpt" 2>&1)
rc=$?
[ $rc -eq 3 ] || { echo "FAIL: verify of a file with a hole exited $rc" >&2; echo "$out" >&2; exit 1; }
grep -q "FAILED /params/DotReluDot_2/W2: .*sums to 0 but the checkpoint's digest says" <<<"$out" ||
  { echo "FAIL: verify did not name the digest" >&2; echo "$out" >&2; exit 1; }
# A flipped bit in the file's metadata (byte 2500 lies in the block of object headers and chunk
# indexes at its start) fails HDF5's metadata checksum: an integrity failure, exit 3 (until the
# forty-fifth session exit 2, as for a file that is not a checkpoint).
cp "$file" "$work/metadata_flipped.h5"
/usr/bin/python3 -c 'import sys
p = sys.argv[1]; d = bytearray(open(p, "rb").read()); d[2500] ^= 0x10; open(p, "wb").write(d)' "$work/metadata_flipped.h5"
out=$("$tool" verify "$work/metadata_flipped.h5" 2>&1)
rc=$?
[ $rc -eq 3 ] || { echo "FAIL: verify of a file with flipped metadata exited $rc" >&2; echo "$out" >&2; exit 1; }
grep -q "the file is corrupt: a checksum of its metadata does not match" <<<"$out" ||
  { echo "FAIL: verify did not name the metadata's checksum" >&2; echo "$out" >&2; exit 1; }
echo "ok: list, verify, a flipped byte, a chunk never written and flipped metadata caught"
