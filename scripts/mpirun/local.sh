#!/usr/bin/env bash
# local.sh N PROGRAM [ARGS...]: run PROGRAM on N ranks of this machine.
# Oversubscribes when N exceeds the cores and yields when idle when N fills them, binds rank r to the
# (r mod cores)-th core where N is a whole multiple of the cores (below), allows running as root,
# and passes the Open MPI settings of scripts/mpirun/mca-params.conf (shared-memory single copy off,
# ROMIO for MPI-IO, shared memory's eager limit and fragment size).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 N PROGRAM [ARGS...]" >&2
  exit 2
fi
n=$1
shift
# This script's folder without a `dirname` process: on a virtual machine every fork and exec costs
# milliseconds, and the test suites start this script hundreds of times.
here=${BASH_SOURCE[0]%/*}
[ "$here" = "${BASH_SOURCE[0]}" ] && here=.
source "$here/launch_checks.sh"
check_rank_count local.sh "$n"
check_program local.sh "$1"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The Open MPI settings of every launch (single copy off, ROMIO, shared memory's eager limit and
# fragment size): scripts/mpirun/mca-params.conf, read by mca_flags.sh.
source "$here/mca_flags.sh"
# Binding: where N is a whole multiple (2 or more) of the CPUs this process may use, each rank is
# bound to one of them in turn (rank r to the (r mod CPUs)-th), so that the ranks sharing a CPU
# stay on it and keep its caches. The transformer's step on 8 ranks of 2 CPUs ran faster bound in
# 13 of 14 interleaved pairs over three sessions on an Intel host (1-7%) and in 3 of 4 on a Zen 5
# host (the fourth level), the MLP's level (docs/design-log.md, "Nineteenth session",
# "Twentieth session"). Any other N stays unbound: ranks bound unevenly (10 on 8 CPUs: two CPUs
# with two ranks each) would make the ranks of the fuller CPUs, and so the whole job, twice as
# slow, where the scheduler shares the CPUs out. TESSERA_LOCAL_BIND=none leaves every launch unbound.
cpus=$(nproc)
case "${TESSERA_LOCAL_BIND:-auto}" in
  auto) if [ "$n" -gt "$cpus" ] && [ $((n % cpus)) -eq 0 ]; then bind=hwthread; else bind=none; fi ;;
  none) bind=none ;;
  *)
    echo "local.sh: TESSERA_LOCAL_BIND must be unset, auto or none, got '$TESSERA_LOCAL_BIND'" >&2
    exit 2
    ;;
esac
if [ "$bind" = hwthread ]; then
  flags=(--map-by hwthread --bind-to hwthread:overload-allowed "${tessera_mca[@]}")
else
  flags=(--bind-to none "${tessera_mca[@]}")
fi
# One node: pml ob1 (shared memory through the vader BTL), the pml Open MPI picks here anyway,
# named so that it does not first open the cm pml and load its PSM and PSM2 libraries to probe
# for their network (0.2 s of every start: 10 starts of an empty program on 1 rank, 4.2 s
# against 2.15 s). A pml the caller chose (OMPI_MCA_pml) stands.
if [ -z "${OMPI_MCA_pml:-}" ]; then
  flags+=(--mca pml ob1)
fi
if [ "$n" -gt "$cpus" ]; then
  flags+=(--oversubscribe)
fi
# Busy-polling ranks that fill every core starve the rank they wait for as soon as anything else
# runs (measured: train step of 2 ranks on 2 busy cores, 4.9 s polling vs 0.41 s yielding).
if [ "$n" -ge "$cpus" ]; then
  flags+=(--mca mpi_yield_when_idle 1)
fi
# hwloc's discovery of I/O devices, in mpirun and again in every rank, reads each PCI device's
# configuration space, which on a virtual machine traps to the hypervisor for every read; Open MPI
# on one node needs the CPUs' topology only (shared memory; binding). Leaving the I/O components
# out took the CPU time of starting an empty 8-rank program from 1.40 to 1.14-1.22 s on a Zen 5
# guest (docs/design.md, "Running MPI on these machines"). A choice of the caller's
# (HWLOC_COMPONENTS set, even empty) stands.
export HWLOC_COMPONENTS=${HWLOC_COMPONENTS--pci,-linuxio}
# mpirun's own banner after a rank exits non-zero is noise next to the program's one message;
# TESSERA_MPIRUN_VERBOSE=1 brings it back.
if [ "${TESSERA_MPIRUN_VERBOSE:-0}" != 1 ]; then
  flags+=(--quiet)
fi
exec mpirun -n "$n" "${flags[@]}" "$@"
