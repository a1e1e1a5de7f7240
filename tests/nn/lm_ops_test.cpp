// The language-model ops (activations, normalisations) beyond the every-mesh and
// finite-difference suites that op_cases.h feeds: each one inside shard_map on the local one-rank
// mesh gives the global view's loss and gradients, and bad input names the op and the tensors.
#include <gtest/gtest.h>

#include "collectives/comm_stats.h"
#include "core/error.h"
#include "nn/activations.h"
#include "nn/normalization.h"
#include "nn/shape_ops.h"
#include "nn/shard_map.h"
#include "tests/nn/nn_test_util.h"
#include "tests/nn/op_cases.h"
#include "tests/test_meshes.h"

namespace tessera::nn {
namespace {

using testing_support::world_size;
using testing_util::max_relative_error;
using testing_util::test_values;

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

TEST(LmOps, ActivationsAreStableAtLargeInputsInF32) {
  Mesh mesh = testing_util::self_mesh();
  Tensor t(Shape{4}, DType::f32);
  float* v = t.data<float>();
  v[0] = -1000.f;
  v[1] = 1000.f;
  v[2] = -30.f;
  v[3] = 30.f;
  Var x(ShardedTensor::from_global(mesh, Spec(), t), true);
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
                                           " shards of dimension 1; reshard it first");
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
}

}  // namespace
}  // namespace tessera::nn
