// The checkpoint wiring of a build without io/: every call says so.
#include "apps/train_checkpoint.h"

#include "core/error.h"

namespace tessera::apps {

namespace {
[[noreturn]] void no_io() {
  throw UsageError("this build of tessera has no checkpoint layer (built without io): --ckpt-dir and --resume are unavailable");
}
}  // namespace

bool checkpoints_available() { return false; }

std::string save_train_state(const nn::TrainState&, const nn::ParamInfos&, std::uint64_t, const std::string&,
                             const std::string&, int) {
  no_io();
}

std::optional<std::string> latest_train_checkpoint(const std::string&) { no_io(); }

std::int64_t restore_train_state(nn::TrainState&, const nn::ParamInfos&, const std::string&) { no_io(); }

}  // namespace tessera::apps
