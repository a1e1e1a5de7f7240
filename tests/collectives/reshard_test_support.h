// What the every-pair reshard tests share: integer values that sums keep exact, and partial
// sources whose summands differ on every rank of the partial axes.
#pragma once

#include <cstdint>

#include "mesh/sharded_tensor.h"

namespace tessera::reshard_testing {

inline double value(std::int64_t i) { return static_cast<double>((i * 7919) % 1009); }

// A partial source whose summands differ on every rank of the partial axes (not just the value
// on one replica): the holder has value - (1 + ... + (P-1)), the k-th other rank has k.
inline ShardedTensor partial_source(const Mesh& mesh, const Spec& spec, const Shape& global) {
  auto x = ShardedTensor::from_fn(mesh, spec, global, DType::f32, value, "x");
  if (!spec.is_partial()) return x;
  const int parts = mesh.shape().axes_size(spec.partial);
  const int k = mesh.axes_rank(spec.partial);
  const float shift = k == 0 ? -static_cast<float>(parts * (parts - 1) / 2) : static_cast<float>(k);
  for (auto& v : x.local().values<float>()) v += shift;
  return x;
}

}  // namespace tessera::reshard_testing
