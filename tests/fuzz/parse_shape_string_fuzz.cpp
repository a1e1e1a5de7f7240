// parse_shape_string on arbitrary text; a shape string that parses prints back to text that
// parses to it.
#include <cstdlib>

#include "core/error.h"
#include "core/spec.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tessera::ShapeString shape;
  try {
    shape = tessera::parse_shape_string(tessera::fuzz::as_text(data, size));
  } catch (const tessera::Error&) {
    return 0;
  }
  if (tessera::parse_shape_string(shape.to_string()) != shape) std::abort();
  (void)shape.spec();
  (void)shape.names();
  return 0;
}
