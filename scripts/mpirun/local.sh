#!/usr/bin/env bash
# local.sh N PROGRAM [ARGS...]: run PROGRAM on N ranks of this machine.
# Oversubscribes when N exceeds the cores and yields when idle when N fills them, allows running as root,
# and passes the Open MPI settings of scripts/mpirun/mca-params.conf (shared-memory single copy off,
# ROMIO for MPI-IO, shared memory's eager limit and fragment size).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 N PROGRAM [ARGS...]" >&2
  exit 2
fi
n=$1
shift
if ! [[ "$n" =~ ^[1-9][0-9]*$ ]]; then
  echo "local.sh: rank count must be a positive integer, got '$n'" >&2
  exit 2
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The Open MPI settings of every launch (single copy off, ROMIO, shared memory's eager limit and
# fragment size): scripts/mpirun/mca-params.conf, read by mca_flags.sh.
source "$(dirname "${BASH_SOURCE[0]}")/mca_flags.sh"
flags=(--bind-to none "${tessera_mca[@]}")
# One node: pml ob1 (shared memory through the vader BTL), the pml Open MPI picks here anyway,
# named so that it does not first open the cm pml and load its PSM and PSM2 libraries to probe
# for their network (0.2 s of every start: 10 starts of an empty program on 1 rank, 4.2 s
# against 2.15 s). A pml the caller chose (OMPI_MCA_pml) stands.
if [ -z "${OMPI_MCA_pml:-}" ]; then
  flags+=(--mca pml ob1)
fi
if [ "$n" -gt "$(nproc)" ]; then
  flags+=(--oversubscribe)
fi
# Busy-polling ranks that fill every core starve the rank they wait for as soon as anything else
# runs (measured: train step of 2 ranks on 2 busy cores, 4.9 s polling vs 0.41 s yielding).
if [ "$n" -ge "$(nproc)" ]; then
  flags+=(--mca mpi_yield_when_idle 1)
fi
# mpirun's own banner after a rank exits non-zero is noise next to the program's one message;
# TESSERA_MPIRUN_VERBOSE=1 brings it back.
if [ "${TESSERA_MPIRUN_VERBOSE:-0}" != 1 ]; then
  flags+=(--quiet)
fi
exec mpirun -n "$n" "${flags[@]}" "$@"
