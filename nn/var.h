// Reverse-mode autodiff over global-view ops. A Var is a sharded value and, when it depends on
// a parameter, the node that made it: the op's inputs and a backward function that turns the
// output's cotangent into the inputs' cotangents. Cotangents are global values too; each one is
// resharded to its primal's spec (without partial axes) as it is accumulated, so that partial
// contributions are resolved by reshard and never by collectives written in an op or a layer.
// The exception is a reshard's result (Node::passes_cotangent): its cotangent is handed on as it
// arrives, so the one reshard is to the reshard's input spec (the transpose of an all-gather is
// a reduce-scatter, as in JAX).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/kernels.h"
#include "mesh/sharded_tensor.h"

namespace tessera::nn {

class GradSink;
struct Node;

class Var {
 public:
  Var() = default;
  // A leaf: a constant (requires_grad = false) or a variable to differentiate against.
  explicit Var(ShardedTensor value, bool requires_grad = false);

  const ShardedTensor& value() const;
  const Spec& spec() const { return value().spec(); }
  const Shape& shape() const { return value().global_shape(); }
  const Mesh& mesh() const { return value().mesh(); }
  DType dtype() const { return value().dtype(); }
  int ndim() const { return value().ndim(); }
  bool requires_grad() const;
  bool defined() const { return node_ != nullptr; }
  const std::shared_ptr<Node>& node() const { return node_; }

 private:
  friend Var make_result(std::string op, ShardedTensor value, std::vector<Var> inputs,
                         std::function<void(ShardedTensor&, GradSink&)> backward);
  std::shared_ptr<Node> node_;
};

// An op's backward pass: given the cotangent of its result, adds its inputs' cotangents to the
// sink. The cotangent is the op's to take: the tape does not read it afterwards, so an op that
// hands it on unchanged (reshard, add) moves it into the sink instead of copying it. Most take it
// as `const ShardedTensor&`.
using Backward = std::function<void(ShardedTensor& grad, GradSink& sink)>;

struct Node {
  ShardedTensor value;
  bool requires_grad = false;
  std::string op;  // "leaf", "einsum", ... (for messages)
  std::vector<Var> inputs;
  Backward backward;
  // The backward hands its cotangent to its one input unchanged (reshard): the tape keeps the
  // cotangent in the spec it arrives in, so that it is resharded once, to the input's spec (a
  // partial sum reduce-scattered straight to a split, not all-reduced and then sliced).
  bool passes_cotangent = false;
};

// The result of an op. When no input requires a gradient, or a NoTape is alive on this thread,
// the tape keeps nothing.
Var make_result(std::string op, ShardedTensor value, std::vector<Var> inputs, Backward backward);

// While a NoTape(true) is alive on this thread, ops record nothing: their results need no
// gradient and keep no inputs (remat's forward pass, nn/remat.h). NoTape(false) turns recording
// back on for a scope (shard_map's body, whose tape types its results). Nests.
class NoTape {
 public:
  explicit NoTape(bool off = true);
  ~NoTape();
  NoTape(const NoTape&) = delete;
  NoTape& operator=(const NoTape&) = delete;
  static bool active();

 private:
  bool saved_;
};

// A variable's gradient that is never materialised whole: its consumer asks for it a panel of
// rows at a time (rows of the variable's local block, dimension 0, each of row_elements()
// elements, row-major) and uses each panel before asking for the next, while it is in cache.
// The producer is an op whose backward reads the variable's value (einsum's input gradient
// reads the weight): when it is asked for rows [begin, end), those rows of the variable still
// hold the value they had in the forward pass; the consumer may change them afterwards.
class RowGradient {
 public:
  virtual ~RowGradient() = default;
  virtual std::int64_t rows() const = 0;
  virtual std::int64_t row_elements() const = 0;
  // Writes the gradient's rows [begin, end) to `out` (f32), each panel once, in increasing order
  // from row 0.
  virtual void produce(std::int64_t begin, std::int64_t end, float* out) = 0;
  // Adam's update (adam_update with `c`) of the variable's rows [begin, end) from those rows of
  // its gradient, in one pass with producing them, where the producer has a kernel for that (a
  // thin einsum's, thin_rows_adam): `value`, `mu` and `nu` are the variable's block (the one the
  // producer reads) and its moments, from row 0. False, having done nothing, where it has none:
  // the consumer then takes the rows from produce(). Rows in produce's order, each once.
  virtual bool produce_adam(std::int64_t begin, std::int64_t end, float* value, float* mu, float* nu,
                            const AdamConstants<float>& c) {
    return false;
  }
  // The matrix FLOPs produce() computes over all rows besides the gradient's own (einsum's input
  // gradient, from the same rows of the variable): for cost models (bench_train's floor).
  virtual double input_grad_flops() const { return 0; }
  // The matrix FLOPs of the gradient's own rows (einsum's weight gradient), for the same models.
  virtual double weight_grad_flops() const { return 0; }
};

// Where an op's backward puts its inputs' cotangents.
class GradSink {
 public:
  virtual ~GradSink() = default;
  // The cotangent of inputs[input] (any spec; it is resharded to the input's spec).
  virtual void add(int input, ShardedTensor grad) = 0;
  // The cotangent of inputs[input] restricted to index `index` of its dimension 0 (for ops that
  // take one layer of a stacked parameter): `grad` has the input's shape without dimension 0.
  virtual void add_slab(int input, std::int64_t index, const ShardedTensor& grad) = 0;
  // Whether inputs[input] needs a cotangent at all.
  virtual bool wants(int input) const = 0;
  // Whether inputs[input]'s cotangent is kept as accumulated, possibly partial (a requested
  // variable with GradOptions::reduce_to_spec false, or a reshard's result), rather than
  // resharded to its spec.
  virtual bool keeps_raw(int input) const { return false; }
  // Whether inputs[input]'s gradient may be handed over in rows (take_rows) instead of added:
  // a requested f32 variable (a parameter, with no op of its own) whose gradient this op's
  // contribution completes (this op is its only use), with GradOptions::ready_rows set. The op
  // then hands over rows of the variable's own block, in its spec, with nothing left to reduce.
  // The same answer on every rank.
  virtual bool takes_rows(int input) const { return false; }
  // Hands inputs[input]'s gradient to GradOptions::ready_rows, which consumes every row before
  // this returns (only where takes_rows(input)).
  virtual void take_rows(int input, RowGradient& grad) {
    throw Error("GradSink: input " + std::to_string(input) + " does not take its gradient in rows");
  }
};

struct GradOptions {
  // Reshard each requested gradient to its variable's spec (true), or hand back the cotangent
  // as accumulated, possibly partial (false: for summing microbatches before one reduction).
  bool reduce_to_spec = true;
  // When not empty (one entry per variable of `wrt`): whether each variable's cotangent is kept
  // raw, overriding reduce_to_spec per variable (remat passes its outer tape's choice through).
  std::vector<bool> keep_raw;
  // When set, each variable's cotangent is handed to it (with the variable's index in `wrt`) as
  // soon as it is final: when the backward pass reaches the variable, after every op that takes
  // it as an input. gradients() then returns nullopt for the variables handed over. In the order
  // of the tape, the same on every rank, so `ready` may run collectives (nn::train_step reduces
  // and applies each parameter's gradient there, while the rest of the backward is still to come).
  std::function<void(std::size_t index, ShardedTensor grad)> ready;
  // With `ready`: where an op can produce a requested variable's gradient in rows (GradSink::
  // takes_rows), it is handed here instead of to `ready`, which is then not called for that
  // variable; the callee consumes every row before returning (nn::train_step updates the
  // parameter panel by panel, while the panel's gradient is in cache).
  std::function<void(std::size_t index, RowGradient& grad)> ready_rows;
};

// Cotangents of `wrt` for the output `y` seeded with `seed` (same shape, dtype and mesh as y).
// Entries are nullopt for variables y does not depend on; a variable listed twice gets its
// gradient at both places.
std::vector<std::optional<ShardedTensor>> gradients(const Var& y, const ShardedTensor& seed, const std::vector<Var>& wrt,
                                                    const GradOptions& options = {});
// Gradients of a scalar y (seed 1); another output is a ShapeError (pass its seed above).
std::vector<std::optional<ShardedTensor>> gradients(const Var& y, const std::vector<Var>& wrt,
                                                    const GradOptions& options = {});

}  // namespace tessera::nn
