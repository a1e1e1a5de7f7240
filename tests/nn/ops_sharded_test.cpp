// Every op on every mesh of this rank count, for a spread of input specs (partial ones
// included, and uneven ones: 6 over 4 ranks, a size-1 or size-2 dimension split 4 or 8 ways,
// under the block rule of core/spec.h): loss and gradients equal the one-rank reference, and
// each gradient comes back in its input's spec without partial axes.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "collectives/comm_stats.h"
#include "collectives/reshard.h"
#include "core/error.h"
#include "nn/einsum.h"
#include "nn/train.h"
#include "tests/nn/nn_test_util.h"
#include "tests/nn/op_cases.h"
#include "tests/test_meshes.h"

namespace tessera {
// Readable records in failure messages.
inline void PrintTo(const CommRecord& r, std::ostream* os) { *os << to_string(r) << " dim " << r.dim; }
}  // namespace tessera

namespace tessera::nn {
namespace {

using testing_ops::op_cases;
using testing_support::all_specs;
using testing_support::meshes_of_size;
using testing_support::world_size;
using testing_util::max_relative_error;
using testing_util::self_mesh;
using testing_util::test_values;


TEST(OpsSharded, LossAndGradientsMatchOneRankOnEveryMesh) {
  const int samples_per_op = 8;
  int checked = 0, uneven = 0;
  for (const auto& shape : meshes_of_size(world_size(), true)) {
    Mesh mesh = Mesh::world(shape);
    Mesh one = self_mesh(shape.names());
    for (const auto& c : op_cases()) {
      std::vector<Tensor> inputs;
      std::vector<std::vector<Spec>> specs;
      for (std::size_t i = 0; i < c.shapes.size(); ++i) {
        inputs.push_back(test_values(c.shapes[i], static_cast<int>(i) + 7, DType::f64, c.positive_inputs));
        specs.push_back(testing_support::valid_specs(shape, c.shapes[i], true));
      }
      // Reference on one rank.
      std::vector<Var> ref_vars;
      for (const auto& t : inputs) ref_vars.emplace_back(ShardedTensor::from_global(one, Spec(), t), true);
      Var ref_loss = c.fn(ref_vars);
      auto ref_grads = gradients(ref_loss, ref_vars);
      const double ref_value = scalar_value(ref_loss.value());
      const std::size_t n0 = specs[0].size();
      const std::size_t stride = std::max<std::size_t>(1, n0 / samples_per_op);
      for (std::size_t k = 0; k < n0; k += stride) {
        std::vector<Var> vars;
        std::string label = shape.to_string() + " " + c.name + ":";
        for (std::size_t i = 0; i < inputs.size(); ++i) {
          const Spec& s = specs[i][(k * (2 * i + 1) + 3 * i) % specs[i].size()];
          label += " " + s.to_string();
          vars.emplace_back(ShardedTensor::from_global(mesh, s, inputs[i]), true);
          uneven += !splits_evenly(s.padded(static_cast<int>(c.shapes[i].size())), shape, c.shapes[i]);
        }
        if (std::getenv("TRACE_CASES")) std::fprintf(stderr, "%s\n", label.c_str());
        Var loss = c.fn(vars);
        EXPECT_NEAR(scalar_value(loss.value()), ref_value, 1e-10 * std::max(1.0, std::abs(ref_value))) << label;
        auto grads = gradients(loss, vars);
        for (std::size_t i = 0; i < vars.size(); ++i) {
          ASSERT_TRUE(grads[i].has_value()) << label;
          EXPECT_EQ(grads[i]->spec(), vars[i].spec().without_partial()) << label << " input " << i;
          EXPECT_LT(max_relative_error(grads[i]->to_global(), ref_grads[i]->to_global(), 1e-12), 1e-10)
              << label << " input " << i;
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
  if (world_size() >= 4) {
    EXPECT_GT(uneven, 0);
  }
}

// einsum_toward (nn/einsum.h): the weight gradient x^T g of a batch split over data. Wanted
// replicated, a small batch gathers x and g over data, (n-1) blocks each, and computes the whole
// gradient on every rank, bit for bit the one-rank product; a large batch keeps the partial
// product and its all-reduce. Wanted split over data (FSDP), the factors move so that each rank
// computes its own rows of the gradient.
TEST(OpsSharded, WeightGradientOfASmallBatchGathersItsOperands) {
  const int n = world_size();
  if (n < 2) GTEST_SKIP() << "needs a data axis";
  Mesh mesh = Mesh::world(MeshShape({"data"}, {n}));
  Mesh one = self_mesh({"data"});
  const auto value = [](std::int64_t i) { return 0.01 * static_cast<double>((i * 37) % 101) - 0.5; };
  const auto weight_gradient = [&](std::int64_t batch, std::int64_t d, std::int64_t h, const Spec& want,
                                   std::vector<CommRecord>& records) {
    const auto x = ShardedTensor::from_fn(mesh, parse_spec("P(data, None)"), {batch, d}, DType::f32, value, "x");
    const auto g = ShardedTensor::from_fn(mesh, parse_spec("P(data, None)"), {batch, h}, DType::f32, value, "g");
    const CommScope scope;
    ShardedTensor out = einsum_toward("bd,bh->dh", x, g, want);
    records = scope.records();
    return out;
  };
  const auto one_rank = [&](std::int64_t batch, std::int64_t d, std::int64_t h) {
    const auto x = ShardedTensor::from_fn(one, Spec(), {batch, d}, DType::f32, value, "x");
    const auto g = ShardedTensor::from_fn(one, Spec(), {batch, h}, DType::f32, value, "g");
    return einsum("bd,bh->dh", x, g).to_global();
  };
  // 2 rows per rank, a 256 x 128 gradient: on 8 ranks the gathers send 7 x 2 x (256 + 128) x 4
  // bytes and add 2 x 256 x 128 x 14 FLOPs (28672 bytes' worth), against an all-reduce of 229376.
  const std::int64_t rows = 2 * n;
  std::vector<CommRecord> records;
  const ShardedTensor small = weight_gradient(rows, 256, 128, Spec::replicated(2), records);
  EXPECT_EQ(small.spec().to_string(), Spec::replicated(2).to_string());
  EXPECT_EQ(records, (std::vector<CommRecord>{{CommOp::all_gather, {"data"}, 0, (n - 1) * 2 * 256 * 4},
                                              {CommOp::all_gather, {"data"}, 0, (n - 1) * 2 * 128 * 4}}));
  const Tensor want_small = one_rank(rows, 256, 128);
  EXPECT_EQ(std::memcmp(small.local().raw(), want_small.raw(), want_small.nbytes()), 0);

  // 512 rows per rank of 16 features: the factors are 32 times the 16 x 8 gradient.
  const ShardedTensor large = weight_gradient(512 * n, 16, 8, Spec::replicated(2), records);
  EXPECT_EQ(large.spec().to_string(), parse_spec("P(None, None; partial=data)").to_string());
  EXPECT_TRUE(records.empty());
  EXPECT_LT(max_relative_error(tessera::reshard(large, Spec::replicated(2)).to_global(), one_rank(512 * n, 16, 8), 1e-12),
            1e-5);

  // Wanted split over data itself (FSDP's weight): x trades its batch split for d's (an
  // all-to-all), g is gathered, and each rank computes exactly its rows of the gradient, with no
  // more FLOPs than the partial product; the reduce-scatter of the 256 x 128 gradient is gone.
  const ShardedTensor fsdp = weight_gradient(rows, 256, 128, parse_spec("P(data, None)"), records);
  EXPECT_EQ(fsdp.spec().to_string(), parse_spec("P(data, None)").to_string());
  EXPECT_EQ(records,
            (std::vector<CommRecord>{{CommOp::all_to_all, {"data"}, 1, send_bytes(CommOp::all_to_all, n, 2 * 256 * 4)},
                                     {CommOp::all_gather, {"data"}, 0, (n - 1) * 2 * 128 * 4}}));
  EXPECT_LT(max_relative_error(fsdp.to_global(), want_small, 1e-12), 1e-6);

  // Through the tape: the gradient of a replicated weight comes back replicated, from the gathers.
  Var x(ShardedTensor::from_fn(mesh, parse_spec("P(data, None)"), {rows, 256}, DType::f32, value, "x"), false);
  Var w(ShardedTensor::from_fn(mesh, Spec::replicated(2), {256, 128}, DType::f32, value, "W"), true);
  Var loss = sum(einsum("bd,dh->bh", x, w));
  const CommScope scope;
  auto grads = gradients(loss, {w});
  EXPECT_EQ(grads[0]->spec().to_string(), Spec::replicated(2).to_string());
  EXPECT_EQ(scope.count(CommOp::all_gather), 2);
  EXPECT_EQ(scope.count(CommOp::all_reduce), 0);
}

// A stacked weight used whole and through take_layer: value_and_grad keeps its cotangent raw
// (partial over data from the whole use's contraction over the split batch, or split over data from
// a product with a tensor split so), and the layer's slab lands in it as the one-rank gradient
// has it, whichever use the backward meets first. Until the forty-fourth session the slab was added
// to every rank's partial share (counted once per rank: 0.899 for 0.599 on 2 ranks) or refused
// ("add_to_slab: slab [4, 8] is not a slab of [2, 4, 4]").
TEST(OpsSharded, AStackedWeightUsedWholeAndByLayerGetsTheOneRankGradient) {
  const int n = world_size();
  Mesh mesh = Mesh::world(MeshShape({"data"}, {n}));
  Mesh one = self_mesh({"data"});
  const Tensor w = testing_util::test_values({2, 8, 8}, 2), x = testing_util::test_values({8 * n, 8}, 1);
  const Tensor c = testing_util::test_values({2, 8, 8}, 3);
  for (const bool split_use : {false, true}) {
    for (const bool layer_first : {false, true}) {
      const auto loss_on = [&](const Mesh& m) {
        return [&, m](const VarTree& p, const Batch& batch) {
          const Var& W = p.at("W");
          const Var whole = split_use ? sum(mul(W, Var(ShardedTensor::from_global(m, parse_spec("P(None, None, data)"), c, "C"))))
                                      : sum(einsum("bk,lkn->bln", Var(batch.x), W));
          const Var layer = sum(einsum("bk,kn->bn", Var(batch.x), take_layer(W, 0)));
          return layer_first ? add(whole, layer) : add(layer, whole);
        };
      };
      const auto run = [&](const Mesh& m, const char* x_spec) {
        ParamTree params;
        params.emplace("W", ShardedTensor::from_global(m, Spec(), w, "W"));
        return value_and_grad(params, loss_on(m), Batch{ShardedTensor::from_global(m, parse_spec(x_spec), x, "x")});
      };
      const auto want = run(one, "P()");
      const auto got = run(mesh, "P(data, None)");
      const std::string label = std::string(split_use ? "split" : "partial") + (layer_first ? ", layer first" : "");
      EXPECT_NEAR(got.loss, want.loss, 1e-9 * std::abs(want.loss)) << label;
      EXPECT_LT(max_relative_error(got.grads.at("W").to_global(), want.grads.at("W").to_global(), 1e-12), 1e-12)
          << label;
    }
  }
}

// A contraction's decisions are cached per process (nn/einsum.cpp, plan_contraction): the same
// arguments again run the same collectives, in the same order, and give the same bits, whether
// the first call aligned the operands (w's rows split like x's batch: one of them resharded), had
// a partial operand's axis resolved first, or moved both factors toward a wanted spec. Shapes
// that no other test contracts, so that the first call of each is planned.
TEST(OpsSharded, AContractionMetAgainReplaysItsPlan) {
  const int n = world_size();
  if (n < 2) GTEST_SKIP() << "needs a data axis";
  Mesh mesh = Mesh::world(MeshShape({"data"}, {n}));
  const auto value = [](std::int64_t i) { return 0.01 * static_cast<double>((i * 37) % 101) - 0.5; };
  const auto operand = [&](const char* spec, Shape shape, const char* name) {
    return ShardedTensor::from_fn(mesh, parse_spec(spec), std::move(shape), DType::f32, value, name);
  };
  const std::int64_t b = 2 * n, d = 264, h = 136;
  const ShardedTensor x = operand("P(data, None)", {b, d}, "x");
  const ShardedTensor w = operand("P(data, None)", {d, h}, "w");
  const ShardedTensor g = operand("P(data, None)", {b, h}, "g");
  // A partial operand whose partial axis the other operand splits: resolved before the product.
  const ShardedTensor partial = tessera::reshard(operand("P(None, None)", {b, d}, "p"), parse_spec("P(None, None; partial=data)"));
  struct Case {
    std::string label;
    std::function<ShardedTensor()> run;
  };
  const std::vector<Case> cases = {
      {"aligned", [&] { return einsum("bd,dh->bh", x, w); }},
      {"partial", [&] { return einsum("bd,dh->bh", partial, w); }},
      {"moved", [&] { return einsum_toward("bd,bh->dh", x, g, parse_spec("P(data, None)")); }},
  };
  for (const Case& c : cases) {
    std::vector<std::vector<CommRecord>> records(2);
    std::vector<ShardedTensor> out;
    for (int call = 0; call < 2; ++call) {
      const CommScope scope;
      out.push_back(c.run());
      records[call] = scope.records();
    }
    EXPECT_FALSE(records[0].empty()) << c.label;
    EXPECT_EQ(records[1], records[0]) << c.label;
    EXPECT_EQ(out[1].spec().to_string(), out[0].spec().to_string()) << c.label;
    ASSERT_EQ(out[1].local().nbytes(), out[0].local().nbytes()) << c.label;
    EXPECT_EQ(std::memcmp(out[1].local().raw(), out[0].local().raw(), out[0].local().nbytes()), 0) << c.label;
  }
}

// A product or quotient keeps a partial operand partial, its parts' results summing to the result,
// except where they do not: a factor that is infinite (a part of 0 times inf is nan) or a divisor
// that is 0 (parts 2 and -1 over 0 give inf - inf = nan, their sum 1 over 0 gives inf). There the
// operand is summed first, on every rank alike: the ranks agree on whether any block holds such an
// element, here the last model block only. The results are exact: the sum of the parts is 1.
TEST(OpsSharded, APartialOperandIsSummedBeforeAZeroDivisorOrAnInfiniteFactor) {
  const int n = world_size();
  if (n < 2 || n % 2 != 0) GTEST_SKIP() << "needs a data axis of 2";
  Mesh mesh = Mesh::world(MeshShape({"data", "model"}, {2, n / 2}));
  const std::int64_t m = n;  // two elements in each model block
  const int data = mesh.coords()[0];
  // Parts over data: `first` on data coordinate 0, `second` on 1; two elements per model block.
  const auto parts = [&](double first, double second) {
    return ShardedTensor(mesh, parse_spec("P(model; partial=data)"), {m}, Tensor::full({2}, data == 0 ? first : second), "x");
  };
  // i + 1 at element i, except the last element: `last`.
  const auto factor = [&](double last) {
    return ShardedTensor::from_fn(
        mesh, parse_spec("P(model)"), {m}, DType::f32,
        [&](std::int64_t i) { return i == m - 1 ? last : static_cast<double>(i + 1); }, "b");
  };
  const auto whole = [](const ShardedTensor& y) {
    const ShardedTensor all = tessera::reshard(y, parse_spec("P(None)"));
    const float* v = all.local().data<float>();
    return std::vector<float>(v, v + all.local().numel());
  };
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> quotients, products;
  for (std::int64_t i = 0; i < m; ++i) {
    quotients.push_back(i == m - 1 ? inf : 1.0f / static_cast<float>(i + 1));
    products.push_back(i == m - 1 ? inf : static_cast<float>(i + 1));
  }
  const ShardedTensor quotient = binary(BinaryOp::div, parts(2, -1), factor(0));
  EXPECT_FALSE(quotient.spec().is_partial());
  EXPECT_EQ(whole(quotient), quotients);
  const ShardedTensor product = binary(BinaryOp::mul, parts(0, 1), factor(inf));
  EXPECT_FALSE(product.spec().is_partial());
  EXPECT_EQ(whole(product), products);
  const ShardedTensor product_b = binary(BinaryOp::mul, factor(inf), parts(0, 1));
  EXPECT_FALSE(product_b.spec().is_partial());
  EXPECT_EQ(whole(product_b), products);
  const ShardedTensor scaled = scale(parts(0, 1), inf);
  EXPECT_FALSE(scaled.spec().is_partial());
  EXPECT_EQ(whole(scaled), std::vector<float>(m, inf));
  // Without such an element the operand stays partial, as before.
  const ShardedTensor kept = binary(BinaryOp::div, parts(2, -1), factor(m));
  EXPECT_EQ(kept.spec().to_string(), parse_spec("P(model; partial=data)").to_string());
  const std::vector<float> kept_values = whole(kept);
  for (std::int64_t i = 0; i < m; ++i) {
    EXPECT_FLOAT_EQ(kept_values[i], 1.0f / static_cast<float>(i == m - 1 ? m : i + 1)) << i;
  }
}

TEST(OpsSharded, MismatchedEinsumShapesAreAnErrorOnEveryRank) {
  Mesh mesh = Mesh::world(MeshShape({"data"}, {world_size()}));
  auto a = ShardedTensor::zeros(mesh, Spec(), {8, 16}, DType::f32, "x");
  auto b = ShardedTensor::zeros(mesh, Spec(), {12, 4}, DType::f32, "W1");
  try {
    einsum("bd,dh->bh", a, b);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "einsum 'bd,dh->bh': letter 'd' is 16 in 'x' [8, 16] but 12 in 'W1' [12, 4]");
  }
  try {
    einsum("bd,d->bh", a, b);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "einsum 'bd,d->bh': output letter 'h' is in no operand");
  }
}

TEST(OpsSharded, OperandsOnAnotherMeshAreAnError) {
  Mesh mesh = Mesh::world(MeshShape({"data"}, {world_size()}));
  Mesh other = Mesh::world(MeshShape({"data"}, {world_size()}));
  auto a = ShardedTensor::zeros(mesh, Spec(), {8, 8}, DType::f32, "x");
  auto b = ShardedTensor::zeros(other, Spec(), {8, 8}, DType::f32, "W");
  try {
    einsum("bd,dh->bh", a, b);
    FAIL();
  } catch (const MeshError& e) {
    const std::string m = "mesh(data: " + std::to_string(world_size()) + ")";
    EXPECT_EQ(std::string(e.what()),
              "einsum 'bd,dh->bh': operands 'x' on " + m + " and 'W' on " + m + " live on different meshes");
  }
}

}  // namespace
}  // namespace tessera::nn
