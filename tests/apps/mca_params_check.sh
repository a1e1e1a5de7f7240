#!/usr/bin/env bash
# mca_params_check.sh ROOT MPIEXEC [TEST MPIEXEC FLAGS...]: every launch path runs with exactly the
# Open MPI settings of scripts/mpirun/mca-params.conf. mpirun hands each --mca setting to the ranks
# as OMPI_MCA_NAME=VALUE, so a rank's environment shows what it runs with:
#   - scripts/mpirun/local.sh and hostfile.sh (a localhost hostfile): a rank's environment;
#   - the tests' mpiexec flags (tests/CMakeLists.txt): a rank's environment;
#   - scripts/mpirun/slurm.sbatch (Slurm runs a copy, so the settings are written out): its
#     `export OMPI_MCA_*` settings, exactly the file's;
#   - a line of the file that is not "name = value" stops local.sh with exit 2 and the line.
set -euo pipefail
root=$1
mpiexec=$2
shift 2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
conf="$root/scripts/mpirun/mca-params.conf"
fail() { echo "FAIL: $*" >&2; exit 1; }

# The file's settings as OMPI_MCA_NAME=VALUE, sorted (a parser independent of mca_flags.sh).
expected=$(sed -e 's/#.*//' "$conf" | awk -F= 'NF == 2 { gsub(/[ \t]/, "", $1); gsub(/[ \t]/, "", $2); print "OMPI_MCA_" $1 "=" $2 }' | sort)
[ "$(echo "$expected" | wc -l)" -ge 4 ] || fail "expected at least 4 settings in $conf, got: $expected"
echo "$expected" | grep -qx 'OMPI_MCA_io=romio321' || fail "$conf lost io = romio321"

# Every expected setting appears in the rank's environment ($1: what launched it, $2: the env).
check_env() {
  local what=$1 env=$2
  while read -r setting; do
    grep -qx -- "$setting" <<< "$env" || fail "$what: a rank runs without $setting"
  done <<< "$expected"
  echo "ok: $what"
}
check_env "scripts/mpirun/local.sh" "$(bash "$root/scripts/mpirun/local.sh" 1 env)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf 'localhost slots=2\n' > "$work/hostfile"
check_env "scripts/mpirun/hostfile.sh" "$(bash "$root/scripts/mpirun/hostfile.sh" "$work/hostfile" 1 env)"
check_env "the tests' mpiexec flags" "$("$mpiexec" -n 1 "$@" env)"

sbatch_settings=$(grep -E '^export OMPI_MCA_' "$root/scripts/mpirun/slurm.sbatch" | sed 's/^export //' | tr ' ' '\n' |
                  grep -E '^OMPI_MCA_' | sort)
[ "$sbatch_settings" = "$expected" ] ||
  fail "scripts/mpirun/slurm.sbatch exports"$'\n'"$sbatch_settings"$'\n'"but $conf says"$'\n'"$expected"
echo "ok: scripts/mpirun/slurm.sbatch"

# A malformed line: local.sh (a copy beside a damaged copy of the file) stops before mpirun.
mkdir "$work/mpirun"
cp "$root/scripts/mpirun/local.sh" "$root/scripts/mpirun/mca_flags.sh" "$root/scripts/mpirun/launch_checks.sh" "$conf" "$work/mpirun/"
echo "btl_vader_eager_limit 65536" >> "$work/mpirun/mca-params.conf"
rc=0
out=$(bash "$work/mpirun/local.sh" 1 true 2>&1) || rc=$?
[ "$rc" = 2 ] || fail "a malformed mca-params.conf line: local.sh exited $rc, 2 expected ($out)"
[ "$out" = "mca_flags.sh: not 'name = value' in $work/mpirun/mca-params.conf: 'btl_vader_eager_limit 65536'" ] ||
  fail "a malformed mca-params.conf line: message '$out'"
echo "ok: a malformed line stops local.sh with exit 2"
