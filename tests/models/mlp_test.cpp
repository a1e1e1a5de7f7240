// The tutorial's layers on every 2-D mesh of this rank count against the one-rank reference:
// loss, gradients and Adam steps; sharding-invariant init; physical == logical shardings;
// stacked == loop; FSDP by specs alone; microbatching.
#include <gtest/gtest.h>

#include <optional>

#include "core/error.h"
#include "models/mlp.h"
#include "nn/ops.h"
#include "nn/train.h"
#include "tests/collectives/expect_error.h"
#include "tests/nn/nn_test_util.h"
#include "tests/test_meshes.h"

namespace tessera::models {
namespace {

using namespace tessera::nn;

using testing_support::meshes_of_size;
using testing_support::world_size;
using testing_util::expect_trees_near;
using testing_util::max_relative_error;
using testing_util::self_mesh;

std::vector<MeshShape> meshes_2d() { return testing_support::meshes_2d_of_size(world_size()); }

// x: global (batch, features) from the RNG, in P(data, None) as the tutorial puts it.
ShardedTensor input(const Mesh& mesh, std::int64_t batch, std::int64_t features, DType dtype = DType::f32) {
  const RngKey key = rng_key(7, "input");
  return ShardedTensor::from_fn(
      mesh, parse_spec("P(data, None)"), {batch, features}, dtype, [&](std::int64_t i) { return normal(key, i); },
      "x");
}

// The scale a sum loss is compared at: the sum of the magnitudes of what it adds up (the sum
// itself may cancel to far less).
double loss_scale(const MLP& mlp, const ParamTree& params, const ShardedTensor& x) {
  Var z = mlp.apply(ParamView(as_vars(params, false)), ApplyContext{tutorial_rules()}, Var(x));
  double s = 0;
  Tensor g = z.value().to_global();
  for (std::int64_t i = 0; i < g.numel(); ++i) s += std::abs(g.at(i));
  return s;
}

struct Model {
  MLP mlp;
  Rules rules = tutorial_rules();
};

LossFn sum_loss_of(const Model& m) {
  return [m](const VarTree& params, const Batch& batch) {
    return sum_loss(m.mlp.apply(ParamView(params), ApplyContext{m.rules}, Var(batch.x)));
  };
}

ParamTree init_model(const Model& m, const Mesh& mesh, const Shape& x_shape, std::uint64_t seed = 0) {
  return init_params(abstract_init(m.mlp, mesh.shape(), m.rules, x_shape), mesh, seed);
}

struct Variant {
  std::string name;
  MLP mlp;
};

std::vector<Variant> variants(std::int64_t depth) {
  MLP loop{2, depth, false, false};
  MLP scan{2, depth, true, false};
  MLP logical{2, depth, false, true};
  MLP logical_scan{2, depth, true, true};
  MLP single{1, depth, false, false};  // one DotReluDot
  return {{"DotReluDot", single}, {"MLP loop", loop}, {"MLP scan", scan}, {"MLP logical", logical},
          {"MLP logical scan", logical_scan}};
}

TEST(Layers, LossAndGradientsMatchOneRankOnEveryMesh) {
  const std::int64_t batch = 8, features = 16, depth = 32;
  Mesh one = self_mesh();
  for (const auto& v : variants(depth)) {
    Model m{v.mlp};
    ParamTree ref_params = init_model(m, one, {batch, features});
    auto ref = value_and_grad(ref_params, sum_loss_of(m), Batch{input(one, batch, features)});
    const double scale = loss_scale(m.mlp, ref_params, input(one, batch, features));
    for (const auto& shape : meshes_2d()) {
      Mesh mesh = Mesh::world(shape);
      ParamTree params = init_model(m, mesh, {batch, features});
      auto got = value_and_grad(params, sum_loss_of(m), Batch{input(mesh, batch, features)});
      const std::string label = v.name + " on " + shape.to_string();
      EXPECT_NEAR(got.loss, ref.loss, 1e-5 * scale) << label;
      expect_trees_near(got.grads, ref.grads, 1e-5, label);
      for (const auto& [path, g] : got.grads) EXPECT_EQ(g.spec(), params.at(path).spec()) << label << " " << path;
    }
  }
}

TEST(Layers, InitialParametersAreBitIdenticalOnEveryMesh) {
  Model m{MLP{2, 32, false, false}};
  Mesh one = self_mesh();
  ParamTree ref = init_model(m, one, {8, 16});
  for (const auto& shape : meshes_2d()) {
    Mesh mesh = Mesh::world(shape);
    ParamTree params = init_model(m, mesh, {8, 16});
    for (const auto& [path, p] : params) {
      EXPECT_TRUE(p.to_global().bit_equal(ref.at(path).to_global())) << shape.to_string() << " " << path;
    }
  }
}

// Sizes below 1 are refused at declaration: an MLP of -1 layers had no parameters and its apply
// returned its input.
TEST(Layers, SizesBelowOneAreRefused) {
  const MeshShape mesh({"data", "model"}, {1, 1});
  for (bool scan : {false, true}) {
    testing_support::expect_error<UsageError>([&] { abstract_init(MLP{-1, 16, scan, false}, mesh, tutorial_rules(), {8, 4}); },
                                              "MLP: num_layers must be >= 1, got -1");
    testing_support::expect_error<UsageError>([&] { abstract_init(MLP{0, 16, scan, false}, mesh, tutorial_rules(), {8, 4}); },
                                              "MLP: num_layers must be >= 1, got 0");
    testing_support::expect_error<UsageError>([&] { abstract_init(MLP{2, 0, scan, false}, mesh, tutorial_rules(), {8, 4}); },
                                              "MLP: depth must be >= 1, got 0");
  }
  Dense dense;
  dense.features = -3;
  testing_support::expect_error<UsageError>([&] { abstract_init(dense, mesh, tutorial_rules(), {8, 4}); },
                                            "Dense: features must be >= 1, got -3");
  testing_support::expect_error<UsageError>(
      [&] { abstract_init(DotReluDot{0}, mesh, tutorial_rules(), {8, 4}); }, "DotReluDot: depth must be >= 1, got 0");
  EXPECT_EQ(abstract_init(MLP{1, 16, false, false}, mesh, tutorial_rules(), {8, 4}).size(), 2u);
}

// The tutorial's check: the shardings from physical annotations equal those from logical names
// and rules, for every parameter and optimizer-state leaf.
TEST(Layers, PhysicalShardingEqualsLogicalSharding) {
  for (bool scan : {false, true}) {
    const MeshShape mesh({"data", "model"}, {2, 4});
    auto physical = abstract_init(MLP{4, 1024, scan, false}, mesh, tutorial_rules(), {8, 1024});
    auto logical = abstract_init(MLP{4, 1024, scan, true}, mesh, tutorial_rules(), {8, 1024});
    auto state_sharding = get_partition_spec(physical);
    auto logical_state_sharding = logical_to_mesh_sharding(get_partition_spec(logical), mesh, tutorial_rules());
    ASSERT_EQ(state_sharding.size(), logical_state_sharding.size());
    for (const auto& [path, spec] : state_sharding) EXPECT_EQ(spec, logical_state_sharding.at(path)) << path;
    // The logical specs before rules name the logical axes.
    auto names = get_partition_spec(logical);
    const std::string w1 = scan ? "ScanDotReluDot_0/Dense_0/kernel" : "DotReluDot_0/Dense_0/kernel";
    EXPECT_EQ(names.at(w1).to_string(), scan ? "P(layer, embed, hidden)" : "P(embed, hidden)");
    EXPECT_EQ(state_sharding.at(w1).to_string(), scan ? "P(None, None, model)" : "P(None, model)");
    // Optimizer state: mu and nu leaves are sharded like their parameters.
    Mesh self = self_mesh();
    auto params = init_params(abstract_init(MLP{2, 8, scan, true}, self.shape(), tutorial_rules(), {2, 4}), self, 0);
    OptState opt = adam(1e-3).init(params);
    for (const auto& [path, p] : params) {
      EXPECT_EQ(opt.mu.at(path).spec(), p.spec());
      EXPECT_EQ(opt.nu.at(path).spec(), p.spec());
    }
  }
}

TEST(Layers, UnknownLogicalNameUnderErrorFallbackIsAnError) {
  Mesh mesh = Mesh::world(MeshShape({"data", "model"}, {1, world_size()}));
  Var y(ShardedTensor::zeros(mesh, Spec(), {8, 8}, DType::f32, "y"));
  try {
    with_logical_constraint(y, {"batch", "heads"}, tutorial_rules(), RulesFallback::error);
    FAIL();
  } catch (const RuleError& e) {
    EXPECT_STREQ(e.what(), "logical names (batch, heads) of 'y': no rule assigns 'heads' and the fallback is error");
  }
  // no_constraint leaves the tensor as it is; unsharded leaves the name unsplit.
  EXPECT_EQ(with_logical_constraint(y, {"batch", "heads"}, tutorial_rules(), RulesFallback::no_constraint).spec(),
            y.spec());
  EXPECT_EQ(with_logical_constraint(y, {"batch", "heads"}, tutorial_rules(), RulesFallback::unsharded).spec(),
            parse_spec("P(data, None)"));
}

// A constraint with more dimensions than its tensor is an error whatever the tensor's spec: until
// the forty-fourth session P(data, None, None) on a [4, 6] tensor P(data) compared equal to it
// (both padded) and passed, where P(None, None, data) was refused; and logical names one too many
// passed too.
TEST(Layers, AConstraintOfMoreDimensionsThanItsTensorIsAnError) {
  Mesh mesh = Mesh::world(MeshShape({"data", "model"}, {world_size(), 1}));
  Var x(ShardedTensor::zeros(mesh, parse_spec("P(data)"), {4 * world_size(), 6}, DType::f32, "x"));
  const std::string shape = "[" + std::to_string(4 * world_size()) + ", 6]";
  const std::string refusal = "spec P(data, None, None) of 'x' has 3 dimensions but the tensor has shape " + shape;
  for (const bool constraint : {true, false}) {
    try {
      (void)(constraint ? with_sharding_constraint(x, parse_spec("P(data, None, None)"))
                        : reshard(x, parse_spec("P(data, None, None)")));
      ADD_FAILURE() << "no error";
    } catch (const SpecError& e) {
      EXPECT_EQ(std::string(e.what()), refusal);
    }
  }
  try {
    (void)with_logical_constraint(x, {"batch", "embed", "extra"}, tutorial_rules(), RulesFallback::error);
    ADD_FAILURE() << "no error";
  } catch (const SpecError& e) {
    EXPECT_EQ(std::string(e.what()), "with_logical_constraint: 3 logical names for 'x' " + shape + ", which has 2 dimensions");
  }
  EXPECT_EQ(with_sharding_constraint(x, parse_spec("P(data, None)")).spec(), x.spec());  // the same spec passes
}

TEST(Layers, StackedEqualsLoop) {
  const std::int64_t batch = 8, features = 16, depth = 32;
  for (const auto& shape : meshes_2d()) {
    Mesh mesh = Mesh::world(shape);
    Model loop{MLP{3, depth, false, false}};
    Model scan{MLP{3, depth, true, false}};
    ParamTree loop_params = init_model(loop, mesh, {batch, features});
    ParamTree scan_params = stack_loop_params(loop_params, 3, mesh);
    Batch b{input(mesh, batch, features)};
    auto l = value_and_grad(loop_params, sum_loss_of(loop), b);
    auto s = value_and_grad(scan_params, sum_loss_of(scan), b);
    EXPECT_EQ(l.loss, s.loss) << shape.to_string();
    expect_trees_near(s.grads, stack_loop_params(l.grads, 3, mesh), 1e-6, shape.to_string());
  }
}

// On every 2-D mesh whose data blocks split into 4: the loss and gradients of k = 2 and 4
// microbatches are those of the whole batch at once (`options`, one microbatch), with the loss
// `loss_of` gives and `options`' reduction.
template <class LossOf>
void expect_microbatches_match_the_whole_batch(LossOf&& loss_of, const StepOptions& options) {
  const std::int64_t batch = 16, features = 16, depth = 32;
  for (const auto& shape : meshes_2d()) {
    Mesh mesh = Mesh::world(shape);
    if (batch / shape.axis_size("data") % 4 != 0) continue;
    Model m{MLP{2, depth, false, false}};
    ParamTree params = init_model(m, mesh, {batch, features});
    Batch b{input(mesh, batch, features)};
    const LossFn loss = loss_of(m);
    auto one = value_and_grad(params, loss, b, options);
    for (int k : {2, 4}) {
      StepOptions split_options = options;
      split_options.microbatches = k;
      auto split = value_and_grad(params, loss, b, split_options);
      EXPECT_NEAR(split.loss, one.loss, 1e-5 * std::abs(one.loss)) << shape.to_string() << " k=" << k;
      expect_trees_near(split.grads, one.grads, 1e-5, shape.to_string() + " k=" + std::to_string(k));
    }
  }
}

TEST(Layers, MicrobatchesGiveTheSameGradients) {
  StepOptions sum_options;
  sum_options.reduction = StepOptions::Reduction::sum;
  expect_microbatches_match_the_whole_batch(sum_loss_of, sum_options);
}

// A mean loss with the default reduction (mean): each microbatch's loss is the mean over its
// rows, and the step's loss and gradients are the mean of the k microbatches', those of the whole
// batch at once. (The test above sums; a step that summed a mean loss's microbatches gave k times
// the loss and gradients.)
TEST(Layers, MicrobatchesOfAMeanLossAverageTheirLossesAndGradients) {
  StepOptions options;
  ASSERT_EQ(options.reduction, StepOptions::Reduction::mean);
  expect_microbatches_match_the_whole_batch(
      [](const Model& m) -> LossFn {
        return [m](const VarTree& vars, const Batch& mb) {
          return mean(square(m.mlp.apply(ParamView(vars), ApplyContext{m.rules}, Var(mb.x))));
        };
      },
      options);
}

TEST(Layers, MicrobatchesThatDoNotDivideAreAnError) {
  Mesh mesh = Mesh::world(MeshShape({"data", "model"}, {world_size(), 1}));
  Model m{MLP{1, 8, false, false}};
  ParamTree params = init_model(m, mesh, {2 * world_size(), 4});
  StepOptions options;
  options.microbatches = 3;
  EXPECT_THROW(value_and_grad(params, sum_loss_of(m), Batch{input(mesh, 2 * world_size(), 4)}, options), ShapeError);
}

// 10 Adam steps of the tutorial MLP (batch 8, 4 layers, depth 1024) and of its FSDP variant
// (W1 P(data, model), specs alone) against one rank. In f64: Adam's update is sign(g) * lr
// for any |g| >> eps, so in f32 an entry whose gradient is within rounding (~1e-7) of zero
// may step the other way on another mesh, and the difference spreads over later steps; f64
// keeps rounding far below every gradient entry, so the comparison measures the framework.
TEST(Layers, TenAdamStepsMatchOneRank) {
  if (world_size() != 8 && world_size() != 2) GTEST_SKIP() << "run on the 2x4 and 1x2 meshes";
  const std::int64_t batch = 8, features = 1024, depth = 1024;
  const MeshShape shape = world_size() == 8 ? MeshShape({"data", "model"}, {2, 4}) : MeshShape({"data", "model"}, {1, 2});
  Mesh mesh = Mesh::world(shape);
  Mesh one = self_mesh();
  Model tutorial{MLP{4, depth, false, false}};
  tutorial.mlp.dtype = DType::f64;
  Model fsdp = tutorial;
  fsdp.mlp.w1_spec = parse_spec("P(data, model)");
  const Optimizer opt = adam(1e-3);
  auto run = [&](const Model& m, const Mesh& on) {
    TrainState state = create_train_state(init_model(m, on, {batch, features}), opt);
    Batch b{input(on, batch, features, DType::f64)};
    for (int step = 0; step < 10; ++step) train_step(state, opt, sum_loss_of(m), b);
    return state;
  };
  // The reference is computed on rank 0 alone (the other ranks would only repeat it).
  std::optional<TrainState> ref;
  if (testing_support::world_rank() == 0) ref = run(tutorial, one);
  for (const auto* m : {&tutorial, &fsdp}) {
    TrainState got = run(*m, mesh);
    EXPECT_EQ(got.step, 10);
    EXPECT_EQ(got.opt_state.count, 10);
    for (const auto* trees : {&got.params, &got.opt_state.mu, &got.opt_state.nu}) {
      for (const auto& [path, value] : *trees) {
        Tensor global = value.to_global();  // collective: every rank takes part
        if (!ref) continue;
        const ParamTree& want = trees == &got.params ? ref->params
                                : trees == &got.opt_state.mu ? ref->opt_state.mu : ref->opt_state.nu;
        EXPECT_LT(max_relative_error(global, want.at(path).to_global()), 1e-5)
            << (m == &tutorial ? "tutorial " : "fsdp ") << path;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::models
