// Names and sizes of the element types.
#include "core/dtype.h"

#include "core/error.h"

namespace tessera {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::i32:
      return 4;
    case DType::bf16:
      return 2;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::i32:
      return "i32";
    case DType::bf16:
      return "bf16";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  for (DType d : {DType::f32, DType::f64, DType::i32, DType::bf16}) {
    if (dtype_name(d) == name) return d;
  }
  throw SpecError("unknown dtype '" + std::string(name) + "' (expected f32, f64, i32 or bf16)");
}

}  // namespace tessera
