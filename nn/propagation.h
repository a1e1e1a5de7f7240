// Shared rules of sharding propagation: resolving partial operands and choosing which operand
// to reshard when two disagree (the one whose reshard moves fewer bytes).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "mesh/sharded_tensor.h"

namespace tessera::nn {

// Bytes per rank that reshard(x, target) moves, from the planner (no communication).
std::int64_t reshard_bytes(const ShardedTensor& x, const Spec& target);
// x with its partial axes summed away (one reduction), or x itself when it has none.
ShardedTensor resolve_partial(const ShardedTensor& x);
// The same for a block the caller gives up: x itself, moved, when it has no partial axes (the
// overload above copies it then).
ShardedTensor resolve_partial(ShardedTensor&& x);
// x with its partial axes summed away and dimension `dim` whole on every rank (one reshard, held
// in `moved`), or x itself when it is so already: the operand of an op that works along `dim`
// (softmax, concat), read in place.
const ShardedTensor& whole_along(const ShardedTensor& x, int dim, ShardedTensor& moved);
// x resharded to `target`, or a copy of x where it is there already (on_spec below reads it in
// place instead).
ShardedTensor to_spec(const ShardedTensor& x, const Spec& target);
// x itself where its spec is `target`; otherwise x resharded to it, held in `moved`. For a block
// that is only read: to_spec returns a copy, a deep one where nothing moves (a backward pass's
// cotangent, already on its spec, was copied once per op).
const ShardedTensor& on_spec(const ShardedTensor& x, const Spec& target, ShardedTensor& moved);
// "'name' [shape] spec": how an op's error message names an operand.
std::string operand_string(const ShardedTensor& x);
// Throws MeshError unless a and b live on the same mesh; `op` names the op in the message.
void check_same_mesh(const ShardedTensor& a, const ShardedTensor& b, std::string_view op);
// The same check where naming the op takes work (a path, the subscripts): `op()` returns the name,
// and is called only when the meshes differ, so the check of every step builds no string.
template <class Op, class = std::enable_if_t<std::is_invocable_r_v<std::string, Op&>>>
void check_same_mesh(const ShardedTensor& a, const ShardedTensor& b, Op&& op) {
  if (!(a.mesh() == b.mesh())) check_same_mesh(a, b, std::string_view(op()));
}

}  // namespace tessera::nn
