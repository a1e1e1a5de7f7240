#!/usr/bin/env bash
# examples_pool_check.sh RUN1... -- TRAIN_MLP: a pool of more than 2^32 examples draws examples past
# 2^32. Until the forty-fifth session each row's draw took one 32-bit word whatever the pool, so
# pools of 2^32, 2^33 and 10^12 examples gave the same batches and the same losses; now a pool
# of at most 2^32 keeps its batches (and every README figure) and a larger one draws 64 bits.
set -uo pipefail
run=()
while [ "$1" != "--" ]; do run+=("$1"); shift; done
train_mlp=$2
loss_of() {
  local out
  out=$(timeout 60 "${run[@]}" "$train_mlp" --mesh data=1,model=1 --steps 3 --batch 8 --depth 16 --layers 1 \
    --loss mse --examples "$1" 2>&1) || { echo "FAIL: --examples $1 exited with $?: $out" >&2; exit 1; }
  grep -oE 'step +3 +loss +[0-9.eE+-]+' <<<"$out" | tail -1
}
a=$(loss_of 4294967296) || exit 1
b=$(loss_of 8589934592) || exit 1
c=$(loss_of 1000000000000) || exit 1
echo "2^32: $a; 2^33: $b; 10^12: $c"
if [ -z "$a" ] || [ -z "$b" ] || [ -z "$c" ]; then echo "FAIL: no step 3 loss" >&2; exit 1; fi
if [ "$a" = "$b" ] || [ "$b" = "$c" ] || [ "$a" = "$c" ]; then
  echo "FAIL: pools of 2^32, 2^33 and 10^12 examples gave a loss alike" >&2
  exit 1
fi
echo "ok: three pools, three losses"
