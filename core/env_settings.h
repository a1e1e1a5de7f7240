// The TESSERA_* environment variables that change what tessera does, and the values each takes.
//
// An unset variable means the value at `unset`; any value outside the list is refused with a
// UsageError, never taken as the default ("fast" must not silently mean datatype). Mesh::create
// agrees on them across its ranks in the all-reduce it makes anyway (mesh/mesh.cpp): a bad value
// on any rank fails every rank, and a setting marked `alike` must have one value on every rank,
// because ranks that differ would run different collectives and wait on each other forever.
// TESSERA_SHM_COLLECTIVES is agreed again where it is read, by the shared-memory channel's own
// all-reduce (mesh/node_channel.cpp), for communicators of a mesh made without Mesh::create.
#pragma once

#include <string>
#include <vector>

namespace tessera {

struct EnvSetting {
  const char* name;
  std::vector<const char*> values;
  int unset;   // the index in values of what an unset variable means
  bool alike;  // must have one value on every rank
};

// TESSERA_PACK (datatype | memcpy: how collectives move blocks of an inner dimension; unset:
// datatype), TESSERA_SHARD_MAP_CHECK (0 | 1: shard_map checks that unmentioned axes hold equal
// blocks; unset: 0; alike, since the check is collective) and TESSERA_SHM_COLLECTIVES (0 | 1:
// collectives on one node through shared memory; unset: 1) and TESSERA_DENORMALS (flush | keep:
// whether an Environment's thread flushes subnormal floats to zero, core/denormals.h; unset:
// flush; alike, since ranks that differ would compute different bits for one replicated value)
// and TESSERA_COLLECTIVE_CHECK (0 | 1: every collective and reshard first checks that all ranks
// are at the same one, collectives/collective_check.h; unset: 0; alike, since the check is
// collective) and TESSERA_FAILED_RANK_WAIT (1 | 3 | 10 | 30 | 100: the seconds a rank whose code
// threw waits for the others before it ends the job, mesh/agree.h; unset: 3).
const std::vector<EnvSetting>& env_settings();
// The entry of env_settings() called `name` (an unknown name is a bug: std::logic_error).
const EnvSetting& env_setting(const std::string& name);

// The index in setting.values of the variable's value (setting.unset when unset), or -1 for any
// other value.
int env_choice(const EnvSetting& setting);
// env_choice, throwing UsageError(env_setting_error(setting, true)) for a value outside the list.
int checked_env_choice(const EnvSetting& setting);
// "NAME must be unset, A or B, got 'v'" for the rank holding the value (mine), "NAME must be
// unset, A or B on every rank" for the others.
std::string env_setting_error(const EnvSetting& setting, bool mine);

}  // namespace tessera
