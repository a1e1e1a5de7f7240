// bench_train: the train step of the tutorial's MLP on the current mesh, beside the floor of
// docs/design.md ("Performance model") measured in the same run:
//   floor = matrix FLOPs per rank / GEMM rate + 28 bytes per fp32 parameter per rank / copy bandwidth
// Every rank measures the GEMM rate and copy bandwidth at once (they share the node's cores and
// memory, as in the step). One JSON object per line on stdout (rank 0).
//   scripts/mpirun/local.sh 8 build/apps/bench_train --layers 8 --depth 4096
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <vector>

#include "apps/cli_main.h"
#include "apps/synthetic_data.h"
#include "core/error.h"
#include "core/kernels.h"
#include "mesh/environment.h"
#include "mesh/mesh.h"
#include "models/mlp.h"
#include "nn/optim.h"
#include "nn/train.h"

namespace {

using namespace tessera;
using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

double allreduce(double v, MPI_Op op) {
  double out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The default mesh for the rank count: (data, model) with model = 4, 2 or 1 (1x2 on 2 ranks,
// 2x4 on 8), as the tutorial shards.
std::string default_mesh(int ranks) {
  const int model = ranks % 4 == 0 ? 4 : ranks % 2 == 0 ? 2 : 1;
  return "data=" + std::to_string(ranks / model) + ",model=" + std::to_string(model);
}

// Runs `work` the same number of times on every rank at once, for about `seconds` in all, and
// returns the repetitions per second of one rank: from the first rank's start to the last
// rank's end, so that ranks sharing cores (oversubscribed) are not timed one at a time.
template <class Work>
double concurrent_rate(Work&& work, double seconds) {
  work();
  MPI_Barrier(MPI_COMM_WORLD);
  auto start = clock_type::now();
  for (int i = 0; i < 3; ++i) work();
  const double probe = allreduce(seconds_since(start), MPI_MAX) / 3;
  const double wanted = std::max(1.0, seconds / std::max(probe, 1e-9));
  const auto reps = static_cast<std::int64_t>(allreduce(wanted, MPI_MIN));
  MPI_Barrier(MPI_COMM_WORLD);
  start = clock_type::now();
  for (std::int64_t i = 0; i < reps; ++i) work();
  MPI_Barrier(MPI_COMM_WORLD);
  return static_cast<double>(reps) / allreduce(seconds_since(start), MPI_MAX);
}

// FLOP/s per rank of batched_gemm on [m, k] x [k, n], every rank at once.
double measure_gemm_rate(std::int64_t m, std::int64_t n, std::int64_t k, double seconds) {
  Tensor a({1, m, k}), b({1, k, n}), c({1, m, n});
  std::fill_n(a.data<float>(), m * k, 0.5f);
  std::fill_n(b.data<float>(), k * n, 0.25f);
  const double rate = concurrent_rate([&] { batched_gemm(a, b, c, 1, m, n, k, false, false); }, seconds);
  return 2.0 * m * n * k * rate;
}

// Bytes per second per rank moved by memcpy of a large buffer (read + write), every rank at once.
double measure_copy_bandwidth(std::size_t bytes, double seconds) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  std::size_t reps = 0;
  const double rate = concurrent_rate(
      [&] {
        std::memcpy(dst.data(), src.data(), bytes);
        src[reps % bytes] = dst[(reps * 7) % bytes];  // keeps the copies observable
        ++reps;
      },
      seconds);
  return 2.0 * static_cast<double>(bytes) * rate;
}

struct Options {
  std::string mesh;
  std::int64_t batch = 8;
  int layers = 4;
  std::int64_t depth = 1024;
  bool scan = false;
  int steps = 20;
  int warmup = 3;
  std::uint64_t seed = 0;
  double measure_seconds = 0.5;
  std::int64_t copy_mib = 64;
};

int run(const Options& o, int world_rank, int world_size) {
  const bool root = world_rank == 0;
  if (o.batch < 1 || o.depth < 1 || o.layers < 1) throw UsageError("--batch, --depth and --layers must be >= 1");
  // The copy measurement indexes its buffer modulo its size and runs for --measure-seconds.
  if (o.copy_mib < 1 || o.copy_mib > 65536) {
    throw UsageError("--copy-mib must be between 1 and 65536, got " + std::to_string(o.copy_mib));
  }
  if (!(o.measure_seconds > 0 && o.measure_seconds <= 3600)) {
    char got[32];
    std::snprintf(got, sizeof got, "%g", o.measure_seconds);
    throw UsageError(std::string("--measure-seconds must be > 0 and <= 3600, got ") + got);
  }
  const MeshShape mesh_shape = MeshShape::parse(o.mesh.empty() ? default_mesh(world_size) : o.mesh);
  if (o.steps < 1 || o.warmup < 0) throw UsageError("--steps must be >= 1 and --warmup >= 0");
  const Rules rules = models::tutorial_rules();
  Mesh mesh = Mesh::world(mesh_shape);
  const models::MLP model{o.layers, o.depth, o.scan, false};
  const nn::ParamInfos infos = nn::abstract_init(model, mesh_shape, rules, {o.batch, o.depth});
  for (const auto& info : infos) validate_spec(info.spec, mesh_shape, info.shape, info.path);
  const apps::SyntheticData data({o.batch, o.depth, apps::LossKind::sum, apps::InputKind::ones, o.seed, false}, mesh,
                                 rules);
  const nn::Optimizer optimizer = nn::adam(1e-3);
  nn::TrainState state = nn::create_train_state(nn::init_params(infos, mesh, o.seed), optimizer);
  const models::ApplyContext ctx{rules};
  const nn::LossFn loss_fn = [&](const nn::VarTree& params, const nn::Batch& batch) {
    return data.loss(model.apply(nn::ParamView(params), ctx, nn::Var(batch.x)), batch);
  };
  nn::StepOptions step_options;
  step_options.reduction = nn::StepOptions::Reduction::sum;
  const nn::Batch batch = data.batch(0);

  std::vector<double> ms;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = clock_type::now();
    nn::train_step(state, optimizer, loss_fn, batch, step_options);
    // A step ends when its slowest rank ends.
    const double t = allreduce(seconds_since(start) * 1e3, MPI_MAX);
    if (i >= o.warmup) ms.push_back(t);
  }

  // What each rank must compute and move. Each layer has 2 matmuls of 2*B*d*d FLOPs forward and
  // 4 backward (a weight and an input gradient each), less the input gradient of layer 0, which
  // nothing needs. Every one is split over the batch (data) and hidden (model) axes.
  const std::int64_t data_size = shard_count(parse_spec("P(data)"), mesh_shape, 0);
  const std::int64_t model_size = shard_count(parse_spec("P(model)"), mesh_shape, 0);
  const double matmuls = 6.0 * o.layers - 1.0;
  const double flops_total = matmuls * 2.0 * o.batch * o.depth * o.depth;
  const double flops_per_rank = flops_total / static_cast<double>(data_size * model_size);
  double local_params = 0;
  for (const auto& info : infos) local_params += static_cast<double>(numel(local_shape(info.spec, mesh_shape, info.shape)));
  const double bytes_per_rank = 28.0 * local_params;

  // The GEMM of the step's forward matmul on one rank: [B/data, d] x [d, d/model].
  const std::int64_t m = o.batch / data_size, k = o.depth, n = o.depth / model_size;
  const double gemm_rate = measure_gemm_rate(m, n, k, o.measure_seconds);
  const double copy_bw = measure_copy_bandwidth(static_cast<std::size_t>(o.copy_mib) << 20, o.measure_seconds);
  const double floor_ms = 1e3 * (flops_per_rank / gemm_rate + bytes_per_rank / copy_bw);
  const double med = median(ms);

  if (root) {
    std::printf("{\"bench\":\"gemm\",\"ranks\":%d,\"m\":%lld,\"n\":%lld,\"k\":%lld,\"gflops_per_rank\":%.3f}\n",
                world_size, static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
                gemm_rate / 1e9);
    std::printf("{\"bench\":\"copy\",\"ranks\":%d,\"mib\":%lld,\"gb_per_s_per_rank\":%.3f}\n", world_size,
                static_cast<long long>(o.copy_mib),
                copy_bw / 1e9);
    std::printf(
        "{\"bench\":\"train_step\",\"mesh\":\"%s\",\"ranks\":%d,\"batch\":%lld,\"layers\":%d,\"depth\":%lld,"
        "\"scan\":%s,\"steps\":%d,\"ms_median\":%.3f,\"ms_min\":%.3f,\"ms_max\":%.3f,\"floor_ms\":%.3f,"
        "\"ratio\":%.3f,\"gflop_per_rank\":%.4f,\"mb_per_rank\":%.3f}\n",
        mesh_shape.to_string().c_str(), world_size, static_cast<long long>(o.batch), o.layers,
        static_cast<long long>(o.depth), o.scan ? "true" : "false", o.steps, med,
        *std::min_element(ms.begin(), ms.end()), *std::max_element(ms.begin(), ms.end()), floor_ms, med / floor_ms,
        flops_per_rank / 1e9, bytes_per_rank / 1e6);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tessera::Environment env(argc, argv);
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CLI::App app{"bench_train: median ms per train step of the tutorial MLP beside its floor"};
  Options o;
  app.add_option("--mesh", o.mesh, "mesh axes data=..,model=.. (default: model 4, 2 or 1 by rank count)");
  app.add_option("--batch", o.batch, "global batch size")->capture_default_str();
  app.add_option("--layers", o.layers, "number of DotReluDot layers")->capture_default_str();
  app.add_option("--depth", o.depth, "width of the layers")->capture_default_str();
  app.add_flag("--scan", o.scan, "stacked layers run by a scan");
  app.add_option("--steps", o.steps, "timed steps (median reported)")->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed steps first")->capture_default_str();
  app.add_option("--seed", o.seed, "parameter seed")->capture_default_str();
  app.add_option("--measure-seconds", o.measure_seconds, "time for each of the GEMM and copy measurements")
      ->capture_default_str();
  app.add_option("--copy-mib", o.copy_mib, "buffer size of the copy-bandwidth measurement per rank")
      ->capture_default_str();
  return tessera::apps::parse_and_run("bench_train", app, argc, argv, [&](int rank) { return run(o, rank, size); });
}
