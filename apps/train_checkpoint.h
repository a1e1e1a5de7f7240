// Checkpoint wiring of train_mlp: TrainState <-> the io layer's CheckpointState. Compiled
// against io/ when the build has it (train_checkpoint.cpp); otherwise a stub whose calls throw
// UsageError("built without io"), so --ckpt-dir and --resume fail with a clear message.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "nn/params.h"
#include "nn/train.h"

namespace tessera::apps {

// Whether this build can write and read checkpoints.
bool checkpoints_available();

// Writes `state` (params, Adam's moments and count, step) with the seed and configuration text;
// keeps the last `keep`. Collective. Returns the file written.
std::string save_train_state(const nn::TrainState& state, const nn::ParamInfos& infos, std::uint64_t seed,
                             const std::string& config, const std::string& dir, int keep);

// The latest complete checkpoint in `dir`, if any. Collective (every rank agrees).
std::optional<std::string> latest_train_checkpoint(const std::string& dir);

// Restores `file` into `state` (whose params and moments give the target specs and shapes).
// Collective. Returns the step of the checkpoint.
std::int64_t restore_train_state(nn::TrainState& state, const nn::ParamInfos& infos, const std::string& file);

}  // namespace tessera::apps
