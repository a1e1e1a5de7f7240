// plan_reshard on a fuzzed (mesh shape, source spec, target spec, global shape), given as four
// lines of text:
//   data=2,model=4
//   P(data, model)
//   P(model, None)
//   8 16
// Sizes are bounded so that an input stays fast: at most 64 ranks, 4 dimensions, 4096 per
// dimension. A plan that comes back never counts negative bytes (a sign of an overflow), and
// table_bytes must not crash either.
#include <charconv>
#include <cstdlib>
#include <string>
#include <vector>

#include "collectives/reshard.h"
#include "core/error.h"
#include "core/mesh_shape.h"
#include "core/spec.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (true) {
    const auto end = text.find('\n');
    lines.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return lines;
}

// Space-separated dimensions, each 0..4096, at most 4 of them; false otherwise.
bool parse_dims(std::string_view text, tessera::Shape& shape) {
  while (!text.empty()) {
    if (text.front() == ' ') {
      text.remove_prefix(1);
      continue;
    }
    std::int64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || value < 0 || value > 4096 || shape.size() == 4) return false;
    shape.push_back(value);
    text.remove_prefix(static_cast<std::size_t>(end - text.data()));
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 512) return 0;
  const auto lines = split_lines(tessera::fuzz::as_text(data, size));
  if (lines.size() < 4) return 0;
  tessera::Shape shape;
  if (!parse_dims(lines[3], shape)) return 0;
  try {
    const tessera::MeshShape mesh = tessera::MeshShape::parse(lines[0]);
    if (mesh.size() > 64) return 0;
    const tessera::Spec source = tessera::parse_spec(lines[1]);
    const tessera::Spec target = tessera::parse_spec(lines[2]);
    const tessera::DType dtype = lines.size() > 4 && lines[4] == "f64" ? tessera::DType::f64 : tessera::DType::f32;
    const tessera::ReshardPlan plan = tessera::plan_reshard(mesh, source, target, shape, dtype);
    if (plan.bytes_per_rank() < 0) std::abort();
    (void)plan.to_string();
    (void)tessera::table_bytes(mesh, source, target, shape, dtype);
  } catch (const tessera::Error&) {
  }
  return 0;
}
