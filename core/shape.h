// Shapes of tensors: one extent per dimension, row-major.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

using Shape = std::vector<std::int64_t>;

std::int64_t numel(const Shape& shape);
// "[8, 1024]"
std::string shape_to_string(const Shape& shape);
// Row-major strides in elements.
std::vector<std::int64_t> row_major_strides(const Shape& shape);

}  // namespace tessera
