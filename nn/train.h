// TrainState and the SPMD train and inference steps. Every rank runs the same step on its own
// blocks; gradients come back in their parameters' specs through reshard alone.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "nn/optim.h"
#include "nn/params.h"

namespace tessera::nn {

struct TrainState {
  std::int64_t step = 0;
  ParamTree params;
  OptState opt_state;
};

TrainState create_train_state(ParamTree params, const Optimizer& optimizer);

struct Batch {
  ShardedTensor x;
  std::optional<ShardedTensor> y = std::nullopt;  // targets or labels, when the loss needs them
};

// The loss of a batch (or microbatch) given the parameters as variables.
using LossFn = std::function<Var(const VarTree& params, const Batch& batch)>;

// A parameter a step updated inside its layer's backward, a panel of rows at a time.
struct RowUpdate {
  std::string path;
  std::int64_t elements = 0;    // of this rank's block
  double input_grad_flops = 0;  // computed from the same panels on this rank (RowGradient)
  double weight_grad_flops = 0;  // the gradient's own (RowGradient)
  // Updated in one pass with both products (RowGradient::produce_adam: Adam's streams and the
  // products' FLOPs overlap), rather than panel by panel from the produced gradient.
  bool one_pass = false;
};

// Filled by train_step when StepOptions::times is set: the optimizer's wall-clock seconds on this
// rank, and the part of them spent inside collectives.
struct StepTimes {
  double optimizer_seconds = 0;
  double optimizer_comm_seconds = 0;
  // Parameters updated inside their layer's backward, a panel of rows at a time as the
  // gradient's rows were computed (Optimizer::update_param_rows; the gradient never whole), in
  // the order updated.
  std::vector<RowUpdate> row_updates;
};

struct StepOptions {
  // k serial microbatches with gradient accumulation (xmap's SerialLoop): each rank splits its
  // block of the batch's leading dimension in k; activation memory drops by k.
  int microbatches = 1;
  // How microbatch losses combine: a sum loss adds, a mean loss averages.
  enum class Reduction { sum, mean } reduction = Reduction::mean;
  StepTimes* times = nullptr;
  // train_step: update a weight inside its layer's backward a panel of rows at a time where the
  // layer can produce its gradient in rows (GradOptions::ready_rows); false takes every gradient
  // whole. The same bits either way.
  bool update_in_rows = true;
};

// Value and gradients of the loss, gradients in their parameters' specs.
struct LossAndGrads {
  double loss = 0;
  ParamTree grads;
};
LossAndGrads value_and_grad(const ParamTree& params, const LossFn& loss_fn, const Batch& batch,
                            const StepOptions& options = {});

// One optimizer step; returns the loss of the batch (before the update). Each parameter is
// updated as soon as the last microbatch's backward pass has finished its gradient (while the
// layers before it are still to come), with the bits of value_and_grad followed by
// Optimizer::update; if the backward pass throws after the first update, the state is partly
// updated (docs/design.md, semantics 10).
double train_step(TrainState& state, const Optimizer& optimizer, const LossFn& loss_fn, const Batch& batch,
                  const StepOptions& options = {});

// The forward pass of a model.
using ApplyFn = std::function<Var(const VarTree& params, const Var& x)>;
// The inference step: the forward pass alone, no tape. The parameters are lent to it without
// a copy and are unchanged when it returns.
ShardedTensor infer_step(ParamTree& params, const ApplyFn& apply, const ShardedTensor& x);

// Microbatch `index` of `count`: each rank's block of dimension 0 split in `count` equal parts.
// UsageError for a count below 1 or an index outside [0, count); ShapeError, on every rank alike,
// where some rank's block does not split so.
ShardedTensor microbatch(const ShardedTensor& x, int index, int count);

}  // namespace tessera::nn
