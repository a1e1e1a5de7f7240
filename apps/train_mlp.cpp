// train_mlp: the Flax sharding tutorial end to end, SPMD over MPI. Every rank runs this same
// program on its own blocks; rank 0 prints. Bad input ends with one message and exit code 2.
//   scripts/mpirun/local.sh 8 build/apps/train_mlp --mesh data=2,model=4 --steps 200
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <iostream>
#include <sstream>

#include "apps/cli_main.h"
#include "apps/run_support.h"
#include "apps/step_profile.h"
#include "apps/synthetic_data.h"
#include "io/checkpoint_dir.h"
#include "io/train_state_io.h"
#include "core/buffer_pool.h"
#include "core/error.h"
#include "mesh/environment.h"
#include "mesh/mesh.h"
#include "models/mlp.h"
#include "nn/ops.h"
#include "nn/optim.h"
#include "nn/precision.h"
#include "nn/train.h"

namespace {

using namespace tessera;

struct Options {
  std::string mesh = "data=2,model=4";
  std::int64_t batch = 8;
  int layers = 4;
  std::int64_t depth = 1024;
  bool scan = false;
  bool logical = false;
  std::string rules = "batch=data,hidden=model";
  std::int64_t steps = 300;
  double lr = 3e-4;
  std::string loss = "mse";
  std::string input = "random";
  std::int64_t examples = 64;
  std::uint64_t seed = 0;
  int microbatches = 1;
  std::string ckpt_dir;
  std::int64_t save_every = 0;
  int keep = 3;
  bool resume = false;
  bool overwrite = false;
  std::string metrics;
  bool quiet = false;
  std::string dtype = "f32";  // compute dtype (nn::Precision): parameters and Adam stay f32
  bool remat = false;         // rematerialise each layer (nn::remat)
};

// The flags that fix the model and the data, stored in checkpoints.
std::string config_json(const Options& o) {
  std::ostringstream s;
  s << "{\"program\":\"train_mlp\",\"batch\":" << o.batch << ",\"layers\":" << o.layers << ",\"depth\":" << o.depth
    << ",\"scan\":" << (o.scan ? "true" : "false") << ",\"logical\":" << (o.logical ? "true" : "false")
    << ",\"rules\":" << apps::json_string(o.rules) << ",\"lr\":" << o.lr << ",\"loss\":" << apps::json_string(o.loss)
    << ",\"input\":" << apps::json_string(o.input) << ",\"examples\":" << o.examples << ",\"seed\":" << o.seed
    << ",\"microbatches\":" << o.microbatches << ",\"dtype\":" << apps::json_string(o.dtype) << "}";
  return s.str();
}

// The picture of a parameter whose path ends with `suffix` (layer 0 of a stack for --scan).
// Collective (take_layer re-shards the stack's layer 0): every rank calls it, rank 0 prints it.
std::string first_picture(const nn::ParamTree& params, const std::string& suffix) {
  for (const auto& [path, value] : params) {
    if (path.size() < suffix.size() || path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    if (value.ndim() == 3) {
      ShardedTensor layer0 = nn::take_layer(nn::Var(value), 0).value();
      layer0.set_name(path + "[0]");
      return layer0.picture();
    }
    return value.picture();
  }
  return "(no parameter " + suffix + ")\n";
}

// Flags that are wrong whatever the mesh.
void validate_flags(const Options& o) {
  if (o.batch < 1 || o.depth < 1 || o.layers < 1) throw UsageError("--batch, --depth and --layers must be >= 1");
  // Each layer is a named parameter pair built before the memory estimate: a bound keeps that
  // step from running for minutes on an absurd count.
  if (o.layers > 10000) throw UsageError("--layers must be <= 10000, got " + std::to_string(o.layers));
  if (o.steps < 0) throw UsageError("--steps must be >= 0");
  if (o.microbatches < 1) throw UsageError("--microbatches must be >= 1");
  if (o.keep < 1) throw UsageError("--keep must be >= 1");
  if (o.save_every < 0) throw UsageError("--save-every must be >= 0");
  if (o.examples < 0) throw UsageError("--examples must be >= 0, got " + std::to_string(o.examples));
  // Element (e, c) of the pool is drawn at index e * depth + c.
  if (o.examples > 0 && o.examples > std::numeric_limits<std::int64_t>::max() / o.depth) {
    throw UsageError("--examples " + std::to_string(o.examples) + " times --depth " + std::to_string(o.depth) +
                     " elements overflow the pool's index");
  }
  apps::check_learning_rate(o.lr);
}

// Checks that cost nothing but catch bad input before any allocation: every parameter's spec
// is valid on the mesh, and every rank's batch block (the block rule: they may differ) splits
// into the microbatches.
void validate_setup(const Options& o, const nn::ParamInfos& infos, const MeshShape& mesh, const Spec& x_spec) {
  for (const auto& info : infos) validate_spec(info.spec, mesh, info.shape, info.path);
  std::int64_t local_batch = 0;
  for (auto rows : block_extents(o.batch, shard_count(x_spec.padded(2), mesh, 0))) {
    if (rows % o.microbatches != 0) {
      local_batch = rows;
      break;
    }
  }
  if (local_batch != 0) {
    throw UsageError("--microbatches " + std::to_string(o.microbatches) + " does not divide each rank's batch block of " +
                     std::to_string(local_batch) + " rows (batch " + std::to_string(o.batch) + " split as " +
                     x_spec.to_string() + ")");
  }
  if ((o.resume || o.save_every > 0 || o.overwrite) && o.ckpt_dir.empty()) {
    throw UsageError("--resume, --save-every and --overwrite need --ckpt-dir");
  }
  if (o.resume && o.overwrite) throw UsageError("--resume and --overwrite exclude each other");
}

// Refuses, before anything is allocated, a model whose estimate exceeds this rank's share.
void check_memory(const Options& o, const nn::ParamInfos& infos, const MeshShape& mesh, const Spec& x_spec) {
  const bool bf16 = nn::Precision::parse(o.dtype).mixed();
  apps::check_memory(apps::mlp_bytes_per_rank({o.batch, o.layers, o.depth, bf16, o.remat}, infos, mesh, x_spec));
}

int run(const Options& o, int world_rank) {
  const bool root = world_rank == 0;
  validate_flags(o);
  const nn::Precision precision = nn::Precision::parse(o.dtype);
  const MeshShape mesh_shape = MeshShape::parse(o.mesh);
  // Without --logical the model's specs name the axes data and model themselves (models/mlp.h);
  // until the forty-fifth session a mesh without one of them was refused for a rule of the default
  // --rules the user never wrote.
  if (!o.logical) {
    for (const char* axis : {"data", "model"}) {
      if (!mesh_shape.has_axis(axis)) {
        throw UsageError("--mesh '" + o.mesh + "' has no axis '" + axis +
                         "': the model's specs split over the axes data and model (--logical maps its logical axes to "
                         "others through --rules)");
      }
    }
  }
  const Rules rules = parse_rules(o.rules);
  validate_rules(rules, mesh_shape);
  Mesh mesh = Mesh::world(mesh_shape);

  const models::MLP model{o.layers, o.depth, o.scan, o.logical};
  const Shape input_shape = {o.batch, o.depth};
  const nn::ParamInfos infos = nn::abstract_init(model, mesh_shape, rules, input_shape);
  apps::DataConfig data_config{o.batch, o.depth, apps::parse_loss_kind(o.loss), apps::parse_input_kind(o.input),
                               o.seed, o.logical, o.examples};
  const Spec x_spec = apps::activation_spec(mesh_shape, rules, o.logical);
  validate_setup(o, infos, mesh_shape, x_spec);
  check_memory(o, infos, mesh_shape, x_spec);
  // The data checks its spec and loss here, before the checkpoint directory is claimed: --overwrite
  // removes the directory's checkpoints, so every refusal comes first.
  const apps::SyntheticData data(data_config, mesh, rules);

  // Held until the run ends: rank 0's lock on the directory and the checkpoint to resume from.
  // A resume continues the saved model and its data: these flags must be the checkpoint's.
  // --metrics names no checkpoint, nothing in --ckpt-dir and not the data (a resume cuts it back).
  apps::check_metrics_path(mesh.comm(), o.metrics, o.ckpt_dir, std::string());
  const apps::RunCheckpoints checkpoints = apps::open_run_checkpoints(
      mesh.comm(), o.ckpt_dir, o.resume, o.overwrite,
      {config_json(o), {"layers", "depth", "scan", "loss", "input", "examples", "seed", "batch"}, o.steps});
  const std::optional<std::string>& resume_file = checkpoints.resume_file;

  if (root) {
    std::cout << "train_mlp: " << mesh.to_string() << " over " << mesh.size() << " ranks\n"
              << "model: MLP(layers=" << o.layers << ", depth=" << o.depth << (o.scan ? ", scan" : "")
              << (o.logical ? ", logical rules " + to_string(rules) : "") << "), batch " << o.batch << ", loss "
              << o.loss << ", input " << o.input << ", adam(lr=" << o.lr << "), seed " << o.seed << ", dtype "
              << o.dtype << (precision.mixed() ? " (f32 parameters and Adam moments, bf16 compute)" : "")
              << (o.remat ? ", remat per layer" : "") << "\n\n"
              << apps::parameter_table(infos, mesh_shape) << '\n';
  }

  const nn::Optimizer optimizer = nn::adam(o.lr);
  nn::TrainState state = nn::create_train_state(nn::init_params(infos, mesh, o.seed), optimizer);
  // The step a resume restored is saved already: a run with nothing left to train writes nothing
  // (it rewrote the file it had restored).
  std::int64_t last_saved = -1;
  if (resume_file) {
    restore_train_state_into(*resume_file, state);
    last_saved = state.step;
    if (root) std::cout << "resumed from " << *resume_file << " at step " << state.step << "\n\n";
  }
  const std::string pictures = first_picture(state.params, "Dense_0/kernel") + first_picture(state.params, "W2");
  if (root) std::cout << pictures << '\n';

  models::ApplyContext ctx{rules};
  ctx.remat = o.remat;
  // The forward pass under the precision policy: parameters and input cast to the compute dtype,
  // the output cast back to f32 for the loss.
  const auto forward = [&](const nn::VarTree& params, const nn::Var& x) {
    return precision.cast_output(model.apply(nn::ParamView(precision.cast_params(params)), ctx, precision.cast_input(x)));
  };
  const nn::LossFn loss_fn = [&](const nn::VarTree& params, const nn::Batch& batch) {
    return data.loss(forward(params, nn::Var(batch.x)), batch);
  };
  nn::StepOptions step_options;
  step_options.microbatches = o.microbatches;
  step_options.reduction =
      data_config.loss == apps::LossKind::sum ? nn::StepOptions::Reduction::sum : nn::StepOptions::Reduction::mean;

  // Rank 0 writes the metrics; the others pass no file.
  apps::MetricsFile metrics("train_mlp", root ? o.metrics : std::string(),
                             resume_file ? std::optional<std::int64_t>(state.step) : std::nullopt);
  nn::StepTimes times;
  step_options.times = &times;
  apps::RunProfile run_profile;
  std::size_t run_peak_bytes = 0;  // rank 0's peak of tensor storage over the steps
  while (state.step < o.steps) {
    const std::int64_t step = state.step;
    const nn::Batch batch = data.batch(step);
    checkpoint_dir::test_kill_point("step" + std::to_string(step + 1), world_rank);  // fault tests only
    CommStats::global().reset();  // this step's records only
    reset_peak_tensor_bytes();    // this step's peak of tensor storage
    const double comm_before = CommStats::global().seconds();
    const auto start = std::chrono::steady_clock::now();
    const double loss = nn::train_step(state, optimizer, loss_fn, batch, step_options);
    apps::check_loss_finite(loss, step + 1);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::size_t peak_bytes = peak_tensor_bytes();
    run_peak_bytes = std::max(run_peak_bytes, peak_bytes);
    const apps::StepProfile profile = apps::profile_step(
        mesh.comm().handle(),
        {seconds, CommStats::global().seconds() - comm_before, times.optimizer_seconds, times.optimizer_comm_seconds},
        CommStats::global().records());
    run_profile.add(profile);
    const double ms = profile.step_ms;
    const double samples_per_s = o.batch / (ms / 1000.0);
    if (root) {
      if (!o.quiet) std::printf("step %6lld  loss %.9g  %8.1f ms/step  %8.1f samples/s\n",
                                static_cast<long long>(step + 1), loss, ms, samples_per_s);
      std::fflush(stdout);
      if (metrics) {
        char line[256];
        std::snprintf(line, sizeof line, "{\"step\":%lld,\"loss\":%.17g,\"ms\":%.3f,\"samples_per_s\":%.3f",
                      static_cast<long long>(step + 1), loss, ms, samples_per_s);
        metrics.write(line + apps::metrics_fields(profile) + ",\"row_updates\":" +
                      std::to_string(times.row_updates.size()) + ",\"peak_tensor_bytes\":" + std::to_string(peak_bytes) +
                      "}\n");
      }
    }
    if (!o.ckpt_dir.empty() && o.save_every > 0 && state.step % o.save_every == 0) {
      apps::check_state_finite(state);
      const std::string file = save_train_state(state, o.ckpt_dir, {o.seed, config_json(o), infos}, SaveOptions{o.keep});
      last_saved = state.step;
      if (root) std::cout << "saved " << file << '\n';
    }
  }
  // The last update reached no loss: the state it left is checked before it is saved or used.
  apps::check_state_finite(state);
  if (!o.ckpt_dir.empty() && last_saved != state.step) {
    const std::string file = save_train_state(state, o.ckpt_dir, {o.seed, config_json(o), infos}, SaveOptions{o.keep});
    if (root) std::cout << "saved " << file << '\n';
  }

  // Inference on the next batch: the output keeps the sharding the layers give it.
  ShardedTensor out = nn::infer_step(state.params, forward, data.batch(state.step).x);
  out.set_name("output");
  if (root) std::cout << "\ninference output: " << out.picture();
  if (root && !o.quiet && run_profile.steps() > 0) std::cout << '\n' << run_profile.table();
  if (root && run_profile.steps() > 0) {
    std::printf("peak tensor storage per step (rank 0): %zu bytes (%.2f MiB)\n", run_peak_bytes,
                static_cast<double>(run_peak_bytes) / (1 << 20));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tessera::Environment env(argc, argv);
  tessera::apps::CommandLine app{"train_mlp: the Flax sharding tutorial's MLP, trained SPMD over MPI"};
  Options o;
  // A flag given twice takes its last value, so wrappers (scripts/run.sh) can be overridden.
  app.take_last_of_repeats();
  app.add_option("--mesh", o.mesh, "mesh axes, name=size,... (product = ranks)").capture_default_str();
  app.add_option("--batch", o.batch, "global batch size").capture_default_str();
  app.add_option("--layers", o.layers, "number of DotReluDot layers").capture_default_str();
  app.add_option("--depth", o.depth, "width of the layers (input, hidden and output)").capture_default_str();
  app.add_flag("--scan", o.scan, "stacked layers with a leading layer dimension, run by a scan");
  tessera::apps::Option logical =
      app.add_flag("--logical", o.logical, "logical names (batch, embed, hidden, layer) resolved by --rules");
  // Without --logical the specs are the tutorial's own and no rule is read: a --rules alone was
  // ignored in silence.
  app.add_option("--rules", o.rules, "logical rules, name=axis[+axis],... (with --logical)")
      .needs(logical)
      .capture_default_str();
  app.add_option("--steps", o.steps, "train until this step").capture_default_str();
  app.add_option("--lr", o.lr, "Adam learning rate").capture_default_str();
  app.add_option("--loss", o.loss, "sum (the tutorial's), mse or xent (teacher targets)")
      .one_of({"sum", "mse", "xent"})
      .capture_default_str();
  app.add_option("--input", o.input, "ones (the tutorial's) or random (RNG keyed by seed and step)")
      .one_of({"ones", "random"})
      .capture_default_str();
  app.add_option("--examples", o.examples, "size of the pool random inputs are drawn from (0: fresh every step)")
      .capture_default_str();
  app.add_option("--seed", o.seed, "seed of parameters, data and teacher").capture_default_str();
  app.add_option("--microbatches", o.microbatches, "serial microbatches per step").capture_default_str();
  app.add_option("--ckpt-dir", o.ckpt_dir, "checkpoint directory: saves at the end and every --save-every (default: none, no checkpoints)")
      .non_empty_path();
  app.add_option("--save-every", o.save_every, "save every N steps (0: only at the end)").capture_default_str();
  app.add_option("--keep", o.keep, "checkpoints kept").capture_default_str();
  app.add_flag("--resume", o.resume, "continue from the latest checkpoint in --ckpt-dir");
  app.add_flag("--overwrite", o.overwrite,
               "delete the checkpoints already in --ckpt-dir and start over (a run without it refuses them)");
  app.add_option("--metrics", o.metrics, "write one JSON object per step to FILE (default: none)")
      .non_empty_path();
  app.add_flag("--quiet", o.quiet, "no progress line per step");
  app.add_option("--dtype", o.dtype,
                 "compute dtype: f32, or bf16 (f32 parameters and Adam moments, bf16 activations and collectives)")
      .one_of({"f32", "bf16"})
      .capture_default_str();
  app.add_flag("--remat", o.remat, "recompute each layer's forward pass in the backward pass instead of keeping its activations");
  return tessera::apps::parse_and_run("train_mlp", app, argc, argv, [&](int rank) { return run(o, rank); });
}
