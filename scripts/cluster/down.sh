#!/usr/bin/env bash
# down.sh: tear the simulated cluster down, idempotently: kill what still runs inside its
# namespaces (slurmd, stray ranks), release the UTS namespaces, delete the network namespaces
# and $TCL_DIR. Safe to run when nothing is up.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=env.sh
. "$here/env.sh"
# Without root, `ip` failed on each namespace and the script still said "cluster: down".
if [ "$(id -u)" -ne 0 ]; then echo "down.sh: needs root (network namespaces)" >&2; exit 1; fi
# A directory up.sh did not make (no marker) is a user's, or another cluster's is meant: nothing is
# torn down, neither the directory nor the namespaces (until 2026-11-28 a TESSERA_CLUSTER_DIR naming a
# user's directory was removed whole; until the twenty-third session the namespaces of the cluster
# that was up were deleted, its directory's mounts left behind).
if [ -d "$TCL_DIR" ] && [ ! -e "$TCL_DIR/$TCL_MARK" ]; then
  echo "down.sh: '$TCL_DIR' is not a cluster's directory (no $TCL_MARK, which up.sh writes): nothing torn down" >&2
  exit 2
fi
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$TCL_PREFIX-"); do
  pids=$(ip netns pids "$ns" 2>/dev/null)
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
done
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$TCL_PREFIX-"); do
  ip netns del "$ns"
done
if [ -d "$TCL_DIR" ]; then
  for f in "$TCL_DIR"/*.uts; do
    [ -e "$f" ] || continue
    mountpoint -q "$f" 2>/dev/null && umount "$f"
  done
  rm -rf "$TCL_DIR"
fi
echo "cluster: down"
