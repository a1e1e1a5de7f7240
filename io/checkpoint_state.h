// The layer-neutral description of what a checkpoint holds: named sharded arrays plus the step,
// the seed and the program's configuration. nn's TrainState converts to and from it, so io does
// not depend on how the model layer organises its parameters.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mesh/sharded_tensor.h"

namespace tessera {

struct CheckpointArray {
  // Slash-separated path of the dataset: "params/MLP_0/DotReluDot_0/W1", "opt_state/mu/...",
  // "opt_state/count". No leading slash, no empty, "." or ".." components.
  std::string path;
  // Global shape, spec and this rank's block. Saved: the value. Restore target: the mesh, spec,
  // shape and dtype wanted (ShardedTensor::zeros is enough); the block is filled in.
  ShardedTensor value;
  // One logical name per dimension (flax-style "embed", "hidden"), or empty.
  std::vector<std::string> logical_names;
};

struct CheckpointState {
  std::int64_t step = 0;
  std::uint64_t seed = 0;
  std::string config;  // the program's configuration (JSON text), stored as a root attribute
  std::vector<CheckpointArray> arrays;

  // The array at `path`, or nullptr.
  const CheckpointArray* find(const std::string& path) const {
    for (const auto& a : arrays) {
      if (a.path == path) return &a;
    }
    return nullptr;
  }
};

}  // namespace tessera
