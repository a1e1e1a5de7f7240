// The train step: forward and backward per microbatch, gradients accumulated unreduced (possibly
// partial) and resharded once to each parameter's spec, then the optimizer's local update.
#include "nn/train.h"

#include <chrono>

#include "collectives/comm_stats.h"
#include "collectives/reshard.h"
#include "core/error.h"
#include "core/kernels.h"
#include "nn/ops.h"

namespace tessera::nn {

TrainState create_train_state(ParamTree params, const Optimizer& optimizer) {
  TrainState s;
  s.opt_state = optimizer.init(params);
  s.params = std::move(params);
  return s;
}

ShardedTensor microbatch(const ShardedTensor& x, int index, int count) {
  if (count == 1) return x;
  const Shape& local = x.local().shape();
  if (x.ndim() < 1 || local[0] % count != 0) {
    throw ShapeError("microbatches: the local batch block of '" + x.name() + "' (" +
                     std::to_string(x.ndim() ? local[0] : 0) + " rows of global " + shape_to_string(x.global_shape()) +
                     " " + x.spec().to_string() + ") does not split into " + std::to_string(count) + " microbatches");
  }
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

LossAndGrads value_and_grad_lent(ParamTree& params, const LossFn& loss_fn, const Batch& batch,
                                 const StepOptions& options);

}  // namespace

LossAndGrads value_and_grad(const ParamTree& params, const LossFn& loss_fn, const Batch& batch,
                            const StepOptions& options) {
  ParamTree copy = params;
  return value_and_grad_lent(copy, loss_fn, batch, options);
}

namespace {

LossAndGrads value_and_grad_lent(ParamTree& params, const LossFn& loss_fn, const Batch& batch,
                                 const StepOptions& options) {
  const int k = options.microbatches;
  if (k < 1) throw UsageError("microbatches must be >= 1, got " + std::to_string(k));
  LentParams lent(params, true);
  const VarTree& vars = lent.vars();
  std::vector<Var> leaves;
  for (const auto& [path, v] : vars) leaves.push_back(v);
  std::vector<std::optional<ShardedTensor>> accumulated(leaves.size());
  std::optional<ShardedTensor> loss_sum;
  for (int i = 0; i < k; ++i) {
    Batch mb{microbatch(batch.x, i, k), batch.y ? std::optional(microbatch(*batch.y, i, k)) : std::nullopt};
    Var loss = loss_fn(vars, mb);
    auto grads = gradients(loss, leaves, GradOptions{false, {}});
    for (std::size_t j = 0; j < leaves.size(); ++j) {
      if (!grads[j]) continue;
      if (!accumulated[j]) {
        accumulated[j] = std::move(grads[j]);
      } else {
        if (!(grads[j]->spec() == accumulated[j]->spec())) grads[j] = reshard(*grads[j], accumulated[j]->spec());
        add_inplace(accumulated[j]->local(), grads[j]->local());
      }
    }
    if (!loss_sum) loss_sum = loss.value();
    else add_inplace(loss_sum->local(), loss.value().local());
  }
  const double weight = options.reduction == StepOptions::Reduction::mean ? 1.0 / k : 1.0;
  LossAndGrads out;
  std::size_t j = 0;
  for (const auto& [path, var] : vars) {
    const ShardedTensor& p = var.value();
    ShardedTensor g = accumulated[j] ? std::move(*accumulated[j])
                                     : ShardedTensor::zeros(p.mesh(), p.spec(), p.global_shape(), p.dtype());
    // The one reduction of each gradient: partial contributions resolved by reshard.
    if (!(g.spec() == p.spec())) g = reshard(std::move(g), p.spec());
    if (weight != 1.0) g.local() = affine(g.local(), weight);
    g.set_name(path);
    out.grads.emplace(path, std::move(g));
    ++j;
  }
  out.loss = scalar_value(*loss_sum) * weight;
  return out;
}

}  // namespace

ShardedTensor infer_step(ParamTree& params, const ApplyFn& apply, const ShardedTensor& x) {
  LentParams lent(params, false);
  return apply(lent.vars(), Var(x)).value();
}

double train_step(TrainState& state, const Optimizer& optimizer, const LossFn& loss_fn, const Batch& batch,
                  const StepOptions& options) {
  LossAndGrads lg = value_and_grad_lent(state.params, loss_fn, batch, options);
  const auto start = std::chrono::steady_clock::now();
  const double comm_before = CommStats::global().seconds();
  optimizer.update(state.params, lg.grads, state.opt_state);
  if (options.times != nullptr) {
    options.times->optimizer_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    options.times->optimizer_comm_seconds = CommStats::global().seconds() - comm_before;
  }
  state.step += 1;
  return lg.loss;
}

}  // namespace tessera::nn
