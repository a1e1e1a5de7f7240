#!/usr/bin/env bash
# up.sh [N]: start a simulated cluster of N hosts (default 2) on this machine, idempotently.
# Each host is a network namespace with its own address on a bridge, its own hostname (a UTS
# namespace kept in $TCL_DIR/hostN.uts) and its own TMPDIR ($TCL_DIR/hostN/tmp), so Open MPI's
# daemons on different "hosts" never share a session directory. Writes $TCL_DIR/hostfile
# ("hostN slots=4" per host). Needs root (ip netns, unshare, mount). Undo with down.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=env.sh
. "$here/env.sh"
n=${1:-2}
slots=${TESSERA_CLUSTER_SLOTS:-4}
if ! [[ "$slots" =~ ^[1-9][0-9]?$ ]]; then echo "up.sh: TESSERA_CLUSTER_SLOTS must be 1..99, got '$slots'" >&2; exit 2; fi
if ! [[ "$n" =~ ^[1-9][0-9]?$ ]]; then echo "up.sh: host count must be 1..99, got '$n'" >&2; exit 2; fi
if [ "$(id -u)" -ne 0 ]; then echo "up.sh: needs root (network namespaces)" >&2; exit 1; fi
if [ -d "$TCL_DIR" ] && [ ! -e "$TCL_DIR/$TCL_MARK" ] && [ -n "$(ls -A "$TCL_DIR")" ]; then
  echo "up.sh: '$TCL_DIR' holds files of its own: TESSERA_CLUSTER_DIR names a new or empty directory" >&2
  exit 2
fi
mkdir -p "$TCL_DIR"
touch "$TCL_DIR/$TCL_MARK"
sw=$(tcl_ns switch)
ip netns list | grep -qw "^$sw" || ip netns add "$sw"
ip -n "$sw" link set lo up
ip -n "$sw" link show br0 >/dev/null 2>&1 || ip -n "$sw" link add br0 type bridge forward_delay 0 stp_state 0
ip -n "$sw" link set br0 up
: > "$TCL_DIR/hostfile.tmp"
for i in $(seq 1 "$n"); do
  host=host$i
  ns=$(tcl_ns "$host")
  ip netns list | grep -qw "^$ns" || ip netns add "$ns"
  ip -n "$ns" link set lo up
  if ! ip -n "$ns" link show eth0 >/dev/null 2>&1; then
    # Created inside the host namespace, the peer moved straight into the switch: the pair never
    # appears in the root namespace.
    ip -n "$ns" link add eth0 type veth peer name "v$host" netns "$sw"
    ip -n "$ns" addr add "$(tcl_addr "$host")/24" dev eth0
  fi
  ip -n "$ns" link set eth0 up
  ip -n "$sw" link set "v$host" master br0 up
  mkdir -p "$TCL_DIR/$host/tmp"
  if ! mountpoint -q "$TCL_DIR/$host.uts" 2>/dev/null; then
    touch "$TCL_DIR/$host.uts"
    unshare --uts="$TCL_DIR/$host.uts" hostname "$host"
  fi
  echo "$host slots=$slots" >> "$TCL_DIR/hostfile.tmp"
done
mv "$TCL_DIR/hostfile.tmp" "$TCL_DIR/hostfile"
# Wait until every host's link to the bridge is up (carrier on both ends of the veth).
for i in $(seq 1 "$n"); do
  for _ in $(seq 1 100); do
    ip -n "$(tcl_ns "host$i")" link show eth0 | grep -q LOWER_UP && break
    sleep 0.05
  done
done
echo "cluster: $n hosts up ($(tr '\n' ' ' < "$TCL_DIR/hostfile")) on $TCL_SUBNET; hostfile $TCL_DIR/hostfile"
