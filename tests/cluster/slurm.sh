#!/usr/bin/env bash
# slurm.sh BUILD WORK: a real Slurm (Debian's munge, slurmctld, slurmd; scripts/cluster/slurm_up.sh)
# with one slurmd per simulated host, under WORK. Jobs of scripts/mpirun/slurm.sbatch with
# --nodes=2 --ntasks-per-node=4 (data=2,model=4):
#   - the default srun path (SLURM_MPI_TYPE unset, MpiDefault=none: slurm.sbatch must pass
#     --mpi=pmix) and TESSERA_LAUNCHER=mpirun both train and give the 1-rank run's losses (1e-5);
#   - demo_mesh --hosts under srun: ranks 0-3 on host1, 4-7 on host2 (the job spans both hosts);
#   - a bad command line (--mesh data=3,model=4 on 8 tasks) ends the job with exit code 2.
set -uo pipefail
. "$(dirname "$0")/common.sh"
cluster_require
for cmd in munged slurmctld slurmd sbatch; do
  command -v "$cmd" >/dev/null || { echo "SKIP: $cmd not installed (scripts/setup.sh installs munge, slurmctld, slurmd, slurm-client)" >&2; exit 77; }
done
build=$1 work=$2
# Each slurmd has its own /tmp (slurm_up.sh), so jobs cannot see a checkout or build under /tmp.
for dir in "$ROOT" "$build" "$work"; do
  case "$(realpath -m "$dir")/" in
    /tmp/*) echo "SKIP: $dir is under /tmp, which each slurmd replaces with its own; build outside /tmp to run the Slurm test" >&2; exit 77 ;;
  esac
done
slurm=$work/slurm
# Daemons an earlier run left (killed by ctest's timeout, its trap below never ran) are stopped by
# their pid files before the directory that holds them goes: munged runs outside the hosts'
# namespaces, where down.sh does not reach.
bash "$ROOT/scripts/cluster/slurm_down.sh" "$slurm" >/dev/null
rm -rf "$work" && mkdir -p "$work"
trap 'bash "$ROOT/scripts/cluster/slurm_down.sh" "$slurm" >/dev/null' EXIT
bash "$ROOT/scripts/cluster/slurm_up.sh" "$slurm" || { echo "FAIL: Slurm did not start" >&2; exit 1; }
args=(--depth 256 --steps 4 --quiet)
bash "$ROOT/scripts/mpirun/local.sh" 1 "$build/apps/train_mlp" --mesh data=1,model=1 "${args[@]}" \
  --metrics "$work/one.jsonl" >/dev/null || { echo "FAIL: 1-rank run" >&2; exit 1; }
# Tasks run as root here; 8 ranks on a small machine yield when idle.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
unset SLURM_MPI_TYPE
submit() {  # submit NAME [VAR=VALUE...] -- PROGRAM ARGS...: prints the job id
  local name=$1
  shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" bash "$ROOT/scripts/cluster/slurm.sh" "$slurm" sbatch --parsable --nodes=2 --ntasks-per-node=4 \
    --job-name="$name" --output="$work/$name.out" "$ROOT/scripts/mpirun/slurm.sbatch" "$@"
}
declare -A job
job[srun]=$(submit srun -- "$build/apps/train_mlp" --mesh data=2,model=4 "${args[@]}" --metrics "$work/srun.jsonl")
job[mpirun]=$(submit mpirun TESSERA_LAUNCHER=mpirun -- "$build/apps/train_mlp" --mesh data=2,model=4 "${args[@]}" \
  --metrics "$work/mpirun.jsonl")
job[hosts]=$(submit hosts -- "$build/apps/demo_mesh" --mesh data=2,model=4 --hosts)
job[bad]=$(submit bad -- "$build/apps/train_mlp" --mesh data=3,model=4 "${args[@]}")
for name in "${!job[@]}"; do
  [[ "${job[$name]}" =~ ^[0-9]+$ ]] || { echo "FAIL: sbatch of '$name' gave '${job[$name]}'" >&2; exit 1; }
done
# Wait for all four (the nodes run one at a time), then read each exit code from slurmctld.
for _ in $(seq 1 900); do
  left=$(bash "$ROOT/scripts/cluster/slurm.sh" "$slurm" squeue -h -j "$(IFS=,; echo "${job[*]}")" -o %i 2>/dev/null | wc -l)
  [ "$left" -eq 0 ] && break
  sleep 0.2
done
[ "$left" -eq 0 ] || { echo "FAIL: jobs still queued after 180 s" >&2; exit 1; }
exit_code() { bash "$ROOT/scripts/cluster/slurm.sh" "$slurm" scontrol show job "$1" | grep -o 'ExitCode=[0-9:]*' | cut -d= -f2; }
bad=0
for name in srun mpirun hosts bad; do
  code=$(exit_code "${job[$name]}")
  want=0:0
  [ "$name" = bad ] && want=2:0
  echo "job ${job[$name]} ($name): ExitCode=$code"
  if [ "$code" != "$want" ]; then echo "FAIL: job $name ended with $code, not $want" >&2; cat "$work/$name.out" >&2; bad=1; fi
done
[ "$bad" = 0 ] || exit 1
for launcher in srun mpirun; do
  same_losses "$work/one.jsonl" "$work/$launcher.jsonl" 1e-5 || { echo "FAIL: $launcher losses differ" >&2; exit 1; }
  echo "ok: $launcher on 2 Slurm nodes x 4 tasks: $(wc -l < "$work/$launcher.jsonl") losses equal the 1-rank run's"
done
cat "$work/hosts.out"
awk '/^mesh rank / { n++; want = $8 < 4 ? "host1" : "host2"; if ($10 != want) { print "FAIL: world rank " $8 " on " $10; bad = 1 } }
     END { if (n != 8) { print "FAIL: " n " ranks"; bad = 1 } exit bad }' "$work/hosts.out" || exit 1
grep -q "has 12 ranks but the communicator has 8" "$work/bad.out" || { cat "$work/bad.out"; echo "FAIL: bad job's message" >&2; exit 1; }
echo "ok: the job spans host1 and host2; a bad command line ends the job with exit code 2"
