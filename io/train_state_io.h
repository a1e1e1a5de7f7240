// Checkpoints of an nn::TrainState: its arrays under the paths of docs/design.md's format
// (params/<path>, opt_state/mu/<path>, opt_state/nu/<path>, opt_state/count), with the step,
// the seed and the program's configuration, restored onto any mesh and specs.
#pragma once

#include <cstdint>
#include <string>

#include "io/checkpoint.h"
#include "nn/params.h"
#include "nn/train.h"

namespace tessera {

struct TrainCheckpointMeta {
  std::uint64_t seed = 0;
  std::string config;  // the program's configuration, JSON text
  // Logical names of the parameters, stored as attributes (may be empty).
  nn::ParamInfos infos;
};

// The state's arrays, borrowed (CheckpointArray::borrow): `state` must outlive the result.
CheckpointState to_checkpoint_state(const nn::TrainState& state, const TrainCheckpointMeta& meta);
// Fills a TrainState shaped like `target` from restored arrays (the step and count included).
nn::TrainState from_checkpoint_state(const CheckpointState& restored, const nn::TrainState& target);

// Collective. Saves atomically into `dir` (see save_checkpoint); returns the file's path.
std::string save_train_state(const nn::TrainState& state, const std::string& dir, const TrainCheckpointMeta& meta,
                             const SaveOptions& options = {});
// Collective. `target` gives the mesh, specs, shapes and dtypes wanted (its values are not
// read); `meta`, when given, receives the seed and configuration stored in the file.
nn::TrainState restore_train_state(const std::string& dir_or_file, const nn::TrainState& target,
                                   TrainCheckpointMeta* meta = nullptr);
// The same, into `state`'s own tensors (its specs say what each rank reads): no copy of the state
// is made. On an error its values are unspecified (the step and count are left as they were).
void restore_train_state_into(const std::string& dir_or_file, nn::TrainState& state,
                              TrainCheckpointMeta* meta = nullptr);

// A TrainState of zeros with the parameters' specs: the target of a restore.
nn::TrainState abstract_train_state(const nn::ParamInfos& infos, const Mesh& mesh, const nn::Optimizer& optimizer);

}  // namespace tessera
