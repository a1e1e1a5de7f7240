// Every op on every mesh of this rank count, for a spread of input specs (partial ones
// included, and uneven ones: 6 over 4 ranks, a size-1 or size-2 dimension split 4 or 8 ways,
// under the block rule of core/spec.h): loss and gradients equal the one-rank reference, and
// each gradient comes back in its input's spec without partial axes.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "tests/nn/nn_test_util.h"
#include "tests/nn/op_cases.h"
#include "tests/test_meshes.h"

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
