#!/usr/bin/env bash
# losses_match.sh WORKDIR TOLERANCE -- COMMAND_A... -- COMMAND_B...: both commands (a training
# app under mpirun, e.g. on one rank and on 8) write --metrics files; their losses must agree
# step by step within TOLERANCE (relative), and so must their held-out losses (when the runs
# write any).
set -uo pipefail
work=$1
tolerance=$2
shift 3
a=()
while [ "$1" != "--" ]; do a+=("$1"); shift; done
shift
rm -rf "$work" && mkdir -p "$work"
"${a[@]}" --metrics "$work/a.jsonl" >"$work/a.log" 2>&1 || { cat "$work/a.log"; echo "FAIL: first run" >&2; exit 1; }
"$@" --metrics "$work/b.jsonl" >"$work/b.log" 2>&1 || { cat "$work/b.log"; echo "FAIL: second run" >&2; exit 1; }
field() { sed -nE "s/.*\"$1\":([-0-9.eE+]+).*/\\1/p" "$2"; }
compare() {  # compare FIELD
  paste <(field "$1" "$work/a.jsonl") <(field "$1" "$work/b.jsonl") | awk -v tol="$tolerance" -v f="$1" '
    { n++; d = $1 - $2; if (d < 0) d = -d; s = $1 < 0 ? -$1 : $1
      printf "%s %d: %.9g %.9g\n", f, n, $1, $2
      if (NF != 2 || !(d <= tol * s)) bad = 1 }
    END { if (n == 0 || bad) { print "FAIL: " f " differs (or missing) beyond " tol; exit 1 } }'
}
compare loss || exit 1
if grep -q '"heldout_loss"' "$work/a.jsonl" "$work/b.jsonl"; then
  compare heldout_loss || exit 1
  echo "ok: losses and held-out losses agree within $tolerance"
else
  echo "ok: losses agree within $tolerance (the runs write no held-out losses)"
fi
