#!/usr/bin/env bash
# bench_floor_check.sh COMMAND...: COMMAND (bench_train under mpirun, all ranks on this machine)
# prints its gemm, copy, adam_stream, rows_stream, read_stream and train_step lines, and the
# step's floor is the one docs/design.md defines:
#   compute_floor_ms = 1e3 * max(1, ranks_per_core)
#                      * (gflop_per_rank / gemm rate + other MB * 1e-3 / bandwidth alone
#                         + read MB * 1e-3 / read bandwidth alone
#                         + row MB * 1e-3 / rows bandwidth alone - row_overlap_ms * 1e-3
#                         - forward_overlap_ms * 1e-3)
#   memory_floor_ms  = 1e3 * (other MB * 1e-3 / bandwidth per rank + read MB * 1e-3 / read bandwidth per rank
#                             + row MB * 1e-3 / rows bandwidth per rank)
#   floor_ms = max(compute_floor_ms, memory_floor_ms)
# where row MB = 24 bytes x row_params_per_rank (a weight updated in rows streams p, m and v
# only), read MB = 4 bytes x row_params_per_rank (the forward's read of those weights), other
# MB = mb_per_rank - row MB - read MB, the bandwidth max(copy, adam_stream), the rows bandwidth
# max(copy, adam_stream, rows_stream) and the read bandwidth read_stream's, each alone (rank 0 by
# itself; where the node's ranks fill its 2-8 CPUs, the mean of its measurements on each) or per
# rank (all at once; on one rank the two are one configuration, and each rate is printed as both
# at the faster of its two measurements); and floor_ms_slower_rates (the same floor at the slower of
# each rate's two measurements) is not below floor_ms,
# with each stream measured over its footprint (footprint_mib_alone, footprint_mib_per_rank): the
# rank's blocks copied ceil(ranks / measuring ranks) times, at most 256 MiB unless one copy is more,
# with the gemm rate the fastest of the MLP's three products measured on one rank alone
# (forward, input gradient, weight gradient; all three printed and positive) on this rank's rows
# and on the whole batch's (whole_batch_gflops, the fastest of those three), ranks_per_core the
# ranks over the CPUs this script may use (at least 1) (the job's: ranks bound to cores, each seeing only its
# own, are bound within them and use them together), each within 1% and half a microsecond (the
# times are printed in ms to 3 decimals, rates to 3 or 4 digits), and ratio = ms_median / floor_ms.
# The MLP's weights go in rows (row_updates, all
# 2 x layers of them: a batch of at most 16 rows a rank; row_params_per_rank all of the rank's
# parameters), each of the same block, and every one but the first layer's kernel computes an
# input gradient of one matmul's FLOPs from its panels.
# Either all of them are updated in one pass with their products (one_pass_updates = row_updates,
# on a target with AVX-512), each pass the longer of its products and Adam's 24 bytes a
# parameter at the rows bandwidth, not both:
#   row_overlap_ms = 1e3 * ((2 x layers - 1) * min(2 x matmul FLOPs / gemm rate, 24 bytes x block / rows bandwidth alone)
#                           + min(matmul FLOPs / gemm rate, 24 bytes x block / rows bandwidth alone))
# or none (one_pass_updates = 0), a weight read once for its input gradient and Adam's update:
#   row_overlap_ms = 1e3 * (2 x layers - 1) * min(matmul FLOPs / gemm rate, 4 bytes x block / bandwidth alone)
# and every weight's forward product reads it as it computes:
#   forward_overlap_ms = 1e3 * 2 x layers * min(matmul FLOPs / gemm rate, 4 bytes x block / read bandwidth alone)
# And the floor of the steps' placement of the CPUs (cpu_pair_ns, the median of the probes around
# the steps; 0 where rank 0 is bound to one CPU): floor_ms_same_placement is the same floor with
# each per-rank bandwidth replaced by gb_per_s_per_rank_same_placement (the fastest measurement
# in that placement: at most the rate's fastest anywhere), so never below floor_ms, and
# ratio_same_placement the median of steps_same_placement of the steps over it (between ms_min
# and ms_max); both null where no probe was taken, or no measurement of the rates saw the steps'
# placement in the 2 + 4 sets of them.
# And comm_ms_median, the time inside collectives: 0 on one rank, else above 0 and at most
# ms_median.
# And work_ms_max_median and work_ms_min_median, the most and the least time a rank spent outside
# collectives: both ms_median on one rank, else above 0, min <= max <= ms_median.
# And alone_cpus, the CPUs each rate alone was measured on: this script's CPUs where the ranks
# are at least as many and they are 2 to 8 (their mean is the rate printed), else 1.
# And update_ms_median, the time inside the optimizer's update: above 0 and at most ms_median;
# with every weight updated in one pass, update_floor_ms, its bound on a rank alone (compute_floor_ms
# holds it max(1, ranks_per_core) times):
#   1e3 * ((2 x layers - 1) * max(2 x matmul FLOPs / gemm rate, 24 bytes x block / rows bandwidth alone)
#          + max(matmul FLOPs / gemm rate, 24 bytes x block / rows bandwidth alone))
# and update_ratio = update_ms_median / update_floor_ms; both null otherwise.
set -uo pipefail
out=$("$@") || { echo "FAIL: bench_train exited with $?" >&2; exit 1; }
echo "$out"
/usr/bin/python3 - "$out" <<'PY'
import json, math, os, sys
lines = {}
for line in sys.argv[1].splitlines():
    if line.startswith("{"):
        d = json.loads(line)
        lines[d["bench"]] = d
# Times are printed in ms to 3 decimals: a printed time is within half a microsecond of the
# program's, which for a small floor (0.045 ms) is more than 1% of it, and a ratio recomputed
# from two printed times carries both roundings.
HALF_MS = 5e-4

def ratio_slack(num, den):
    return num / den * (1e-2 + HALF_MS / num + HALF_MS / den)

names = ("gemm", "copy", "adam_stream", "rows_stream", "read_stream", "train_step")
for name in names:
    assert name in lines, f"no {name} line"
gemm, copy, stream, rows, read, step = (lines[name] for name in names)
for s in (stream, rows, read):
    assert s["gb_per_s_per_rank"] > 0 and s["gb_per_s_alone"] > 0 and s["elements"] == step["params_per_rank"], s
assert copy["gb_per_s_alone"] > 0, copy
# Each stream measurement streams the rank's blocks as many times over as makes the measuring
# ranks' arrays the node's (rank 0 alone: all ranks'; at once: all ranks' over the CPUs), at
# most 256 MiB a rank unless one copy is larger (every rank of these tests is on this machine).
cpus = len(os.sched_getaffinity(0))
for s, bpe in ((stream, 16), (rows, 12), (read, 4)):
    own = bpe * s["elements"] / 2**20
    for key, measuring in (("footprint_mib_alone", 1), ("footprint_mib_per_rank", min(s["ranks"], cpus))):
        copies = max(1, min(math.ceil(s["ranks"] / measuring), math.floor(256 / own)))
        assert abs(s[key] - copies * own) <= 1e-3 * own, (s["bench"], key, s[key], copies, own)
# One rank (every rank of these tests is on this machine): alone and at once are one configuration,
# each rate the faster of its two kinds of measurement, printed as both.
if step["ranks"] == 1:
    for line in (copy, stream, rows, read):
        assert line["gb_per_s_alone"] == line["gb_per_s_per_rank"], line
bw_all = max(copy["gb_per_s_per_rank"], stream["gb_per_s_per_rank"])
bw_alone = max(copy["gb_per_s_alone"], stream["gb_per_s_alone"])
rows_all = max(bw_all, rows["gb_per_s_per_rank"])
rows_alone = max(bw_alone, rows["gb_per_s_alone"])
read_all, read_alone = read["gb_per_s_per_rank"], read["gb_per_s_alone"]
rates = [gemm["gflops_per_rank"], gemm["input_grad_gflops_per_rank"], gemm["weight_grad_gflops_per_rank"]]
assert min(rates) > 0, gemm
assert gemm["whole_batch_m"] >= gemm["m"] and gemm["whole_batch_gflops"] > 0, gemm
rates.append(gemm["whole_batch_gflops"])
share = step["ranks"] / len(os.sched_getaffinity(0))
assert abs(step["ranks_per_core"] - max(1.0, share)) <= 1e-3, (step["ranks_per_core"], share)
# Rates alone were measured on each of these CPUs, rank 0 pinned to each in turn, where the ranks
# are at least as many as the CPUs and those are 2 to 8; else where rank 0 ran (1).
want_alone_cpus = cpus if step["ranks"] >= cpus and 2 <= cpus <= 8 else 1
assert step["alone_cpus"] == want_alone_cpus, (step["alone_cpus"], want_alone_cpus)
layers = step["layers"]
assert step["row_updates"] == 2 * layers, step
block = step["params_per_rank"] / (2 * layers)
assert step["row_params_per_rank"] == step["params_per_rank"], step
matmul_gflop = step["gflop_per_rank"] / (6 * layers - 1)
if step["one_pass_updates"] == 2 * layers:
    def one_pass(gflop):
        return min(gflop / max(rates), 24 * block * 1e-9 / rows_alone)
    overlap = 1e3 * ((2 * layers - 1) * one_pass(2 * matmul_gflop) + one_pass(matmul_gflop))
else:
    assert step["one_pass_updates"] == 0, step
    overlap = 1e3 * (2 * layers - 1) * min(matmul_gflop / max(rates), 4 * block * 1e-9 / bw_alone)
assert overlap > 0 and abs(step["row_overlap_ms"] - overlap) <= 1e-2 * overlap + 1e-3, (step["row_overlap_ms"], overlap)
# Each weight's forward product and its read of the weight are one pass, charged the longer.
forward = 1e3 * 2 * layers * min(matmul_gflop / max(rates), 4 * block * 1e-9 / read_alone)
assert forward > 0 and abs(step["forward_overlap_ms"] - forward) <= 1e-2 * forward + 1e-3, (step["forward_overlap_ms"], forward)
row_mb = 24 * step["row_params_per_rank"] * 1e-6
read_mb = 4 * step["row_params_per_rank"] * 1e-6
other_mb = step["mb_per_rank"] - row_mb - read_mb
compute = 1e3 * max(1.0, share) * (step["gflop_per_rank"] / max(rates) + other_mb * 1e-3 / bw_alone
                                   + read_mb * 1e-3 / read_alone + row_mb * 1e-3 / rows_alone
                                   - overlap * 1e-3 - forward * 1e-3)
memory = 1e3 * (other_mb * 1e-3 / bw_all + read_mb * 1e-3 / read_all + row_mb * 1e-3 / rows_all)
for name, want in (("compute_floor_ms", compute), ("memory_floor_ms", memory), ("floor_ms", max(compute, memory))):
    assert abs(want - step[name]) <= 1e-2 * want + HALF_MS, (name, want, step[name])
floor = max(compute, memory)
ratio = step["ms_median"] / step["floor_ms"]
assert abs(ratio - step["ratio"]) <= ratio_slack(step["ms_median"], step["floor_ms"]), step
# The time inside collectives: 0 on one rank (a rank alone waits for no other; printed to the
# microsecond); on more, some, and in each step at most the step's (both are the most of any rank,
# and a rank's time in collectives is part of its step), so its median is at most the steps'.
if step["ranks"] == 1:
    assert step["comm_ms_median"] == 0, step
else:
    assert 0 < step["comm_ms_median"] <= step["ms_median"] + 1e-3, step
# The time a rank worked outside collectives: on one rank its whole step (each step's the same
# value, so the same median); on more, the least of any rank at most the most, and the most at
# most the step's (a rank's work is part of its step, and the step the most of any rank's).
if step["ranks"] == 1:
    assert step["work_ms_max_median"] == step["work_ms_min_median"] == step["ms_median"], step
else:
    assert 0 < step["work_ms_min_median"] <= step["work_ms_max_median"] <= step["ms_median"] + 1e-3, step
# The time inside the optimizer's update: some, and in each step at most the step's (both the
# most of any rank), so its median at most the steps'. Where every weight is updated in one pass,
# the update's bound on a rank alone: each pass the longer of its products and its streams.
assert 0 < step["update_ms_median"] <= step["ms_median"] + 1e-3, step
if step["one_pass_updates"] == 2 * layers:
    def whole_pass(gflop):
        return max(gflop / max(rates), 24 * block * 1e-9 / rows_alone)
    update = 1e3 * ((2 * layers - 1) * whole_pass(2 * matmul_gflop) + whole_pass(matmul_gflop))
    assert abs(step["update_floor_ms"] - update) <= 1e-2 * update + HALF_MS, (step["update_floor_ms"], update)
    # Both printed: the update's rounding counts max(1, share) times, the compute floor's once.
    slack = HALF_MS * (max(1.0, share) + 1)
    assert step["update_floor_ms"] * max(1.0, share) <= step["compute_floor_ms"] * (1 + 1e-2) + slack, step
    ratio = step["update_ms_median"] / step["update_floor_ms"]
    assert abs(step["update_ratio"] - ratio) <= ratio_slack(step["update_ms_median"], step["update_floor_ms"]), (
        step["update_ratio"], ratio)
else:
    assert step["update_floor_ms"] is None and step["update_ratio"] is None, step
# The same floor at the slower of each rate's two measurements: never below the floor.
assert step["floor_ms_slower_rates"] >= step["floor_ms"] * (1 - 1e-2), step
# The floor of the steps' placement.
placed = [copy["gb_per_s_per_rank_same_placement"], stream["gb_per_s_per_rank_same_placement"],
          rows["gb_per_s_per_rank_same_placement"], read["gb_per_s_per_rank_same_placement"]]
assert 0 <= step["steps_same_placement"] <= step["steps"] and 2 <= step["rate_sets"] <= 6, step
if step["cpu_pair_ns"] == 0:
    assert placed == [None] * 4 and step["rate_sets"] == 2 and step["steps_same_placement"] == 0, (placed, step)
else:
    assert step["cpu_pair_ns"] > 0, step
if step["floor_ms_same_placement"] is None:
    assert None in placed and step["ratio_same_placement"] is None, (placed, step)
    assert step["cpu_pair_ns"] == 0 or step["rate_sets"] == 6, step
else:
    for line, rate in zip((copy, stream, rows, read), placed):
        assert rate is not None and 0 < rate <= line["gb_per_s_per_rank"] * (1 + 1e-3), (line, rate)
    bw_all_p = max(placed[0], placed[1])
    rows_all_p = max(bw_all_p, placed[2])
    memory_p = 1e3 * (other_mb * 1e-3 / bw_all_p + read_mb * 1e-3 / placed[3] + row_mb * 1e-3 / rows_all_p)
    floor_p = max(compute, memory_p)
    assert abs(step["floor_ms_same_placement"] - floor_p) <= 1e-2 * floor_p, (step["floor_ms_same_placement"], floor_p)
    assert step["floor_ms_same_placement"] >= step["floor_ms"] * (1 - 1e-2), step
    if step["steps_same_placement"] == 0:
        assert step["ratio_same_placement"] is None, step
    else:
        ms = step["ratio_same_placement"] * step["floor_ms_same_placement"]
        assert step["ms_min"] * (1 - 1e-2) <= ms <= step["ms_max"] * (1 + 1e-2), (ms, step)
print(f"ok: floor {step['floor_ms']} ms = max({compute:.3f}, {memory:.3f}) from the printed rates, "
      f"{step['ranks_per_core']} ranks per core")
PY
