// Initializers: fans, the per-element value, block filling and the text form. Every path that
// produces a value goes through Sampler::value, which is why a block equals the matching part of
// the full tensor bit for bit.
#include "core/init.h"

#include <charconv>
#include <cmath>
#include <string>

#include "core/error.h"
#include "core/text.h"

namespace tessera {
namespace {

// What one element needs once the fans are known: a draw and the factor it is multiplied by.
enum class Draw : std::uint8_t { constant, normal, truncated_normal, uniform_unit, uniform_symmetric };

struct Sampler {
  Draw draw = Draw::constant;
  double factor = 0.0;  // the constant itself for Draw::constant

  double value(RngKey key, std::uint64_t index) const {
    switch (draw) {
      case Draw::constant:
        return factor;
      case Draw::normal:
        return factor * normal(key, index);
      case Draw::truncated_normal:
        return factor * truncated_normal(key, index);
      case Draw::uniform_unit:
        return factor * uniform_f64(key, index);
      case Draw::uniform_symmetric:
        // 2u - 1 is exact for u = k / 2^53, so no rounding depends on how it is compiled.
        return factor * (2.0 * uniform_f64(key, index) - 1.0);
    }
    return 0.0;
  }
};

Sampler make_sampler(const Initializer& init, const Shape& global_shape) {
  // Validated for every kind so that a bad batch_axes fails the same way whatever the kind.
  Fans fans = compute_fans(global_shape, init.batch_axes);
  switch (init.kind) {
    case InitKind::constant:
      return {Draw::constant, init.param};
    case InitKind::normal:
      return {Draw::normal, init.param};
    case InitKind::uniform:
      return {Draw::uniform_unit, init.param};
    case InitKind::truncated_normal:
      return {Draw::truncated_normal, init.param};
    case InitKind::variance_scaling:
      break;
  }
  double fan = init.mode == FanMode::fan_in    ? fans.fan_in
               : init.mode == FanMode::fan_out ? fans.fan_out
                                               : (fans.fan_in + fans.fan_out) / 2.0;
  double variance = init.param / fan;
  switch (init.distribution) {
    case InitDistribution::truncated_normal:
      return {Draw::truncated_normal, std::sqrt(variance) / truncated_normal_stddev_2sigma};
    case InitDistribution::normal:
      return {Draw::normal, std::sqrt(variance)};
    case InitDistribution::uniform:
      return {Draw::uniform_symmetric, std::sqrt(3.0 * variance)};
  }
  return {};
}

std::string_view mode_name(FanMode mode) {
  switch (mode) {
    case FanMode::fan_in:
      return "fan_in";
    case FanMode::fan_out:
      return "fan_out";
    case FanMode::fan_avg:
      return "fan_avg";
  }
  return "?";
}

std::string_view distribution_name(InitDistribution distribution) {
  switch (distribution) {
    case InitDistribution::truncated_normal:
      return "truncated_normal";
    case InitDistribution::normal:
      return "normal";
    case InitDistribution::uniform:
      return "uniform";
  }
  return "?";
}

std::string format_number(double x) {
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, x);
  return std::string(buffer, result.ptr);
}

// Parsing state: the original text for messages, the name and the arguments.
struct Call {
  std::string text;
  std::string_view name;
  std::vector<std::string_view> args;
  int batch_axes = 0;

  [[noreturn]] void fail(const std::string& why) const {
    throw SpecError("initializer '" + text + "': " + why);
  }

  double number(std::string_view arg) const {
    double x = 0.0;
    auto result = std::from_chars(arg.data(), arg.data() + arg.size(), x);
    if (arg.empty() || result.ec != std::errc() || result.ptr != arg.data() + arg.size()) {
      fail("'" + std::string(arg) + "' is not a number");
    }
    if (!std::isfinite(x)) fail("'" + std::string(arg) + "' is not a finite number");
    return x;
  }

  void expect_args(std::size_t low, std::size_t high) const {
    if (args.size() >= low && args.size() <= high) return;
    std::string expected = low == high ? (low == 0   ? std::string("no arguments")
                                          : low == 1 ? std::string("1 argument")
                                                     : std::to_string(low) + " arguments")
                                       : std::to_string(low) + " or " + std::to_string(high) + " arguments";
    fail(std::string(name) + " takes " + expected + ", got " + std::to_string(args.size()));
  }
};

Call split_call(std::string_view text) {
  Call call{std::string(text), {}, {}, 0};
  std::string_view body = trim(text);
  std::size_t open = body.find('(');
  if (open == std::string_view::npos) {
    if (body.find(')') != std::string_view::npos) call.fail("')' without '('");
    call.name = body;
    return call;
  }
  if (body.back() != ')') call.fail("missing ')' at the end");
  call.name = trim(body.substr(0, open));
  std::string_view inside = body.substr(open + 1, body.size() - open - 2);
  if (inside.find_first_of("()") != std::string_view::npos) call.fail("unexpected parenthesis inside the arguments");
  if (trim(inside).empty()) return call;
  for (;;) {
    std::size_t comma = inside.find(',');
    call.args.push_back(trim(inside.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    inside.remove_prefix(comma + 1);
  }
  for (std::size_t i = 0; i < call.args.size(); ++i) {
    std::string_view arg = call.args[i];
    std::size_t equals = arg.find('=');
    if (arg.empty()) call.fail("empty argument " + std::to_string(i + 1));
    if (equals == std::string_view::npos) continue;
    std::string_view keyword = trim(arg.substr(0, equals));
    if (keyword != "batch_axes") call.fail("unknown keyword '" + std::string(keyword) + "' (expected batch_axes)");
    if (i + 1 != call.args.size()) call.fail("batch_axes must be the last argument");
    std::string_view value = trim(arg.substr(equals + 1));
    auto result = std::from_chars(value.data(), value.data() + value.size(), call.batch_axes);
    if (value.empty() || result.ec != std::errc() || result.ptr != value.data() + value.size() ||
        call.batch_axes < 0) {
      call.fail("batch_axes '" + std::string(value) + "' is not a non-negative integer");
    }
    call.args.pop_back();
  }
  return call;
}

FanMode parse_mode(const Call& call, std::string_view text) {
  if (text == "fan_in") return FanMode::fan_in;
  if (text == "fan_out") return FanMode::fan_out;
  if (text == "fan_avg") return FanMode::fan_avg;
  call.fail("unknown mode '" + std::string(text) + "' (expected fan_in, fan_out or fan_avg)");
}

InitDistribution parse_distribution(const Call& call, std::string_view text) {
  if (text == "truncated_normal") return InitDistribution::truncated_normal;
  if (text == "normal") return InitDistribution::normal;
  if (text == "uniform") return InitDistribution::uniform;
  call.fail("unknown distribution '" + std::string(text) + "' (expected truncated_normal, normal or uniform)");
}

Initializer parse_call(const Call& call) {
  namespace in = initializers;
  const std::string_view name = call.name;
  struct Preset {
    std::string_view name;
    Initializer (*make)();
  };
  static constexpr Preset presets[] = {
      {"zeros", in::zeros},
      {"ones", in::ones},
      {"lecun_normal", in::lecun_normal},
      {"lecun_uniform", in::lecun_uniform},
      {"xavier_normal", in::xavier_normal},
      {"xavier_uniform", in::xavier_uniform},
      {"glorot_normal", in::glorot_normal},
      {"glorot_uniform", in::glorot_uniform},
      {"he_normal", in::he_normal},
      {"he_uniform", in::he_uniform},
  };
  for (const Preset& preset : presets) {
    if (name == preset.name) {
      call.expect_args(0, 0);
      return preset.make();
    }
  }
  if (name == "constant") {
    call.expect_args(1, 1);
    return in::constant(call.number(call.args[0]));
  }
  if (name == "normal" || name == "truncated_normal") {
    call.expect_args(0, 1);
    double stddev = call.args.empty() ? 0.01 : call.number(call.args[0]);
    if (stddev < 0.0) call.fail("stddev must be >= 0");
    return name == "normal" ? in::normal(stddev) : in::truncated_normal(stddev);
  }
  if (name == "uniform") {
    call.expect_args(0, 1);
    return in::uniform(call.args.empty() ? 0.01 : call.number(call.args[0]));
  }
  if (name == "variance_scaling") {
    call.expect_args(3, 3);
    double scale = call.number(call.args[0]);
    if (!(scale > 0.0)) call.fail("scale must be > 0");
    return in::variance_scaling(scale, parse_mode(call, call.args[1]), parse_distribution(call, call.args[2]));
  }
  throw SpecError("unknown initializer '" + call.text +
                  "' (expected zeros, ones, constant(value), normal(stddev), uniform(scale), "
                  "truncated_normal(stddev), lecun_normal, lecun_uniform, xavier_normal, xavier_uniform, "
                  "glorot_normal, glorot_uniform, he_normal, he_uniform or "
                  "variance_scaling(scale, mode, distribution))");
}

}  // namespace

Initializer Initializer::with_batch_axes(int n_leading) const {
  if (n_leading < 0) throw SpecError("initializer: batch_axes " + std::to_string(n_leading) + " is negative");
  Initializer copy = *this;
  copy.batch_axes = n_leading;
  return copy;
}

namespace initializers {
// + 0.0 turns -0 into +0, so constant(-0.0) == zeros() prints and parses back the same.
Initializer constant(double value) { return {InitKind::constant, value + 0.0}; }
Initializer zeros() { return constant(0.0); }
Initializer ones() { return constant(1.0); }
Initializer normal(double stddev) { return {InitKind::normal, stddev}; }
Initializer uniform(double scale) { return {InitKind::uniform, scale}; }
Initializer truncated_normal(double stddev) { return {InitKind::truncated_normal, stddev}; }
Initializer variance_scaling(double scale, FanMode mode, InitDistribution distribution) {
  return {InitKind::variance_scaling, scale, mode, distribution};
}
Initializer lecun_normal() { return variance_scaling(1.0, FanMode::fan_in, InitDistribution::truncated_normal); }
Initializer lecun_uniform() { return variance_scaling(1.0, FanMode::fan_in, InitDistribution::uniform); }
Initializer xavier_normal() { return variance_scaling(1.0, FanMode::fan_avg, InitDistribution::truncated_normal); }
Initializer xavier_uniform() { return variance_scaling(1.0, FanMode::fan_avg, InitDistribution::uniform); }
Initializer glorot_normal() { return xavier_normal(); }
Initializer glorot_uniform() { return xavier_uniform(); }
Initializer he_normal() { return variance_scaling(2.0, FanMode::fan_in, InitDistribution::truncated_normal); }
Initializer he_uniform() { return variance_scaling(2.0, FanMode::fan_in, InitDistribution::uniform); }
}  // namespace initializers

Fans compute_fans(const Shape& shape, int batch_axes) {
  const int ndim = static_cast<int>(shape.size());
  if (batch_axes < 0 || batch_axes > ndim) {
    throw SpecError("initializer: batch_axes " + std::to_string(batch_axes) + " does not fit shape " +
                    shape_to_string(shape));
  }
  const auto first = static_cast<std::size_t>(batch_axes);
  const std::size_t remaining = shape.size() - first;
  if (remaining == 0) return {1.0, 1.0};
  const auto out_extent = static_cast<double>(shape.back());
  if (remaining == 1) return {out_extent, out_extent};
  const auto in_extent = static_cast<double>(shape[shape.size() - 2]);
  // A product of the other dimensions rather than jax's prod(shape) / in / out / batch: the same
  // number, without dividing by a zero extent.
  double receptive = 1.0;
  for (std::size_t d = first; d + 2 < shape.size(); ++d) receptive *= static_cast<double>(shape[d]);
  return {in_extent * receptive, out_extent * receptive};
}

double init_value(const Initializer& init, RngKey key, const Shape& global_shape, std::uint64_t flat_global_index) {
  std::int64_t count = numel(global_shape);
  if (flat_global_index >= static_cast<std::uint64_t>(count)) {
    throw ShapeError("init_value: flat index " + std::to_string(flat_global_index) + " is outside shape " +
                     shape_to_string(global_shape) + " (" + std::to_string(count) + " elements)");
  }
  return make_sampler(init, global_shape).value(key, flat_global_index);
}

Tensor init_block(const Initializer& init, RngKey key, const Shape& global_shape,
                  const std::vector<std::int64_t>& block_offsets, const Shape& block_shape, DType dtype) {
  const std::size_t rank = global_shape.size();
  if (block_offsets.size() != rank || block_shape.size() != rank) {
    throw ShapeError("init_block: offsets of rank " + std::to_string(block_offsets.size()) + " and block " +
                     shape_to_string(block_shape) + " do not match global shape " + shape_to_string(global_shape));
  }
  for (std::size_t d = 0; d < rank; ++d) {
    if (block_offsets[d] < 0 || block_shape[d] < 0 || block_offsets[d] + block_shape[d] > global_shape[d]) {
      throw ShapeError("init_block: block " + shape_to_string(block_shape) + " at offsets " +
                       shape_to_string(block_offsets) + " leaves global shape " + shape_to_string(global_shape) +
                       " in dimension " + std::to_string(d));
    }
  }
  const Sampler sampler = make_sampler(init, global_shape);
  if (dtype == DType::i32 && sampler.draw != Draw::constant) {
    throw DTypeError("init_block: initializer '" + to_string(init) + "' draws random reals; dtype i32 is not supported");
  }
  Tensor out(block_shape, dtype);
  if (out.numel() == 0) return out;

  const std::vector<std::int64_t> strides = row_major_strides(global_shape);
  const std::int64_t row_length = rank == 0 ? 1 : block_shape[rank - 1];
  const std::int64_t row_count = out.numel() / row_length;
  const std::size_t outer = rank == 0 ? 0 : rank - 1;
  std::vector<std::int64_t> position(outer, 0);  // index within the block over all but the last dim
  dispatch_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* dst = out.data<T>();
    for (std::int64_t row = 0; row < row_count; ++row) {
      std::int64_t start = rank == 0 ? 0 : block_offsets[rank - 1];
      for (std::size_t d = 0; d < outer; ++d) start += (block_offsets[d] + position[d]) * strides[d];
      for (std::int64_t j = 0; j < row_length; ++j) {
        *dst++ = static_cast<T>(sampler.value(key, static_cast<std::uint64_t>(start + j)));
      }
      for (std::size_t d = outer; d-- > 0;) {
        if (++position[d] < block_shape[d]) break;
        position[d] = 0;
      }
    }
  });
  return out;
}

Tensor init_full(const Initializer& init, RngKey key, const Shape& global_shape, DType dtype) {
  return init_block(init, key, global_shape, std::vector<std::int64_t>(global_shape.size(), 0), global_shape, dtype);
}

Initializer parse_initializer(std::string_view text) {
  Call call = split_call(text);
  return parse_call(call).with_batch_axes(call.batch_axes);
}

std::string to_string(const Initializer& init) {
  namespace in = initializers;
  std::string head;
  std::string args;
  Initializer base = init.with_batch_axes(0);
  if (base == in::zeros()) {
    head = "zeros";
  } else if (base == in::ones()) {
    head = "ones";
  } else if (base == in::lecun_normal()) {
    head = "lecun_normal";
  } else if (base == in::lecun_uniform()) {
    head = "lecun_uniform";
  } else if (base == in::xavier_normal()) {
    head = "xavier_normal";
  } else if (base == in::xavier_uniform()) {
    head = "xavier_uniform";
  } else if (base == in::he_normal()) {
    head = "he_normal";
  } else if (base == in::he_uniform()) {
    head = "he_uniform";
  } else {
    switch (init.kind) {
      case InitKind::constant:
        head = "constant";
        break;
      case InitKind::normal:
        head = "normal";
        break;
      case InitKind::uniform:
        head = "uniform";
        break;
      case InitKind::truncated_normal:
        head = "truncated_normal";
        break;
      case InitKind::variance_scaling:
        head = "variance_scaling";
        break;
    }
    args = format_number(init.param);
    if (init.kind == InitKind::variance_scaling) {
      args += ", " + std::string(mode_name(init.mode)) + ", " + std::string(distribution_name(init.distribution));
    }
  }
  if (init.batch_axes != 0) args += (args.empty() ? "" : ", ") + std::string("batch_axes=") + std::to_string(init.batch_axes);
  return args.empty() ? head : head + "(" + args + ")";
}

}  // namespace tessera
