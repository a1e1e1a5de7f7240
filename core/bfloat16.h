// bf16 ("brain float"), the storage type of DType::bf16: the upper half of an IEEE f32 (sign,
// 8 exponent bits, 7 mantissa bits), so it has f32's range with 2-3 significant digits. tessera
// stores and communicates bf16 and computes in f32: kernels convert a block to f32, compute and
// round the result once (core/kernels.h). This header holds only the 2-byte type and its scalar
// conversions, without Eigen; the bits are those of Eigen::bfloat16 (tests/core/bf16_test.cpp
// checks every rounding case against it).
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace tessera {

// f32 -> bf16 bits, rounded to nearest, ties to even. A NaN becomes the quiet NaN 0x7FC0 (0xFFC0
// when negative), as Eigen does, so that dropping the low bits never turns a NaN into infinity.
constexpr std::uint16_t bf16_bits_from_f32(float value) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u & 0x80000000u) ? 0xffc0u : 0x7fc0u;
  const std::uint32_t lsb = (u >> 16) & 1u;
  return static_cast<std::uint16_t>((u + 0x7fffu + lsb) >> 16);
}

// f64 -> bf16 bits with a single rounding (nearest, ties to even): the double is first rounded
// to f32 *to odd* (truncate, then set the last bit when inexact), which keeps the information a
// tie needs, so rounding that f32 to bf16 gives the correctly rounded result.
inline std::uint16_t bf16_bits_from_f64(double value) {
  float f = static_cast<float>(value);
  if (std::isfinite(f) && static_cast<double>(f) != value) {
    std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    if (std::fabs(static_cast<double>(f)) > std::fabs(value)) u -= 1;  // rounded away from zero: step back
    f = std::bit_cast<float>(u | 1u);
  }
  return bf16_bits_from_f32(f);
}

constexpr float f32_from_bf16_bits(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

// The element type of DType::bf16. Conversion to float is implicit and exact; construction from
// a number is explicit and rounds (nearest even), so an expression computed in float must be
// rounded on purpose: `bfloat16(a + b)`.
struct bfloat16 {
  std::uint16_t bits = 0;

  constexpr bfloat16() = default;
  template <class T>
    requires std::is_arithmetic_v<T>
  explicit bfloat16(T value) {
    if constexpr (std::is_same_v<T, float> || (std::is_integral_v<T> && sizeof(T) <= 2)) {
      bits = bf16_bits_from_f32(static_cast<float>(value));
    } else {
      bits = bf16_bits_from_f64(static_cast<double>(value));
    }
  }
  static constexpr bfloat16 from_bits(std::uint16_t b) {
    bfloat16 out;
    out.bits = b;
    return out;
  }
  constexpr operator float() const { return f32_from_bf16_bits(bits); }

  // In-place arithmetic: computed in f32, rounded once.
  bfloat16& operator+=(bfloat16 other) { return *this = bfloat16(float(*this) + float(other)); }
  bfloat16& operator-=(bfloat16 other) { return *this = bfloat16(float(*this) - float(other)); }
  bfloat16& operator*=(bfloat16 other) { return *this = bfloat16(float(*this) * float(other)); }
  bfloat16& operator/=(bfloat16 other) { return *this = bfloat16(float(*this) / float(other)); }
};
static_assert(sizeof(bfloat16) == 2 && std::is_trivially_copyable_v<bfloat16>);

// Bulk conversions of n contiguous elements (loops the compiler vectorizes; the same rounding as
// the scalar functions above on every CPU).
void convert_f32_to_bf16(const float* in, bfloat16* out, std::size_t n);
void convert_bf16_to_f32(const bfloat16* in, float* out, std::size_t n);

}  // namespace tessera
