// Tests of the counter-based RNG and the initializers: Philox known answers, purity of draws,
// blocks that reassemble to the full tensor bit for bit (the heart of sharding-invariant init),
// distribution statistics, jax fan rules and the initializer text form.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/init.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace tessera {
namespace {

using Words = std::array<std::uint32_t, 4>;

TEST(Philox, Random123KnownAnswers) {
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}), (Words{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (Words{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (Words{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(StreamId, IsFnv1a64) {
  EXPECT_EQ(stream_id(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(stream_id("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(stream_id("foobar"), 0x85944171f73967e8ull);
  EXPECT_NE(stream_id("MLP_0/DotReluDot_0/W1"), stream_id("MLP_0/DotReluDot_0/W2"));
  EXPECT_EQ(rng_key(7, "MLP_0/DotReluDot_0/W1"), (RngKey{7, stream_id("MLP_0/DotReluDot_0/W1")}));
}

TEST(RandomBits, MapsSeedStreamIndexAttemptOntoPhiloxWords) {
  RngKey key{0x1122334455667788ull, 0x99aabbccddeeff00ull};
  std::uint64_t index = 0x00abcdef01234567ull;
  EXPECT_EQ(random_bits(key, index, 5),
            philox4x32({0x01234567, 0x00abcdef | (5u << 24), 0xddeeff00, 0x99aabbcc}, {0x55667788, 0x11223344}));
  EXPECT_THROW(random_bits(key, max_rng_index), ShapeError);
  EXPECT_THROW(random_bits(key, 0, 256), ShapeError);
  EXPECT_NO_THROW(random_bits(key, max_rng_index - 1, 255));
}

TEST(Draws, ArePureFunctionsOfKeyAndIndex) {
  RngKey key = rng_key(42, "w");
  std::vector<double> forward, backward(1000);
  for (std::uint64_t i = 0; i < 1000; ++i) forward.push_back(normal(key, i));
  for (std::uint64_t i = 1000; i-- > 0;) backward[i] = normal(key, i);
  EXPECT_EQ(forward, backward);
  EXPECT_EQ(uniform_f32(key, 17), uniform_f32(key, 17));
  EXPECT_EQ(uniform_f64(key, 17), uniform_f64(key, 17));
  EXPECT_EQ(truncated_normal(key, 17), truncated_normal(key, 17));
}

TEST(Draws, DifferentSeedsStreamsAndIndicesDiffer) {
  std::set<double> seen;
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    for (const char* path : {"a/W1", "a/W2", "b/W1"}) {
      for (std::uint64_t i = 0; i < 64; ++i) seen.insert(normal(rng_key(seed, path), i));
    }
  }
  EXPECT_EQ(seen.size(), 4u * 3u * 64u);
  Tensor a = init_full(initializers::lecun_normal(), rng_key(0, "W"), {16, 16});
  Tensor b = init_full(initializers::lecun_normal(), rng_key(1, "W"), {16, 16});
  Tensor c = init_full(initializers::lecun_normal(), rng_key(0, "V"), {16, 16});
  EXPECT_FALSE(a.bit_equal(b));
  EXPECT_FALSE(a.bit_equal(c));
  EXPECT_TRUE(a.bit_equal(init_full(initializers::lecun_normal(), rng_key(0, "W"), {16, 16})));
}

TEST(Draws, UniformRangesAndGrid) {
  RngKey key = rng_key(3, "u");
  double sum = 0.0;
  const std::uint64_t n = 100000;
  for (std::uint64_t i = 0; i < n; ++i) {
    float f = uniform_f32(key, i);
    double d = uniform_f64(key, i);
    ASSERT_GE(f, 0.0f);
    ASSERT_LT(f, 1.0f);
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
    ASSERT_EQ(f * 16777216.0f, std::floor(f * 16777216.0f));  // a multiple of 2^-24
    sum += d;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);
}

struct Moments {
  double mean = 0.0;
  double stddev = 0.0;
  double min = 0.0;
  double max = 0.0;
};

Moments moments(const std::vector<double>& x) {
  Moments m{0.0, 0.0, x.at(0), x.at(0)};
  for (double v : x) {
    m.mean += v;
    m.min = std::min(m.min, v);
    m.max = std::max(m.max, v);
  }
  m.mean /= static_cast<double>(x.size());
  for (double v : x) m.stddev += (v - m.mean) * (v - m.mean);
  m.stddev = std::sqrt(m.stddev / static_cast<double>(x.size()));
  return m;
}

std::vector<double> as_doubles(const Tensor& t) {
  std::vector<double> out;
  for (std::int64_t i = 0; i < t.numel(); ++i) out.push_back(t.at(i));
  return out;
}

TEST(Draws, NormalAndTruncatedNormalStatistics) {
  RngKey key = rng_key(11, "stats");
  std::vector<double> z, t;
  for (std::uint64_t i = 0; i < 100000; ++i) {
    z.push_back(normal(key, i));
    t.push_back(truncated_normal(key, i));
  }
  Moments mz = moments(z);
  EXPECT_NEAR(mz.mean, 0.0, 0.02);
  EXPECT_NEAR(mz.stddev, 1.0, 0.02);
  Moments mt = moments(t);
  EXPECT_NEAR(mt.mean, 0.0, 0.02);
  EXPECT_NEAR(mt.stddev, truncated_normal_stddev_2sigma, 0.02 * truncated_normal_stddev_2sigma);
  EXPECT_GE(mt.min, -2.0);
  EXPECT_LE(mt.max, 2.0);
}

TEST(Draws, TruncatedNormalBoundsAndClamp) {
  RngKey key = rng_key(5, "tail");
  for (std::uint64_t i = 0; i < 2000; ++i) {
    double x = truncated_normal(key, i, 1.5, 2.0);
    ASSERT_GE(x, 1.5);
    ASSERT_LE(x, 2.0);
    // 64 candidates never reach [8, 9]: the documented clamp keeps the value inside anyway.
    double far = truncated_normal(key, i, 8.0, 9.0);
    ASSERT_GE(far, 8.0);
    ASSERT_LE(far, 9.0);
  }
  EXPECT_THROW(truncated_normal(key, 0, 1.0, 1.0), SpecError);
  EXPECT_THROW(truncated_normal(key, 0, 2.0, -2.0), SpecError);
}

TEST(Fans, FollowJaxComputeFans) {
  EXPECT_EQ(compute_fans({}), (Fans{1, 1}));
  EXPECT_EQ(compute_fans({7}), (Fans{7, 7}));
  EXPECT_EQ(compute_fans({3, 5}), (Fans{3, 5}));
  EXPECT_EQ(compute_fans({2, 3, 5}), (Fans{6, 10}));        // receptive field 2
  EXPECT_EQ(compute_fans({4, 2, 3, 5}), (Fans{24, 40}));    // receptive field 8
  EXPECT_EQ(compute_fans({4, 3, 5}, 1), (Fans{3, 5}));      // stacked: layer axis left out
  EXPECT_EQ(compute_fans({4, 2, 3, 5}, 1), (Fans{6, 10}));
  EXPECT_EQ(compute_fans({4, 2, 3, 5}, 2), (Fans{3, 5}));
  EXPECT_EQ(compute_fans({4, 7}, 1), (Fans{7, 7}));
  EXPECT_EQ(compute_fans({4, 7}, 2), (Fans{1, 1}));
  EXPECT_EQ(compute_fans({0, 5}), (Fans{0, 5}));
  EXPECT_THROW(compute_fans({3, 5}, 3), SpecError);
  EXPECT_THROW(compute_fans({3, 5}, -1), SpecError);
  EXPECT_THROW(initializers::zeros().with_batch_axes(-1), SpecError);
}

// Every way of cutting `shape` into blocks with the given cut points per dimension.
void expect_blocks_reassemble(const Initializer& init, const Shape& shape,
                              const std::vector<std::vector<std::int64_t>>& cuts, DType dtype) {
  RngKey key = rng_key(2024, "MLP_0/DotReluDot_0/W1");
  Tensor full = init_full(init, key, shape, dtype);
  Tensor assembled(shape, dtype);
  const std::size_t rank = shape.size();
  std::vector<std::size_t> piece(rank, 0);
  for (;;) {
    std::vector<std::int64_t> offsets(rank);
    Shape block(rank);
    for (std::size_t d = 0; d < rank; ++d) {
      offsets[d] = cuts[d][piece[d]];
      block[d] = cuts[d][piece[d] + 1] - offsets[d];
    }
    insert_block(assembled, init_block(init, key, shape, offsets, block, dtype), offsets);
    std::size_t d = rank;
    while (d-- > 0) {
      if (++piece[d] + 1 < cuts[d].size()) break;
      piece[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1)) break;
  }
  ASSERT_TRUE(assembled.bit_equal(full)) << to_string(init) << " on " << shape_to_string(shape);
}

std::vector<std::int64_t> even_cuts(std::int64_t n, std::int64_t parts) {
  std::vector<std::int64_t> cuts;
  for (std::int64_t p = 0; p <= parts; ++p) cuts.push_back(n / parts * p);
  return cuts;
}

TEST(InitBlock, BlocksReassembleToFullBitForBit) {
  const std::vector<Initializer> inits = {
      initializers::lecun_normal(),  initializers::xavier_normal(), initializers::he_uniform(),
      initializers::normal(0.02),    initializers::uniform(0.1),    initializers::truncated_normal(0.5),
      initializers::ones(),          initializers::lecun_normal().with_batch_axes(1)};
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const Initializer& init : inits) {
      for (std::int64_t a : {1, 2, 3, 6}) {
        for (std::int64_t b : {1, 2, 5, 10}) {
          expect_blocks_reassemble(init, {6, 10}, {even_cuts(6, a), even_cuts(10, b)}, dtype);
        }
      }
      for (std::int64_t a : {1, 2, 4}) {
        for (std::int64_t b : {1, 3}) {
          for (std::int64_t c : {1, 2, 8}) {
            expect_blocks_reassemble(init, {4, 6, 8}, {even_cuts(4, a), even_cuts(6, b), even_cuts(8, c)}, dtype);
          }
        }
      }
      // Uneven blocks too: init_block takes any box, not only mesh shards.
      expect_blocks_reassemble(init, {5, 7, 3}, {{0, 1, 5}, {0, 3, 4, 7}, {0, 2, 3}}, dtype);
    }
  }
}

TEST(InitBlock, MatchesInitValueElementwise) {
  const Shape shape = {3, 4, 5};
  RngKey key = rng_key(9, "p");
  for (const Initializer& init : {initializers::xavier_normal(), initializers::uniform(0.3)}) {
    Tensor f64 = init_full(init, key, shape, DType::f64);
    Tensor f32 = init_full(init, key, shape, DType::f32);
    for (std::int64_t i = 0; i < f64.numel(); ++i) {
      double v = init_value(init, key, shape, static_cast<std::uint64_t>(i));
      ASSERT_EQ(f64.data<double>()[i], v);
      ASSERT_EQ(f32.data<float>()[i], static_cast<float>(v));
    }
  }
  EXPECT_THROW(init_value(initializers::ones(), key, shape, 60), ShapeError);
  EXPECT_EQ(init_value(initializers::ones(), key, {}, 0), 1.0);
}

TEST(InitBlock, RejectsBadBlocksAndIntegerRandomness) {
  RngKey key = rng_key(1, "w");
  EXPECT_THROW(init_block(initializers::ones(), key, {4, 4}, {0}, {4, 4}), ShapeError);
  EXPECT_THROW(init_block(initializers::ones(), key, {4, 4}, {2, 0}, {3, 4}), ShapeError);
  EXPECT_THROW(init_block(initializers::ones(), key, {4, 4}, {-1, 0}, {1, 4}), ShapeError);
  EXPECT_THROW(init_full(initializers::normal(1.0), key, {4}, DType::i32), DTypeError);
  Tensor ones = init_full(initializers::ones(), key, {2, 3}, DType::i32);
  for (std::int32_t v : ones.values<std::int32_t>()) EXPECT_EQ(v, 1);
  EXPECT_EQ(init_block(initializers::ones(), key, {4, 4}, {4, 0}, {0, 4}).numel(), 0);
  Tensor scalar = init_full(initializers::normal(1.0), key, {}, DType::f64);
  EXPECT_EQ(scalar.data<double>()[0], normal(key, 0));
}

TEST(Initializers, StatisticsMatchTheirVariance) {
  struct Case {
    Initializer init;
    Shape shape;
    double expected_stddev;
    double bound;  // |value| <= bound, or 0 for none
  };
  const double lecun = std::sqrt(1.0 / 250.0);
  const double xavier = std::sqrt(1.0 / ((250.0 + 400.0) / 2.0));
  const std::vector<Case> cases = {
      {initializers::normal(0.02), {250, 400}, 0.02, 0.0},
      {initializers::lecun_normal(), {250, 400}, lecun, 2.0 * lecun / truncated_normal_stddev_2sigma},
      {initializers::xavier_normal(), {250, 400}, xavier, 2.0 * xavier / truncated_normal_stddev_2sigma},
      {initializers::glorot_normal(), {250, 400}, xavier, 2.0 * xavier / truncated_normal_stddev_2sigma},
      {initializers::truncated_normal(0.5), {250, 400}, 0.5 * truncated_normal_stddev_2sigma, 1.0},
      {initializers::he_uniform(), {250, 400}, std::sqrt(2.0 / 250.0), std::sqrt(6.0 / 250.0)},
      // Stacked: 4 layers of (250, 100); each layer's fan_in is 250, not 1000.
      {initializers::lecun_normal().with_batch_axes(1), {4, 250, 100}, lecun,
       2.0 * lecun / truncated_normal_stddev_2sigma},
  };
  for (const Case& c : cases) {
    Tensor t = init_full(c.init, rng_key(123, to_string(c.init)), c.shape, DType::f64);
    Moments m = moments(as_doubles(t));
    EXPECT_NEAR(m.mean, 0.0, 0.02 * c.expected_stddev) << to_string(c.init);
    EXPECT_NEAR(m.stddev, c.expected_stddev, 0.02 * c.expected_stddev) << to_string(c.init);
    if (c.bound > 0.0) {
      EXPECT_GE(m.min, -c.bound) << to_string(c.init);
      EXPECT_LE(m.max, c.bound) << to_string(c.init);
    }
  }
  Moments u = moments(as_doubles(init_full(initializers::uniform(0.1), rng_key(1, "u"), {100000}, DType::f64)));
  EXPECT_GE(u.min, 0.0);
  EXPECT_LT(u.max, 0.1);
  EXPECT_NEAR(u.mean, 0.05, 0.001);
  EXPECT_NEAR(u.stddev, 0.1 / std::sqrt(12.0), 0.02 * 0.1 / std::sqrt(12.0));
  Tensor zeros = init_full(initializers::zeros(), rng_key(1, "z"), {3, 3});
  for (float v : zeros.values<float>()) EXPECT_EQ(v, 0.0f);
}

TEST(ParseInitializer, NamesAndArguments) {
  namespace in = initializers;
  EXPECT_EQ(parse_initializer("zeros"), in::zeros());
  EXPECT_EQ(parse_initializer("ones"), in::ones());
  EXPECT_EQ(parse_initializer("lecun_normal"), in::lecun_normal());
  EXPECT_EQ(parse_initializer("xavier_normal"), in::xavier_normal());
  EXPECT_EQ(parse_initializer("glorot_normal"), in::xavier_normal());
  EXPECT_EQ(parse_initializer(" normal( 0.02 ) "), in::normal(0.02));
  EXPECT_EQ(parse_initializer("normal"), in::normal(0.01));
  EXPECT_EQ(parse_initializer("uniform(0.1)"), in::uniform(0.1));
  EXPECT_EQ(parse_initializer("constant(-3.5)"), in::constant(-3.5));
  EXPECT_EQ(parse_initializer("variance_scaling(2, fan_out, normal)"),
            in::variance_scaling(2.0, FanMode::fan_out, InitDistribution::normal));
  EXPECT_EQ(parse_initializer("lecun_normal(batch_axes=1)"), in::lecun_normal().with_batch_axes(1));
  EXPECT_EQ(parse_initializer("normal(0.02, batch_axes = 2)"), in::normal(0.02).with_batch_axes(2));
}

TEST(ParseInitializer, ToStringRoundTrips) {
  namespace in = initializers;
  EXPECT_EQ(to_string(in::glorot_normal()), "xavier_normal");
  EXPECT_EQ(to_string(in::normal(0.02)), "normal(0.02)");
  EXPECT_EQ(to_string(in::constant(-0.0)), "zeros");
  EXPECT_EQ(to_string(in::lecun_normal().with_batch_axes(1)), "lecun_normal(batch_axes=1)");
  EXPECT_EQ(to_string(in::variance_scaling(0.1, FanMode::fan_avg, InitDistribution::uniform)),
            "variance_scaling(0.1, fan_avg, uniform)");
  for (const Initializer& init :
       {in::zeros(), in::ones(), in::constant(1.0 / 3.0), in::normal(0.02), in::uniform(1e-7),
        in::truncated_normal(0.3), in::lecun_normal(), in::lecun_uniform(), in::xavier_normal(),
        in::xavier_uniform(), in::he_normal(), in::he_uniform(),
        in::variance_scaling(0.5, FanMode::fan_out, InitDistribution::truncated_normal),
        in::variance_scaling(1.0, FanMode::fan_in, InitDistribution::normal), in::normal(0.02).with_batch_axes(3)}) {
    EXPECT_EQ(parse_initializer(to_string(init)), init) << to_string(init);
  }
}

void expect_spec_error(std::string_view text, const std::string& message) {
  try {
    parse_initializer(text);
    ADD_FAILURE() << "no error for '" << text << "'";
  } catch (const SpecError& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(ParseInitializer, ErrorsSayWhatWasExpected) {
  expect_spec_error("kaiming",
                    "unknown initializer 'kaiming' (expected zeros, ones, constant(value), normal(stddev), "
                    "uniform(scale), truncated_normal(stddev), lecun_normal, lecun_uniform, xavier_normal, "
                    "xavier_uniform, glorot_normal, glorot_uniform, he_normal, he_uniform or "
                    "variance_scaling(scale, mode, distribution))");
  expect_spec_error("normal(abc)", "initializer 'normal(abc)': 'abc' is not a number");
  expect_spec_error("normal(0.02", "initializer 'normal(0.02': missing ')' at the end");
  expect_spec_error("normal(1, 2)", "initializer 'normal(1, 2)': normal takes 0 or 1 arguments, got 2");
  expect_spec_error("zeros(1)", "initializer 'zeros(1)': zeros takes no arguments, got 1");
  expect_spec_error("constant", "initializer 'constant': constant takes 1 argument, got 0");
  expect_spec_error("normal(-1)", "initializer 'normal(-1)': stddev must be >= 0");
  expect_spec_error("normal(inf)", "initializer 'normal(inf)': 'inf' is not a finite number");
  expect_spec_error("variance_scaling(1, fan_mid, normal)",
                    "initializer 'variance_scaling(1, fan_mid, normal)': unknown mode 'fan_mid' "
                    "(expected fan_in, fan_out or fan_avg)");
  expect_spec_error("variance_scaling(1, fan_in, cauchy)",
                    "initializer 'variance_scaling(1, fan_in, cauchy)': unknown distribution 'cauchy' "
                    "(expected truncated_normal, normal or uniform)");
  expect_spec_error("variance_scaling(0, fan_in, normal)",
                    "initializer 'variance_scaling(0, fan_in, normal)': scale must be > 0");
  expect_spec_error("lecun_normal(layers=1)",
                    "initializer 'lecun_normal(layers=1)': unknown keyword 'layers' (expected batch_axes)");
  expect_spec_error("lecun_normal(batch_axes=-1)",
                    "initializer 'lecun_normal(batch_axes=-1)': batch_axes '-1' is not a non-negative integer");
  expect_spec_error("normal(batch_axes=1, 0.02)",
                    "initializer 'normal(batch_axes=1, 0.02)': batch_axes must be the last argument");
  expect_spec_error("normal(0.02,)", "initializer 'normal(0.02,)': empty argument 2");
}

}  // namespace
}  // namespace tessera
