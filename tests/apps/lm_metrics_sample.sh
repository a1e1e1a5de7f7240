#!/usr/bin/env bash
# lm_metrics_sample.sh WORKDIR COMMAND...: COMMAND (train_lm under mpirun) runs 4 steps with
# --eval-every 2 and a 24-byte sample. Every --metrics line carries step, loss, ms, tokens_per_s
# and the bytes by collective; steps 2 and 4 carry heldout_loss, which the output prints too;
# the sample is printed after the prompt, and the same seed samples the same text again.
set -uo pipefail
work=$1
shift
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
run() { "$@" --steps 4 --eval-every 2 --prompt "The Licensee " --sample-bytes 24 --temperature 0.8 --metrics "$work/m.jsonl"; }
out=$(run "$@") || { echo "$out"; fail "train_lm exited $?"; }
echo "$out"
[ "$(wc -l <"$work/m.jsonl")" -eq 4 ] || fail "expected 4 metrics lines"
n=0
while IFS= read -r line; do
  n=$((n + 1))
  for key in step loss ms tokens_per_s lr compute_ms comm_ms comm_bytes; do
    grep -q "\"$key\":" <<<"$line" || fail "line $n has no $key: $line"
  done
  grep -q "^{\"step\":$n," <<<"$line" || fail "line $n is not step $n: $line"
  if [ $((n % 2)) -eq 0 ]; then
    grep -qE '"heldout_loss":[0-9.]+' <<<"$line" || fail "line $n has no heldout_loss"
  elif grep -q heldout_loss <<<"$line"; then
    fail "line $n has a heldout_loss"
  fi
done <"$work/m.jsonl"
[ "$(grep -cE '^step +[24]  held-out loss [0-9.]+ nats/byte' <<<"$out")" -eq 2 ] || fail "held-out losses not printed"
after_sample() { sed -n '/^sample (temperature 0.8):$/,$p' | tail -n +2; }  # the sample may hold newlines
sample=$(after_sample <<<"$out")
[[ $sample == "The Licensee "* ]] || fail "no sample after the prompt: '$sample'"
[ ${#sample} -ge 25 ] || fail "sample too short: '$sample'"
again=$(run "$@" | after_sample)
[ "$sample" = "$again" ] || fail "the same seed sampled '$again', then '$sample'"
echo "ok: metrics lines, held-out losses, sample"
