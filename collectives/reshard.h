// TEMPORARY stand-in for the collectives branch's reshard (same API), so nn can build before
// it lands. Value-correct through to_global/from_global; not byte-optimal. Never merged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mesh/sharded_tensor.h"

namespace tessera {

struct ReshardStep {
  std::string op;
  Axes axes;
  int dim = -1;
  int dim_to = -1;
  std::int64_t bytes_per_rank = 0;
  std::string note;
};

struct ReshardPlan {
  Spec source, target;
  std::vector<ReshardStep> steps;
  std::int64_t bytes_per_rank() const {
    std::int64_t b = 0;
    for (const auto& s : steps) b += s.bytes_per_rank;
    return b;
  }
  std::string to_string() const { return ""; }
};

ReshardPlan plan_reshard(const MeshShape& mesh, const Spec& source, const Spec& target, const Shape& global_shape,
                         DType dtype);
ShardedTensor reshard(const ShardedTensor& x, const Spec& target);
ShardedTensor reshard(ShardedTensor&& x, const Spec& target);

}  // namespace tessera
