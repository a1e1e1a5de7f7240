#!/usr/bin/env bash
# mpirun.sh HOSTS N PROGRAM [ARGS...]: run PROGRAM on N ranks of the first HOSTS simulated hosts
# with scripts/mpirun/hostfile.sh, unchanged but for TESSERA_MPIRUN_FLAGS: mpirun starts on
# host1 (inside its namespaces), reaches the other hosts through rsh.sh, and ranks on different
# hosts talk TCP over the bridge. Extra flags: TESSERA_CLUSTER_FLAGS (e.g. "--map-by node").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=env.sh
. "$here/env.sh"
if [ $# -lt 3 ]; then echo "usage: $0 HOSTS N PROGRAM [ARGS...]" >&2; exit 2; fi
hosts=$1
shift
if [ ! -r "$TCL_DIR/hostfile" ]; then echo "mpirun.sh: no cluster up (scripts/cluster/up.sh)" >&2; exit 2; fi
# HOSTS is one of the cluster's host counts (-1 took all hosts but the last, 0 none, and more hosts
# than are up as many as there were, each in silence).
up=$(grep -c . "$TCL_DIR/hostfile")
if ! [[ "$hosts" =~ ^[1-9][0-9]?$ ]] || [ "$hosts" -gt "$up" ]; then
  echo "mpirun.sh: HOSTS must be 1 to $up (the hosts up), got '$hosts'" >&2
  exit 2
fi
head -n "$hosts" "$TCL_DIR/hostfile" > "$TCL_DIR/hostfile.$hosts"
# The agent's path goes through two splits at whitespace (TESSERA_MPIRUN_FLAGS, Open MPI's own of
# plm_rsh_agent): a checkout whose path has any is refused, where its pieces were run as programs.
if [[ "$here" =~ [[:space:]] ]]; then
  echo "mpirun.sh: the checkout's path '$here' has whitespace, which the launcher's agent cannot carry" >&2
  exit 2
fi
flags="--mca plm_rsh_agent $here/rsh.sh --mca btl self,vader,tcp"
flags+=" --mca btl_tcp_if_include $TCL_SUBNET --mca oob_tcp_if_include $TCL_SUBNET"
flags+=" ${TESSERA_CLUSTER_FLAGS:-}"
# Eight ranks on a small machine: waiting ranks yield the core (in the environment, which mpirun
# forwards: hostfile.sh passes the flag itself when N exceeds the slots, and twice is an error).
OMPI_MCA_mpi_yield_when_idle=1 TESSERA_MPIRUN_FLAGS="$flags" tcl_enter host1 bash "$here/../mpirun/hostfile.sh" "$TCL_DIR/hostfile.$hosts" "$@"
