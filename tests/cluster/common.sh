# Sourced by the cluster tests. ROOT: the source tree; BUILD: the build tree.
# cluster_allowed prints why the simulated cluster cannot run here (and returns 1) or returns 0.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=../../scripts/cluster/env.sh
. "$ROOT/scripts/cluster/env.sh"
cluster_allowed() {
  if [ "$(id -u)" -ne 0 ]; then echo "not root (network namespaces need root)"; return 1; fi
  for tool in ip nsenter unshare mountpoint; do
    command -v "$tool" >/dev/null 2>&1 || { echo "'$tool' not installed (iproute2, util-linux)"; return 1; }
  done
  if ! unshare --net --uts true 2>/dev/null; then echo "this machine does not allow network/UTS namespaces"; return 1; fi
  return 0
}
# Skip (ctest's SKIP_RETURN_CODE 77) where the machine cannot run the cluster; fail when it can
# but the cluster is not up (the fixture cluster.up failed).
cluster_require() {
  local why
  if ! why=$(cluster_allowed); then echo "SKIP: $why" >&2; exit 77; fi
  if [ ! -r "$TCL_DIR/hostfile" ]; then echo "FAIL: no simulated cluster up ($TCL_DIR/hostfile)" >&2; exit 1; fi
}
# losses FILE: "step loss" per line of a --metrics file.
losses() { sed -E 's/.*"step":([0-9]+),"loss":([^,]+),.*/\1 \2/' "$1"; }
# same_losses A B TOL: every step of A has the same loss in B within TOL relative (0: bit for
# bit, compared as the printed 17 significant digits), and both have the same steps.
same_losses() {
  awk -v tol="$3" '
    NR == FNR { a[$1] = $2; n++; next }
    { m++; if (!($1 in a)) { print "step " $1 " missing in the reference"; bad = 1; next }
      if (tol == 0) { if (a[$1] != $2) { print "step " $1 ": " a[$1] " vs " $2; bad = 1 } }
      else { d = a[$1] - $2; if (d < 0) d = -d; s = a[$1] < 0 ? -a[$1] : a[$1];
             if (d > tol * s) { print "step " $1 ": " a[$1] " vs " $2 " (relative " d / s ")"; bad = 1 } } }
    END { if (n != m) { print n " steps vs " m; bad = 1 } exit bad }' <(losses "$1") <(losses "$2")
}
