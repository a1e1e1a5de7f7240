// bench_collectives: tessera's local-view collectives against the raw MPI call on the same input
// buffers, in the same run, for message sizes from --min to --max (powers of 4) and for the
// outermost dimension (no packing) and an inner one (strided blocks). One JSON object per line.
// Sizes follow nccl-tests: all_gather's size is the gathered (output) size, the others' the
// per-rank input. Time: the slowest rank's, with a barrier before each call, after warm-up; the
// two calls are timed in --iters pairs, back to back, and the times printed are the medians.
// Bus bandwidth: size / time times (n-1)/n (all_gather, reduce_scatter, all_to_all) or 2(n-1)/n
// (all_reduce). ratio = the median over pairs of raw time / tessera time (= busbw ratio).
//   scripts/mpirun/local.sh 8 build/apps/bench_collectives --min 4096 --max 67108864
#include "apps/cli_main.h"
#include "apps/run_support.h"
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "core/error.h"
#include "mesh/environment.h"
#include "mesh/mesh.h"
#include "mesh/mpi_check.h"

namespace {

using namespace tessera;

// The slowest rank's time of f, in seconds, after a barrier.
double slowest_time(const Communicator& comm, const std::function<void()>& f) {
  comm.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  f();
  double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double slowest = 0;
  check_mpi(MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm.handle()), "MPI_Allreduce");
  return slowest;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

struct Timing {
  double mine_s, raw_s, ratio;  // medians; ratio = median of raw_i / mine_i
};

// tessera's call and the raw one timed in pairs, one right after the other (their order
// alternating), so a disturbance of a shared or oversubscribed machine hits both members of a
// pair alike; the ratio is the median of the pairs' ratios, not a ratio of two medians taken
// minutes apart.
Timing time_pairs(const Communicator& comm, int warmup, int iters, const std::function<void()>& mine,
                  const std::function<void()>& raw) {
  for (int i = 0; i < warmup; ++i) {
    mine();
    raw();
  }
  std::vector<double> t_mine, t_raw, ratios;
  for (int i = 0; i < iters; ++i) {
    double tm = 0, tr = 0;
    if (i % 2 == 0) {
      tr = slowest_time(comm, raw);
      tm = slowest_time(comm, mine);
    } else {
      tm = slowest_time(comm, mine);
      tr = slowest_time(comm, raw);
    }
    t_mine.push_back(tm);
    t_raw.push_back(tr);
    ratios.push_back(tr / tm);
  }
  return {median(t_mine), median(t_raw), median(ratios)};
}

struct Case {
  CommOp op;
  double bus_factor;
  std::int64_t input_bytes;  // per rank
  std::int64_t size;         // the message size
};

// The case of `op` at message size `size` on n ranks, or nothing when its input is too small to
// split into [64][n][...] floats.
std::optional<Case> case_of(CommOp op, std::int64_t size, int n) {
  Case k{op, 2.0 * (n - 1) / n, size, size};  // all_reduce
  if (op == CommOp::all_gather) k = {op, (n - 1.0) / n, size / n, size};
  else if (op == CommOp::reduce_scatter || op == CommOp::all_to_all) k = {op, (n - 1.0) / n, size, size};
  const std::int64_t elems = k.input_bytes / 4;
  if (elems < 64 * n || elems % (64 * n) != 0) return std::nullopt;
  return k;
}

}  // namespace

int main(int argc, char** argv) {
  Environment env(argc, argv);
  tessera::apps::CommandLine app{"tessera collectives against raw MPI on the same buffers"};
  std::int64_t min_bytes = 4096, max_bytes = 64ll << 20;
  int iters = 10, warmup = 2;
  std::vector<std::string> ops = {"all_gather", "reduce_scatter", "all_to_all", "all_reduce"};
  std::vector<std::string> layouts = {"outer", "inner"};
  std::string pack = "datatype";
  app.add_option("--min", min_bytes, "smallest message size in bytes").capture_default_str();
  app.add_option("--max", max_bytes, "largest message size in bytes").capture_default_str();
  app.add_option("--iters", iters, "timed pairs (tessera call, raw call) per point").capture_default_str();
  app.add_option("--warmup", warmup, "untimed iterations per point").capture_default_str();
  app.add_option("--ops", ops, "collectives to run").capture_default_str();
  app.add_option("--layouts", layouts, "outer (dimension 0) and/or inner (dimension 1 of [64, k])")
      .one_of({"outer", "inner"})
      .capture_default_str();
  app.add_option("--pack", pack, "inner blocks: datatype or memcpy").capture_default_str();
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  return apps::parse_and_run("bench_collectives", app, argc, argv, [&](int world_rank) {
    if (pack != "datatype" && pack != "memcpy") throw UsageError("--pack must be datatype or memcpy, got " + pack);
    // Sizes grow by 4 from --min: 0 would never grow. Raw MPI takes int counts of floats, so
    // --max stops at 4 GiB (2^30 floats), which also keeps size * 4 from overflowing.
    if (min_bytes < 1) throw UsageError("--min must be >= 1, got " + std::to_string(min_bytes));
    if (max_bytes < min_bytes || max_bytes > (std::int64_t{1} << 32)) {
      throw UsageError("--max must be between --min (" + std::to_string(min_bytes) + ") and 4294967296, got " +
                       std::to_string(max_bytes));
    }
    // Bounded as bench_train's --steps: each timed pair keeps three figures, so a count near
    // INT_MAX would ask for tens of GB before the first pair.
    if (iters < 1 || iters > 1000000) {
      throw UsageError("--iters must be between 1 and 1000000, got " + std::to_string(iters));
    }
    if (warmup < 0 || warmup > 1000000) {
      throw UsageError("--warmup must be between 0 and 1000000, got " + std::to_string(warmup));
    }
    std::vector<CommOp> kinds;
    for (const auto& name : ops) {
      const auto op = comm_op_from_string(name);
      if (!op || (*op != CommOp::all_gather && *op != CommOp::reduce_scatter && *op != CommOp::all_to_all &&
                  *op != CommOp::all_reduce)) {
        throw UsageError("--ops: unknown collective '" + name +
                         "' (all_gather, reduce_scatter, all_to_all, all_reduce)");
      }
      kinds.push_back(*op);
    }
    set_pack_method(pack == "memcpy" ? PackMethod::memcpy : PackMethod::datatype);
    Mesh mesh = Mesh::world(MeshShape({"x"}, {world}));
    const Axes axes = {"x"};
    const Communicator& comm = mesh.axes_comm(axes);
    const int n = comm.size();
    const MPI_Comm c = comm.handle();
    // Every size and collective that runs, found first: sizes that none can run are refused
    // (before, --max 100 printed nothing and exited 0), and the largest must fit in memory.
    std::vector<Case> cases;
    for (std::int64_t size = min_bytes; size <= max_bytes; size *= 4) {
      for (const CommOp op : kinds) {
        if (const std::optional<Case> found = case_of(op, size, n)) cases.push_back(*found);
      }
    }
    if (cases.empty()) {
      throw UsageError("no message size from --min " + std::to_string(min_bytes) + " to --max " +
                       std::to_string(max_bytes) + " (powers of 4 from --min) splits into 64 floats per rank on " +
                       std::to_string(n) + " ranks for --ops");
    }
    // The input, tessera's result and raw MPI's, each at most the message size (the last case's).
    const std::int64_t largest = cases.back().size;
    apps::check_memory(3.0 * static_cast<double>(largest),
                       "--max " + std::to_string(max_bytes) + ": the largest message (" + std::to_string(largest) +
                           " bytes) ");
    for (const Case& k : cases) {
      const CommOp op = k.op;
      const std::int64_t size = k.size;
      const std::int64_t elems = k.input_bytes / 4;
      for (const auto& layout : layouts) {
        const bool outer = layout == "outer";
        // Outer: [elems] split on dim 0. Inner: [64, elems / 64] split on dim 1 (64 runs per block).
        const Shape shape = outer ? Shape{elems} : Shape{64, elems / 64};
        const int dim = outer ? 0 : 1;
        Tensor in = Tensor::full(shape, 1.0 + world_rank);
        std::vector<std::byte> raw_out(static_cast<std::size_t>(size));
        const int count = static_cast<int>(elems);
        std::function<void()> mine, raw;
        if (op == CommOp::all_gather) {
          mine = [&] { all_gather(mesh, in, axes, dim); };
          raw = [&] { MPI_Allgather(in.raw(), count, MPI_FLOAT, raw_out.data(), count, MPI_FLOAT, c); };
        } else if (op == CommOp::reduce_scatter) {
          mine = [&] { reduce_scatter(mesh, in, axes, dim); };
          raw = [&] { MPI_Reduce_scatter_block(in.raw(), raw_out.data(), count / n, MPI_FLOAT, MPI_SUM, c); };
        } else if (op == CommOp::all_to_all) {
          // Split dim 0 or 1 into n pieces, concatenate along the same dimension.
          mine = [&] { all_to_all(mesh, in, axes, dim, dim); };
          raw = [&] { MPI_Alltoall(in.raw(), count / n, MPI_FLOAT, raw_out.data(), count / n, MPI_FLOAT, c); };
        } else {
          mine = [&] { all_reduce(mesh, in, axes); };
          raw = [&] { MPI_Allreduce(in.raw(), raw_out.data(), count, MPI_FLOAT, MPI_SUM, c); };
        }
        const Timing t = time_pairs(comm, warmup, iters, mine, raw);
        const double bus_mine = size / t.mine_s * k.bus_factor / 1e9, bus_raw = size / t.raw_s * k.bus_factor / 1e9;
        if (world_rank == 0) {
          std::printf(
              "{\"op\": \"%s\", \"layout\": \"%s\", \"ranks\": %d, \"bytes\": %lld, \"dim\": %d, \"shape\": \"%s\", "
              "\"pack\": \"%s\", \"tessera_us\": %.1f, \"raw_us\": %.1f, \"tessera_busbw_GBps\": %.3f, "
              "\"raw_busbw_GBps\": %.3f, \"ratio\": %.3f}\n",
              std::string(to_string(op)).c_str(), layout.c_str(), n, static_cast<long long>(size), dim, shape_to_string(shape).c_str(),
              outer ? "none" : pack.c_str(), t.mine_s * 1e6, t.raw_s * 1e6, bus_mine, bus_raw, t.ratio);
          std::fflush(stdout);
        }
      }
    }
    return 0;
  });
}
