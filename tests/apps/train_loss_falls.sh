#!/usr/bin/env bash
# train_loss_falls.sh METRICS_FILE COMMAND...: runs a short train_mlp (COMMAND writes one JSON
# object per step to METRICS_FILE) and checks that the mean loss of the last 5 steps is below
# 0.8 times that of the first 5.
set -uo pipefail
metrics=$1
shift
rm -f "$metrics"
"$@" || { echo "FAIL: train_mlp exited with $?" >&2; exit 1; }
awk -F'"loss":' '
  { split($2, a, ","); loss[NR] = a[1] + 0 }
  END {
    if (NR < 10) { print "FAIL: " NR " steps in the metrics file, expected >= 10"; exit 1 }
    for (i = 1; i <= 5; i++) { first += loss[i]; last += loss[NR - 5 + i] }
    first /= 5; last /= 5
    printf "mean loss of the first 5 steps %.6g, of the last 5 %.6g\n", first, last
    if (!(last < 0.8 * first)) { print "FAIL: the loss did not fall"; exit 1 }
  }' "$metrics"
