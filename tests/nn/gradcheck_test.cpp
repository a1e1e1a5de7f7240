// Finite-difference gradient checks in f64 on one rank for every op (relative error < 1e-6).
#include <gtest/gtest.h>

#include <cmath>

#include "tests/collectives/expect_error.h"
#include "tests/nn/nn_test_util.h"
#include "tests/nn/op_cases.h"

namespace tessera::nn {
namespace {

using testing_ops::op_cases;
using testing_util::self_mesh;
using testing_util::test_values;

double evaluate(const testing_ops::OpCase& c, const Mesh& mesh, const std::vector<Tensor>& inputs) {
  std::vector<Var> vars;
  for (const auto& t : inputs) vars.emplace_back(ShardedTensor::from_global(mesh, Spec(), t));
  return scalar_value(c.fn(vars).value());
}

TEST(GradCheck, EveryOpMatchesCentralDifferences) {
  Mesh mesh = self_mesh();
  for (const auto& c : op_cases()) {
    std::vector<Tensor> inputs;
    for (std::size_t i = 0; i < c.shapes.size(); ++i) {
      inputs.push_back(test_values(c.shapes[i], static_cast<int>(i) + 1, DType::f64, c.positive_inputs));
    }
    std::vector<Var> vars;
    for (const auto& t : inputs) vars.emplace_back(ShardedTensor::from_global(mesh, Spec(), t), true);
    Var loss = c.fn(vars);
    auto grads = gradients(loss, vars);
    const double h = 1e-6;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      ASSERT_TRUE(grads[i].has_value()) << c.name << " input " << i;
      Tensor analytic = grads[i]->to_global();
      Tensor numeric(inputs[i].shape(), DType::f64);
      for (std::int64_t j = 0; j < inputs[i].numel(); ++j) {
        auto perturbed = inputs;
        perturbed[i].data<double>()[j] += h;
        double up = evaluate(c, mesh, perturbed);
        perturbed[i].data<double>()[j] -= 2 * h;
        double down = evaluate(c, mesh, perturbed);
        numeric.data<double>()[j] = (up - down) / (2 * h);
      }
      double num = 0, den = 0;
      for (std::int64_t j = 0; j < numeric.numel(); ++j) {
        num += std::pow(analytic.at(j) - numeric.at(j), 2);
        den = std::max(den, std::max(std::abs(analytic.at(j)), std::abs(numeric.at(j))));
      }
      double rel = std::sqrt(num / numeric.numel()) / den;
      EXPECT_LT(rel, 1e-6) << c.name << " input " << i;
    }
  }
}

TEST(GradCheck, UnusedInputHasNoGradient) {
  Mesh mesh = self_mesh();
  Var a(ShardedTensor::from_global(mesh, Spec(), test_values({3}, 1)), true);
  Var b(ShardedTensor::from_global(mesh, Spec(), test_values({3}, 2)), true);
  auto grads = gradients(sum(square(a)), {a, b});
  EXPECT_TRUE(grads[0].has_value());
  EXPECT_FALSE(grads[1].has_value());
}

TEST(GradCheck, SharedInputAccumulates) {
  Mesh mesh = self_mesh();
  Tensor x = test_values({5}, 3);
  Var a(ShardedTensor::from_global(mesh, Spec(), x), true);
  // d/da sum(a*a + a) = 2a + 1
  auto grads = gradients(sum(add(mul(a, a), a)), {a});
  Tensor g = grads[0]->to_global();
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(g.at(i), 2 * x.at(i) + 1, 1e-12);
}

// A variable listed twice gets its gradient at both places (the second was an empty tensor).
TEST(GradCheck, VariableListedTwiceGetsItsGradientTwice) {
  Mesh mesh = self_mesh();
  Tensor x = test_values({4}, 5);
  Var a(ShardedTensor::from_global(mesh, Spec(), x), true);
  auto grads = gradients(sum(square(a)), {a, a});
  ASSERT_TRUE(grads[0].has_value() && grads[1].has_value());
  const Tensor g0 = grads[0]->to_global(), g1 = grads[1]->to_global();
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(g0.at(i), 2 * x.at(i), 1e-12);
    EXPECT_EQ(g1.at(i), g0.at(i));
  }
}

// The seed-less form takes a scalar output, as JAX's grad (a seed of ones summed a vector output in
// silence); an explicit seed must have the output's mesh and dtype.
TEST(GradCheck, OutputAndSeedAreChecked) {
  Mesh mesh = self_mesh();
  Var a(ShardedTensor::from_global(mesh, Spec(), test_values({4}, 6)), true);
  testing_support::expect_error<ShapeError>(
      [&] { gradients(square(a), {a}); },
      "gradients: the output has shape [4], not a scalar's []; pass a seed of its shape for a vector-Jacobian product");
  Var y = square(a);
  testing_support::expect_error<DTypeError>(
      [&] { gradients(y, ShardedTensor::zeros(mesh, Spec(), {4}, DType::f32), {a}); },
      "gradients: seed of dtype f32 for an output of dtype f64");
  Mesh other = self_mesh();
  testing_support::expect_error<MeshError>(
      [&] { gradients(y, ShardedTensor::zeros(other, Spec(), {4}, DType::f64), {a}); },
      "gradients: operands '' on " + mesh.to_string() + " and '' on " + other.to_string() + " live on different meshes");
  auto grads = gradients(y, ShardedTensor::from_global(mesh, Spec(), Tensor::full({4}, 1.0, DType::f64)), {a});
  EXPECT_TRUE(grads[0].has_value());
}

// A dimension given twice was summed once, in silence: sum(x, {0, 0}) of a [2, 3] tensor gave
// shape [3]. It is refused, as JAX's "repeated axis", also when one of the two is negative.
TEST(GradCheck, SumRefusesARepeatedDimension) {
  Mesh mesh = self_mesh();
  Var a(ShardedTensor::from_global(mesh, Spec(), test_values({2, 3}, 7)), true);
  testing_support::expect_error<ShapeError>([&] { sum(a, {0, 0}); }, "sum: dimension 0 is given twice");
  testing_support::expect_error<ShapeError>([&] { mean(a, {1, -1}); }, "mean: dimension 1 is given twice");
  testing_support::expect_error<ShapeError>([&] { sum(a.value(), {-1, 1}, true); }, "sum: dimension 1 is given twice");
  testing_support::expect_error<ShapeError>([&] { sum(a, {2}); },
                                            "sum: dimension 2 is out of range for a tensor of 2 dimensions");
  testing_support::expect_error<ShapeError>([&] { sum(a, {-3}); },
                                            "sum: dimension -3 is out of range for a tensor of 2 dimensions");
  EXPECT_EQ(sum(a, {1, 0}).shape(), (Shape{}));
  EXPECT_EQ(sum(a, {-1}).shape(), (Shape{2}));
  // The shape ops name a dimension out of range as it was given (transpose named -3 as -1).
  testing_support::expect_error<ShapeError>([&] { transpose(a, 0, -3); },
                                            "transpose: dimension -3 out of range for '' [2, 3] P(None, None)");
  // One past the last dimension is out of range too (transpose swapped past the end of its perm).
  testing_support::expect_error<ShapeError>([&] { transpose(a, 0, 2); },
                                            "transpose: dimension 2 out of range for '' [2, 3] P(None, None)");
}

// A stacked variable's cotangent built slab by slab (take_layer's backward, GradSink::add_slab):
// a slab taken twice sums both, a slab never taken is zero, and a use of the whole stack adds to
// every slab, whichever comes first in the backward pass. The cotangent's first slab is copied
// into memory that is not zeroed first, so the buffers the pool hands out are filled with NaN
// beforehand (64 KiB and more are pooled): a slab left unwritten would show.
TEST(GradCheck, StackedCotangentSumsItsSlabs) {
  Mesh mesh = self_mesh();
  constexpr std::int64_t layers = 4, width = 2048;  // 64 KiB of f64
  const Tensor x = test_values({layers, width}, 4);
  const Tensor w0 = test_values({width}, 5), w1 = test_values({width}, 6), w2 = test_values({width}, 7);
  const Tensor v = test_values({layers, width}, 8);
  Var s(ShardedTensor::from_global(mesh, Spec(), x), true);
  const auto constant = [&](const Tensor& t) { return Var(ShardedTensor::from_global(mesh, Spec(), t)); };
  const Var slabs = add(add(sum(mul(take_layer(s, 0), constant(w0))), sum(mul(take_layer(s, 0), constant(w1)))),
                        sum(mul(take_layer(s, 2), constant(w2))));
  for (const bool whole : {false, true}) {
    const Var y = whole ? add(slabs, sum(mul(s, constant(v)))) : slabs;
    {
      std::vector<Tensor> junk;
      for (int i = 0; i < 4; ++i) junk.push_back(Tensor::full({layers, width}, std::nan(""), DType::f64));
    }
    const Tensor g = gradients(y, {s})[0]->to_global();
    ASSERT_EQ(g.shape(), (Shape{layers, width}));
    for (std::int64_t layer = 0; layer < layers; ++layer) {
      for (std::int64_t j = 0; j < width; ++j) {
        double want = layer == 0 ? w0.at(j) + w1.at(j) : layer == 2 ? w2.at(j) : 0.0;
        if (whole) want += v.at(layer * width + j);
        ASSERT_NEAR(g.at(layer * width + j), want, 1e-12) << "whole " << whole << " layer " << layer << " column " << j;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::nn
