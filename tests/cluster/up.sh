#!/usr/bin/env bash
# The fixture: a simulated cluster of 2 hosts (scripts/cluster/up.sh), or skip with the reason.
set -uo pipefail
. "$(dirname "$0")/common.sh"
if ! why=$(cluster_allowed); then echo "SKIP: $why" >&2; exit 77; fi
bash "$ROOT/scripts/cluster/down.sh" >/dev/null
exec bash "$ROOT/scripts/cluster/up.sh" 2
