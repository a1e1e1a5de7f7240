// parse_spec on arbitrary text; a spec that parses prints back to text that parses to it.
#include <cstdlib>

#include "core/error.h"
#include "core/spec.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tessera::Spec spec;
  try {
    spec = tessera::parse_spec(tessera::fuzz::as_text(data, size));
  } catch (const tessera::Error&) {
    return 0;
  }
  if (tessera::parse_spec(spec.to_string()) != spec) std::abort();
  return 0;
}
