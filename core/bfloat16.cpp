// Bulk f32 <-> bf16 conversions: branch-free loops that vectorize. Eigen's packet conversion is
// not used on purpose: on CPUs with AVX512-BF16 it compiles to VCVTNEPS2BF16, which flushes
// subnormals to zero, so the bits would depend on the machine (and differ from the scalar rule).
#include "core/bfloat16.h"

#include <cstring>

namespace tessera {

void convert_f32_to_bf16(const float* in, bfloat16* out, std::size_t n) {
  auto* bits = reinterpret_cast<std::uint16_t*>(out);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t u;
    std::memcpy(&u, in + i, 4);
    const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const std::uint32_t nan = (u & 0x80000000u) ? 0xffc0u : 0x7fc0u;
    bits[i] = static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
}

void convert_bf16_to_f32(const bfloat16* in, float* out, std::size_t n) {
  const auto* bits = reinterpret_cast<const std::uint16_t*>(in);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(bits[i]) << 16;
    std::memcpy(out + i, &u, 4);
  }
}

}  // namespace tessera
