// TrainState <-> checkpoint arrays.
#include "io/train_state_io.h"

#include "core/error.h"

namespace tessera {

namespace {

ShardedTensor count_tensor(const Mesh& mesh, std::int32_t count) {
  Tensor t(Shape{}, DType::i32);
  t.data<std::int32_t>()[0] = count;
  return ShardedTensor(mesh, Spec(), Shape{}, std::move(t), "opt_state/count");
}

const Mesh& mesh_of(const nn::TrainState& state) {
  if (state.params.empty()) throw IoError("train state checkpoint: the state has no parameters");
  return state.params.begin()->second.mesh();
}

}  // namespace

CheckpointState to_checkpoint_state(const nn::TrainState& state, const TrainCheckpointMeta& meta) {
  CheckpointState out;
  out.step = state.step;
  out.seed = meta.seed;
  out.config = meta.config;
  auto names_of = [&](const std::string& path) {
    for (const auto& info : meta.infos) {
      if (info.path == path) return info.logical_names();
    }
    return std::vector<std::string>{};
  };
  // The arrays borrow the state's tensors: a save writes from them, a restore fills them.
  for (const auto& [path, p] : state.params) {
    out.arrays.push_back(CheckpointArray::borrow("params/" + path, p, names_of(path)));
  }
  for (const auto& [path, m] : state.opt_state.mu) {
    out.arrays.push_back(CheckpointArray::borrow("opt_state/mu/" + path, m, names_of(path)));
  }
  for (const auto& [path, v] : state.opt_state.nu) {
    out.arrays.push_back(CheckpointArray::borrow("opt_state/nu/" + path, v, names_of(path)));
  }
  out.arrays.push_back({"opt_state/count", count_tensor(mesh_of(state), state.opt_state.count), {}});
  return out;
}

namespace {

// The restored step count (replicated: every rank reads the same value, so every rank throws
// alike). A negative count would make Adam's bias correction divide by zero.
std::int32_t checked_count(const CheckpointState& restored) {
  const CheckpointArray* count = restored.find("opt_state/count");
  if (count == nullptr) throw IoError("train state checkpoint: no array 'opt_state/count' was restored");
  const std::int32_t value = count->tensor().local().data<std::int32_t>()[0];
  if (value < 0) {
    throw IoError("train state checkpoint: dataset '/opt_state/count' holds " + std::to_string(value) +
                  "; an optimizer step count is >= 0");
  }
  return value;
}

}  // namespace

nn::TrainState from_checkpoint_state(const CheckpointState& restored, const nn::TrainState& target) {
  nn::TrainState out;
  out.step = restored.step;
  auto take = [&](const std::string& path) -> const ShardedTensor& {
    for (const auto& a : restored.arrays) {
      if (a.path == path) return a.value;
    }
    throw IoError("train state checkpoint: no array '" + path + "' was restored");
  };
  const std::int32_t count = checked_count(restored);
  for (const auto& [path, p] : target.params) out.params.emplace(path, take("params/" + path));
  for (const auto& [path, m] : target.opt_state.mu) out.opt_state.mu.emplace(path, take("opt_state/mu/" + path));
  for (const auto& [path, v] : target.opt_state.nu) out.opt_state.nu.emplace(path, take("opt_state/nu/" + path));
  out.opt_state.count = count;
  return out;
}

std::string save_train_state(const nn::TrainState& state, const std::string& dir, const TrainCheckpointMeta& meta,
                             const SaveOptions& options) {
  return save_checkpoint(to_checkpoint_state(state, meta), dir, options);
}

void restore_train_state_into(const std::string& dir_or_file, nn::TrainState& state, TrainCheckpointMeta* meta) {
  CheckpointState wanted = to_checkpoint_state(state, TrainCheckpointMeta{});
  restore_checkpoint_into(dir_or_file, wanted);
  const std::int32_t count = checked_count(wanted);
  state.step = wanted.step;
  state.opt_state.count = count;
  if (meta) {
    meta->seed = wanted.seed;
    meta->config = wanted.config;
  }
}

nn::TrainState restore_train_state(const std::string& dir_or_file, const nn::TrainState& target,
                                   TrainCheckpointMeta* meta) {
  nn::TrainState out = target;  // the result's storage
  restore_train_state_into(dir_or_file, out, meta);
  return out;
}

nn::TrainState abstract_train_state(const nn::ParamInfos& infos, const Mesh& mesh, const nn::Optimizer& optimizer) {
  nn::ParamTree zeros;
  for (const auto& info : infos) {
    zeros.emplace(info.path, ShardedTensor::zeros(mesh, info.spec, info.shape, info.dtype, info.path));
  }
  return nn::create_train_state(std::move(zeros), optimizer);
}

}  // namespace tessera
