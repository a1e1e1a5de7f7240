// Global-view ops other than einsum, each on sharded tensors (no tape) and on Vars (taped).
// Propagation: elementwise results keep the operands' axes (the cheaper operand is resharded
// where they disagree); reductions over a split dimension give a result partial over its axes
// (no communication); linear ops keep partial axes, nonlinear ones reduce them first.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/kernels.h"
#include "core/rules.h"
#include "nn/losses.h"
#include "nn/var.h"

namespace tessera::nn {

// Elementwise with numpy broadcasting.
ShardedTensor binary(BinaryOp op, const ShardedTensor& a, const ShardedTensor& b);
Var add(const Var& a, const Var& b);
Var sub(const Var& a, const Var& b);
Var mul(const Var& a, const Var& b);
Var div(const Var& a, const Var& b);

ShardedTensor unary(UnaryOp op, const ShardedTensor& x);
Var relu(const Var& x);
Var neg(const Var& x);
Var exp(const Var& x);
Var log(const Var& x);
Var square(const Var& x);
Var tanh(const Var& x);
// x * factor (keeps partial axes).
ShardedTensor scale(const ShardedTensor& x, double factor);
Var scale(const Var& x, double factor);

// Sums over `dims` (all dimensions when empty); split dimensions give a partial result.
ShardedTensor sum(const ShardedTensor& x, std::vector<int> dims = {}, bool keepdims = false);
Var sum(const Var& x, std::vector<int> dims = {}, bool keepdims = false);
Var mean(const Var& x, std::vector<int> dims = {}, bool keepdims = false);
// x (whose shape broadcasts to `shape`) broadcast to `shape`; spec: x's on the kept dimensions.
ShardedTensor broadcast_to(const ShardedTensor& x, const Shape& shape, const Spec& spec);
// Sums x down to `shape` (the reverse of broadcasting).
ShardedTensor sum_to_shape(const ShardedTensor& x, const Shape& shape);
// The same for a block the caller gives up: x itself, moved, when it has `shape` already.
ShardedTensor sum_to_shape(ShardedTensor&& x, const Shape& shape);

// log_softmax over the last dimension (which is gathered first if it is split).
Var log_softmax(const Var& x);

// Layer `index` of a stacked tensor (dimension 0), as nn.scan hands each layer its slice.
Var take_layer(const Var& stacked, std::int64_t index);

// Resharding in the global view; the cotangent is resharded back in the backward pass.
Var reshard(const Var& x, const Spec& target);
Var with_sharding_constraint(const Var& x, const Spec& spec);
// flax.linen.with_logical_constraint: names -> spec by the rules; with the fallback
// no_constraint, x is returned unchanged when a name matches no rule.
Var with_logical_constraint(const Var& x, const std::vector<std::string>& names, const Rules& rules,
                            RulesFallback fallback = RulesFallback::unsharded);

// The value of a scalar (summing partial axes): collective over the mesh.
double scalar_value(const ShardedTensor& x);

}  // namespace tessera::nn
