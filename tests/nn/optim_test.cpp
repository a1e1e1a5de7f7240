// Optimizers against optax's update rules written out by hand, over several steps; the train
// step's update of each parameter during the backward pass (GradOptions::ready) against the
// update after it; and the inference step (lends the parameters, leaves them unchanged).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>

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

// GradOptions::ready: each requested variable's cotangent handed over once, when the backward
// pass reaches it, with the value gradients() returns without it; a requested variable that is
// not a leaf still passes its cotangent on; a variable the output does not depend on is not
// handed over. z = a * b is read by both terms, so it is final only after both.
TEST(Gradients, ReadyHandsEachCotangentOverOnceItIsFinal) {
  Mesh mesh = self_mesh();
  const auto leaf = [&](double first) {
    return Var(ShardedTensor::from_fn(mesh, Spec(), {3}, DType::f64, [first](std::int64_t i) { return first + i; }), true);
  };
  const Var a = leaf(1), b = leaf(-2), c = leaf(0.5), unused = leaf(7);
  const Var z = mul(a, b);
  const Var y = sum(add(mul(z, c), mul(z, z)));
  const std::vector<Var> wrt = {a, b, c, unused, z};
  const auto plain = gradients(y, wrt);
  std::vector<int> order;
  std::vector<std::optional<ShardedTensor>> handed(wrt.size());
  GradOptions options;
  options.ready = [&](std::size_t i, ShardedTensor g) {
    order.push_back(static_cast<int>(i));
    EXPECT_FALSE(handed[i].has_value()) << "variable " << i << " handed over twice";
    handed[i] = std::move(g);
  };
  const auto returned = gradients(y, wrt, options);
  // z first (a and b read it), then its inputs; c whenever its one reader is done.
  ASSERT_EQ(order.size(), 4u);
  EXPECT_LT(std::find(order.begin(), order.end(), 4) - order.begin(), std::find(order.begin(), order.end(), 0) - order.begin());
  EXPECT_LT(std::find(order.begin(), order.end(), 4) - order.begin(), std::find(order.begin(), order.end(), 1) - order.begin());
  for (std::size_t i = 0; i < wrt.size(); ++i) {
    EXPECT_FALSE(returned[i].has_value()) << "variable " << i;
    ASSERT_EQ(handed[i].has_value(), plain[i].has_value()) << "variable " << i;
    if (plain[i]) {
      EXPECT_TRUE(handed[i]->local().bit_equal(plain[i]->local())) << "variable " << i;
    }
  }
  EXPECT_FALSE(plain[3].has_value());
}

// train_step updates each parameter during the backward pass, as soon as its gradient is final
// (the tape's GradOptions::ready): the same bits as value_and_grad followed by Optimizer::update,
// step after step, with one microbatch and with two, for a parameter the loss never reaches (its
// gradient zeros; AdamW's decay still moves it), and on a mesh that splits the weights and one
// that replicates them (whose gradients are all-reduced during the backward).
TEST(TrainStep, UpdatesDuringTheBackwardWithTheBitsOfUpdateAfterIt) {
  const int n = testing_support::world_size();
  for (const MeshShape& shape : {MeshShape({"data", "model"}, {1, n}), MeshShape({"data", "model"}, {n, 1})}) {
    Mesh mesh = Mesh::world(shape);
    for (const bool scan : {false, true}) {
      for (const int microbatches : {1, 2}) {
        const std::string label = shape.to_string() + (scan ? " scan" : " loop") + " microbatches " +
                                  std::to_string(microbatches);
        MLP mlp{3, 16, scan, false};
        ParamTree params = init_params(abstract_init(mlp, mesh.shape(), tutorial_rules(), {4 * n, 8}), mesh, 3);
        params.emplace("unused", ShardedTensor::from_fn(
                                     mesh, Spec(), {5}, DType::f32, [](std::int64_t i) { return 1.0 + i; }, "unused"));
        const Optimizer opt = adamw(1e-2, 0.1);
        TrainState fused = create_train_state(params, opt);
        TrainState after = create_train_state(params, opt);
        const LossFn loss_fn = [&](const VarTree& p, const Batch& batch) {
          return sum(mul(mlp.apply(ParamView(p), ApplyContext{tutorial_rules()}, Var(batch.x)),
                         mlp.apply(ParamView(p), ApplyContext{tutorial_rules()}, Var(batch.x))));
        };
        StepOptions options;
        options.microbatches = microbatches;
        for (int step = 0; step < 3; ++step) {
          const Batch batch{ShardedTensor::from_fn(
              mesh, parse_spec("P(data, None)"), {4 * n, 8}, DType::f32,
              [step](std::int64_t i) { return 0.1 * ((i * 7 + step) % 11) - 0.5; }, "x")};
          const double loss = train_step(fused, opt, loss_fn, batch, options);
          LossAndGrads lg = value_and_grad(after.params, loss_fn, batch, options);
          opt.update(after.params, lg.grads, after.opt_state);
          EXPECT_EQ(loss, lg.loss) << label << " step " << step;
        }
        EXPECT_EQ(fused.step, 3) << label;
        EXPECT_EQ(fused.opt_state.count, after.opt_state.count) << label;
        for (const auto* tree : {&fused.params, &fused.opt_state.mu, &fused.opt_state.nu}) {
          const ParamTree& want = tree == &fused.params ? after.params
                                  : tree == &fused.opt_state.mu ? after.opt_state.mu : after.opt_state.nu;
          ASSERT_EQ(tree->size(), want.size()) << label;
          for (const auto& [path, value] : *tree) {
            EXPECT_TRUE(value.local().bit_equal(want.at(path).local())) << label << " " << path;
          }
        }
        EXPECT_FALSE(fused.params.at("unused").local().bit_equal(params.at("unused").local())) << label;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::nn
