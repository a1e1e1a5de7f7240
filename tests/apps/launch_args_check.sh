#!/usr/bin/env bash
# launch_args_check.sh ROOT: the exact mpirun command lines of scripts/mpirun/local.sh and
# hostfile.sh, and their refusals, with a stand-in `mpirun` first on PATH that writes down its
# arguments (one a line), a few variables of its environment and its process id, and exits with
# $STUB_RC. No MPI job runs, so every case takes milliseconds:
#   - local.sh on 1, 2, 3 and 4 ranks of two CPUs (`taskset`): binding, --oversubscribe,
#     mpi_yield_when_idle, pml ob1 (a caller's OMPI_MCA_pml stands), --quiet
#     (TESSERA_MPIRUN_VERBOSE=1 drops it), HWLOC_COMPONENTS (a caller's value, even empty, stands),
#     root allowed, arguments with spaces, empty or glob characters passed as they are, `exec`
#     (mpirun is the script's own process) and mpirun's exit code;
#   - the rank count from 1 to 4096 and the program (a path or a command on PATH) in both
#     scripts, and their usage lines;
#   - hostfile.sh: slots counted (a host without slots= is 1), oversubscribing past them,
#     TESSERA_MPIRUN_FLAGS split on whitespace without globbing, each bad hostfile's message;
#   - mca_flags.sh: a last line without a newline, comments and indentation, a line of two values.
set -euo pipefail
root=$(cd "$1" && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
local_sh="$root/scripts/mpirun/local.sh"
hostfile_sh="$root/scripts/mpirun/hostfile.sh"

mkdir "$work/bin"
cat >"$work/bin/mpirun" <<'EOF'
#!/usr/bin/env bash
printf '%s\n' "$@" >"$STUB_DIR/args"
{
  echo "pid=$$"
  echo "HWLOC_COMPONENTS=${HWLOC_COMPONENTS-<unset>}"
  echo "OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT-<unset>}"
  echo "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM-<unset>}"
} >"$STUB_DIR/env"
exit "${STUB_RC:-0}"
EOF
printf '#!/bin/sh\n' >"$work/bin/prog"
chmod +x "$work/bin/mpirun" "$work/bin/prog"
export STUB_DIR=$work PATH="$work/bin:$PATH"
unset OMPI_MCA_pml HWLOC_COMPONENTS TESSERA_MPIRUN_VERBOSE TESSERA_LOCAL_BIND TESSERA_MPIRUN_FLAGS \
      OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM STUB_RC

# The settings of mca-params.conf as mca_flags.sh should pass them (an independent parser).
mca=()
while read -r name value; do mca+=(--mca "$name" "$value"); done < <(
  sed -e 's/#.*//' "$root/scripts/mpirun/mca-params.conf" | awk -F= 'NF == 2 { gsub(/[ \t]/, "", $1); gsub(/[ \t]/, "", $2); print $1, $2 }')
[ "${#mca[@]}" -ge 12 ] || fail "fewer than 4 settings read from mca-params.conf"

# expect_args LABEL WORDS...: mpirun's arguments were exactly WORDS.
expect_args() {
  local label=$1
  shift
  local got want
  got=$(cat "$work/args")
  want=$(printf '%s\n' "$@")
  [ "$got" = "$want" ] || fail "$label: mpirun got"$'\n'"$got"$'\n'"want"$'\n'"$want"
}
# refused RC MESSAGE COMMAND...: COMMAND exits RC with exactly MESSAGE on stderr, nothing on
# stdout, and never starts mpirun.
refused() {
  local want_rc=$1 want=$2
  shift 2
  rm -f "$work/args"
  local rc=0
  "$@" >"$work/out" 2>"$work/err" || rc=$?
  [ "$rc" = "$want_rc" ] || fail "$*: exit $rc, $want_rc expected ($(cat "$work/err"))"
  [ "$(cat "$work/err")" = "$want" ] || fail "$*: stderr '$(cat "$work/err")', want '$want'"
  [ ! -s "$work/out" ] || fail "$*: stdout '$(cat "$work/out")'"
  [ ! -e "$work/args" ] || fail "$*: mpirun started"
}

# local.sh 1 yields when idle where this process may use one CPU only.
yield_on_1=()
[ "$(nproc)" -le 1 ] && yield_on_1=(--mca mpi_yield_when_idle 1)

# --- local.sh ------------------------------------------------------------------------------
cpus=$(python3 -c "
import os
print(','.join(str(c) for c in sorted(os.sched_getaffinity(0))[:2]))")
if [ "${cpus%%,*}" = "${cpus##*,}" ]; then
  echo "skip: local.sh's cases on two CPUs (this process may use one)"
else
  on2() { taskset -c "$cpus" bash "$local_sh" "$@"; }
  on2 1 prog 'a b' '' 'c*' "--x=1 2"
  expect_args "local.sh 1" -n 1 --bind-to none "${mca[@]}" --mca pml ob1 --quiet prog 'a b' '' 'c*' "--x=1 2"
  want_env="HWLOC_COMPONENTS=-pci,-linuxio
OMPI_ALLOW_RUN_AS_ROOT=1
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
  [ "$(grep -v '^pid=' "$work/env")" = "$want_env" ] || fail "local.sh 1: mpirun's environment $(cat "$work/env")"
  on2 2 prog
  expect_args "local.sh 2 on 2 CPUs" -n 2 --bind-to none "${mca[@]}" --mca pml ob1 --mca mpi_yield_when_idle 1 --quiet prog
  on2 3 prog
  expect_args "local.sh 3 on 2 CPUs" -n 3 --bind-to none "${mca[@]}" --mca pml ob1 --oversubscribe \
    --mca mpi_yield_when_idle 1 --quiet prog
  on2 4 prog
  expect_args "local.sh 4 on 2 CPUs" -n 4 --map-by hwthread --bind-to hwthread:overload-allowed "${mca[@]}" \
    --mca pml ob1 --oversubscribe --mca mpi_yield_when_idle 1 --quiet prog
  TESSERA_LOCAL_BIND=none on2 4 prog
  expect_args "TESSERA_LOCAL_BIND=none local.sh 4" -n 4 --bind-to none "${mca[@]}" --mca pml ob1 --oversubscribe \
    --mca mpi_yield_when_idle 1 --quiet prog
  TESSERA_LOCAL_BIND=auto on2 4 prog
  expect_args "TESSERA_LOCAL_BIND=auto local.sh 4" -n 4 --map-by hwthread --bind-to hwthread:overload-allowed \
    "${mca[@]}" --mca pml ob1 --oversubscribe --mca mpi_yield_when_idle 1 --quiet prog
  OMPI_MCA_pml=cm TESSERA_MPIRUN_VERBOSE=1 on2 1 prog
  expect_args "OMPI_MCA_pml=cm TESSERA_MPIRUN_VERBOSE=1 local.sh 1" -n 1 --bind-to none "${mca[@]}" prog
  TESSERA_MPIRUN_VERBOSE=0 on2 1 prog
  expect_args "TESSERA_MPIRUN_VERBOSE=0 local.sh 1" -n 1 --bind-to none "${mca[@]}" --mca pml ob1 --quiet prog
  HWLOC_COMPONENTS='' on2 1 prog
  grep -qx 'HWLOC_COMPONENTS=' "$work/env" || fail "HWLOC_COMPONENTS= local.sh 1: $(cat "$work/env")"
  HWLOC_COMPONENTS=-x86 on2 1 prog
  grep -qx 'HWLOC_COMPONENTS=-x86' "$work/env" || fail "HWLOC_COMPONENTS=-x86 local.sh 1: $(cat "$work/env")"
  echo "ok: local.sh's mpirun lines on 1 to 4 ranks of two CPUs"
fi
# mpirun is local.sh's own process (exec: a signal to the script reaches it) and its exit code
# is the script's.
rc=0
STUB_RC=7 bash "$local_sh" 1 prog & pid=$!
wait "$pid" || rc=$?
[ "$rc" = 7 ] || fail "local.sh: exit $rc where mpirun exited 7"
grep -qx "pid=$pid" "$work/env" || fail "local.sh: mpirun ran as $(grep pid= "$work/env"), not as the script ($pid)"
# Started from its own folder by a bare name (no folder in BASH_SOURCE).
(cd "$root/scripts/mpirun" && bash local.sh 1 prog) || fail "local.sh started as 'bash local.sh' from its folder"
expect_args "bash local.sh from scripts/mpirun" -n 1 --bind-to none "${mca[@]}" --mca pml ob1 \
  "${yield_on_1[@]}" --quiet prog
echo "ok: local.sh execs mpirun and passes its exit code"

# --- both launchers: arguments ---------------------------------------------------------------
printf 'localhost slots=2\n' >"$work/hosts"
mkdir "$work/dir"
printf '#!/bin/sh\n' >"$work/not_executable"
for script in local.sh hostfile.sh; do
  if [ "$script" = local.sh ]; then
    launch=(bash "$local_sh")
    usage="usage: $local_sh N PROGRAM [ARGS...]"
    refused 2 "$usage" "${launch[@]}"
    refused 2 "$usage" "${launch[@]}" 2
  else
    launch=(bash "$hostfile_sh" "$work/hosts")
    usage="usage: $hostfile_sh HOSTFILE N PROGRAM [ARGS...]"
    refused 2 "$usage" bash "$hostfile_sh"
    refused 2 "$usage" "${launch[@]}"
    refused 2 "$usage" "${launch[@]}" 2
  fi
  for n in 0 4097 10000 01 '' ' 2' 2x -1 1.5; do
    refused 2 "$script: rank count must be an integer from 1 to 4096, got '$n'" "${launch[@]}" "$n" prog
  done
  for n in 1 9 10 4096; do
    "${launch[@]}" "$n" prog || fail "$script $n prog: refused"
    [ "$(sed -n 2p "$work/args")" = "$n" ] || fail "$script $n: mpirun -n $(sed -n 2p "$work/args")"
  done
  refused 2 "$script: no program 'no_such_program_here' on PATH" "${launch[@]}" 1 no_such_program_here
  refused 2 "$script: program '$work/missing' does not exist" "${launch[@]}" 1 "$work/missing"
  refused 2 "$script: '$work/dir' is not an executable file" "${launch[@]}" 1 "$work/dir"
  refused 2 "$script: '$work/not_executable' is not an executable file" "${launch[@]}" 1 "$work/not_executable"
  "${launch[@]}" 1 env || fail "$script 1 env (a command on PATH): refused"
  "${launch[@]}" 1 "$work/bin/mpirun" || fail "$script 1 (an executable path): refused"
done
echo "ok: both launchers check the rank count and the program"

# --- hostfile.sh ---------------------------------------------------------------------------
hf_flags() {  # hf_flags HOSTFILE N: hostfile.sh's flags before the program, into the array hf
  hf=(-n "$2" --hostfile "$1" --map-by slot --bind-to none "${mca[@]}"
      -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM)
}
bash "$hostfile_sh" "$work/hosts" 2 prog 'a b' '' 'c*'
hf_flags "$work/hosts" 2
expect_args "hostfile.sh (2 slots) 2" "${hf[@]}" --quiet prog 'a b' '' 'c*'
grep -qx 'OMPI_ALLOW_RUN_AS_ROOT=1' "$work/env" && grep -qx 'OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1' "$work/env" ||
  fail "hostfile.sh: mpirun's environment $(cat "$work/env")"
bash "$hostfile_sh" "$work/hosts" 3 prog
hf_flags "$work/hosts" 3
expect_args "hostfile.sh (2 slots) 3" "${hf[@]}" --oversubscribe --mca mpi_yield_when_idle 1 --quiet prog
# One host without slots= (1 slot), one with 3 and a comment, a comment line and a blank line: 4.
printf 'node01\n  node02 slots=3 # big\n# node03 slots=8\n\n' >"$work/hosts4"
bash "$hostfile_sh" "$work/hosts4" 4 prog
hf_flags "$work/hosts4" 4
expect_args "hostfile.sh (4 slots) 4" "${hf[@]}" --quiet prog
bash "$hostfile_sh" "$work/hosts4" 5 prog
hf_flags "$work/hosts4" 5
expect_args "hostfile.sh (4 slots) 5" "${hf[@]}" --oversubscribe --mca mpi_yield_when_idle 1 --quiet prog
# TESSERA_MPIRUN_FLAGS: split on whitespace, a glob passed as it is (files here would match it).
touch "$work/dir/match_a" "$work/dir/match_b"
(cd "$work/dir" && TESSERA_MPIRUN_FLAGS=" --mca btl_tcp_if_include  eth0	match_* " TESSERA_MPIRUN_VERBOSE=1 \
   bash "$hostfile_sh" "$work/hosts" 1 prog x)
hf_flags "$work/hosts" 1
expect_args "TESSERA_MPIRUN_FLAGS hostfile.sh" "${hf[@]}" --mca btl_tcp_if_include eth0 'match_*' prog x
rc=0
STUB_RC=5 bash "$hostfile_sh" "$work/hosts" 1 prog & pid=$!
wait "$pid" || rc=$?
[ "$rc" = 5 ] || fail "hostfile.sh: exit $rc where mpirun exited 5"
grep -qx "pid=$pid" "$work/env" || fail "hostfile.sh: mpirun ran as $(grep pid= "$work/env"), not as the script ($pid)"
echo "ok: hostfile.sh's mpirun lines"
# Bad hostfiles, each with its message.
bad() {  # bad NAME CONTENT MESSAGE
  printf "$2" >"$work/$1"
  refused 2 "hostfile.sh: hostfile '$work/$1': $3" bash "$hostfile_sh" "$work/$1" 1 prog
}
bad crlf 'node01 slots=2\r\n' "line 1 ends in a carriage return (a Windows line ending)"
bad crlf2 'node01 slots=2\nnode02\r\n' "line 2 ends in a carriage return (a Windows line ending)"
bad empty '' "it names no host"
bad comments '# node01 slots=2\n\n   \n' "it names no host"
bad slots_zero 'node01 slots=0\n' "line 1: slots=0 is not slots=N with N >= 1"
bad slots_lead_zero 'node01\nnode02 slots=04\n' "line 2: slots=04 is not slots=N with N >= 1"
bad slots_empty 'node01 slots=\n' "line 1: slots= is not slots=N with N >= 1"
bad slots_negative 'node01 max_slots=4 slots=-2\n' "line 1: slots=-2 is not slots=N with N >= 1"
refused 2 "hostfile.sh: cannot read hostfile '$work/nothing' (a readable regular file)" \
  bash "$hostfile_sh" "$work/nothing" 1 prog
refused 2 "hostfile.sh: cannot read hostfile '$work/dir' (a readable regular file)" \
  bash "$hostfile_sh" "$work/dir" 1 prog
# A hostfile its user may not read (as root: run as nobody, where nobody can reach the scripts).
printf 'localhost slots=2\n' >"$work/unreadable"
chmod 000 "$work/unreadable"
chmod 755 "$work"
as_user=()
[ "$(id -u)" = 0 ] && as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
if [ "$(id -u)" = 0 ] && ! "${as_user[@]}" test -r "$hostfile_sh" 2>/dev/null; then
  echo "skip: an unreadable hostfile (nobody cannot read $hostfile_sh)"
else
  refused 2 "hostfile.sh: cannot read hostfile '$work/unreadable' (a readable regular file)" \
    "${as_user[@]}" bash "$hostfile_sh" "$work/unreadable" 1 prog
fi
echo "ok: hostfile.sh refuses each bad hostfile with its message"

# --- mca_flags.sh --------------------------------------------------------------------------
# A copy of the launcher beside an edited mca-params.conf.
mkdir "$work/copy"
cp "$root/scripts/mpirun/local.sh" "$root/scripts/mpirun/mca_flags.sh" "$root/scripts/mpirun/launch_checks.sh" "$work/copy/"
printf '# a comment\n\n  io=romio321   # MPI-IO\n\tbtl_vader_eager_limit =  65536\nodls_base_sigkill_timeout = 0' \
  >"$work/copy/mca-params.conf"
TESSERA_LOCAL_BIND=none bash "$work/copy/local.sh" 1 prog
expect_args "mca-params.conf with comments, indentation, no final newline" -n 1 --bind-to none \
  --mca io romio321 --mca btl_vader_eager_limit 65536 --mca odls_base_sigkill_timeout 0 --mca pml ob1 \
  "${yield_on_1[@]}" --quiet prog
printf 'io = romio321\nbtl_vader_eager_limit = 65536 131072\n' >"$work/copy/mca-params.conf"
refused 2 "mca_flags.sh: not 'name = value' in $work/copy/mca-params.conf: 'btl_vader_eager_limit = 65536 131072'" \
  bash "$work/copy/local.sh" 1 prog
echo "ok: mca_flags.sh reads comments, indentation and a last line without a newline"
