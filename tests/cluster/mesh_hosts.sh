#!/usr/bin/env bash
# mesh_hosts.sh BUILD: ranks placed round-robin over the 2 hosts (--map-by node: world ranks
# 0,2,4,6 on host1, 1,3,5,7 on host2), Mesh::world still puts each `model` group (a row of
# data=2,model=4) on one host, the two rows on different hosts. Prints the picture.
set -uo pipefail
. "$(dirname "$0")/common.sh"
cluster_require
build=$1
out=$(TESSERA_CLUSTER_FLAGS="--map-by node" bash "$ROOT/scripts/cluster/mpirun.sh" 2 8 "$build/apps/demo_mesh" \
  --mesh data=2,model=4 --hosts) || { echo "$out"; echo "FAIL: demo_mesh --hosts" >&2; exit 1; }
echo "$out"
# "mesh rank R coords (d,m) world rank W host H"
echo "$out" | awk '
  /^mesh rank / { split($5, c, /[(),]/); d = c[2]; w = $8; h = $10; n++
    whost[w] = h; if (!(d in row)) row[d] = h; else if (row[d] != h) { print "FAIL: model group of data=" d " spans " row[d] " and " h; bad = 1 } }
  END {
    if (n != 8) { print "FAIL: " n " ranks listed"; exit 1 }
    if (whost[0] == whost[1]) { print "FAIL: world ranks 0 and 1 on one host: not placed round-robin"; bad = 1 }
    if (row[0] == row[1]) { print "FAIL: both model groups on " row[0]; bad = 1 }
    if (!bad) print "ok: round-robin placement, each model group on one host (" row[0] ", " row[1] ")"
    exit bad }'
