// tessera's version, as the CMake project declares it (also in the installed package's
// tesseraConfigVersion.cmake); every app prints it with --version.
#pragma once

#include <string_view>

namespace tessera {

struct Version {
  int major, minor, patch;
};

// {0, 1, 0} for "0.1.0".
Version version();
// "0.1.0"
std::string_view version_string();

}  // namespace tessera
