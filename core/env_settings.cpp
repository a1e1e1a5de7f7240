#include "core/env_settings.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "core/error.h"

namespace tessera {

const std::vector<EnvSetting>& env_settings() {
  static const std::vector<EnvSetting> settings = {
      {"TESSERA_PACK", {"datatype", "memcpy"}, 0, false},
      {"TESSERA_SHARD_MAP_CHECK", {"0", "1"}, 0, true},
      {"TESSERA_SHM_COLLECTIVES", {"0", "1"}, 1, false},
      {"TESSERA_DENORMALS", {"flush", "keep"}, 0, true},
      {"TESSERA_COLLECTIVE_CHECK", {"0", "1"}, 0, true},
      {"TESSERA_FAILED_RANK_WAIT", {"1", "3", "10", "30", "100"}, 1, false},
  };
  return settings;
}

const EnvSetting& env_setting(const std::string& name) {
  for (const auto& s : env_settings()) {
    if (name == s.name) return s;
  }
  throw std::logic_error("env_setting: no setting " + name);
}

int env_choice(const EnvSetting& setting) {
  const char* value = std::getenv(setting.name);
  if (value == nullptr) return setting.unset;
  for (std::size_t i = 0; i < setting.values.size(); ++i) {
    if (std::strcmp(value, setting.values[i]) == 0) return static_cast<int>(i);
  }
  return -1;
}

int checked_env_choice(const EnvSetting& setting) {
  const int choice = env_choice(setting);
  if (choice < 0) throw UsageError(env_setting_error(setting, true));
  return choice;
}

std::string env_setting_error(const EnvSetting& setting, bool mine) {
  std::string text = std::string(setting.name) + " must be unset";
  for (std::size_t i = 0; i < setting.values.size(); ++i) {
    text += (i + 1 == setting.values.size() ? " or " : ", ") + std::string(setting.values[i]);
  }
  if (!mine) return text + " on every rank";
  const char* value = std::getenv(setting.name);
  return text + ", got '" + (value != nullptr ? value : "") + "'";
}

}  // namespace tessera
