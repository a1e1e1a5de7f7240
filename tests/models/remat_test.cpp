// Rematerialisation: gradients bit for bit those of the plain tape (loop and stacked MLPs, on one
// rank and on every 2-D mesh of this rank count, with and without microbatches), a lower peak of
// tensor storage (core/buffer_pool.h's deterministic counter), the forward collectives run twice,
// and the errors of a block that is not closed over its inputs.
#include <gtest/gtest.h>

#include <iostream>

#include "collectives/comm_stats.h"
#include "core/buffer_pool.h"
#include "core/error.h"
#include "nn/einsum.h"
#include "models/mlp.h"
#include "nn/ops.h"
#include "nn/remat.h"
#include "nn/train.h"
#include "tests/nn/nn_test_util.h"
#include "tests/test_meshes.h"

namespace tessera::nn {
namespace {

using models::ApplyContext;
using models::MLP;
using models::tutorial_rules;

using testing_support::world_rank;
using testing_support::world_size;
using testing_util::self_mesh;

std::vector<Mesh> test_meshes() {
  std::vector<Mesh> out = {self_mesh()};
  for (const auto& shape : testing_support::meshes_2d_of_size(world_size())) out.push_back(Mesh::world(shape));
  return out;
}

ShardedTensor input(const Mesh& mesh, std::int64_t batch, std::int64_t features) {
  const RngKey key = rng_key(7, "input");
  return ShardedTensor::from_fn(
      mesh, parse_spec("P(data, None)"), {batch, features}, DType::f32, [&](std::int64_t i) { return normal(key, i); },
      "x");
}

LossFn loss_of(const MLP& mlp, bool remat) {
  return [mlp, remat](const VarTree& params, const Batch& batch) {
    ApplyContext ctx{tutorial_rules()};
    ctx.remat = remat;
    return sum_loss(mlp.apply(ParamView(params), ctx, Var(batch.x)));
  };
}

// Peak tensor bytes above what was live before, during f().
template <class F>
std::size_t peak_during(F&& f) {
  const std::size_t before = live_tensor_bytes();
  reset_peak_tensor_bytes();
  f();
  return peak_tensor_bytes() - before;
}

TEST(Remat, GradientsAreBitExactOnEveryMesh) {
  const std::int64_t batch = 8, features = 16, depth = 32;
  for (bool scan : {false, true}) {
    const MLP mlp{3, depth, scan, false};
    for (const Mesh& mesh : test_meshes()) {
      const ParamTree params = init_params(abstract_init(mlp, mesh.shape(), tutorial_rules(), {batch, features}), mesh, 0);
      const Batch b{input(mesh, batch, features)};
      for (int microbatches : {1, 2}) {
        StepOptions options;
        options.microbatches = microbatches;
        const std::string label = mesh.to_string() + (scan ? " scan" : " loop") + " microbatches " +
                                  std::to_string(microbatches);
        LossAndGrads plain = value_and_grad(params, loss_of(mlp, false), b, options);
        LossAndGrads remat = value_and_grad(params, loss_of(mlp, true), b, options);
        EXPECT_EQ(remat.loss, plain.loss) << label;
        ASSERT_EQ(remat.grads.size(), plain.grads.size());
        for (const auto& [path, g] : plain.grads) {
          EXPECT_EQ(remat.grads.at(path).spec(), g.spec()) << label << " " << path;
          EXPECT_TRUE(remat.grads.at(path).local().bit_equal(g.local())) << label << " " << path;
        }
      }
    }
  }
}

// Per layer the plain tape keeps x @ W1, its relu, the constrained copy, the product with W2 and
// its reduced copy; remat keeps the layer's output alone (and, in the backward pass, one layer's
// recomputation at a time).
TEST(Remat, LowersThePeakOfTensorStorage) {
  const std::int64_t batch = 64, features = 64, depth = 64;
  const int layers = 8;
  const MLP mlp{layers, depth, false, false};
  for (const Mesh& mesh : test_meshes()) {
    const ParamTree params = init_params(abstract_init(mlp, mesh.shape(), tutorial_rules(), {batch, features}), mesh, 0);
    const Batch b{input(mesh, batch, features)};
    const std::size_t plain = peak_during([&] { value_and_grad(params, loss_of(mlp, false), b); });
    const std::size_t remat = peak_during([&] { value_and_grad(params, loss_of(mlp, true), b); });
    // Deterministic: the same program gives the same figure.
    EXPECT_EQ(peak_during([&] { value_and_grad(params, loss_of(mlp, true), b); }), remat);
    // One local activation block of the hidden layer: the rows and columns this rank holds.
    const std::int64_t rows = batch / mesh.shape().axes_size({"data"});
    const std::size_t hidden_block = rows * (depth / mesh.shape().axes_size({"model"})) * 4;
    EXPECT_LT(remat + (layers - 2) * 2 * hidden_block, plain) << mesh.to_string();
    if (world_rank() == 0) {
      std::cout << "peak tensor bytes on " << mesh.to_string() << ": " << plain << " plain, " << remat << " remat\n";
    }
  }
}

// The backward pass runs each block's forward again: its collectives are recorded twice.
TEST(Remat, RecomputesTheForwardCollectives) {
  if (world_size() < 2) GTEST_SKIP() << "needs a model axis";
  Mesh mesh = Mesh::world(MeshShape({"data", "model"}, {world_size() / 2, 2}));
  const MLP mlp{2, 32, false, false};
  const ParamTree params = init_params(abstract_init(mlp, mesh.shape(), tutorial_rules(), {8, 16}), mesh, 0);
  const Batch b{input(mesh, 8, 16)};
  auto records_of = [&](bool remat) {
    CommScope scope;
    value_and_grad(params, loss_of(mlp, remat), b);
    return scope.count(CommOp::all_reduce);
  };
  ParamTree lent = params;
  CommScope forward;
  infer_step(lent,
             [&](const VarTree& p, const Var& x) { return mlp.apply(ParamView(p), ApplyContext{tutorial_rules()}, x); },
             b.x);
  const int forward_all_reduces = forward.count(CommOp::all_reduce);
  EXPECT_GT(forward_all_reduces, 0);
  EXPECT_EQ(records_of(true), records_of(false) + forward_all_reduces);
}

TEST(Remat, DuplicatedInputsAndConstants) {
  Mesh mesh = self_mesh();
  auto value = [&](int seed) {
    return ShardedTensor::from_global(mesh, Spec::replicated(2), testing_util::test_values({4, 4}, seed, DType::f32), "v");
  };
  Var w(value(1), true);
  Var c(value(2), false);
  auto block = [](const std::vector<Var>& a) { return mul(einsum("ij,jk->ik", a[0], a[1]), a[2]); };
  Var plain = sum_loss(block({w, w, c}));
  Var block_out = remat(block, "square")({w, w, c});
  EXPECT_EQ(block_out.node()->op, "remat:square");
  EXPECT_EQ(block_out.node()->inputs.size(), 3u);  // the tape holds the inputs and the result only
  Var rematted = sum_loss(block_out);
  auto g_plain = gradients(plain, {w});
  auto g_remat = gradients(rematted, {w});
  ASSERT_TRUE(g_plain[0] && g_remat[0]);
  EXPECT_TRUE(g_remat[0]->local().bit_equal(g_plain[0]->local()));
  EXPECT_FALSE(remat(block)({c, c, c}).requires_grad());
}

TEST(Remat, ABlockThatCapturesAVariableIsAnError) {
  Mesh mesh = self_mesh();
  Var x(ShardedTensor::from_global(mesh, Spec::replicated(2), testing_util::test_values({2, 2}, 3, DType::f32), "x"), true);
  Var w(ShardedTensor::from_global(mesh, Spec::replicated(2), testing_util::test_values({2, 2}, 4, DType::f32), "w"), true);
  Var y = remat([&w](const std::vector<Var>& a) { return einsum("ij,jk->ik", a[0], w); }, "leaky")({x});
  try {
    gradients(sum_loss(y), {x, w});
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "remat 'leaky': the block uses a Var that needs a gradient and is not one of its inputs (op 'leaf'); "
                 "pass it as an input");
  }
  // The inputs' values are back in their nodes after the error.
  EXPECT_EQ(x.value().local().shape(), (Shape{2, 2}));
}

}  // namespace
}  // namespace tessera::nn
