// TrainState <-> CheckpointState: one array per parameter and per Adam moment, named
// "params/<p>", "opt_state/mu/<p>", "opt_state/nu/<p>", plus the replicated i32 "opt_state/count".
#include "apps/train_checkpoint.h"

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/checkpoint_state.h"

namespace tessera::apps {

namespace {

ShardedTensor count_tensor(const Mesh& mesh, std::int32_t count) {
  ShardedTensor c = ShardedTensor::zeros(mesh, Spec::replicated(0), {}, DType::i32, "opt_state/count");
  c.local().data<std::int32_t>()[0] = count;
  return c;
}

// The arrays of `state` in checkpoint order, with each parameter's logical names.
CheckpointState to_checkpoint(const nn::TrainState& state, const nn::ParamInfos& infos) {
  CheckpointState ckpt;
  ckpt.step = state.step;
  for (const auto& info : infos) {
    const auto names = info.logical_names();
    ckpt.arrays.push_back({"params/" + info.path, state.params.at(info.path), names});
    ckpt.arrays.push_back({"opt_state/mu/" + info.path, state.opt_state.mu.at(info.path), names});
    ckpt.arrays.push_back({"opt_state/nu/" + info.path, state.opt_state.nu.at(info.path), names});
  }
  const Mesh& mesh = state.params.begin()->second.mesh();
  ckpt.arrays.push_back({"opt_state/count", count_tensor(mesh, state.opt_state.count), {}});
  return ckpt;
}

}  // namespace

bool checkpoints_available() { return true; }

std::string save_train_state(const nn::TrainState& state, const nn::ParamInfos& infos, std::uint64_t seed,
                             const std::string& config, const std::string& dir, int keep) {
  CheckpointState ckpt = to_checkpoint(state, infos);
  ckpt.seed = seed;
  ckpt.config = config;
  return save_checkpoint(ckpt, dir, SaveOptions{keep});
}

std::optional<std::string> latest_train_checkpoint(const std::string& dir) { return latest_checkpoint(dir); }

std::int64_t restore_train_state(nn::TrainState& state, const nn::ParamInfos& infos, const std::string& file) {
  // The target: zeros in the specs and shapes this run wants (any mesh).
  CheckpointState target = to_checkpoint(state, infos);
  for (auto& a : target.arrays) {
    a.value = ShardedTensor::zeros(a.value.mesh(), a.value.spec(), a.value.global_shape(), a.value.dtype(), a.path);
  }
  CheckpointState restored = restore_checkpoint(file, target);
  for (auto& a : restored.arrays) {
    const std::string& p = a.path;
    if (p == "opt_state/count") {
      state.opt_state.count = a.value.local().data<std::int32_t>()[0];
    } else if (p.rfind("params/", 0) == 0) {
      state.params.at(p.substr(7)) = std::move(a.value);
    } else if (p.rfind("opt_state/mu/", 0) == 0) {
      state.opt_state.mu.at(p.substr(13)) = std::move(a.value);
    } else if (p.rfind("opt_state/nu/", 0) == 0) {
      state.opt_state.nu.at(p.substr(13)) = std::move(a.value);
    } else {
      throw IoError("restore: unexpected array '" + p + "' in " + file);
    }
  }
  state.step = restored.step;
  return restored.step;
}

}  // namespace tessera::apps
