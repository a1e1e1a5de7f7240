#!/usr/bin/env bash
# demo_mesh_check.sh COMMAND...: COMMAND (demo_mesh under mpirun at 2 ranks) prints, for each
# configuration below, exactly the lines given: the mesh, the tensor's picture, rank 0's block and
# the global sum of the tensor drawn from the seed (the RNG is sharding-invariant: the same sum on
# every mesh), or with --hosts each rank's coordinates and host and the mesh as a grid of them.
# (The largest seed, 2^64 - 1, in the fourth; apps.demo_mesh.seed_* check the seeds' edges.)
set -uo pipefail
host=$(uname -n)
failed=0
check() {  # check EXPECTED ARGS...
  local want=$1
  shift
  local got
  got=$(timeout 20 "${cmd[@]}" "$@" 2>&1)
  local rc=$?
  if [ "$rc" -ne 0 ] || [ "$got" != "$want" ]; then
    echo "FAIL: demo_mesh $* (exit $rc) printed:" >&2
    echo "$got" >&2
    echo "expected:" >&2
    echo "$want" >&2
    failed=1
  else
    echo "ok: demo_mesh $*"
  fi
}
cmd=("$@")

check "mesh(data: 1, model: 2) over 2 ranks
W1: f32[4, 8] P(None, model) on mesh(data: 1, model: 2)
+-----+-----+
|  0  |  1  |
+-----+-----+
local block [4, 4], global sum -0.627668" --mesh data=1,model=2 --spec "P(None, model)" --shape 4,8
# The same tensor split the other way (a seqax shape string): the same sum.
check "mesh(x: 2) over 2 ranks
W1: f32[4, 8] P(x, None) on mesh(x: 2)
+-----+
|  0  |
+-----+
|  1  |
+-----+
local block [2, 8], global sum -0.627668" --mesh x=2 --spec "rows/x cols" --shape 4 8
# Uneven blocks: 5 rows over 2 ranks are 3 and 2.
check "mesh(x: 2) over 2 ranks
W1: f32[5, 3] P(x, None) on mesh(x: 2)
+-------+
| 0 3x3 |
+-------+
| 1 2x3 |
+-------+
local block [3, 3], global sum 1.46519" --mesh x=2 --spec "P(x)" --shape 5,3 --seed 7
check "mesh(x: 2) over 2 ranks
W1: f32[5] P(x) on mesh(x: 2)
+-----+-----+
| 0 3 | 1 2 |
+-----+-----+
local block [3], global sum -0.867704" --mesh x=2 --spec "rows/x" --shape 5 --seed 18446744073709551615
# --hosts: rows are the first axis, columns the second.
check "mesh(data: 2, model: 1) over 2 ranks
mesh rank 0 coords (0,0) world rank 0 host $host
mesh rank 1 coords (1,0) world rank 1 host $host
rows: data, columns: model
+${host//?/-}----+
| 0@$host |
+${host//?/-}----+
| 1@$host |
+${host//?/-}----+" --mesh data=2,model=1 --hosts
check "mesh(data: 1, model: 2) over 2 ranks
mesh rank 0 coords (0,0) world rank 0 host $host
mesh rank 1 coords (0,1) world rank 1 host $host
rows: data, columns: model
+${host//?/-}----+${host//?/-}----+
| 0@$host | 1@$host |
+${host//?/-}----+${host//?/-}----+" --mesh data=1,model=2 --hosts
exit $failed
