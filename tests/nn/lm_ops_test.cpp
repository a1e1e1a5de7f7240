// The language-model ops (activations, normalisations) beyond the every-mesh and
// finite-difference suites that op_cases.h feeds: each one inside shard_map on the local one-rank
// mesh gives the global view's loss and gradients, and bad input names the op and the tensors.
#include <gtest/gtest.h>

#include "core/error.h"
#include "nn/activations.h"
#include "nn/normalization.h"
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

}  // namespace
}  // namespace tessera::nn
