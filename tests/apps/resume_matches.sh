#!/usr/bin/env bash
# resume_matches.sh WORKDIR COMMAND...: COMMAND (train_mlp under mpirun) runs 12 steps straight,
# then 6 steps saving a checkpoint and 6 more with --resume; the losses of steps 7..12 must be
# identical, bit for bit (printed with 17 significant digits in the metrics files).
set -uo pipefail
work=$1
shift
rm -rf "$work" && mkdir -p "$work"
"$@" --steps 12 --metrics "$work/straight.jsonl" || { echo "FAIL: straight run" >&2; exit 1; }
"$@" --steps 6 --ckpt-dir "$work/ckpt" --metrics "$work/resumed.jsonl" || { echo "FAIL: first half" >&2; exit 1; }
"$@" --steps 12 --ckpt-dir "$work/ckpt" --resume --metrics "$work/resumed.jsonl" || { echo "FAIL: resume" >&2; exit 1; }
losses() { sed -E 's/.*"step":([0-9]+),"loss":([^,]+),.*/\1 \2/' "$1"; }
if ! diff <(losses "$work/straight.jsonl") <(losses "$work/resumed.jsonl"); then
  echo "FAIL: the resumed run's losses differ from the uninterrupted run's" >&2
  exit 1
fi
# A resume with nothing left to train (--steps at the checkpoint's step, or below) writes nothing:
# train_mlp rewrote the file it had restored, with the new run's settings (until the
# twenty-third session).
latest="$work/ckpt/$(cat "$work/ckpt/latest")"
before=$(md5sum <"$latest")
out=$("$@" --steps 12 --ckpt-dir "$work/ckpt" --resume) || { echo "FAIL: resume with nothing to train" >&2; exit 1; }
if grep -q '^saved ' <<<"$out" || [ "$(md5sum <"$latest")" != "$before" ]; then
  echo "FAIL: a resume with nothing to train wrote its checkpoint again" >&2
  exit 1
fi
echo "ok: 12 losses identical, straight and resumed at step 6; a resume with nothing to train writes nothing"
