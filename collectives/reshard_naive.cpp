// TEMPORARY: see reshard.h.
#include "collectives/reshard.h"

namespace tessera {

ReshardPlan plan_reshard(const MeshShape& mesh, const Spec& source, const Spec& target, const Shape& global_shape,
                         DType dtype) {
  ReshardPlan p{source, target, {}};
  if (!(source == target)) {
    p.steps.push_back({"naive", {}, -1, -1, numel(local_shape(source, mesh, global_shape)) * (std::int64_t)dtype_size(dtype), ""});
  }
  return p;
}

ShardedTensor reshard(const ShardedTensor& x, const Spec& target) {
  if (x.spec() == target) return x;
  return ShardedTensor::from_global(x.mesh(), target, x.to_global(), x.name());
}

ShardedTensor reshard(ShardedTensor&& x, const Spec& target) { return reshard(static_cast<const ShardedTensor&>(x), target); }

}  // namespace tessera
