#!/usr/bin/env bash
# host_bytes.sh: bytes sent between the simulated hosts so far: the sum over hosts of what each
# host's eth0 (its only link to the bridge) transmitted, TCP/IP headers included. Run it before
# and after a job; the difference is what the job sent across hosts (traffic inside a host goes
# through shared memory or lo and is not counted).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=env.sh
. "$here/env.sh"
total=0
for h in $(awk '{print $1}' "$TCL_DIR/hostfile"); do
  b=$(ip netns exec "$(tcl_ns "$h")" cat /sys/class/net/eth0/statistics/tx_bytes)
  total=$((total + b))
done
echo "$total"
