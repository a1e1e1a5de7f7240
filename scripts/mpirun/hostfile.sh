#!/usr/bin/env bash
# hostfile.sh HOSTFILE N PROGRAM [ARGS...]: run PROGRAM on N ranks spread over the hosts of an
# Open MPI hostfile ("node01 slots=16" per line), started over ssh. Every host needs the same
# path to PROGRAM (a shared file system or an identical copy) and password-less ssh.
# Same settings as local.sh: root allowed, the Open MPI settings of scripts/mpirun/mca-params.conf;
# ranks fill each host's slots in order, so a mesh's minor axes stay inside a node.
# Extra mpirun flags can be passed in TESSERA_MPIRUN_FLAGS (e.g. "--mca btl_tcp_if_include eth0").
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 HOSTFILE N PROGRAM [ARGS...]" >&2
  exit 2
fi
hostfile=$1
n=$2
shift 2
# A regular file only: awk would wait for ever on a FIFO.
if [ ! -f "$hostfile" ] || [ ! -r "$hostfile" ]; then
  echo "hostfile.sh: cannot read hostfile '$hostfile' (a readable regular file)" >&2
  exit 2
fi
source "$(dirname "${BASH_SOURCE[0]}")/launch_checks.sh"
check_rank_count hostfile.sh "$n"
check_program hostfile.sh "$1"
# Each line "host [slots=N] [key=value...]", N from 1 up; comments and blank lines aside; at least
# one host. mpirun's own refusals of these are hidden by --quiet.
if ! problem=$(awk '
  { sub(/[[:space:]]*#.*/, "") }
  /\r/ { print "line " NR " ends in a carriage return (a Windows line ending)"; bad = 1; exit }
  NF == 0 { next }
  { hosts++; for (i = 2; i <= NF; i++) if ($i ~ /^slots=/ && $i !~ /^slots=[1-9][0-9]*$/) { print "line " NR ": " $i " is not slots=N with N >= 1"; bad = 1; exit } }
  END { if (!bad && hosts == 0) print "it names no host" }' "$hostfile") || [ -n "$problem" ]; then
  echo "hostfile.sh: hostfile '$hostfile': ${problem:-cannot be read}" >&2
  exit 2
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source "$(dirname "${BASH_SOURCE[0]}")/mca_flags.sh"
flags=(--hostfile "$hostfile" --map-by slot --bind-to none "${tessera_mca[@]}"
       -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM)
# The slots the hostfile claims; more ranks than that oversubscribes (and yields when idle).
slots=$(awk '!/^[[:space:]]*(#|$)/ { s = 1; for (i = 2; i <= NF; i++) if ($i ~ /^slots=/) { split($i, a, "="); s = a[2] } total += s } END { print total + 0 }' "$hostfile")
if [ "$n" -gt "$slots" ]; then
  flags+=(--oversubscribe --mca mpi_yield_when_idle 1)
fi
if [ "${TESSERA_MPIRUN_VERBOSE:-0}" != 1 ]; then
  flags+=(--quiet)  # as local.sh: the program's own message is the one that matters
fi
# Split on whitespace with globbing off: 'docker*' reached mpirun as the names of the files in
# the current directory that matched it.
set -f
# shellcheck disable=SC2206
extra=(${TESSERA_MPIRUN_FLAGS:-})
set +f
exec mpirun -n "$n" "${flags[@]}" "${extra[@]}" "$@"
