# Sourced by scripts/cluster/*.sh: names and addresses of the simulated cluster.
# Everything lives in network namespaces these scripts create: a "switch" namespace holding the
# bridge, and one namespace per host (hostN, 10.199.0.(10+N)/24) joined to it by a veth pair.
# The subnet exists only inside those namespaces; the root namespace gets no address or route.
TCL_DIR=${TESSERA_CLUSTER_DIR:-/run/tessera-cluster}
# up.sh marks the directory it makes (or finds empty) as the cluster's; down.sh removes only a
# directory so marked (TESSERA_CLUSTER_DIR may name any directory).
TCL_MARK=.tessera-cluster
TCL_PREFIX=tcl
TCL_SUBNET=10.199.0.0/24
tcl_ns() { echo "$TCL_PREFIX-$1"; }          # host1 -> tcl-host1
tcl_addr() { echo "10.199.0.$((10 + ${1#host}))"; }
# nsenter into a host: its network and UTS namespaces (own address and hostname).
tcl_enter() {
  local host=$1
  shift
  nsenter --net="/run/netns/$(tcl_ns "$host")" --uts="$TCL_DIR/$host.uts" \
    env TMPDIR="$TCL_DIR/$host/tmp" "$@"
}
