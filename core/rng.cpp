// Philox4x32-10 and the scalar draws built on it. Conversions to floating point are exact
// (integer times a power of two) and no formula has an a*b+c a compiler could fuse, so a value is
// the same whichever loop or translation unit computes it.
#include "core/rng.h"

#include <cmath>
#include <numbers>
#include <string>

#include "core/error.h"

namespace tessera {
namespace {

constexpr std::uint32_t philox_m0 = 0xD2511F53u;
constexpr std::uint32_t philox_m1 = 0xCD9E8D57u;
constexpr std::uint32_t philox_w0 = 0x9E3779B9u;  // golden ratio
constexpr std::uint32_t philox_w1 = 0xBB67AE85u;  // sqrt(3) - 1

std::uint64_t join(std::uint32_t lo, std::uint32_t hi) { return (std::uint64_t{hi} << 32) | lo; }

// k / 2^53 for the top 53 bits of x: [0, 1).
double unit_f64(std::uint64_t x) { return static_cast<double>(x >> 11) * 0x1p-53; }
// (k + 1) / 2^53: (0, 1], so the logarithm in Box-Muller never sees 0.
double unit_f64_open_zero(std::uint64_t x) { return static_cast<double>((x >> 11) + 1) * 0x1p-53; }

struct BoxMuller {
  double radius;
  double angle;
};

BoxMuller box_muller(const std::array<std::uint32_t, 4>& bits) {
  double u1 = unit_f64_open_zero(join(bits[0], bits[1]));
  double u2 = unit_f64(join(bits[2], bits[3]));
  return {std::sqrt(-2.0 * std::log(u1)), 2.0 * std::numbers::pi * u2};
}

}  // namespace

std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> counter, std::array<std::uint32_t, 2> key) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += philox_w0;
      key[1] += philox_w1;
    }
    std::uint64_t p0 = std::uint64_t{philox_m0} * counter[0];
    std::uint64_t p1 = std::uint64_t{philox_m1} * counter[2];
    counter = {static_cast<std::uint32_t>(p1 >> 32) ^ counter[1] ^ key[0], static_cast<std::uint32_t>(p1),
               static_cast<std::uint32_t>(p0 >> 32) ^ counter[3] ^ key[1], static_cast<std::uint32_t>(p0)};
  }
  return counter;
}

std::uint64_t stream_id(std::string_view path) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (char c : path) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

std::array<std::uint32_t, 4> random_bits(RngKey key, std::uint64_t index, std::uint32_t attempt) {
  if (index >= max_rng_index) {
    throw ShapeError("rng: element index " + std::to_string(index) + " is not below 2^56");
  }
  if (attempt > 255) throw ShapeError("rng: attempt " + std::to_string(attempt) + " is above 255");
  std::array<std::uint32_t, 4> counter = {
      static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32) | (attempt << 24),
      static_cast<std::uint32_t>(key.stream), static_cast<std::uint32_t>(key.stream >> 32)};
  return philox4x32(counter, {static_cast<std::uint32_t>(key.seed), static_cast<std::uint32_t>(key.seed >> 32)});
}

float uniform_f32(RngKey key, std::uint64_t index) {
  return static_cast<float>(random_bits(key, index)[0] >> 8) * 0x1p-24f;
}

double uniform_f64(RngKey key, std::uint64_t index) {
  auto bits = random_bits(key, index);
  return unit_f64(join(bits[0], bits[1]));
}

double normal(RngKey key, std::uint64_t index) {
  BoxMuller bm = box_muller(random_bits(key, index));
  return bm.radius * std::cos(bm.angle);
}

double truncated_normal(RngKey key, std::uint64_t index, double lo, double hi) {
  if (!(lo < hi)) {
    throw SpecError("truncated_normal: bounds [" + std::to_string(lo) + ", " + std::to_string(hi) +
                    "] are empty (need lo < hi)");
  }
  double candidate = 0.0;
  for (std::uint32_t attempt = 0; attempt < truncated_normal_attempts; ++attempt) {
    BoxMuller bm = box_muller(random_bits(key, index, attempt));
    candidate = bm.radius * std::cos(bm.angle);
    if (candidate >= lo && candidate <= hi) return candidate;
    candidate = bm.radius * std::sin(bm.angle);
    if (candidate >= lo && candidate <= hi) return candidate;
  }
  return std::fmin(std::fmax(candidate, lo), hi);
}

}  // namespace tessera
