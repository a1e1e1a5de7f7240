// The language-model ops (activations, normalisations) beyond the every-mesh and
// finite-difference suites that op_cases.h feeds: each one inside shard_map on the local one-rank
// mesh gives the global view's loss and gradients, and bad input names the op and the tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "collectives/comm_stats.h"
#include "core/buffer_pool.h"
#include "core/error.h"
#include "nn/activations.h"
#include "nn/attention.h"
#include "nn/embedding.h"
#include "nn/losses.h"
#include "nn/normalization.h"
#include "nn/ops.h"
#include "nn/shape_ops.h"
#include "nn/shard_map.h"
#include "tests/collectives/expect_error.h"
#include "tests/nn/nn_test_util.h"
#include "tests/nn/op_cases.h"
#include "tests/test_meshes.h"

namespace tessera::nn {
namespace {

using testing_support::world_size;
using testing_util::max_relative_error;
using testing_util::test_values;

// What the language model's ops copy (Tensor's deep copies, core/buffer_pool.h), on one rank:
// forward, then the backward from a seed cotangent. The tape copies the seed once (gradients takes
// it by const reference); beyond that an op reads a block already on its spec where it lies and
// hands a cotangent it passes on unchanged to its input (reshard, the second input of add). Each
// of these copied a block once more before (the transformer's step on 8 ranks copied 8 MiB a
// rank that it no longer does): rotary's input and its cotangent, rmsnorm's, softmax's,
// log_softmax's and attention's cotangents, softmax's and log_softmax's input and saved result,
// reshard's and add's cotangents, embed's table, result and tokens, the cross-entropy's logits,
// labels and statistics.
TEST(LmOps, OpsReadBlocksInPlaceAndHandCotangentsOn) {
  Mesh mesh = testing_util::self_mesh();
  const Shape bshd{2, 8, 2, 4};
  const std::size_t block = 2 * 8 * 2 * 4 * sizeof(float);  // one f32 [2, 8, 2, 4]
  const auto input = [&](const Shape& shape, int seed) {
    return Var(ShardedTensor::from_global(mesh, Spec(), test_values(shape, seed, DType::f32, false)), true);
  };
  const auto seed_of = [&](const Var& y) {
    return ShardedTensor::from_global(mesh, y.spec(), test_values(y.shape(), 9, DType::f32, false));
  };
  // Bytes copied by fn's forward and by the backward of its result.
  const auto copies = [&](const std::function<Var()>& fn, const std::vector<Var>& wrt) {
    reset_tensor_copy_bytes();
    const Var y = fn();
    const std::size_t forward = tensor_copy_bytes();
    const ShardedTensor seed = seed_of(y);
    reset_tensor_copy_bytes();
    const auto grads = gradients(y, seed, wrt);
    for (const auto& g : grads) EXPECT_TRUE(g.has_value());
    return std::pair<std::size_t, std::size_t>{forward, tensor_copy_bytes()};
  };
  const Var x = input(bshd, 1), z = input(bshd, 2), k = input(bshd, 3), v = input(bshd, 4);
  const Var w = input({4}, 5);
  EXPECT_EQ(copies([&] { return rotary(x); }, {x}), std::make_pair(std::size_t{0}, block));
  EXPECT_EQ(copies([&] { return rmsnorm(x, w); }, {x, w}), std::make_pair(std::size_t{0}, block));
  // softmax and log_softmax keep a copy of their result for the backward pass.
  EXPECT_EQ(copies([&] { return softmax(x); }, {x}), std::make_pair(block, block));
  EXPECT_EQ(copies([&] { return log_softmax(x); }, {x}), std::make_pair(block, block));
  EXPECT_EQ(copies([&] { return causal_attention(x, k, v); }, {x, k, v}), std::make_pair(std::size_t{0}, block));
  // add: the seed, and a copy for its first input; the second takes the cotangent itself.
  EXPECT_EQ(copies([&] { return add(x, z); }, {x, z}), std::make_pair(std::size_t{0}, 2 * block));
  // reshard onto the spec x has: the forward's result is a copy; the backward hands the
  // cotangent on.
  EXPECT_EQ(copies([&] { return reshard(x, Spec()); }, {x}), std::make_pair(block, block));
  // embed: no copy of the table or of its result, one of the tokens (i32 [2, 8]) kept for the
  // backward pass, whose scatter writes a fresh block.
  const Var table = input({16, 4}, 6);
  const ShardedTensor tokens = testing_ops::token_ids(mesh, {2, 8}, 16);
  const std::size_t ids = 2 * 8 * sizeof(std::int32_t), embedded = 2 * 8 * 4 * sizeof(float);
  EXPECT_EQ(copies([&] { return embed(table, tokens); }, {table}), std::make_pair(ids, embedded));
  // The cross-entropy keeps its logits for the backward pass by holding the input's node, not a
  // copy; the labels are resharded onto the logits' rows (from P(data)) and kept; the loss's seed
  // is one f32.
  const Var logits = input({2, 8, 16}, 7);
  EXPECT_EQ(copies([&] { return softmax_cross_entropy_with_integer_labels(logits, tokens); }, {logits}),
            std::make_pair(2 * ids, sizeof(float)));
}

TEST(LmOps, EveryOpInsideShardMapMatchesTheGlobalView) {
  for (const auto& shape : testing_support::meshes_2d_of_size(world_size())) {
    Mesh mesh = Mesh::world(shape);
    for (const auto& c : testing_ops::op_cases()) {
      std::vector<Var> global_vars, mapped_vars;
      std::vector<Spec> in_specs;
      for (std::size_t i = 0; i < c.shapes.size(); ++i) {
        Tensor t = test_values(c.shapes[i], static_cast<int>(i) + 3, DType::f64, c.positive_inputs);
        global_vars.emplace_back(ShardedTensor::from_global(mesh, Spec(), t), true);
        mapped_vars.emplace_back(ShardedTensor::from_global(mesh, Spec(), t), true);
        in_specs.push_back(Spec::replicated(static_cast<int>(c.shapes[i].size())));
      }
      const std::string label = shape.to_string() + " " + c.name;
      Var want = c.fn(global_vars);
      Var got = shard_map(
          mesh, [&c](const std::vector<Var>& blocks) { return std::vector<Var>{c.fn(blocks)}; }, in_specs, {Spec()},
          mapped_vars)[0];
      EXPECT_NEAR(scalar_value(got.value()), scalar_value(want.value()), 1e-12) << label;
      auto want_grads = gradients(want, global_vars);
      auto got_grads = gradients(got, mapped_vars);
      for (std::size_t i = 0; i < c.shapes.size(); ++i) {
        ASSERT_TRUE(got_grads[i].has_value()) << label;
        EXPECT_LT(max_relative_error(got_grads[i]->to_global(), want_grads[i]->to_global(), 1e-12), 1e-12)
            << label << " input " << i;
      }
    }
  }
}

// rotary against its formula: the pair (x_i, x_{i+d/2}) of position p turns by
// p * base^(-2i/d). Positions and bases change between calls and return to the first, so the
// angles' table (made once per positions, attention.cpp) is made, kept and found again, and
// (ten offsets, more than the eight tables kept) made again after it was dropped.
TEST(LmOps, RotaryTurnsEachPairByItsPositionsAngle) {
  Mesh mesh = testing_util::self_mesh();
  const Shape shape{2, 3, 2, 4};  // batch, seq, heads, d_head
  const Tensor x = test_values(shape, 5, DType::f64, false);
  struct Call {
    std::int64_t offset;
    double base;
  };
  std::vector<Call> calls{{0, 100.0}, {7, 100.0}, {0, 10000.0}, {0, 100.0}};
  for (std::int64_t offset = 1; offset <= 10; ++offset) calls.push_back({offset, 100.0});
  calls.push_back({0, 100.0});
  for (const Call call : calls) {
    const Tensor y = rotary(Var(ShardedTensor::from_global(mesh, Spec(), x)), call.base, call.offset).value().local();
    const double* in = x.data<double>();
    for (std::int64_t b = 0; b < 2; ++b) {
      for (std::int64_t p = 0; p < 3; ++p) {
        for (std::int64_t h = 0; h < 2; ++h) {
          for (std::int64_t i = 0; i < 2; ++i) {
            const std::int64_t at = ((b * 3 + p) * 2 + h) * 4;
            const double angle = static_cast<double>(call.offset + p) * std::pow(call.base, -2.0 * i / 4.0);
            const double x1 = in[at + i], x2 = in[at + i + 2];
            EXPECT_NEAR(y.data<double>()[at + i], x1 * std::cos(angle) - x2 * std::sin(angle), 1e-15);
            EXPECT_NEAR(y.data<double>()[at + i + 2], x2 * std::cos(angle) + x1 * std::sin(angle), 1e-15);
          }
        }
      }
    }
  }
}

TEST(LmOps, EveryOpInF32AgreesWithF64) {
  Mesh mesh = testing_util::self_mesh();
  for (const auto& c : testing_ops::op_cases()) {
    double values[2];
    int at = 0;
    for (DType dtype : {DType::f64, DType::f32}) {
      std::vector<Var> vars;
      for (std::size_t i = 0; i < c.shapes.size(); ++i) {
        vars.emplace_back(ShardedTensor::from_global(
                              mesh, Spec(), test_values(c.shapes[i], static_cast<int>(i) + 3, dtype, c.positive_inputs)),
                          true);
      }
      Var loss = c.fn(vars);
      EXPECT_EQ(loss.dtype(), dtype) << c.name;
      ASSERT_TRUE(gradients(loss, vars)[0].has_value()) << c.name;
      values[at++] = scalar_value(loss.value());
    }
    EXPECT_NEAR(values[1], values[0], 1e-5 * std::max(1.0, std::abs(values[0]))) << c.name;
  }
}

// layernorm against its formula, row by row: (x - mean) / sqrt(var + eps) * w + b with the
// biased variance (the mean of the squared deviations, as flax's LayerNorm). The every-mesh and
// finite-difference suites compare the op with itself, so only a formula pins its values.
TEST(LmOps, LayernormFollowsItsFormula) {
  Mesh mesh = testing_util::self_mesh();
  const std::int64_t rows = 3, d = 5;
  const double eps = 1e-5;
  const Tensor x = test_values({rows, d}, 21), w = test_values({d}, 22, DType::f64, true), b = test_values({d}, 23);
  const auto var = [&](const Tensor& t) { return Var(ShardedTensor::from_global(mesh, Spec(), t)); };
  const Tensor y = layernorm(var(x), var(w), var(b), eps).value().to_global();
  for (std::int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (std::int64_t j = 0; j < d; ++j) mean += x.at(r * d + j) / d;
    for (std::int64_t j = 0; j < d; ++j) var += (x.at(r * d + j) - mean) * (x.at(r * d + j) - mean) / d;
    for (std::int64_t j = 0; j < d; ++j) {
      EXPECT_NEAR(y.at(r * d + j), (x.at(r * d + j) - mean) / std::sqrt(var + eps) * w.at(j) + b.at(j), 1e-12)
          << "row " << r << " column " << j;
    }
  }
}

// The losses against their formulas: mse the mean of the squared differences, the one-hot
// cross-entropy the mean over rows of -sum(labels * log_softmax(logits)).
TEST(LmOps, LossesFollowTheirFormulas) {
  Mesh mesh = testing_util::self_mesh();
  const std::int64_t rows = 3, d = 4;
  const Tensor a = test_values({rows, d}, 31), b = test_values({rows, d}, 32);
  const Tensor labels = test_values({rows, d}, 33, DType::f64, true);
  const auto var = [&](const Tensor& t) { return Var(ShardedTensor::from_global(mesh, Spec(), t)); };
  double mse = 0, xent = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    double lse = 0;
    for (std::int64_t j = 0; j < d; ++j) lse += std::exp(a.at(r * d + j));
    lse = std::log(lse);
    for (std::int64_t j = 0; j < d; ++j) {
      mse += (a.at(r * d + j) - b.at(r * d + j)) * (a.at(r * d + j) - b.at(r * d + j)) / (rows * d);
      xent -= labels.at(r * d + j) * (a.at(r * d + j) - lse) / rows;
    }
  }
  EXPECT_NEAR(scalar_value(mse_loss(var(a), var(b)).value()), mse, 1e-12);
  EXPECT_NEAR(scalar_value(softmax_cross_entropy(var(a), var(labels)).value()), xent, 1e-12);
}

// f32 inputs of -1000, 1000, -30 and 30 on one rank, where exp overflows past 88 unless shifted.
Var large_f32_inputs(const Mesh& mesh) {
  return Var(ShardedTensor::from_global(mesh, Spec(), Tensor::from_vector<float>({4}, {-1000.f, 1000.f, -30.f, 30.f})),
             true);
}

TEST(LmOps, ActivationsAreStableAtLargeInputsInF32) {
  Mesh mesh = testing_util::self_mesh();
  Var x = large_f32_inputs(mesh);
  Tensor s = silu(x).value().to_global();
  Tensor g = gelu(x).value().to_global();
  EXPECT_EQ(s.at(0), 0.0);
  EXPECT_EQ(s.at(1), 1000.0);
  EXPECT_EQ(g.at(0), 0.0);
  EXPECT_EQ(g.at(1), 1000.0);
  Tensor sm = softmax(x).value().to_global();
  EXPECT_EQ(sm.at(1), 1.0);
  EXPECT_EQ(sm.at(0), 0.0);
}

// log_softmax shifts each row by its maximum: at inputs of +-1000 in f32 (exp overflows past 88)
// it is finite and exact, as is its gradient. A shift by any other per-row constant is the same
// function in exact arithmetic and the same numbers at small inputs.
TEST(LmOps, LogSoftmaxIsStableAtLargeInputsInF32) {
  Mesh mesh = testing_util::self_mesh();
  Var x = large_f32_inputs(mesh);
  Var y = log_softmax(x);
  Tensor ls = y.value().to_global();
  EXPECT_EQ(ls.at(0), -2000.0);
  EXPECT_EQ(ls.at(1), 0.0);
  EXPECT_EQ(ls.at(2), -1030.0);
  EXPECT_EQ(ls.at(3), -970.0);
  Tensor g = gradients(sum(y), {x})[0]->to_global();  // 1 - 4 softmax(x)
  EXPECT_EQ(g.at(0), 1.0);
  EXPECT_EQ(g.at(1), -3.0);
}

TEST(LmOps, NormalisationWeightOfTheWrongShapeIsAnError) {
  Mesh mesh = testing_util::self_mesh();
  Var x(ShardedTensor::zeros(mesh, Spec(), {4, 8}, DType::f64, "h"));
  Var w(ShardedTensor::zeros(mesh, Spec(), {6}, DType::f64, "norm_scale"));
  Var b(ShardedTensor::zeros(mesh, Spec(), {8}, DType::f64, "norm_bias"));
  try {
    rmsnorm(x, w);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "rmsnorm: weight 'norm_scale' [6] does not match the last dimension of 'h' [4, 8]");
  }
  try {
    layernorm(x, b, w);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "layernorm: bias 'norm_scale' [6] does not match the last dimension of 'h' [4, 8]");
  }
}

TEST(LmOps, ReshapeKeepsASplitOnTheMajorDimensionWithoutMoving) {
  Mesh mesh = Mesh::world(MeshShape({"data", "model"}, {world_size(), 1}));
  const std::int64_t n = world_size();
  Tensor t = test_values({2 * n, 3, 4}, 5);
  Var x(ShardedTensor::from_global(mesh, parse_spec("P(data, None, model)"), t, "h"), true);
  CommScope scope;
  Var merged = reshape(x, {2 * n * 3, 4});  // (2n, 3) merge: data stays on the major part
  Var heads = reshape(merged, {2 * n, 3, 2, 2});  // and comes back; 4 splits into (2, 2)
  EXPECT_EQ(scope.total_bytes(), 0);
  EXPECT_EQ(merged.spec(), parse_spec("P(data, model)"));
  EXPECT_EQ(heads.spec(), parse_spec("P(data, None, model, None)"));
  EXPECT_LT(max_relative_error(reshape(heads, {2 * n, 3, 4}).value().to_global(), t), 1e-15);
  auto g = gradients(sum(square(heads)), {x});
  EXPECT_EQ(g[0]->spec(), x.spec());
  EXPECT_LT(max_relative_error(g[0]->to_global(), tessera::affine(t, 2.0)), 1e-15);
}

TEST(LmOps, ReshapeOfASplitMinorDimensionIsAnError) {
  Mesh mesh = Mesh::world(MeshShape({"data"}, {world_size()}));
  const std::int64_t n = world_size();
  const std::string six_n = std::to_string(6 * n);
  Var x(ShardedTensor::zeros(mesh, parse_spec("P(None, data)"), {3, 6 * n}, DType::f64, "h"));
  const std::string where = "'h' [3, " + six_n + "] P(None, data)";
  try {
    reshape(x, {18 * n});
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_EQ(std::string(e.what()), "reshape: " + where + " to [" + std::to_string(18 * n) +
                                         "]: dimension 1 is split but is not the major dimension of the dimensions " +
                                         "it merges or splits into; reshard it first");
  }
  try {
    reshape(x, {3, 5});
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_EQ(std::string(e.what()), "reshape: " + where + " has " + std::to_string(18 * n) +
                                         " elements, not those of [3, 5]");
  }
  // Dimensions of size 1 do not count as major; a split must land on a size it divides.
  EXPECT_EQ(reshape(x, {3, 1, 6 * n}).spec(), parse_spec("P(None, None, data)"));
  EXPECT_EQ(reshape(x, {3, 6 * n, 1}).spec(), parse_spec("P(None, data, None)"));
  if (n > 1) {
    try {
      reshape(x, {3, 3, 2 * n});
      FAIL();
    } catch (const ShapeError& e) {
      EXPECT_EQ(std::string(e.what()), "reshape: " + where + " to [3, 3, " + std::to_string(2 * n) +
                                           "]: dimension 1 (size 3) does not divide over the " + std::to_string(n) +
                                           " shards of dimension 1 into the same blocks; reshard it first");
    }
  }
}

// A tensor without elements reshapes into any shape without elements (refused as "no grouping"
// until 2026-11-28), to a replicated result, and its gradient comes back in its own spec. A split
// size-1 dimension that a reshape drops is named as such (it named "dimension -1 (size 0)").
TEST(LmOps, ReshapeOfNoElementsAndOfADroppedSplitDimension) {
  Mesh mesh = Mesh::world(MeshShape({"data"}, {world_size()}));
  const std::int64_t n = world_size();
  Var empty(ShardedTensor::zeros(mesh, parse_spec("P(data, None)"), {n, 0}, DType::f64, "e"), true);
  Var flat = reshape(empty, {0});
  EXPECT_EQ(flat.shape(), Shape({0}));
  EXPECT_EQ(flat.spec(), parse_spec("P(None)"));
  Var turned = reshape(empty, {0, 3, n});
  EXPECT_EQ(turned.shape(), Shape({0, 3, n}));
  EXPECT_EQ(turned.value().local().numel(), 0);
  EXPECT_EQ(reshape(empty, {n, 0}).spec(), empty.spec());  // the same shape keeps its spec
  auto g = gradients(sum(square(turned)), {empty});
  EXPECT_EQ(g[0]->spec(), empty.spec());
  EXPECT_EQ(g[0]->global_shape(), Shape({n, 0}));
  EXPECT_EQ(scalar_value(sum(square(turned)).value()), 0.0);
  if (n > 1) {
    Var one(ShardedTensor::zeros(mesh, parse_spec("P(None, data)"), {4, 1}, DType::f64, "u"));
    try {
      reshape(one, {4});
      FAIL();
    } catch (const ShapeError& e) {
      EXPECT_EQ(std::string(e.what()), "reshape: 'u' [4, 1] P(None, data) to [4]: dimension 1 (size 1) is split and "
                                       "has no dimension of the result to go to; reshard it first");
    }
  }
}

TEST(LmOps, ShapeOpsBadInputNamesTheTensors) {
  Mesh mesh = testing_util::self_mesh();
  Var a(ShardedTensor::zeros(mesh, Spec(), {4, 8}, DType::f64, "q"));
  Var b(ShardedTensor::zeros(mesh, Spec(), {3, 4}, DType::f64, "k"));
  try {
    concat({a, b}, 1);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "concat: 'k' [3, 4] P(None, None) does not fit 'q' [4, 8] P(None, None) along dimension 1");
  }
  try {
    permute(a, {0, 0});
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "permute: (0, 0) is not a permutation of the dimensions of 'q' [4, 8] P(None, None)");
  }
  try {
    split(a, {3, 4}, 1);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "split: sizes summing to 7 do not cut dimension 1 of 'q' [4, 8] P(None, None)");
  }
  // Only -1 is inferred: another negative extent is refused, not taken as "the rest".
  testing_support::expect_error<ShapeError>([&] { reshape(a, {-2, 8}); },
                                            "reshape: 'q' [4, 8] P(None, None) has 32 elements, not those of [-2, 8]");
  // start + length wrapped past 2^63 and the slice read outside the tensor.
  try {
    slice(a, 1, std::numeric_limits<std::int64_t>::max() - 2, 4);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "slice: 4 from 9223372036854775805 of dimension 1 is out of range for 'q' [4, 8] P(None, None)");
  }
  // Every dimension but the one concatenated must match, the last one too.
  Var d(ShardedTensor::zeros(mesh, Spec(), {4, 7}, DType::f64, "v"));
  testing_support::expect_error<ShapeError>(
      [&] { concat({a, d}, 0); },
      "concat: 'v' [4, 7] P(None, None) does not fit 'q' [4, 8] P(None, None) along dimension 0");
  // A reshard to a spec of more dimensions than the tensor is refused, though it compares equal
  // to the tensor's spec padded with None.
  testing_support::expect_error<SpecError>(
      [&] { reshard(a, parse_spec("P(None, None, None)")); },
      "spec P(None, None, None) of 'q' has 3 dimensions but the tensor has shape [4, 8]");
  // Another dtype is named as such (it was "does not fit ... along dimension 0").
  Var c(ShardedTensor::zeros(mesh, Spec(), {4, 8}, DType::f32, "r"));
  try {
    concat({a, c}, 0);
    FAIL();
  } catch (const DTypeError& e) {
    EXPECT_STREQ(e.what(), "concat: 'r' [4, 8] P(None, None) is f32, 'q' [4, 8] P(None, None) is f64");
  }
  // A target of more dimensions indexed the spec before its start.
  try {
    sum_to_shape(a.value(), {2, 4, 8});
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "sum_to_shape: [4, 8] does not sum to [2, 4, 8] (the target must broadcast to it)");
  }
  EXPECT_THROW(sum_to_shape(a.value(), {3}), ShapeError);
  EXPECT_EQ(sum_to_shape(a.value(), {1, 8}).global_shape(), (Shape{1, 8}));
  EXPECT_THROW(ShardedTensor::zeros(mesh, Spec(), {-4, 4}, DType::f32, "neg"), ShapeError);
}

CommRecord ring_all_reduce(Axes axes, int n, std::int64_t block_bytes) {
  return CommRecord{CommOp::all_reduce, std::move(axes), -1, 2 * (n - 1) * block_bytes / n};
}

// The Megatron shapes on data = world / 2, model = 2: the vocabulary over model, rows over data.
struct VocabParallel {
  int data = world_size() / 2;
  Mesh mesh = Mesh::world(MeshShape({"data", "model"}, {world_size() / 2, 2}));
  std::int64_t batch = 2 * data, seq = 3, vocabulary = 16, d = 8;
  ShardedTensor tokens = testing_ops::token_ids(mesh, {batch, seq}, vocabulary);
};

TEST(LmOps, VocabParallelEmbeddingMovesOnePsumOfItsResult) {
  if (world_size() < 2) GTEST_SKIP() << "needs a model axis of 2";
  VocabParallel s;
  Var table(ShardedTensor::from_fn(
                s.mesh, parse_spec("P(model, None)"), {s.vocabulary, s.d}, DType::f32,
                [](std::int64_t i) { return 0.01 * static_cast<double>(i % 97); }, "wte"),
            true);
  Var y;
  std::vector<CommRecord> forward, backward;
  {
    CommScope scope;
    y = embed(table, s.tokens);
    forward = scope.records();
  }
  {
    CommScope scope;
    gradients(sum(y), {table});
    backward = scope.records();
  }
  // Forward: the [2, 3, 8] f32 block summed over model; never a gather of the table.
  EXPECT_EQ(forward, (std::vector<CommRecord>{ring_all_reduce({"model"}, 2, 2 * 3 * 8 * 4)}));
  // Backward: the table's cotangent ([8, 8] f32 per rank) summed over the batch's data axis.
  std::vector<CommRecord> want;
  if (s.data > 1) want.push_back(ring_all_reduce({"data"}, s.data, 8 * 8 * 4));
  EXPECT_EQ(backward, want);
  EXPECT_EQ(y.spec(), parse_spec("P(data, None, None)"));
}

TEST(LmOps, VocabParallelCrossEntropyMovesOnlyMaxAndSumExp) {
  if (world_size() < 2) GTEST_SKIP() << "needs a model axis of 2";
  VocabParallel s;
  Var logits(ShardedTensor::from_fn(
                 s.mesh, parse_spec("P(data, None, model)"), {s.batch, s.seq, s.vocabulary}, DType::f32,
                 [](std::int64_t i) { return 0.1 * static_cast<double>((i * 7) % 13); }, "logits"),
             true);
  std::vector<CommRecord> forward, backward;
  Var loss;
  {
    CommScope scope;
    loss = softmax_cross_entropy_with_integer_labels(logits, s.tokens);
    forward = scope.records();
  }
  {
    CommScope scope;
    auto g = gradients(loss, {logits});
    backward = scope.records();
    EXPECT_EQ(g[0]->spec(), logits.spec());
  }
  // The 2 x 3 rows' maxima (f64), then their [sum of exponentials, label logit] pairs; the
  // [2, 3, 8] logits block never moves.
  EXPECT_EQ(forward, (std::vector<CommRecord>{ring_all_reduce({"model"}, 2, 2 * 3 * 8),
                                              ring_all_reduce({"model"}, 2, 2 * 3 * 2 * 8)}));
  EXPECT_EQ(backward, std::vector<CommRecord>{});
}

TEST(LmOps, TokensOutsideTheVocabularyAreAnError) {
  Mesh mesh = testing_util::self_mesh();
  Var table(ShardedTensor::zeros(mesh, Spec(), {4, 2}, DType::f64, "wte"));
  ShardedTensor tokens = testing_ops::token_ids(mesh, {3}, 5);  // 3, 3, 3 -> 3, 8 % 5 = 3, ...
  Tensor bad(Shape{3}, DType::i32);
  bad.data<std::int32_t>()[1] = 4;
  ShardedTensor ids = ShardedTensor::from_global(mesh, Spec(), bad, "tokens");
  try {
    embed(table, ids);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "embed: token id 4 in 'tokens' [3] P(None) is outside the vocabulary [0, 4) of 'wte' "
                           "[4, 2] P(None, None)");
  }
  Var logits(ShardedTensor::zeros(mesh, Spec(), {3, 4}, DType::f64, "logits"));
  try {
    softmax_cross_entropy_with_integer_labels(logits, ids);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "softmax_cross_entropy_with_integer_labels: label 4 in 'tokens' [3] P(None) is outside "
                           "the vocabulary [0, 4) of 'logits' [3, 4] P(None, None)");
  }
  try {
    softmax_cross_entropy_with_integer_labels(logits, tokens);
    softmax_cross_entropy_with_integer_labels(logits, ShardedTensor::zeros(mesh, Spec(), {4}, DType::i32, "y"));
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "softmax_cross_entropy_with_integer_labels: labels 'y' [4] P(None) (i32) do not fit "
                           "logits 'logits' [3, 4] P(None, None) (f64): want i32 labels [rows...] for f32 or f64 "
                           "logits [rows..., V]");
  }
}

// A token id or label outside the vocabulary in one rank's block is an error on every rank, agreed
// on (the ranks that did not hold it waited in the result's all-reduce for ever).
TEST(LmOps, ATokenOutsideTheVocabularyOnOneRankFailsEveryRank) {
  const int n = world_size();
  Mesh mesh = Mesh::world(MeshShape({"data"}, {n}));
  Var table(ShardedTensor::zeros(mesh, Spec(), {8, 2}, DType::f64, "wte"));
  Tensor global(Shape{2 * n}, DType::i32);
  global.data<std::int32_t>()[2 * n - 1] = 100;  // in the last rank's block only
  const ShardedTensor ids = ShardedTensor::from_global(mesh, parse_spec("P(data)"), global, "tokens");
  const std::string from_last = n > 1 ? "rank " + std::to_string(n - 1) + ": " : "";
  try {
    embed(table, ids);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_EQ(std::string(e.what()), from_last + "embed: token id 100 in 'tokens' [" + std::to_string(2 * n) +
                                         "] P(data) is outside the vocabulary [0, 8) of 'wte' [8, 2] P(None, None)");
  }
  Var logits(ShardedTensor::zeros(mesh, parse_spec("P(data)"), {2 * n, 8}, DType::f64, "logits"));
  EXPECT_THROW(softmax_cross_entropy_with_integer_labels(logits, ids), ShapeError);
}

// q, k, v [2, 4, heads, 4] with `spec`, f64 values from `seed`.
std::vector<Var> qkv(const Mesh& mesh, const Spec& spec, std::int64_t heads) {
  std::vector<Var> out;
  for (int i = 0; i < 3; ++i) {
    out.emplace_back(ShardedTensor::from_global(mesh, spec, test_values({2, 4, heads, 4}, 11 + i)), true);
  }
  return out;
}

// Logits near 1000 split over the vocabulary: each slice shifts by the row's maximum over the
// whole vocabulary (the max all-reduce), so the exponentials stay finite and the loss and
// gradient are the one-rank reference's. A shift by another per-row constant (the slices' maxima
// summed) gives the same numbers for small logits, and here exp(-1000): a loss of -inf.
TEST(LmOps, VocabParallelCrossEntropyOfLargeLogitsMatchesOneRank) {
  if (world_size() < 2) GTEST_SKIP() << "needs a model axis of 2";
  VocabParallel s;
  const Shape shape = {s.batch, s.seq, s.vocabulary};
  const auto large = [](std::int64_t i) { return 1000.0 + 0.5 * static_cast<double>((i * 7) % 13); };
  Var logits(ShardedTensor::from_fn(s.mesh, parse_spec("P(data, None, model)"), shape, DType::f32, large, "logits"),
             true);
  Mesh one = testing_util::self_mesh();
  Var ref_logits(ShardedTensor::from_fn(one, Spec(), shape, DType::f32, large, "logits"), true);
  const ShardedTensor ref_tokens = ShardedTensor::from_global(one, Spec(), s.tokens.to_global(), "tokens");
  Var loss = softmax_cross_entropy_with_integer_labels(logits, s.tokens);
  Var want = softmax_cross_entropy_with_integer_labels(ref_logits, ref_tokens);
  const double got_value = scalar_value(loss.value()), want_value = scalar_value(want.value());
  ASSERT_TRUE(std::isfinite(want_value));
  EXPECT_TRUE(std::isfinite(got_value)) << got_value;
  EXPECT_NEAR(got_value, want_value, 1e-5 * std::abs(want_value));
  const auto got_grad = gradients(loss, {logits})[0]->to_global();
  const auto want_grad = gradients(want, {ref_logits})[0]->to_global();
  EXPECT_LT(max_relative_error(got_grad, want_grad), 1e-5);
}

// causal_attention against its formula on one rank: query i mixes the values of keys 0..i with
// the softmax of q_i . k_j / sqrt(d_head). The kernel's tests take the scale as an argument; this
// pins the one the op passes.
TEST(LmOps, CausalAttentionFollowsItsFormula) {
  Mesh mesh = testing_util::self_mesh({"seq", "model"});
  const std::int64_t S = 4, H = 2, D = 4;
  auto in = qkv(mesh, Spec(), H);
  const Tensor q = in[0].value().to_global(), k = in[1].value().to_global(), v = in[2].value().to_global();
  const Tensor y = causal_attention(in[0], in[1], in[2]).value().to_global();
  const auto at = [&](std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t e) {
    return ((b * S + s) * H + h) * D + e;
  };
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t h = 0; h < H; ++h) {
      for (std::int64_t i = 0; i < S; ++i) {
        std::vector<double> p(static_cast<std::size_t>(i + 1));
        double total = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (std::int64_t e = 0; e < D; ++e) dot += q.at(at(b, i, h, e)) * k.at(at(b, j, h, e));
          p[j] = std::exp(dot / std::sqrt(static_cast<double>(D)));
          total += p[j];
        }
        for (std::int64_t e = 0; e < D; ++e) {
          double want = 0;
          for (std::int64_t j = 0; j <= i; ++j) want += p[j] / total * v.at(at(b, j, h, e));
          EXPECT_NEAR(y.at(at(b, i, h, e)), want, 1e-12) << "batch " << b << " head " << h << " query " << i;
        }
      }
    }
  }
}

TEST(LmOps, AttentionWithHeadsSplitMovesNothingAndSequenceSplitGathersKV) {
  if (world_size() < 2) GTEST_SKIP() << "needs two axes of size > 1 or one of 2";
  const int n = world_size();
  const std::int64_t heads = n;
  Mesh one = testing_util::self_mesh({"seq", "model"});
  auto ref = qkv(one, Spec(), heads);
  Tensor want = causal_attention(ref[0], ref[1], ref[2]).value().to_global();
  {
    Mesh mesh = Mesh::world(MeshShape({"seq", "model"}, {1, n}));
    auto x = qkv(mesh, parse_spec("P(None, None, model, None)"), heads);
    CommScope scope;
    Var y = causal_attention(x[0], x[1], x[2]);
    EXPECT_EQ(scope.total_bytes(), 0);
    EXPECT_EQ(y.spec(), x[0].spec());
    EXPECT_LT(max_relative_error(y.value().to_global(), want), 1e-12);
  }
  {
    Mesh mesh = Mesh::world(MeshShape({"seq", "model"}, {2, n / 2}));
    auto x = qkv(mesh, parse_spec("P(None, seq, model, None)"), heads);
    CommScope scope;
    Var y = causal_attention(x[0], x[1], x[2]);
    auto records = scope.records();
    ASSERT_EQ(records.size(), 2u);
    for (const auto& r : records) {
      EXPECT_EQ(r.op, CommOp::all_gather);
      EXPECT_EQ(r.axes, Axes{"seq"});
      EXPECT_EQ(r.dim, 1);
    }
    EXPECT_EQ(y.spec(), x[0].spec());
    EXPECT_LT(max_relative_error(y.value().to_global(), want), 1e-12);
  }
}

}  // namespace
}  // namespace tessera::nn
