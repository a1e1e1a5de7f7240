// Internal to nn/: the thread-local stack of enclosing shard_maps, shared by shard_map.cpp and
// spmd_collectives.cpp. A frame records, per node made in the body, how the op changes the set
// of mesh axes its value varies over (JAX's replication types), for shard_map's checks and for
// deciding which replicated inputs get their cotangents summed.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "mesh/mesh.h"
#include "nn/var.h"

namespace tessera::nn::detail {

// How a node's varying axes (bit i = mesh axis i) follow from its inputs': the union of the
// inputs', minus `removes`, plus `adds`. A body leaf (input `input`) varies over `adds`.
struct VaryRule {
  std::uint64_t adds = 0;
  std::uint64_t removes = 0;
  int input = -1;  // >= 0: the leaf of shard_map argument `input`
};

struct SpmdFrame {
  Mesh mesh;   // the real mesh
  Mesh local;  // the one-rank mesh with the same axis names
  std::unordered_map<const Node*, VaryRule> rules;
};

// The innermost frame, or nullptr outside shard_map.
SpmdFrame* current_frame();
// RAII push / pop.
class FrameGuard {
 public:
  explicit FrameGuard(SpmdFrame& frame);
  ~FrameGuard();
  FrameGuard(const FrameGuard&) = delete;
  FrameGuard& operator=(const FrameGuard&) = delete;
};

// Bit mask of `axes` on `mesh` (axes already validated).
std::uint64_t axis_mask(const MeshShape& mesh, const Axes& axes);

}  // namespace tessera::nn::detail
