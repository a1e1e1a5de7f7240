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
  // shape and dtype wanted (ShardedTensor::zeros is enough); restore_checkpoint_into fills its
  // block in place. Held here (`value`), or borrowed from the caller (`borrowed`, see borrow()):
  // a borrowed array is saved from, and restored into, the caller's tensor without a copy.
  ShardedTensor value;
  // One logical name per dimension (flax-style "embed", "hidden"), or empty.
  std::vector<std::string> logical_names;
  ShardedTensor* borrowed = nullptr;

  // An array that refers to `tensor`, which must outlive every use of this array. A save only
  // reads it (a const tensor may be borrowed for a save); a restore writes its block.
  static CheckpointArray borrow(std::string path, const ShardedTensor& tensor,
                                std::vector<std::string> logical_names = {}) {
    CheckpointArray a;
    a.path = std::move(path);
    a.logical_names = std::move(logical_names);
    a.borrowed = const_cast<ShardedTensor*>(&tensor);
    return a;
  }
  // The array's tensor: the borrowed one, or `value`.
  const ShardedTensor& tensor() const { return borrowed != nullptr ? *borrowed : value; }
  ShardedTensor& tensor() { return borrowed != nullptr ? *borrowed : value; }
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
