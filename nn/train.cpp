// The train step: forward and backward per microbatch, gradients accumulated unreduced (possibly
// partial) and resharded once to each parameter's spec, and the optimizer's local update of each
// parameter as soon as the last microbatch's backward pass has finished its gradient.
#include "nn/train.h"

#include <chrono>

#include "collectives/comm_stats.h"
#include "collectives/reshard.h"
#include "core/error.h"
#include "core/kernels.h"
#include "mesh/fail_together.h"
#include "nn/ops.h"

namespace tessera::nn {

TrainState create_train_state(ParamTree params, const Optimizer& optimizer) {
  TrainState s;
  s.opt_state = optimizer.init(params);
  s.params = std::move(params);
  return s;
}

ShardedTensor microbatch(const ShardedTensor& x, int index, int count) {
  if (count < 1 || index < 0 || index >= count) {
    throw UsageError("microbatch " + std::to_string(index) + " of " + std::to_string(count) +
                     ": the count must be >= 1 and the index in [0, count)");
  }
  if (count == 1) return x;
  const auto refuse = [&](const std::string& blocks) {
    throw ShapeError("microbatches: the batch blocks of '" + x.name() + "' (global " + shape_to_string(x.global_shape()) +
                     " " + x.spec().to_string() + blocks + ") do not all split into " + std::to_string(count) +
                     " microbatches");
  };
  if (x.ndim() < 1) refuse(", no batch dimension");
  // Every rank's block, from the global shape and the spec: the same answer on every rank. (Each
  // rank judged its own block, and under the uneven block rule one rank threw while the others
  // went on into the step's collectives.)
  const std::int64_t rows = x.global_shape()[0];
  const std::int64_t shards = shard_count(x.spec().padded(x.ndim()), x.mesh().shape(), 0);
  for (std::int64_t b = 0; b < shards; ++b) {
    if (block_extent(rows, shards, b) % count != 0) {
      refuse(": a block of " + std::to_string(block_extent(rows, shards, b)) + " rows");
    }
  }
  const Shape& local = x.local().shape();
  Shape block = local;
  block[0] /= count;
  std::vector<std::int64_t> at(x.ndim(), 0);
  at[0] = index * block[0];
  Shape global = x.global_shape();
  global[0] /= count;
  return ShardedTensor(x.mesh(), x.spec(), global, extract_block(x.local(), at, block), x.name());
}

namespace {

// Lends the parameters to the tape as variables without copying them, and takes them back when
// the step is done (also when it throws).
class LentParams {
 public:
  LentParams(ParamTree& params, bool requires_grad) : params_(params) {
    for (auto& [path, value] : params_) vars_.emplace(path, Var(std::move(value), requires_grad));
  }
  ~LentParams() {
    for (auto& [path, var] : vars_) params_[path] = std::move(var.node()->value);
  }
  const VarTree& vars() const { return vars_; }

 private:
  ParamTree& params_;
  VarTree vars_;
};

// Takes each parameter's gradient, in its parameter's spec, as soon as it is final: the parameter
// as the tape holds it (updated in place by train_step) and its path.
using ApplyGradient = std::function<void(const std::string& path, ShardedTensor& param, const ShardedTensor& grad)>;
// The same, for a gradient an op hands over in rows (GradOptions::ready_rows).
using ApplyRows = std::function<void(const std::string& path, ShardedTensor& param, RowGradient& grad)>;

// The spec `apply` takes a parameter's gradient in (its state's, train_step's), or null for the
// parameter's own.
using GradSpec = std::function<const Spec*(const std::string& path)>;

// `caller` names the entry point (train_step, value_and_grad) in the message of a loss function
// that threw on some ranks only (detail::fail_together, mesh/fail_together.h).
LossAndGrads value_and_grad_lent(const char* caller, ParamTree& params, const LossFn& loss_fn, const Batch& batch,
                                 const StepOptions& options, const ApplyGradient& apply = {},
                                 const ApplyRows& apply_rows = {}, const GradSpec& grad_spec = {});

}  // namespace

LossAndGrads value_and_grad(const ParamTree& params, const LossFn& loss_fn, const Batch& batch,
                            const StepOptions& options) {
  ParamTree copy = params;
  return value_and_grad_lent("value_and_grad", copy, loss_fn, batch, options);
}

namespace {

// Where the other ranks are when a step's user function threw on some ranks only.
constexpr const char* kOthersInTheStep = "they wait in one of the step's collectives, or still run it";

// The mesh whose ranks run a step's user function together (the first parameter's), with its
// failure communicator made while every rank is here; null on one rank.
const Mesh* failure_mesh(const VarTree& vars) {
  return vars.empty() ? nullptr : tessera::detail::failure_mesh(vars.begin()->second.mesh());
}

// With `apply` the gradients are not returned: each goes to `apply` during the last microbatch's
// backward pass, when the tape reaches its parameter (GradOptions::ready), then those the
// backward never reached (zeros), in the parameters' order, each in the spec `grad_spec` gives
// (a reduce-scatter to its optimizer state's spec where a partial gradient would otherwise be
// all-reduced). Either way each gradient is the sum of the microbatches' in their order,
// resharded once and scaled, the same bits. With one
// microbatch (nothing to sum or scale), a gradient an op can hand over in rows goes to
// `apply_rows` instead (GradOptions::ready_rows).
LossAndGrads value_and_grad_lent(const char* caller, ParamTree& params, const LossFn& loss_fn, const Batch& batch,
                                 const StepOptions& options, const ApplyGradient& apply,
                                 const ApplyRows& apply_rows, const GradSpec& grad_spec) {
  const int k = options.microbatches;
  if (k < 1) throw UsageError("microbatches must be >= 1, got " + std::to_string(k));
  LentParams lent(params, true);
  const VarTree& vars = lent.vars();
  std::vector<Var> leaves;
  std::vector<const std::string*> paths;
  for (const auto& [path, v] : vars) {
    leaves.push_back(v);
    paths.push_back(&path);
  }
  const Mesh* mesh = failure_mesh(vars);
  std::vector<const Spec*> wanted_specs(leaves.size(), nullptr);
  if (grad_spec) {
    for (std::size_t j = 0; j < leaves.size(); ++j) wanted_specs[j] = grad_spec(*paths[j]);
  }
  std::vector<std::optional<ShardedTensor>> accumulated(leaves.size());
  const auto accumulate = [&](std::size_t j, ShardedTensor g) {
    if (!accumulated[j]) {
      accumulated[j] = std::move(g);
    } else {
      if (!(g.spec() == accumulated[j]->spec())) g = reshard(g, accumulated[j]->spec());
      add_inplace(accumulated[j]->local(), g.local());
    }
  };
  const double weight = options.reduction == StepOptions::Reduction::mean ? 1.0 / k : 1.0;
  // Parameter j's gradient in its spec (or grad_spec's), from what the microbatches accumulated.
  const auto finished = [&](std::size_t j) {
    const ShardedTensor& p = leaves[j].value();
    const Spec& spec = wanted_specs[j] != nullptr ? *wanted_specs[j] : p.spec();
    ShardedTensor g = accumulated[j] ? std::move(*accumulated[j])
                                     : ShardedTensor::zeros(p.mesh(), spec, p.global_shape(), p.dtype());
    accumulated[j].reset();
    // The one reduction of each gradient: partial contributions resolved by reshard.
    if (!(g.spec() == spec)) g = reshard(std::move(g), spec);
    if (weight != 1.0) g.local() = affine(g.local(), weight);
    g.set_name(*paths[j]);
    return g;
  };
  std::vector<bool> applied(leaves.size(), false);
  std::optional<ShardedTensor> loss_sum;
  const std::string what = std::string(caller) + ": the loss function";
  for (int i = 0; i < k; ++i) {
    Batch mb{microbatch(batch.x, i, k), batch.y ? std::optional(microbatch(*batch.y, i, k)) : std::nullopt};
    Var loss = tessera::detail::fail_together(what.c_str(), kOthersInTheStep, mesh, [&] { return loss_fn(vars, mb); });
    GradOptions grad_options{false, {}, {}, {}};
    if (apply && i == k - 1) {
      grad_options.ready = [&](std::size_t j, ShardedTensor g) {
        accumulate(j, std::move(g));
        apply(*paths[j], leaves[j].node()->value, finished(j));
        applied[j] = true;
      };
      if (apply_rows && k == 1) {
        grad_options.ready_rows = [&](std::size_t j, RowGradient& g) {
          apply_rows(*paths[j], leaves[j].node()->value, g);
          applied[j] = true;
        };
      }
    }
    auto grads = gradients(loss, leaves, grad_options);
    for (std::size_t j = 0; j < leaves.size(); ++j) {
      if (grads[j]) accumulate(j, std::move(*grads[j]));
    }
    if (!loss_sum) loss_sum = loss.value();
    else add_inplace(loss_sum->local(), loss.value().local());
  }
  LossAndGrads out;
  for (std::size_t j = 0; j < leaves.size(); ++j) {
    if (!apply) out.grads.emplace(*paths[j], finished(j));
    else if (!applied[j]) apply(*paths[j], leaves[j].node()->value, finished(j));
  }
  out.loss = scalar_value(*loss_sum) * weight;
  return out;
}

}  // namespace

ShardedTensor infer_step(ParamTree& params, const ApplyFn& apply, const ShardedTensor& x) {
  LentParams lent(params, false);
  const Mesh* mesh = failure_mesh(lent.vars());
  return tessera::detail::fail_together("infer_step: the apply function", kOthersInTheStep, mesh,
                               [&] { return apply(lent.vars(), Var(x)); })
      .value();
}

double train_step(TrainState& state, const Optimizer& optimizer, const LossFn& loss_fn, const Batch& batch,
                  const StepOptions& options) {
  // Each parameter is updated as soon as its gradient is final, while the backward pass goes on
  // to the layers before it: the gradient is still in cache, and it is freed at once.
  // A weight whose layer's backward can produce its gradient in rows (einsum's, for a thin batch)
  // is updated there, panel by panel, as each panel of the gradient is computed: the gradient is
  // never written whole, and the weight's rows that the input gradient has just read are still in
  // cache for the update.
  double optimizer_seconds = 0, optimizer_comm_seconds = 0;
  std::vector<RowUpdate> row_updates;
  bool begun = false;
  const auto timed = [&](auto&& update) {
    const auto start = std::chrono::steady_clock::now();
    const double comm_before = CommStats::global().seconds();
    if (!begun) optimizer.begin_step(state.opt_state);
    begun = true;
    update();
    optimizer_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    optimizer_comm_seconds += CommStats::global().seconds() - comm_before;
  };
  const ApplyGradient apply = [&](const std::string& path, ShardedTensor& param, const ShardedTensor& grad) {
    timed([&] { optimizer.update_param(path, param, grad, state.opt_state); });
  };
  // The rows' time counts as the optimizer's, though it includes the input and weight gradients'
  // products computed inside it (panel by panel, or in one pass with the update).
  const ApplyRows apply_rows = [&](const std::string& path, ShardedTensor& param, RowGradient& grad) {
    bool one_pass = false;
    timed([&] { one_pass = optimizer.update_param_rows(path, param, grad, state.opt_state); });
    if (options.times != nullptr) {
      row_updates.push_back(
          {path, param.local().numel(), grad.input_grad_flops(), grad.weight_grad_flops(), one_pass});
    }
  };
  // Each gradient goes to its optimizer state's spec (ZeRO's first stage where the state is
  // split further than its parameter, Optimizer::shard_state_over).
  const GradSpec grad_spec = [&](const std::string& path) -> const Spec* {
    const auto found = state.opt_state.mu.find(path);
    return found == state.opt_state.mu.end() ? nullptr : &found->second.spec();
  };
  const double loss = value_and_grad_lent("train_step", state.params, loss_fn, batch, options, apply,
                                          options.update_in_rows ? apply_rows : ApplyRows{}, grad_spec)
                          .loss;
  if (!begun) optimizer.begin_step(state.opt_state);  // a model without parameters
  if (options.times != nullptr) {
    options.times->optimizer_seconds = optimizer_seconds;
    options.times->optimizer_comm_seconds = optimizer_comm_seconds;
    options.times->row_updates = std::move(row_updates);
  }
  state.step += 1;
  return loss;
}

}  // namespace tessera::nn
