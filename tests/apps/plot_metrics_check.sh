#!/usr/bin/env bash
# plot_metrics_check.sh WORKDIR PLOT_SCRIPT COMMAND...: COMMAND (train_mlp under mpirun) writes a
# metrics file; scripts/plot_metrics must turn it into non-empty PNG files (loss, time split, bytes)
# and print their paths, and refuse a file that is not metrics with exit 2 and one message.
set -uo pipefail
work=$1
plot=$2
shift 2
rm -rf "$work" && mkdir -p "$work"
"$@" --steps 5 --metrics "$work/run.jsonl" >/dev/null || { echo "FAIL: training run" >&2; exit 1; }
out=$("$plot" -o "$work/plots" "$work/run.jsonl") || { echo "FAIL: plot_metrics exited $?" >&2; exit 1; }
echo "$out"
for kind in loss time bytes; do
  png="$work/plots/run_$kind.png"
  grep -qxF "$png" <<<"$out" || { echo "FAIL: $png not printed" >&2; exit 1; }
  [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || { echo "FAIL: $png is not a PNG" >&2; exit 1; }
  [ "$(stat -c %s "$png")" -gt 5000 ] || { echo "FAIL: $png is nearly empty" >&2; exit 1; }
done
echo 'not json' >"$work/bad.jsonl"
err=$("$plot" -o "$work/plots" "$work/bad.jsonl" 2>&1 >/dev/null)
rc=$?
[ $rc -eq 2 ] && [ "$err" = "plot_metrics: '$work/bad.jsonl' line 1 is not JSON: Expecting value" ] ||
  { echo "FAIL: bad file gave exit $rc and '$err'" >&2; exit 1; }
# Lines whose fields have the wrong type, a file that is not text, and output paths that cannot
# be used: each refused with exit 2 and one message (until 2026-11-28: Python tracebacks, exit 1).
refused() {
  local want=$1
  shift
  err=$("$plot" "$@" 2>&1 >/dev/null)
  rc=$?
  [ $rc -eq 2 ] && [ "$err" = "plot_metrics: $want" ] || { echo "FAIL: plot_metrics $* gave exit $rc and '$err'" >&2; exit 1; }
}
echo '{"step":1,"loss":"abc"}' >"$work/string_loss.jsonl"
refused "'$work/string_loss.jsonl' line 1: \"loss\" is \"abc\", not a number" "$work/string_loss.jsonl"
echo '{"step":"2","loss":1}' >"$work/string_step.jsonl"
refused "'$work/string_step.jsonl' line 1: \"step\" is \"2\", not an integer" "$work/string_step.jsonl"
echo '{"step":1,"loss":1,"comm_bytes":5}' >"$work/bytes.jsonl"
refused "'$work/bytes.jsonl' line 1: \"comm_bytes\" is not an object of byte counts" "$work/bytes.jsonl"
printf '\x89HDF\r\n\x1a\n\xff\xfe' >"$work/binary.jsonl"
refused "'$work/binary.jsonl' is not text (metrics are JSON lines)" "$work/binary.jsonl"
refused "-o '$work/run.jsonl': cannot make the directory: File exists" -o "$work/run.jsonl" "$work/run.jsonl"
refused "--prefix 'a/b' is a file name prefix, not a path (-o names the directory)" --prefix a/b "$work/run.jsonl"
# A diverged run: NaN, inf and losses near the largest double are gaps in the plots, with one note
# per field (until 2026-11-28 matplotlib's axes overflowed on 1e280 and ended in a traceback).
printf '%s\n' '{"step":1,"loss":2.5,"ms":3}' '{"step":2,"loss":1.7e308,"ms":1e280}' '{"step":3,"loss":NaN,"ms":3}' \
  '{"step":4,"loss":Infinity,"ms":2,"comm_bytes":{"all_reduce/data":1e290}}' >"$work/diverged.jsonl"
err=$("$plot" -o "$work/plots" "$work/diverged.jsonl" 2>&1 >/dev/null)
rc=$?
want="plot_metrics: '$work/diverged.jsonl': 1 value of \"comm_bytes\" not finite or beyond 1e+200, left out of the plots
plot_metrics: '$work/diverged.jsonl': 3 values of \"loss\" not finite or beyond 1e+200, left out of the plots
plot_metrics: '$work/diverged.jsonl': 1 value of \"ms\" not finite or beyond 1e+200, left out of the plots"
[ $rc -eq 0 ] && [ "$err" = "$want" ] || { echo "FAIL: a diverged run gave exit $rc and '$err'" >&2; exit 1; }
for kind in loss time bytes; do
  [ "$(stat -c %s "$work/plots/diverged_$kind.png")" -gt 5000 ] || { echo "FAIL: diverged_$kind.png" >&2; exit 1; }
done
echo '{"step":100000000000000000000,"loss":1}' >"$work/huge_step.jsonl"
refused "'$work/huge_step.jsonl' line 1: \"step\" 100000000000000000000 is beyond 9007199254740992" "$work/huge_step.jsonl"
# The parts of a step's time without its total: plotted without the total (until the forty-fourth
# session a KeyError and a traceback, exit 1, after the loss plot).
printf '%s\n' '{"step":1,"loss":2.5,"compute_ms":1,"comm_ms":1,"optimizer_ms":1}' \
  '{"step":2,"loss":2.0,"compute_ms":1,"comm_ms":2,"optimizer_ms":1}' >"$work/no_total.jsonl"
"$plot" -o "$work/plots" "$work/no_total.jsonl" >/dev/null 2>"$work/no_total.err" ||
  { echo "FAIL: parts without a total: exit $?: $(cat "$work/no_total.err")" >&2; exit 1; }
[ "$(stat -c %s "$work/plots/no_total_time.png")" -gt 5000 ] || { echo "FAIL: no_total_time.png" >&2; exit 1; }
echo "ok: plots written, bad input refused"
