// Optimizers against optax's update rules written out by hand, over several steps, and the
// inference step (lends the parameters, leaves them unchanged).
#include <gtest/gtest.h>

#include <cmath>

#include "models/mlp.h"
#include "nn/optim.h"
#include "nn/ops.h"
#include "nn/train.h"
#include "tests/nn/nn_test_util.h"
#include "tests/test_meshes.h"

namespace tessera::nn {
namespace {

using models::ApplyContext;
using models::MLP;
using models::tutorial_rules;

using testing_util::self_mesh;

const std::vector<double> kStart = {0.5, -1.0, 2.0, 0.0};
const std::vector<std::vector<double>> kGrads = {{0.1, -0.2, 0.3, 0.0}, {-0.05, 0.4, 0.1, 1e-3}, {0.2, 0.2, -0.6, -2.0}};

ParamTree tree_of(const Mesh& mesh, const std::vector<double>& values) {
  ParamTree t;
  t.emplace("w", ShardedTensor::from_global(mesh, Spec(), Tensor::from_vector<double>({4}, values), "w"));
  return t;
}

std::vector<double> values_of(const ParamTree& t) {
  std::vector<double> v;
  for (double x : t.at("w").local().values<double>()) v.push_back(x);
  return v;
}

std::vector<double> run(const Optimizer& opt) {
  Mesh mesh = self_mesh();
  ParamTree params = tree_of(mesh, kStart);
  OptState state = opt.init(params);
  for (const auto& g : kGrads) opt.update(params, tree_of(mesh, g), state);
  EXPECT_EQ(state.count, 3);
  return values_of(params);
}

// optax.adam / adamw (scale_by_adam, add_decayed_weights, scale_by_learning_rate).
std::vector<double> adam_reference(double lr, double b1, double b2, double eps, double wd) {
  std::vector<double> p = kStart, mu(4, 0), nu(4, 0);
  for (std::size_t t = 1; t <= kGrads.size(); ++t) {
    for (int i = 0; i < 4; ++i) {
      const double g = kGrads[t - 1][i];
      mu[i] = b1 * mu[i] + (1 - b1) * g;
      nu[i] = b2 * nu[i] + (1 - b2) * g * g;
      const double mu_hat = mu[i] / (1 - std::pow(b1, t));
      const double nu_hat = nu[i] / (1 - std::pow(b2, t));
      p[i] += -lr * (mu_hat / (std::sqrt(nu_hat) + eps) + wd * p[i]);
    }
  }
  return p;
}

// optax.sgd with momentum (trace: t = g + m t; nesterov: g + m t).
std::vector<double> sgd_reference(double lr, double m, bool nesterov) {
  std::vector<double> p = kStart, trace(4, 0);
  for (const auto& g : kGrads) {
    for (int i = 0; i < 4; ++i) {
      trace[i] = g[i] + m * trace[i];
      p[i] -= lr * (nesterov ? g[i] + m * trace[i] : trace[i]);
    }
  }
  return p;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "element " << i;
}

TEST(Optim, AdamFollowsOptax) { expect_near(run(adam(0.1)), adam_reference(0.1, 0.9, 0.999, 1e-8, 0.0)); }

TEST(Optim, AdamWFollowsOptax) {
  expect_near(run(adamw(0.1, 0.01)), adam_reference(0.1, 0.9, 0.999, 1e-8, 0.01));
}

TEST(Optim, SgdWithMomentumFollowsOptax) {
  expect_near(run(sgd(0.1)), sgd_reference(0.1, 0.0, false));
  expect_near(run(sgd(0.1, 0.9)), sgd_reference(0.1, 0.9, false));
  expect_near(run(sgd(0.1, 0.9, true)), sgd_reference(0.1, 0.9, true));
}

TEST(Optim, GradientInAnotherSpecIsAnError) {
  Mesh mesh = Mesh::world(MeshShape({"data"}, {testing_support::world_size()}));
  ParamTree params;
  params.emplace("w", ShardedTensor::zeros(mesh, parse_spec("P(data)"), {8 * testing_support::world_size()},
                                           DType::f32, "w"));
  ParamTree grads;
  grads.emplace("w", ShardedTensor::zeros(mesh, parse_spec("P()"), {8 * testing_support::world_size()}, DType::f32));
  OptState state = adam(0.1).init(params);
  EXPECT_THROW(adam(0.1).update(params, grads, state), ShapeError);
}

TEST(InferStep, ForwardWithoutTapeLeavesParametersUnchanged) {
  Mesh mesh = Mesh::world(MeshShape({"data", "model"}, {1, testing_support::world_size()}));
  MLP mlp{2, 16, false, false};
  ParamTree params = init_params(abstract_init(mlp, mesh.shape(), tutorial_rules(), {4, 8}), mesh, 1);
  ParamTree before = params;
  auto x = ShardedTensor::from_fn(
      mesh, parse_spec("P(data, None)"), {4, 8}, DType::f32, [](std::int64_t i) { return 0.1 * (i % 5); }, "x");
  ApplyFn apply = [&](const VarTree& p, const Var& in) { return mlp.apply(ParamView(p), ApplyContext{}, in); };
  ShardedTensor y = infer_step(params, apply, x);
  EXPECT_EQ(y.spec(), parse_spec("P(data, None)"));
  EXPECT_EQ(y.global_shape(), (Shape{4, 8}));
  // The same as the taped forward.
  Var z = mlp.apply(ParamView(as_vars(before, true)), ApplyContext{}, Var(x));
  EXPECT_TRUE(y.to_global().bit_equal(z.value().to_global()));
  for (const auto& [path, p] : before) EXPECT_TRUE(params.at(path).local().bit_equal(p.local())) << path;
}

}  // namespace
}  // namespace tessera::nn
