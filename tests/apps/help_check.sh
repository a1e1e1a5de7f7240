#!/usr/bin/env bash
# help_check.sh PROGRAM [SUBCOMMAND...]: PROGRAM --help (and PROGRAM SUBCOMMAND --help) exits 0,
# lists every option with its meaning, shows a default for every option that takes a value
# ("--steps INT=300", or "default" / "none" in its meaning), and the main help ends with the
# exit codes. CLI11 writes an option as "  --name TYPE[=DEFAULT]  meaning", the meaning on the
# next, deeper indented line when the name column is full.
set -uo pipefail
program=$1
shift
status=0

check() {  # check LABEL ARGS...
  local label=$1
  shift
  local out
  if ! out=$("$program" "$@" --help 2>&1); then
    echo "FAIL $label: --help exited nonzero"
    status=1
    return
  fi
  grep -q '^Usage:' <<<"$out" || { echo "FAIL $label: no Usage line"; status=1; }
  local lines=() line
  mapfile -t lines <<<"$out"
  local count=0 i
  for ((i = 0; i < ${#lines[@]}; i++)); do
    line=${lines[i]}
    [[ $line =~ ^\ \ (-[^ ]+|[a-z][a-z_-]*\ (TEXT|INT|FLOAT|UINT)) ]] || continue
    count=$((count + 1))
    local name meaning=""
    name=$(sed -E 's/^  ([^ ]+).*/\1/' <<<"$line")
    if [[ $line =~ ^\ \ [^\ ].*[^\ ]\ \ +([^\ ].*)$ ]]; then
      meaning=${BASH_REMATCH[1]}
      local head=${line%%"$meaning"}
    else
      local head=$line
      local next=${lines[i + 1]:-}
      [[ $next =~ ^\ {6,}([^\ ].*)$ ]] && meaning=${BASH_REMATCH[1]}
    fi
    if [[ -z $meaning ]]; then
      echo "FAIL $label: $name has no meaning in --help"
      status=1
      continue
    fi
    # An option taking a value shows its default, or says it has none.
    if [[ $head =~ \ (TEXT|INT|FLOAT|UINT) && ! $head =~ REQUIRED && ! $head =~ = ]] &&
       [[ ! $meaning =~ default|none ]]; then
      echo "FAIL $label: $name takes a value but --help shows no default: $line / $meaning"
      status=1
    fi
  done
  if ((count < 2)); then
    echo "FAIL $label: found only $count options in --help"
    status=1
  fi
  echo "$label: $count options checked"
}

out=$("$program" --help 2>&1)
grep -q '^Exit codes: 0 success; 2 bad input' <<<"$out" || { echo "FAIL: --help does not end with the exit codes"; status=1; }
check "$(basename "$program")"
for sub in "$@"; do check "$(basename "$program") $sub" "$sub"; done
exit $status
