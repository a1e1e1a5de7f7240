#!/usr/bin/env bash
# slurm_up.sh DIR: a real Slurm (Debian's munge, slurmctld, slurmd) on the simulated cluster,
# everything under DIR (not under /tmp: slurm.conf, munge key and socket, state, spool, logs): slurmctld on
# host1, one slurmd per host (NodeName=hostN, its own namespaces), one partition `sim`.
# Needs scripts/cluster/up.sh first. Use DIR/env.sh's SLURM_CONF with the clients, inside a host:
#   scripts/cluster/slurm.sh DIR sbatch --nodes=2 ... (runs them in host1). Stop with slurm_down.sh DIR.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=env.sh
. "$here/env.sh"
if [ $# -ne 1 ]; then echo "usage: $0 DIR" >&2; exit 2; fi
dir=$(mkdir -p "$1" && cd "$1" && pwd)
case "$dir/" in
  /tmp/*) echo "slurm_up.sh: DIR must not be under /tmp (each slurmd gets its own /tmp)" >&2; exit 2 ;;
esac
if [ ! -r "$TCL_DIR/hostfile" ]; then echo "slurm_up.sh: no cluster up (scripts/cluster/up.sh)" >&2; exit 2; fi
hosts=$(awk '{print $1}' "$TCL_DIR/hostfile")
slots=$(awk '{split($2, a, "="); print a[2]; exit}' "$TCL_DIR/hostfile")
for cmd in munged slurmctld slurmd sbatch; do
  command -v "$cmd" >/dev/null || { echo "slurm_up.sh: $cmd missing (scripts/setup.sh installs munge, slurmctld, slurmd, slurm-client)" >&2; exit 2; }
done
# Whether PIDFILE names a running DAEMON: a stale file (after a reboot, say) may name another
# process by now, which `kill -0` took for the daemon, so that none was started and the wait
# below ran out (until the forty-fourth session); slurm_down.sh checks the same way.
running() {
  local pid
  pid=$(cat "$2" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[1-9][0-9]*$ ]] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ]
}
mkdir -p "$dir/munge" "$dir/state" "$dir/log"
chmod 700 "$dir/munge"
# munge: its own key and socket; the daemons reach it through the file system from any namespace.
[ -s "$dir/munge/munge.key" ] || dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge/munge.key"
if ! [ -S "$dir/munge/munge.socket" ] || ! running munged "$dir/munge/munged.pid"; then
  munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed"
fi
nodes=
for h in $hosts; do
  nodes+="NodeName=$h NodeAddr=$(tcl_addr "$h") CPUs=$slots State=UNKNOWN"$'\n'
  mkdir -p "$dir/spool/$h"
done
cat > "$dir/slurm.conf" <<CONF
ClusterName=tessera-sim
SlurmctldHost=host1($(tcl_addr host1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/spool/%n/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
InactiveLimit=0
KillWait=5
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
$nodes
PartitionName=sim Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
cat > "$dir/env.sh" <<ENV
export SLURM_CONF=$dir/slurm.conf
ENV
export SLURM_CONF=$dir/slurm.conf
if ! running slurmctld "$dir/slurmctld.pid"; then
  tcl_enter host1 slurmctld -c -f "$SLURM_CONF"
fi
for h in $hosts; do
  if ! running slurmd "$dir/spool/$h/slurmd.pid"; then
    # Its own /tmp too (a private mount namespace, the host's TMPDIR bound on /tmp): Slurm's PMIx
    # plugin keeps per-step directories under TmpFS=/tmp, which would collide between hosts.
    tcl_enter "$h" unshare --mount --propagation private \
      sh -c 'mount --bind "$1" /tmp && exec slurmd -N "$2" -f "$3"' sh "$TCL_DIR/$h/tmp" "$h" "$SLURM_CONF"
  fi
done
# Wait until every node is idle.
n=$(echo "$hosts" | wc -w)
for _ in $(seq 1 300); do
  idle=$(tcl_enter host1 sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)
  [ "$idle" -eq "$n" ] && { echo "slurm: $n nodes idle ($(echo $hosts)), SLURM_CONF=$SLURM_CONF"; exit 0; }
  sleep 0.2
done
echo "slurm_up.sh: nodes not idle after 60 s" >&2
tcl_enter host1 sinfo -N -l >&2 || true
tail -5 "$dir/log/"*.log >&2
exit 1
