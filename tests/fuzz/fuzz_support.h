// Helpers shared by the libFuzzer targets: every target feeds bytes to one tessera entry point;
// a tessera::Error is the expected answer to a bad input, anything else (a crash, a sanitizer
// report, another exception, a hang past -timeout) is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tessera::fuzz {

// The input as text (may hold any bytes, NULs included).
inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace tessera::fuzz
