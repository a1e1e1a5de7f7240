// Parameter initializers with jax.nn.initializers semantics, computed one element at a time from
// the GLOBAL shape and GLOBAL flat index, so a rank that fills only its shard gets exactly the
// values the one-rank run has there (DESIGN semantics 5).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace tessera {

enum class InitKind : std::uint8_t { constant, normal, uniform, truncated_normal, variance_scaling };
// Which fan variance_scaling divides by: fan_in, fan_out, or their mean.
enum class FanMode : std::uint8_t { fan_in, fan_out, fan_avg };
enum class InitDistribution : std::uint8_t { truncated_normal, normal, uniform };

// A small value type naming one initializer; build it with the functions in
// tessera::initializers or parse_initializer. Text form: see parse_initializer.
struct Initializer {
  InitKind kind = InitKind::constant;
  // constant: the value; normal, truncated_normal: the stddev; uniform: the upper end of
  // [0, scale); variance_scaling: the factor on the variance.
  double param = 0.0;
  FanMode mode = FanMode::fan_in;                                      // variance_scaling only
  InitDistribution distribution = InitDistribution::truncated_normal;  // variance_scaling only
  // Leading dimensions left out of the fans (jax's batch_axis = (0, ..., n - 1)): layer l of a
  // stacked (L, in, out) parameter then has the fans of an (in, out) one.
  int batch_axes = 0;

  bool operator==(const Initializer&) const = default;
  // The same initializer with fans computed past the first n_leading dimensions.
  Initializer with_batch_axes(int n_leading) const;
};

// Named like jax.nn.initializers; the variance_scaling presets are the jax ones.
namespace initializers {
Initializer constant(double value);
Initializer zeros();
Initializer ones();
// stddev * N(0, 1).
Initializer normal(double stddev = 0.01);
// Uniform in [0, scale).
Initializer uniform(double scale = 0.01);
// stddev * (N(0, 1) truncated to [-2, 2]); like jax, no correction for the truncation.
Initializer truncated_normal(double stddev = 0.01);
// variance = scale / fan (fan_in, fan_out or (fan_in + fan_out) / 2). truncated_normal draws
// [-2, 2]-truncated normals times sqrt(variance) / 0.87962566103423978 (the std of that
// truncation, so the result has the intended variance); normal draws sqrt(variance) * N(0, 1);
// uniform draws sqrt(3 variance) * U[-1, 1).
Initializer variance_scaling(double scale, FanMode mode, InitDistribution distribution);
Initializer lecun_normal();    // variance_scaling(1, fan_in, truncated_normal)
Initializer lecun_uniform();   // variance_scaling(1, fan_in, uniform)
Initializer xavier_normal();   // variance_scaling(1, fan_avg, truncated_normal)
Initializer xavier_uniform();  // variance_scaling(1, fan_avg, uniform)
Initializer glorot_normal();   // = xavier_normal
Initializer glorot_uniform();  // = xavier_uniform
Initializer he_normal();       // variance_scaling(2, fan_in, truncated_normal)
Initializer he_uniform();      // variance_scaling(2, fan_in, uniform)
}  // namespace initializers

// The std of a unit normal truncated to [-2, 2], as jax writes it.
inline constexpr double truncated_normal_stddev_2sigma = 0.87962566103423978;

struct Fans {
  double fan_in = 1.0;
  double fan_out = 1.0;
  bool operator==(const Fans&) const = default;
};

// jax's _compute_fans(shape, in_axis=-2, out_axis=-1, batch_axis=(0..batch_axes-1)):
// receptive = product of the dimensions that are neither batch, in nor out; fan_in =
// shape[-2] * receptive, fan_out = shape[-1] * receptive. When fewer than two dimensions remain
// after the batch axes, the Keras convention (which jax used to follow) applies: one dimension n
// gives fans (n, n), none gives (1, 1). Throws SpecError unless 0 <= batch_axes <= rank.
Fans compute_fans(const Shape& shape, int batch_axes = 0);

// The element at row-major flat index `flat_global_index` of a tensor of `global_shape`.
// Throws ShapeError when the index is outside the shape.
double init_value(const Initializer& init, RngKey key, const Shape& global_shape, std::uint64_t flat_global_index);

// The block [block_offsets, block_offsets + block_shape) of the global tensor, computed without
// the rest of it: what each rank calls for its shard. Element for element equal to
// init_value converted to dtype. Throws ShapeError when the block leaves the global shape, and
// DTypeError for a random initializer with dtype i32.
Tensor init_block(const Initializer& init, RngKey key, const Shape& global_shape,
                  const std::vector<std::int64_t>& block_offsets, const Shape& block_shape,
                  DType dtype = DType::f32);
// The whole tensor: init_block with offsets 0 and the global shape.
Tensor init_full(const Initializer& init, RngKey key, const Shape& global_shape, DType dtype = DType::f32);

// Parses the text form; whitespace around names and arguments is ignored:
//   zeros | ones | constant(v) | normal[(stddev)] | uniform[(scale)] | truncated_normal[(stddev)]
//   | lecun_normal | lecun_uniform | xavier_normal | xavier_uniform | glorot_normal
//   | glorot_uniform | he_normal | he_uniform | variance_scaling(scale, mode, distribution)
// where mode is fan_in, fan_out or fan_avg and distribution is truncated_normal, normal or
// uniform; any of them may end with a keyword argument batch_axes=n, e.g. "lecun_normal(batch_axes=1)"
// or "normal(0.02, batch_axes=1)". normal, uniform and truncated_normal alone use jax's 0.01.
// Throws SpecError quoting the text and what was expected.
Initializer parse_initializer(std::string_view text);
// The canonical text form: parse_initializer(to_string(x)) == x. Presets print by name
// (glorot_* as xavier_*), numbers in the shortest form that reads back exactly.
std::string to_string(const Initializer& init);

}  // namespace tessera
