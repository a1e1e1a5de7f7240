// Optimizers with optax's semantics. State is sharded like its parameter (same spec), so every
// update is local: no communication; or, with Optimizer::shard_state_over (ZeRO's first stage),
// split further over the axes that replicate its parameter, each replica updating its part.
//   adam:  mu = b1 mu + (1-b1) g;  nu = b2 nu + (1-b2) g^2;  count += 1
//          p -= lr * (mu / (1-b1^count)) / (sqrt(nu / (1-b2^count)) + eps)   (eps outside the root)
//   adamw: adam's step plus lr * weight_decay * p
//   sgd:   with momentum m: trace = g + m * trace; p -= lr * trace (nesterov: g + m * trace)
#pragma once

#include <cstdint>
#include <string>

#include "nn/params.h"

namespace tessera::nn {

struct OptState {
  std::int32_t count = 0;
  ParamTree mu;  // Adam's first moment; SGD's momentum trace
  ParamTree nu;  // Adam's second moment (empty for SGD)
};

struct Optimizer {
  enum class Kind { adam, adamw, sgd };
  Kind kind = Kind::adam;
  double learning_rate = 1e-3;
  double b1 = 0.9;
  double b2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // adamw
  double momentum = 0.0;      // sgd
  bool nesterov = false;      // sgd
  // ZeRO's first stage (DeepSpeed's; Megatron's distributed optimizer): mesh axes over which each
  // parameter's state is split further where the parameter is replicated over them (its spec
  // does not use them), so that each replica keeps and updates only its part (state_spec).
  // train_step then reduce-scatters each gradient to its state's spec, in place of all-reducing
  // it to the parameter's, updates that part of the parameter and all-gathers it. The same
  // values as a state in the parameters' specs (on one node, the same bits: both sums take the
  // ranks in order). Empty: every state takes its parameter's spec.
  Axes shard_state_over;

  // The spec of `param`'s state: sharded_state_spec over shard_state_over.
  Spec state_spec(const ShardedTensor& param) const;
  OptState init(const ParamTree& params) const;
  // params and state updated in place from grads (each grad in its parameter's spec):
  // begin_step, then update_param for every parameter.
  void update(ParamTree& params, const ParamTree& grads, OptState& state) const;
  // The step's start: counts it (Adam's bias corrections use the count).
  void begin_step(OptState& state) const;
  // One parameter's update in this step, from its gradient in the parameter's spec or in its
  // state's (state_spec): what update does for `path`, so that a train step can update each
  // parameter as soon as its gradient is final (nn::train_step) and get the same bits. With a
  // state split further than the parameter, updates the part of the parameter the state covers
  // and all-gathers the parameter (collective over the state's extra axes).
  void update_param(const std::string& path, ShardedTensor& p, const ShardedTensor& g, OptState& state) const;
  // update_param with the gradient produced a panel of rows at a time (an f32 parameter; see
  // RowGradient): each panel of about kRowPanelBytes is updated as soon as it is produced, while
  // it and the parameter's rows are in cache, and the whole gradient never exists. The same bits
  // as update_param, element by element.
  // Adam and AdamW take the rows in one pass with their products where the producer has a kernel
  // for it (RowGradient::produce_adam): true then.
  bool update_param_rows(const std::string& path, ShardedTensor& p, RowGradient& g, OptState& state) const;
  // Timed in one process, steps alternating with whole gradients (B8, Zen 5, 1 MiB of L2 a
  // core): depth 4096 on one rank 221-223 ms -> 217 at 128 KiB, 215.5 at 256, 213 at 512; depth
  // 1024 on one rank 6.2 -> 6.3 at 128, 6.07 at 256, 6.17 at 512; on 1x2 2.93 -> 3.10 at 128,
  // 2.82 -> 2.91 at 256, 2.90 -> 2.84 at 512. In separate runs, interleaved, 1 MiB against 256
  // KiB: depth 4096 on one rank 208-214 against 224-226 ms, elsewhere within the host's noise
  // (docs/design.md, "Performance model").
  static constexpr std::int64_t kRowPanelBytes = std::int64_t{1} << 20;

 private:
  void update_elements(const std::string& path, ShardedTensor& p, OptState& state, std::int64_t begin,
                       std::int64_t count, const void* g, std::int64_t param_begin = -1) const;
  std::string to_string() const;
  // Adam's constants for this step (state.count counted: after begin_step).
  template <class T>
  AdamConstants<T> adam_constants(const OptState& state) const;
};

// The spec of the optimizer state of a parameter of spec `param` and shape `global` on `mesh`,
// split further over `over` (Optimizer::shard_state_over): `param`, with the axes of `over` that
// it does not use and that have more than one rank appended (minor) to the first dimension they
// split evenly together with the dimension's own axes; else to the first whose blocks they split
// into nested blocks (blocks_nest); else `param` unchanged. Throws SpecError for an axis of `over`
// that `mesh` lacks or that `over` names twice.
Spec sharded_state_spec(const Spec& param, const MeshShape& mesh, const Shape& global, const Axes& over);

Optimizer adam(double learning_rate, double b1 = 0.9, double b2 = 0.999, double eps = 1e-8);
Optimizer adamw(double learning_rate, double weight_decay = 1e-4, double b1 = 0.9, double b2 = 0.999,
                double eps = 1e-8);
Optimizer sgd(double learning_rate, double momentum = 0.0, bool nesterov = false);

}  // namespace tessera::nn
