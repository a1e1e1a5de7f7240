#!/usr/bin/env bash
# host_bytes.sh: bytes sent between the simulated hosts so far: the sum over hosts of what each
# host's eth0 (its only link to the bridge) transmitted, TCP/IP headers included. Run it before
# and after a job; the difference is what the job sent across hosts (traffic inside a host goes
# through shared memory or lo and is not counted).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=env.sh
. "$here/env.sh"
# A failing command substitution in the loop's word list does not stop the script (set -e): with
# no cluster up it printed 0 and exited 0 until the forty-fourth session.
if [ ! -r "$TCL_DIR/hostfile" ]; then echo "host_bytes.sh: no cluster up (scripts/cluster/up.sh)" >&2; exit 2; fi
total=0
for h in $(awk '{print $1}' "$TCL_DIR/hostfile"); do
  b=$(ip netns exec "$(tcl_ns "$h")" cat /sys/class/net/eth0/statistics/tx_bytes)
  total=$((total + b))
done
echo "$total"
