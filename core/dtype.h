// Element types of tensors. bf16 is a storage and communication type (2 bytes): kernels compute
// it in f32 and round the result (core/bfloat16.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/bfloat16.h"

namespace tessera {

enum class DType : std::uint8_t { f32, f64, i32, bf16 };

std::size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);
// Parses "f32", "f64", "i32" or "bf16"; throws SpecError otherwise.
DType parse_dtype(std::string_view name);
// f32, f64 or bf16.
constexpr bool is_floating(DType dtype) { return dtype != DType::i32; }

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct dtype_of<bfloat16> {
  static constexpr DType value = DType::bf16;
};
template <class T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;

// Calls f(T{}) with T the C++ type of dtype (bfloat16 for bf16: arithmetic on it converts to
// float, so generic code computes in f32 and rounds where it stores).
template <class F>
decltype(auto) dispatch_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      return f(float{});
    case DType::f64:
      return f(double{});
    case DType::i32:
      return f(std::int32_t{});
    case DType::bf16:
      return f(bfloat16{});
  }
  return f(float{});
}

}  // namespace tessera
