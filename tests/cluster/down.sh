#!/usr/bin/env bash
# The fixture's cleanup: nothing of the cluster is left (namespaces, daemons, mounts).
set -uo pipefail
. "$(dirname "$0")/common.sh"
bash "$ROOT/scripts/cluster/down.sh"
if ip netns list 2>/dev/null | grep -q "^$TCL_PREFIX-"; then echo "FAIL: namespaces left" >&2; exit 1; fi
[ ! -e "$TCL_DIR" ] || { echo "FAIL: $TCL_DIR left" >&2; exit 1; }
