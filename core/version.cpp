// The numbers come from CMake's project(VERSION) through compile definitions on this file alone,
// so a version bump recompiles one file.
#include "core/version.h"

namespace tessera {

Version version() { return {TESSERA_VERSION_MAJOR, TESSERA_VERSION_MINOR, TESSERA_VERSION_PATCH}; }

std::string_view version_string() { return TESSERA_VERSION_STRING; }

}  // namespace tessera
