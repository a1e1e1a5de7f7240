// Finite-difference gradient checks in f64 on one rank for every op (relative error < 1e-6).
#include <gtest/gtest.h>

#include <cmath>

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

}  // namespace
}  // namespace tessera::nn
