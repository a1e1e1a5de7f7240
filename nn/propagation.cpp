// Propagation helpers shared by einsum and the elementwise ops.
#include "nn/propagation.h"

#include "collectives/reshard.h"
#include "core/error.h"

namespace tessera::nn {

std::int64_t reshard_bytes(const ShardedTensor& x, const Spec& target) {
  return cached_reshard_plan(x.mesh().shape(), x.spec(), target, x.global_shape(), x.dtype())->bytes_per_rank();
}

ShardedTensor resolve_partial(const ShardedTensor& x) {
  return x.spec().is_partial() ? reshard(x, x.spec().without_partial()) : x;
}

ShardedTensor resolve_partial(ShardedTensor&& x) {
  if (!x.spec().is_partial()) return std::move(x);
  const Spec target = x.spec().without_partial();
  return reshard(std::move(x), target);  // the sum in x's own storage (all_reduce's in-place form)
}

const ShardedTensor& whole_along(const ShardedTensor& x, int dim, ShardedTensor& moved) {
  Spec want = x.spec().without_partial();
  want.dims[dim].clear();
  return on_spec(x, want, moved);
}

ShardedTensor to_spec(const ShardedTensor& x, const Spec& target) {
  return x.spec() == target ? x : reshard(x, target);
}

const ShardedTensor& on_spec(const ShardedTensor& x, const Spec& target, ShardedTensor& moved) {
  if (x.spec() == target) return x;
  moved = reshard(x, target);
  return moved;
}

std::string operand_string(const ShardedTensor& x) {
  return "'" + x.name() + "' " + shape_to_string(x.global_shape()) + " " + x.spec().to_string();
}

void check_same_mesh(const ShardedTensor& a, const ShardedTensor& b, std::string_view op) {
  if (!(a.mesh() == b.mesh())) {
    throw MeshError(std::string(op) + ": operands '" + a.name() + "' on " + a.mesh().to_string() + " and '" + b.name() +
                    "' on " + b.mesh().to_string() + " live on different meshes");
  }
}

}  // namespace tessera::nn
