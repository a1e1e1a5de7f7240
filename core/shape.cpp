// Shapes: element counts (overflow-checked), their text form and row-major strides.
#include "core/shape.h"

#include <sstream>

#include "core/checked.h"

namespace tessera {

std::int64_t numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n = checked_mul<std::int64_t>(n, d, "element count");
  return n;
}

std::string shape_to_string(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

std::vector<std::int64_t> row_major_strides(const Shape& shape) {
  std::vector<std::int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

}  // namespace tessera
