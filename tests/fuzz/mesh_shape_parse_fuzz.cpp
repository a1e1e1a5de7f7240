// MeshShape::parse on arbitrary text; a mesh that parses prints back to text that parses to it,
// and its row-major coordinates round-trip for its first and last rank.
#include <cstdlib>

#include "core/error.h"
#include "core/mesh_shape.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tessera::MeshShape mesh;
  try {
    mesh = tessera::MeshShape::parse(tessera::fuzz::as_text(data, size));
  } catch (const tessera::Error&) {
    return 0;
  }
  if (tessera::MeshShape::parse(mesh.to_string()) != mesh) std::abort();
  try {
    const int last = mesh.size() - 1;
    if (mesh.rank_of(mesh.coords_of(0)) != 0 || mesh.rank_of(mesh.coords_of(last)) != last) std::abort();
  } catch (const tessera::Error&) {
  }
  return 0;
}
