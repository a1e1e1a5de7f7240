// Optimizers against optax's update rules written out by hand, over several steps; the train
// step's update of each parameter during the backward pass (GradOptions::ready, and in rows:
// ready_rows) against the update after it; and the inference step (lends the parameters, leaves
// them unchanged).
#include <gtest/gtest.h>

#include <limits>

#include <algorithm>
#include <cmath>
#include <optional>

#include "collectives/comm_stats.h"
#include "collectives/reshard.h"
#include "models/mlp.h"
#include "nn/einsum.h"
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

// The count is an int32, as optax's: at its largest, the step is refused with the count as it
// was (before, it wrapped to -2^31 and the run saved a checkpoint its restore refused).
TEST(Optim, CountAtItsLargestTakesNoFurtherStep) {
  const Optimizer opt = adam(0.1);
  OptState state;
  state.count = std::numeric_limits<std::int32_t>::max() - 1;
  opt.begin_step(state);
  EXPECT_EQ(state.count, std::numeric_limits<std::int32_t>::max());
  try {
    opt.begin_step(state);
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "the optimizer's step count is 2147483647, the largest its int32 holds: no further step can be taken");
  }
  EXPECT_EQ(state.count, std::numeric_limits<std::int32_t>::max());
}

// A gradient or a moment on another mesh than its parameter's: a block of another size, which the
// update indexed past its end (found on 2026-11-28: an out-of-bounds read of the gradient).
TEST(Optim, GradientOrMomentOnAnotherMeshIsAnError) {
  const int n = testing_support::world_size();
  Mesh mesh = Mesh::world(MeshShape({"x"}, {n}));
  Mesh other = Mesh::world(MeshShape({"x"}, {n}));
  ParamTree params;
  params.emplace("w", ShardedTensor::zeros(mesh, parse_spec("P(x)"), {8 * n}, DType::f32, "w"));
  ParamTree grads;
  grads.emplace("w", ShardedTensor::zeros(other, parse_spec("P(x)"), {8 * n}, DType::f32, "w"));
  const Optimizer opt = adam(0.1);
  OptState state = opt.init(params);
  try {
    opt.update(params, grads, state);
    FAIL() << "no error";
  } catch (const MeshError& e) {
    EXPECT_EQ(std::string(e.what()), "optimizer: the gradient of 'w': operands 'w' on " + mesh.to_string() + " and 'w' on " +
                                         other.to_string() + " live on different meshes");
  }
  ParamTree on_other;
  on_other.emplace("w", ShardedTensor::zeros(other, parse_spec("P(x)"), {8 * n}, DType::f32, "w"));
  OptState foreign = opt.init(on_other);
  grads = params;
  EXPECT_THROW(opt.update(params, grads, foreign), MeshError);
}

// A state without a moment a parameter needs (made for other parameters, or SGD's for Adam): named,
// where the update's lookup threw std::out_of_range.
TEST(Optim, StateWithoutAParametersMomentIsAnError) {
  Mesh mesh = self_mesh();
  ParamTree params;
  params.emplace("a", ShardedTensor::zeros(mesh, Spec(), {4}, DType::f32, "a"));
  const Optimizer opt = adam(0.1);
  OptState state = opt.init(params);
  params.emplace("b", ShardedTensor::zeros(mesh, Spec(), {4}, DType::f32, "b"));
  const ParamTree grads = params;
  try {
    opt.update(params, grads, state);
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "optimizer: the state has no first moment for parameter 'b' (a state made for other "
                           "parameters, or by another optimizer?)");
  }
  OptState sgd_state = sgd(0.1).init(params);
  EXPECT_THROW(opt.update(params, grads, sgd_state), ShapeError);
}

// Microbatches: a count below 1 is refused (it divided by zero: SIGFPE), and blocks that do not
// all split are refused on every rank alike (each rank judged its own block: with uneven blocks
// one rank threw and the other waited in the step's collectives).
TEST(Optim, MicrobatchesAreCheckedOnEveryRankAlike) {
  const int n = testing_support::world_size();
  Mesh mesh = Mesh::world(MeshShape({"x"}, {n}));
  const ShardedTensor x = ShardedTensor::zeros(mesh, parse_spec("P(x)"), {2 * n, 4}, DType::f32, "x");
  try {
    microbatch(x, 0, 0);
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "microbatch 0 of 0: the count must be >= 1 and the index in [0, count)");
  }
  EXPECT_THROW(microbatch(x, 2, 2), UsageError);
  EXPECT_EQ(microbatch(x, 1, 2).global_shape(), (Shape{n, 4}));
  if (n < 2) return;
  // 2n - 1 rows over n ranks: blocks of 2 and a last of 1, which does not split in two.
  const ShardedTensor uneven = ShardedTensor::zeros(mesh, parse_spec("P(x)"), {2 * n - 1, 4}, DType::f32, "x");
  try {
    microbatch(uneven, 0, 2);
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_EQ(std::string(e.what()), "microbatches: the batch blocks of 'x' (global [" + std::to_string(2 * n - 1) +
                                         ", 4] P(x, None): a block of 1 rows) do not all split into 2 microbatches");
  }
}

// Moments the update would index otherwise than each other or than their parameter: another
// spec for the second moment than the first's, another global shape or another dtype (indexed
// with the parameter's element count and element size), each refused naming both.
TEST(Optim, MomentsInAnotherSpecOrShapeAreAnError) {
  const int n = testing_support::world_size();
  Mesh mesh = Mesh::world(MeshShape({"data"}, {n}));
  ParamTree params;
  params.emplace("w", ShardedTensor::zeros(mesh, parse_spec("P()"), {8 * n}, DType::f32, "w"));
  const ParamTree grads = params;
  const Optimizer opt = adam(0.1);
  OptState state = opt.init(params);
  state.nu.at("w") = ShardedTensor::zeros(mesh, parse_spec("P(data)"), {8 * n}, DType::f32, "w");
  try {
    opt.update(params, grads, state);
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_EQ(std::string(e.what()), "optimizer: a moment of 'w' is " + state.nu.at("w").describe() +
                                         ", parameter is " + params.at("w").describe() + " with its state in P(None)");
  }
  for (const auto& [shape, dtype] : {std::pair<Shape, DType>{{4 * n}, DType::f32}, {{8 * n}, DType::f64}}) {
    state = opt.init(params);
    state.mu.at("w") = ShardedTensor::zeros(mesh, parse_spec("P()"), shape, dtype, "w");
    try {
      opt.update(params, grads, state);
      ADD_FAILURE() << "no error for a moment " << state.mu.at("w").describe();
    } catch (const ShapeError& e) {
      EXPECT_EQ(std::string(e.what()), "optimizer: a moment of 'w' is " + state.mu.at("w").describe() +
                                           ", parameter is " + params.at("w").describe() + " with its state in P(None)");
    }
  }
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

// GradOptions::ready_rows: einsum hands a thin weight's gradient over in rows (the weight read by
// this einsum alone), panel by panel from row 0, each panel asked for while the weight's rows
// still hold their values (the consumer here overwrites each panel's rows after taking it, as an
// optimizer does); the rows and the input gradient have the bits of the plain backward pass. A
// weight read twice (w2 in both terms) is final only after both reads: handed to `ready`, whole.
TEST(Gradients, ReadyRowsHandsAThinWeightsGradientOverInPanels) {
  Mesh mesh = self_mesh();
  const auto leaf = [&](const Shape& shape, int seed) {
    return Var(ShardedTensor::from_global(mesh, Spec::replicated(2), testing_util::test_values(shape, seed, DType::f32)),
               true);
  };
  // k = 300 rows of 70: several panels of Optimizer::kRowPanelBytes and a short last one.
  const Var x = leaf({5, 300}, 1), w1 = leaf({300, 70}, 2), w2 = leaf({70, 70}, 3);
  const auto loss_of = [&](const Var& x1, const Var& a, const Var& b) {
    const Var h = relu(einsum("bk,kn->bn", x1, a));
    return sum(mul(einsum("bn,nm->bm", h, b), einsum("bn,nm->bm", h, b)));
  };
  const std::vector<Var> wrt = {x, w1, w2};
  const Var y = loss_of(x, w1, w2);
  const auto plain = gradients(y, wrt);
  const Tensor w1_before = w1.value().local();
  std::vector<std::optional<ShardedTensor>> handed(wrt.size());
  std::optional<Tensor> rows_of_w1;
  std::vector<std::pair<std::int64_t, std::int64_t>> panels;
  GradOptions options;
  options.ready = [&](std::size_t i, ShardedTensor g) { handed[i] = std::move(g); };
  options.ready_rows = [&](std::size_t i, RowGradient& g) {
    ASSERT_EQ(i, 1u);
    ASSERT_EQ(g.rows(), 300);
    ASSERT_EQ(g.row_elements(), 70);
    rows_of_w1 = Tensor::zeros({300, 70}, DType::f32);
    const std::int64_t panel = 128;
    for (std::int64_t begin = 0; begin < g.rows(); begin += panel) {
      const std::int64_t end = std::min(g.rows(), begin + panel);
      g.produce(begin, end, rows_of_w1->data<float>() + begin * 70);
      panels.emplace_back(begin, end);
      // The update of those rows: the input gradient must have read them already.
      std::fill_n(const_cast<Var&>(w1).node()->value.local().data<float>() + begin * 70, (end - begin) * 70, 1e6f);
    }
  };
  const auto returned = gradients(y, wrt, options);
  EXPECT_EQ(panels, (std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 128}, {128, 256}, {256, 300}}));
  ASSERT_TRUE(rows_of_w1.has_value());
  EXPECT_TRUE(rows_of_w1->bit_equal(plain[1]->local()));
  EXPECT_FALSE(handed[1].has_value());
  EXPECT_FALSE(returned[1].has_value());
  ASSERT_TRUE(handed[0].has_value());
  EXPECT_TRUE(handed[0]->local().bit_equal(plain[0]->local()));
  ASSERT_TRUE(handed[2].has_value());
  EXPECT_TRUE(handed[2]->local().bit_equal(plain[2]->local()));
  EXPECT_FALSE(w1.value().local().bit_equal(w1_before));
}

// On a mesh that splits the weight's 3 columns over every rank (some blocks empty, uneven): each
// rank's rows are its block of the plain gradient, and the input gradient (each rank's partial
// product, all-reduced) has the plain bits.
TEST(Gradients, ReadyRowsOnUnevenAndEmptyBlocks) {
  const int n = testing_support::world_size();
  Mesh mesh = Mesh::world(MeshShape({"data", "model"}, {1, n}));
  // One row against 400: the input gradient's all-reduce costs less than gathering w (a
  // partial product, w read where it is; einsum_toward).
  const Var x(ShardedTensor::from_global(mesh, Spec::replicated(2), testing_util::test_values({1, 400}, 1, DType::f32)),
              true);
  const Var w(ShardedTensor::from_global(mesh, parse_spec("P(None, model)"),
                                         testing_util::test_values({400, 3}, 2, DType::f32)),
              true);
  const auto loss = [&] {
    const Var y = einsum("bk,kn->bn", x, w);
    return sum(mul(y, y));
  };
  const auto plain = gradients(loss(), {x, w});
  std::optional<ShardedTensor> dx;
  std::optional<Tensor> rows;
  GradOptions options;
  options.ready = [&](std::size_t i, ShardedTensor g) {
    ASSERT_EQ(i, 0u);
    dx = std::move(g);
  };
  options.ready_rows = [&](std::size_t i, RowGradient& g) {
    ASSERT_EQ(i, 1u);
    rows = Tensor::zeros(w.value().local().shape(), DType::f32);
    if (g.rows() > 0) g.produce(0, g.rows(), rows->data<float>());
  };
  gradients(loss(), {x, w}, options);
  ASSERT_TRUE(rows.has_value());
  EXPECT_TRUE(rows->bit_equal(plain[1]->local()));
  ASSERT_TRUE(dx.has_value());
  EXPECT_TRUE(dx->to_global().bit_equal(plain[0]->to_global()));
}

// A consumer that does not take every row is an error, not a weight half updated in silence.
TEST(Gradients, ReadyRowsRefusesAConsumerThatStopsEarly) {
  Mesh mesh = self_mesh();
  const Var x(ShardedTensor::from_global(mesh, Spec::replicated(2), testing_util::test_values({4, 40}, 1, DType::f32)));
  const Var w(ShardedTensor::from_global(mesh, Spec::replicated(2), testing_util::test_values({40, 8}, 2, DType::f32)),
              true);
  const Var y = sum(einsum("bk,kn->bn", x, w));
  GradOptions options;
  options.ready = [](std::size_t, ShardedTensor) {};
  options.ready_rows = [](std::size_t, RowGradient& g) {
    std::vector<float> out(static_cast<std::size_t>(10 * g.row_elements()));
    g.produce(0, 10, out.data());
  };
  try {
    gradients(y, {w}, options);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "einsum: the weight gradient's consumer took 10 of 40 rows");
  }
}

// The batch of train step `step` of the tests below: values in [-0.5, 0.5] that change with it.
Batch step_batch(const Mesh& mesh, const Spec& spec, const Shape& shape, int step) {
  return {ShardedTensor::from_fn(
      mesh, spec, shape, DType::f32, [step](std::int64_t i) { return 0.1 * ((i * 7 + step) % 11) - 0.5; }, "x")};
}

// Weights updated in rows whose blocks are uneven or empty (3 rows or columns over 4 ranks, 40
// over 3): train_step (one pass with both products, or panels) gives the bits of whole gradients,
// for the weights and both moments, step after step.
TEST(TrainStep, UpdatesInRowsOnUnevenAndEmptyBlocks) {
  const int n = testing_support::world_size();
  Mesh mesh = Mesh::world(MeshShape({"data", "model"}, {1, n}));
  for (const std::int64_t width : {3, 40}) {
    const std::string label = "width " + std::to_string(width);
    ParamTree params;
    params.emplace("w1", ShardedTensor::from_global(mesh, parse_spec("P(None, model)"),
                                                    testing_util::test_values({24, width}, 2, DType::f32)));
    params.emplace("w2", ShardedTensor::from_global(mesh, parse_spec("P(model, None)"),
                                                    testing_util::test_values({width, 24}, 3, DType::f32)));
    const Optimizer opt = adamw(1e-2, 0.1);
    TrainState rows = create_train_state(params, opt);
    TrainState whole = create_train_state(params, opt);
    const LossFn loss_fn = [](const VarTree& p, const Batch& batch) {
      const Var h = relu(einsum("bk,kn->bn", Var(batch.x), p.at("w1")));
      const Var y = einsum("bn,nk->bk", h, p.at("w2"));
      return sum(mul(y, y));
    };
    StepOptions options;
    StepTimes times;
    options.times = &times;
    StepOptions without_rows = options;
    without_rows.update_in_rows = false;
    for (int step = 0; step < 3; ++step) {
      const Batch batch = step_batch(mesh, Spec::replicated(2), {4, 24}, step);
      const double loss = train_step(rows, opt, loss_fn, batch, options);
      EXPECT_FALSE(times.row_updates.empty()) << label << " step " << step;
      EXPECT_EQ(train_step(whole, opt, loss_fn, batch, without_rows), loss) << label << " step " << step;
    }
    for (const std::string path : {"w1", "w2"}) {
      EXPECT_TRUE(rows.params.at(path).local().bit_equal(whole.params.at(path).local())) << label << " " << path;
      EXPECT_TRUE(rows.opt_state.mu.at(path).local().bit_equal(whole.opt_state.mu.at(path).local())) << label << " " << path;
      EXPECT_TRUE(rows.opt_state.nu.at(path).local().bit_equal(whole.opt_state.nu.at(path).local())) << label << " " << path;
      EXPECT_FALSE(rows.params.at(path).local().numel() > 0 &&
                   rows.params.at(path).local().bit_equal(params.at(path).local()))
          << label << " " << path << " not updated";
    }
  }
}

// train_step updates each parameter during the backward pass, as soon as its gradient is final
// (the tape's GradOptions::ready; a thin weight a panel of rows at a time inside its einsum's
// backward, GradOptions::ready_rows, unless StepOptions::update_in_rows is false): the same bits
// as value_and_grad followed by Optimizer::update, step after step, with one microbatch and with
// two, for a parameter the loss never reaches (its gradient zeros; AdamW's decay still moves it),
// and on a mesh that splits the weights and one that replicates them (whose gradients are
// all-reduced during the backward, or computed whole from gathered operands).
TEST(TrainStep, UpdatesDuringTheBackwardWithTheBitsOfUpdateAfterIt) {
  const int n = testing_support::world_size();
  for (const MeshShape& shape : {MeshShape({"data", "model"}, {1, n}), MeshShape({"data", "model"}, {n, 1})}) {
   for (const std::int64_t depth : {16, 520}) {
    Mesh mesh = Mesh::world(shape);
    for (const bool scan : {false, true}) {
      for (const int microbatches : {1, 2}) {
        const std::string label = shape.to_string() + (scan ? " scan" : " loop") + " microbatches " +
                                  std::to_string(microbatches) + " depth " + std::to_string(depth);
        MLP mlp{3, depth, scan, false};
        // Depth 520: the tutorial's square weights (features = depth), several panels each.
        const std::int64_t features = depth == 520 ? depth : 8;
        ParamTree params =
            init_params(abstract_init(mlp, mesh.shape(), tutorial_rules(), {4 * n, features}), mesh, 3);
        params.emplace("unused", ShardedTensor::from_fn(
                                     mesh, Spec(), {5}, DType::f32, [](std::int64_t i) { return 1.0 + i; }, "unused"));
        const Optimizer opt = adamw(1e-2, 0.1);
        TrainState fused = create_train_state(params, opt);
        TrainState after = create_train_state(params, opt);
        TrainState whole = create_train_state(params, opt);  // StepOptions::update_in_rows false
        const LossFn loss_fn = [&](const VarTree& p, const Batch& batch) {
          const Var y = mlp.apply(ParamView(p), ApplyContext{tutorial_rules()}, Var(batch.x));
          return sum(mul(y, y));
        };
        StepOptions options;
        options.microbatches = microbatches;
        StepTimes times;
        options.times = &times;
        for (int step = 0; step < 3; ++step) {
          const Batch batch = step_batch(mesh, parse_spec("P(data, None)"), {4 * n, features}, step);
          const double loss = train_step(fused, opt, loss_fn, batch, options);
          LossAndGrads lg = value_and_grad(after.params, loss_fn, batch, options);
          opt.update(after.params, lg.grads, after.opt_state);
          EXPECT_EQ(loss, lg.loss) << label << " step " << step;
          // At depth 520 the loop's six weights go in rows (a batch of at most 16 rows, several
          // panels each); not the scan's stacked weights, nor with two microbatches to sum. At
          // depth 16 on data=4 the weight gradient is cheaper to all-reduce than its operands to
          // gather (einsum_toward): a partial product, taken whole.
          if (depth == 520 || shape.size() <= 2) {
            EXPECT_EQ(times.row_updates.size(), !scan && microbatches == 1 ? 6u : 0u) << label << " step " << step;
          }
          // Each record: the weight, its block here, and the input gradient computed from its
          // panels (2 x rows x block), none for the first layer's kernel (x needs no gradient).
          if (depth == 520 && !scan && microbatches == 1) {
            const std::int64_t rows = 4 * n / shape.axis_size("data");
            for (std::size_t i = 0; i < times.row_updates.size(); ++i) {
              const RowUpdate& u = times.row_updates[i];
              const int layer = 2 - static_cast<int>(i / 2);  // the backward's order: W2, then kernel
              const std::string want = "DotReluDot_" + std::to_string(layer) + (i % 2 == 0 ? "/W2" : "/Dense_0/kernel");
              EXPECT_EQ(u.path, want) << label;
              EXPECT_EQ(u.elements, fused.params.at(want).local().numel()) << label << " " << want;
              const bool first = want == "DotReluDot_0/Dense_0/kernel";
              EXPECT_EQ(u.input_grad_flops, first ? 0.0 : 2.0 * rows * u.elements) << label << " " << want;
              // The weight gradient from the whole batch's rows (gathered over data where it is split).
              EXPECT_EQ(u.weight_grad_flops, 2.0 * 4 * n * u.elements) << label << " " << want;
              // In one pass with both products wherever the kernel takes the batches (AVX-512).
              EXPECT_EQ(u.one_pass, thin_rows_adam_shape(first ? 0 : rows, 4 * n)) << label << " " << want;
            }
          }
          StepOptions without_rows = options;
          without_rows.update_in_rows = false;
          EXPECT_EQ(train_step(whole, opt, loss_fn, batch, without_rows), loss) << label << " step " << step;
          EXPECT_EQ(times.row_updates.size(), 0u) << label << " step " << step;
        }
        EXPECT_EQ(fused.step, 3) << label;
        EXPECT_EQ(fused.opt_state.count, after.opt_state.count) << label;
        for (const TrainState* got : {&fused, &whole}) {
          for (const auto* tree : {&got->params, &got->opt_state.mu, &got->opt_state.nu}) {
            const ParamTree& want = tree == &got->params        ? after.params
                                    : tree == &got->opt_state.mu ? after.opt_state.mu
                                                                 : after.opt_state.nu;
            ASSERT_EQ(tree->size(), want.size()) << label;
            for (const auto& [path, value] : *tree) {
              EXPECT_TRUE(value.local().bit_equal(want.at(path).local()))
                  << label << (got == &whole ? " whole " : " ") << path;
            }
          }
        }
        EXPECT_FALSE(fused.params.at("unused").local().bit_equal(params.at("unused").local())) << label;
      }
    }
   }
  }
}

// sharded_state_spec (ZeRO's first stage): the axes of `over` that the parameter leaves unused and
// that have more than one rank go, minor, to the first dimension they split evenly, else to the
// first whose blocks they nest in, else nowhere; unknown and repeated axes are refused.
TEST(ShardedState, SpecSplitsTheFirstDimensionTheReplicasDivide) {
  const MeshShape mesh({"data", "seq", "model"}, {2, 2, 2});
  const Axes over = {"data", "seq"};
  const auto spec = [&](const char* param, const Shape& shape, const Axes& axes) {
    return sharded_state_spec(parse_spec(param), mesh, shape, axes).to_string();
  };
  EXPECT_EQ(spec("P(None, model)", {256, 1024}, over), "P((data, seq), model)");
  EXPECT_EQ(spec("P(model, None, None)", {8, 32, 256}, over), "P((model, data, seq), None, None)");
  // Dimension 0's blocks (3 of 6, over model) do not divide by 4; dimension 1 does.
  EXPECT_EQ(spec("P(model, None)", {6, 8}, over), "P(model, (data, seq))");
  // Neither divides: the first whose blocks the replicas' blocks nest in.
  EXPECT_EQ(spec("P()", {5, 3}, over), "P((data, seq), None)");
  EXPECT_EQ(spec("P()", {3}, over), "P()");  // 3 rows for 4 replicas: unchanged
  EXPECT_EQ(spec("P()", {}, over), "P()");   // a scalar
  // An axis the parameter uses already (FSDP's data) or of size 1 is left out.
  EXPECT_EQ(spec("P(data, model)", {256, 1024}, over), "P((data, seq), model)");
  EXPECT_EQ(sharded_state_spec(parse_spec("P(None)"), MeshShape({"data", "model"}, {1, 8}), {64}, {"data"}).to_string(),
            "P(None)");
  EXPECT_EQ(spec("P(None)", {64}, {}), "P(None)");
  EXPECT_EQ(spec("P(None)", {64}, {"seq"}), "P(seq)");
  try {
    spec("P(None)", {64}, {"pipe"});
    ADD_FAILURE() << "no error";
  } catch (const SpecError& e) {
    EXPECT_STREQ(e.what(),
                 "optimizer state: axis 'pipe' to split it over is not an axis of the mesh (data: 2, seq: 2, model: 2)");
  }
  try {
    spec("P(None)", {64}, {"data", "data"});
    ADD_FAILURE() << "no error";
  } catch (const SpecError& e) {
    EXPECT_STREQ(e.what(), "optimizer state: axis 'data' to split it over is named twice");
  }
}

// Optimizer::update chooses between gathering the state's part in place and a reshard there and
// back from the specs, the mesh and the global shape, the same on every rank: the two run
// different collectives. Until the forty-fourth session it read this rank's block: on x=2,y=2 a
// [3, 4] parameter P(x, None), its state split over y along dimension 1 (P(x, y)), gathered in
// place on x=1 (a block of one row) and resharded on x=0 (two rows), and with blocks of other
// sizes ranks waited in different collectives for ever. Every rank now runs the same collectives,
// and the update has the bits of one with a replicated state.
TEST(ShardedState, UpdateTakesOnePathOnEveryRank) {
  if (testing_support::world_size() != 4) GTEST_SKIP() << "a 2 x 2 mesh";
  Mesh mesh = Mesh::world(MeshShape({"x", "y"}, {2, 2}));
  ParamTree params, grads;
  params.emplace("w", ShardedTensor::from_global(mesh, parse_spec("P(x, None)"),
                                                 testing_util::test_values({3, 4}, 1, DType::f32), "w"));
  grads.emplace("w", ShardedTensor::from_global(mesh, parse_spec("P(x, None)"),
                                                testing_util::test_values({3, 4}, 2, DType::f32), "w"));
  Optimizer sharded_opt = adam(0.1);
  sharded_opt.shard_state_over = {"y"};
  OptState sharded_state = sharded_opt.init(params);
  ASSERT_EQ(sharded_state.mu.at("w").spec().to_string(), "P(x, y)");
  const Optimizer opt = adam(0.1);
  OptState state = opt.init(params);
  ParamTree updated = params, expected = params;
  CommScope scope;
  sharded_opt.update(updated, grads, sharded_state);
  std::string ran;
  for (CommRecord record : scope.records()) {
    record.bytes = 0;  // a rank's own: blocks of 2 rows on x=0, 1 on x=1
    ran += to_string(record) + "\n";
  }
  opt.update(expected, grads, state);
  EXPECT_TRUE(updated.at("w").to_global().bit_equal(expected.at("w").to_global()));
  // The collectives this rank ran, against rank 0's.
  std::uint64_t hash = std::hash<std::string>{}(ran), first = hash;
  MPI_Bcast(&first, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  EXPECT_EQ(hash, first) << "rank " << mesh.rank() << " ran:\n" << ran;
}

// A train step whose optimizer state is split over the axes that replicate the weights gives the
// bits of one whose state is replicated: the loss, the weights and both moments (gathered),
// step after step, with one microbatch and two. Meshes: the batch split over data (gradients
// reduce-scattered to the state, the parts updated in place and gathered), the weights split over
// model too, and a batch replicated over `rep` (thin weights' gradients in rows, taken whole and
// updated in part). A state split by hand along an inner dimension (no run of the block: a copy
// updated, then resharded back) does the same, and so does Optimizer::update after value_and_grad
// (gradients in the parameters' specs, sliced to the state's). The sharded step gathers, over the
// replicas, what their parts of the state cover, more than the replicated step.
TEST(TrainStep, ShardedOptimizerStateHasTheBitsOfAReplicatedOne) {
  const int n = testing_support::world_size();
  std::vector<MeshShape> shapes = {MeshShape({"data", "model"}, {n, 1}), MeshShape({"rep", "model"}, {n, 1})};
  if (n >= 4) shapes.push_back(MeshShape({"data", "model"}, {2, n / 2}));
  for (const MeshShape& shape : shapes) {
    Mesh mesh = Mesh::world(shape);
    const Axes over = {shape.names()[0]};
    const bool batch_split = shape.names()[0] == "data";
    for (const int microbatches : {1, 2}) {
      for (const bool by_hand : {false, true}) {
        const std::string label = shape.to_string() + " microbatches " + std::to_string(microbatches) +
                                  (by_hand ? " by hand" : "");
        MLP mlp{2, 40, false, false};
        // The MLP where the batch is split; two plain products where it is replicated (the MLP's
        // rules would split its activations over data).
        ParamTree params;
        if (batch_split) {
          params = init_params(abstract_init(mlp, shape, tutorial_rules(), {4 * n, 40}), mesh, 5);
        } else {
          params.emplace("w1", ShardedTensor::from_global(mesh, parse_spec("P(None, model)"),
                                                          testing_util::test_values({40, 40}, 2, DType::f32), "w1"));
          params.emplace("w2", ShardedTensor::from_global(mesh, parse_spec("P(model, None)"),
                                                          testing_util::test_values({40, 40}, 3, DType::f32), "w2"));
        }
        Optimizer sharded_opt = adamw(1e-2, 0.1);
        sharded_opt.shard_state_over = over;
        const Optimizer opt = adamw(1e-2, 0.1);
        TrainState replicated = create_train_state(params, opt);
        TrainState sharded = create_train_state(params, sharded_opt);
        std::int64_t part_bytes = 0;  // this rank's bytes of the split states
        for (const auto& [path, p] : params) {
          const ShardedTensor& mu = sharded.opt_state.mu.at(path);
          EXPECT_EQ(mu.spec(), sharded_opt.state_spec(p)) << label << " " << path;
          EXPECT_EQ(sharded.opt_state.nu.at(path).spec(), mu.spec()) << label << " " << path;
          if (n > 1) {
            EXPECT_FALSE(mu.spec() == p.spec()) << label << " " << path;
          }
          if (by_hand && p.ndim() == 2 && p.spec().padded(2).dims[1].empty()) {
            // The state split over the replicas along dimension 1, which the parameter leaves
            // unsplit.
            Spec inner = p.spec().padded(2);
            inner.dims[1] = over;
            if (!(inner == p.spec())) {
              for (ParamTree* moments : {&sharded.opt_state.mu, &sharded.opt_state.nu}) {
                moments->at(path) = tessera::reshard(ShardedTensor::zeros(mesh, p.spec(), p.global_shape(), p.dtype(), path), inner);
              }
            }
          }
          if (!(sharded.opt_state.mu.at(path).spec() == p.spec())) {
            part_bytes += static_cast<std::int64_t>(sharded.opt_state.mu.at(path).local().nbytes());
          }
        }
        // The same state updated after value_and_grad, from gradients in the parameters' specs.
        TrainState later = sharded;
        const LossFn loss_fn = [&](const VarTree& p, const Batch& batch) {
          const Var y = batch_split ? mlp.apply(ParamView(p), ApplyContext{tutorial_rules()}, Var(batch.x))
                                    : einsum("bn,nk->bk", relu(einsum("bk,kn->bn", Var(batch.x), p.at("w1"))), p.at("w2"));
          return sum(mul(y, y));
        };
        StepOptions options;
        options.microbatches = microbatches;
        StepTimes times;
        options.times = &times;
        for (int step = 0; step < 3; ++step) {
          const Batch batch =
              step_batch(mesh, batch_split ? parse_spec("P(data, None)") : Spec::replicated(2), {4 * n, 40}, step);
          // Bytes gathered over the replicas' axes by each step: the sharded step's extra are its
          // optimizer's.
          const auto gathered = [&](TrainState& state) {
            CommScope scope;
            const double loss = train_step(state, opt, loss_fn, batch, options);
            // A replicated batch's thin weights come in rows with one microbatch (the sharded
            // state's taken whole, then in part).
            if (!batch_split) {
              EXPECT_EQ(times.row_updates.empty(), microbatches > 1) << label << " step " << step;
            }
            std::int64_t bytes = 0;
            for (const CommRecord& r : scope.records()) {
              if (r.op == CommOp::all_gather && r.axes == over) bytes += r.bytes;
            }
            return std::pair(loss, bytes);
          };
          const auto [want, before] = gathered(replicated);
          const auto [got, after] = gathered(sharded);
          EXPECT_EQ(got, want) << label << " step " << step;
          EXPECT_EQ(after - before, (shape.axis_size(over[0]) - 1) * part_bytes) << label << " step " << step;
          const LossAndGrads lg = value_and_grad(later.params, loss_fn, batch, options);
          sharded_opt.update(later.params, lg.grads, later.opt_state);
          EXPECT_EQ(lg.loss, want) << label << " step " << step;
        }
        for (const auto& [path, p] : sharded.params) {
          EXPECT_TRUE(later.params.at(path).local().bit_equal(p.local())) << label << " update after " << path;
          EXPECT_TRUE(later.opt_state.mu.at(path).local().bit_equal(sharded.opt_state.mu.at(path).local()))
              << label << " update after " << path;
          EXPECT_TRUE(later.opt_state.nu.at(path).local().bit_equal(sharded.opt_state.nu.at(path).local()))
              << label << " update after " << path;
        }
        for (const auto& [path, p] : replicated.params) {
          EXPECT_TRUE(sharded.params.at(path).local().bit_equal(p.local())) << label << " " << path;
          EXPECT_EQ(sharded.params.at(path).spec(), p.spec()) << label << " " << path;
          for (const auto* trees : {&sharded.opt_state.mu, &sharded.opt_state.nu}) {
            const ParamTree& theirs = trees == &sharded.opt_state.mu ? replicated.opt_state.mu : replicated.opt_state.nu;
            EXPECT_TRUE(tessera::reshard(trees->at(path), p.spec()).local().bit_equal(theirs.at(path).local()))
                << label << " " << path;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tessera::nn
