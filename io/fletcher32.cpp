// Fletcher32 as HDF5 computes it, in closed form so the loop vectorizes.
//
// HDF5 keeps two sums over the 16-bit words w_0 .. w_{n-1}: sum1 += w_i; sum2 += sum1, folded
// ((x & 0xffff) + (x >> 16)) every 360 words and twice at the end. A fold keeps a value's
// residue modulo 65535 and keeps it positive, and the bounds of HDF5's schedule leave both sums
// at most 0xffff. So its result is fixed by the residues alone:
//   sum1 = S mod 65535,            S = sum of w_i
//   sum2 = (n S - T) mod 65535,    T = sum of i w_i   (since sum2 = sum of (n - i) w_i)
// each written as the representative in 1 .. 65535 when some word is not zero (a positive
// value <= 0xffff), and 0 when all are.
#include "io/fletcher32.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace tessera::checkpoint_io {

namespace {

constexpr std::uint64_t modulus = 65535;

inline std::uint32_t word(const unsigned char* p) { return (static_cast<std::uint32_t>(p[0]) << 8) | p[1]; }

}  // namespace

std::uint32_t fletcher32(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  const std::size_t full_words = bytes / 2;
  const std::size_t words = full_words + bytes % 2;
  std::uint64_t s = 0;  // S mod 65535
  std::uint64_t t = 0;  // T mod 65535
  bool any = false;
  // Blocks of 256 steps of 8 words, one lane per word position: lane l sums its words (a) and
  // their running sums (b), so that with K steps, sum over the block of k w[8k + l] is K a - b.
  constexpr std::size_t lanes = 8;
  constexpr std::size_t steps = 256;  // b <= steps (steps + 1) / 2 * 65535 < 2^32
  constexpr std::size_t block = lanes * steps;
  std::size_t i = 0;
  for (; i + block <= full_words; i += block) {
    const unsigned char* q = p + 2 * i;
    std::uint32_t a[lanes] = {};
    std::uint32_t b[lanes] = {};
#if defined(__SSE2__)
    const __m128i zero = _mm_setzero_si128();
    __m128i a_low = zero, a_high = zero, b_low = zero, b_high = zero;
    for (std::size_t k = 0; k < steps; ++k) {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 2 * lanes * k));
      const __m128i words16 = _mm_or_si128(_mm_slli_epi16(raw, 8), _mm_srli_epi16(raw, 8));  // big-endian words
      a_low = _mm_add_epi32(a_low, _mm_unpacklo_epi16(words16, zero));
      a_high = _mm_add_epi32(a_high, _mm_unpackhi_epi16(words16, zero));
      b_low = _mm_add_epi32(b_low, a_low);
      b_high = _mm_add_epi32(b_high, a_high);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(a), a_low);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(a + 4), a_high);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b), b_low);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b + 4), b_high);
#else
    for (std::size_t k = 0; k < steps; ++k) {
      for (std::size_t l = 0; l < lanes; ++l) {
        a[l] += word(q + 2 * (lanes * k + l));
        b[l] += a[l];
      }
    }
#endif
    std::uint64_t block_s = 0;
    std::uint64_t block_t = 0;  // sum of j w_j, j the word's index in the block
    for (std::size_t l = 0; l < lanes; ++l) {
      block_s += a[l];
      block_t += lanes * (std::uint64_t{steps} * a[l] - b[l]) + l * std::uint64_t{a[l]};
    }
    any = any || block_s != 0;
    t = (t + (i % modulus) * (block_s % modulus) + block_t) % modulus;
    s = (s + block_s) % modulus;
  }
  for (; i < words; ++i) {
    const std::uint32_t w = i < full_words ? word(p + 2 * i) : static_cast<std::uint32_t>(p[2 * i]) << 8;
    any = any || w != 0;
    t = (t + (i % modulus) * w) % modulus;
    s = (s + w) % modulus;
  }
  if (!any) return 0;
  const std::uint64_t sum1 = s;
  const std::uint64_t sum2 = ((words % modulus) * s % modulus + modulus - t) % modulus;
  auto representative = [](std::uint64_t r) { return static_cast<std::uint32_t>(r == 0 ? modulus : r); };
  return (representative(sum2) << 16) | representative(sum1);
}

}  // namespace tessera::checkpoint_io
