// Shared rules of sharding propagation: resolving partial operands and choosing which operand
// to reshard when two disagree (the one whose reshard moves fewer bytes).
#pragma once

#include <cstdint>

#include "mesh/sharded_tensor.h"

namespace tessera::nn {

// Bytes per rank that reshard(x, target) moves, from the planner (no communication).
std::int64_t reshard_bytes(const ShardedTensor& x, const Spec& target);
// x with its partial axes summed away (one reduction), or x itself when it has none.
ShardedTensor resolve_partial(const ShardedTensor& x);
// x with its partial axes summed away and dimension `dim` whole on every rank (one reshard), or
// x itself when it is so already: the operand of an op that works along `dim` (softmax, concat).
ShardedTensor whole_along(const ShardedTensor& x, int dim);
// x resharded to `target` unless it is there already (no copy of the data then).
ShardedTensor to_spec(const ShardedTensor& x, const Spec& target);
// "'name' [shape] spec": how an op's error message names an operand.
std::string operand_string(const ShardedTensor& x);
// Throws MeshError unless a and b live on the same mesh; `op` names the op in the message.
void check_same_mesh(const ShardedTensor& a, const ShardedTensor& b, std::string_view op);

}  // namespace tessera::nn
