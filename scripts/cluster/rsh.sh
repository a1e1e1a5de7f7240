#!/usr/bin/env bash
# rsh.sh HOST COMMAND...: Open MPI's rsh agent for the simulated cluster (--mca plm_rsh_agent):
# runs COMMAND (orted's command line) inside HOST's namespaces, with its own TMPDIR.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=env.sh
. "$here/env.sh"
host=$1
shift
if [ ! -e "/run/netns/$(tcl_ns "$host")" ]; then
  echo "rsh.sh: no simulated host '$host' (scripts/cluster/up.sh)" >&2
  exit 255
fi
tcl_enter "$host" /bin/sh -c "$*"
