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

#if defined(__AVX512BW__) || defined(__AVX2__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace tessera::checkpoint_io {

namespace {

constexpr std::uint64_t modulus = 65535;

inline std::uint32_t word(const unsigned char* p) { return (static_cast<std::uint32_t>(p[0]) << 8) | p[1]; }

// A block is `steps` steps of `lanes` words, one lane per word position l: lane l sums its words
// (a[l]) and their running sums (b[l]), so that over the block the sum of k w[lanes k + l] is
// steps a[l] - b[l]. b <= steps (steps + 1) / 2 * 65535 < 2^32.
constexpr std::size_t steps = 256;

// The vector versions widen each 16-byte group of 8 words to 32 bits in two halves: element e of
// the low half holds word e % 4 of group e / 4, element e of the high half its word 4 + e % 4.
// SSE2 takes the halves by unpacking against zero after swapping each word's bytes; AVX2 and
// AVX-512 with one byte shuffle each, which also swaps the bytes (0x80: a zero byte).
#if defined(__AVX512BW__) || defined(__AVX2__)
constexpr std::size_t lane_of(std::size_t e, std::size_t half) { return 8 * (e / 4) + 4 * half + e % 4; }
// The shuffles' controls for every 16-byte group of a 64-byte vector (AVX2 loads the first 32).
// Loaded whole rather than broadcast from 16 bytes: GCC 12's _mm512_broadcast_i32x4 warns of
// an uninitialized operand.
#define TESSERA_WIDEN_LOW 1, 0, 0x80, 0x80, 3, 2, 0x80, 0x80, 5, 4, 0x80, 0x80, 7, 6, 0x80, 0x80
#define TESSERA_WIDEN_HIGH 9, 8, 0x80, 0x80, 11, 10, 0x80, 0x80, 13, 12, 0x80, 0x80, 15, 14, 0x80, 0x80
alignas(64) constexpr unsigned char widen_low[64] = {TESSERA_WIDEN_LOW, TESSERA_WIDEN_LOW, TESSERA_WIDEN_LOW,
                                                     TESSERA_WIDEN_LOW};
alignas(64) constexpr unsigned char widen_high[64] = {TESSERA_WIDEN_HIGH, TESSERA_WIDEN_HIGH, TESSERA_WIDEN_HIGH,
                                                      TESSERA_WIDEN_HIGH};
#undef TESSERA_WIDEN_LOW
#undef TESSERA_WIDEN_HIGH
#endif

#if defined(__AVX512BW__) || defined(__AVX2__)
// One step's operations on the target's widest vectors.
#if defined(__AVX512BW__)
struct Wide {
  using V = __m512i;
  static V load(const void* p) { return _mm512_load_si512(p); }
  static V load_unaligned(const void* p) { return _mm512_loadu_si512(p); }
  static V zero() { return _mm512_setzero_si512(); }
  static V add(V x, V y) { return _mm512_add_epi32(x, y); }
  static V shuffle(V x, V control) { return _mm512_shuffle_epi8(x, control); }
  static void store(void* p, V x) { _mm512_store_si512(p, x); }
};
#else
struct Wide {
  using V = __m256i;
  static V load(const void* p) { return _mm256_load_si256(static_cast<const V*>(p)); }
  static V load_unaligned(const void* p) { return _mm256_loadu_si256(static_cast<const V*>(p)); }
  static V zero() { return _mm256_setzero_si256(); }
  static V add(V x, V y) { return _mm256_add_epi32(x, y); }
  static V shuffle(V x, V control) { return _mm256_shuffle_epi8(x, control); }
  static void store(void* p, V x) { _mm256_store_si256(static_cast<V*>(p), x); }
};
#endif
constexpr std::size_t lanes = sizeof(Wide::V) / 2;  // words a step: 32 with AVX-512, 16 with AVX2
void block_sums(const unsigned char* q, std::uint32_t (&a)[lanes], std::uint32_t (&b)[lanes]) {
  using V = Wide::V;
  const V low = Wide::load(widen_low);
  const V high = Wide::load(widen_high);
  V a_low = Wide::zero(), a_high = a_low, b_low = a_low, b_high = a_low;
  for (std::size_t k = 0; k < steps; ++k) {
    const V raw = Wide::load_unaligned(q + 2 * lanes * k);
    a_low = Wide::add(a_low, Wide::shuffle(raw, low));
    a_high = Wide::add(a_high, Wide::shuffle(raw, high));
    b_low = Wide::add(b_low, a_low);
    b_high = Wide::add(b_high, a_high);
  }
  constexpr std::size_t half_lanes = lanes / 2;
  alignas(64) std::uint32_t out[4][half_lanes];
  Wide::store(out[0], a_low);
  Wide::store(out[1], a_high);
  Wide::store(out[2], b_low);
  Wide::store(out[3], b_high);
  for (std::size_t e = 0; e < half_lanes; ++e) {
    for (std::size_t half = 0; half < 2; ++half) {
      a[lane_of(e, half)] = out[half][e];
      b[lane_of(e, half)] = out[2 + half][e];
    }
  }
}
#elif defined(__SSE2__)
constexpr std::size_t lanes = 8;  // 16 bytes a step
void block_sums(const unsigned char* q, std::uint32_t (&a)[lanes], std::uint32_t (&b)[lanes]) {
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
  // One group: the halves are lanes 0-3 and 4-7 (lane_of).
  _mm_storeu_si128(reinterpret_cast<__m128i*>(a), a_low);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(a + 4), a_high);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(b), b_low);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(b + 4), b_high);
}
#else
constexpr std::size_t lanes = 8;
void block_sums(const unsigned char* q, std::uint32_t (&a)[lanes], std::uint32_t (&b)[lanes]) {
  for (std::size_t k = 0; k < steps; ++k) {
    for (std::size_t l = 0; l < lanes; ++l) {
      a[l] += word(q + 2 * (lanes * k + l));
      b[l] += a[l];
    }
  }
}
#endif

}  // namespace

std::uint32_t fletcher32(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  const std::size_t full_words = bytes / 2;
  const std::size_t words = full_words + bytes % 2;
  std::uint64_t s = 0;  // S mod 65535
  std::uint64_t t = 0;  // T mod 65535
  bool any = false;
  constexpr std::size_t block = lanes * steps;
  std::size_t i = 0;
  for (; i + block <= full_words; i += block) {
    std::uint32_t a[lanes] = {};
    std::uint32_t b[lanes] = {};
    block_sums(p + 2 * i, a, b);
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
