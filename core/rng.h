// The counter-based random number generator behind sharding-invariant init (DESIGN semantics 5).
// Every draw is a pure function of (seed, stream, global element index[, attempt]): never of the
// rank, the mesh or the order of calls, so each rank can compute exactly its own block.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace tessera {

// Philox4x32-10 (Salmon et al., SC'11) with the Random123 constants: one call maps a 128-bit
// counter and a 64-bit key to 128 random bits.
std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> counter, std::array<std::uint32_t, 2> key);

// FNV-1a 64 of a parameter path such as "MLP_0/DotReluDot_0/W1": the stream of that parameter.
std::uint64_t stream_id(std::string_view path);

// Which random sequence a draw comes from: the user's seed and the stream of one parameter
// (or data set). Two keys that differ in either field give unrelated values.
struct RngKey {
  std::uint64_t seed = 0;
  std::uint64_t stream = 0;
  bool operator==(const RngKey&) const = default;
};

inline RngKey rng_key(std::uint64_t seed, std::string_view path) { return {seed, stream_id(path)}; }

// Element indices must stay below 2^56: the top 8 bits of counter word 1 hold the attempt.
inline constexpr std::uint64_t max_rng_index = std::uint64_t{1} << 56;
// Truncated normal: each attempt yields two candidates (the cos and sin branches of one
// Box-Muller pair), so 32 attempts try 64 candidates before clamping.
inline constexpr std::uint32_t truncated_normal_attempts = 32;

// The 128 random bits of (key, index, attempt). Mapping onto Philox (injective, so distinct
// (seed, stream, index, attempt) never share a (key, counter) pair):
//   key     = (seed lo32, seed hi32)
//   counter = (index lo32, index bits 32..55 | attempt << 24, stream lo32, stream hi32)
// Throws ShapeError when index >= max_rng_index or attempt > 255.
std::array<std::uint32_t, 4> random_bits(RngKey key, std::uint64_t index, std::uint32_t attempt = 0);

// Uniform in [0, 1) from the top 24 bits of word 0: every float of the form k / 2^24.
float uniform_f32(RngKey key, std::uint64_t index);
// Uniform in [0, 1) from the top 53 bits of (word 1 : word 0): every double of the form k / 2^53.
double uniform_f64(RngKey key, std::uint64_t index);
// Standard normal by Box-Muller in double precision from one Philox call: u1 in (0, 1] from words
// (1 : 0) so log(u1) is finite, u2 in [0, 1) from words (3 : 2); returns sqrt(-2 ln u1) cos(2 pi u2).
double normal(RngKey key, std::uint64_t index);
// A standard normal conditioned on [lo, hi], by rejection. Attempt k (k < truncated_normal_attempts)
// draws random_bits(key, index, k) and tries its cos candidate, then its sin candidate; the first
// inside [lo, hi] is returned. If all 64 miss (probability 0.0455^64 for [-2, 2]; only likely for
// ranges far in a tail), the last candidate is clamped to [lo, hi]. Throws SpecError unless lo < hi.
double truncated_normal(RngKey key, std::uint64_t index, double lo = -2.0, double hi = 2.0);

}  // namespace tessera
