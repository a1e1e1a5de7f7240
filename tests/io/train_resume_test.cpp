// Checkpoints of a TrainState: resume is exact (10 steps straight == 5, save, restore on a new
// communicator, 5 more: bit-identical), and a state saved on one mesh restores onto every mesh
// of this rank count with the same global values, optimizer state and step included: the MLP's,
// and the transformer's on the meshes of data, seq and model (whose next step then gives the
// saving mesh's loss within f32 rounding); an optimizer state split over the batch's axes (ZeRO's
// first stage) restores into a replicated one and the other way round.
#include <gtest/gtest.h>

#include "io/train_state_io.h"
#include "models/mlp.h"
#include "models/transformer.h"
#include "nn/ops.h"
#include "tests/io/io_test_support.h"

namespace tessera {
namespace {

using io_testing::TempDir;
using testing_support::meshes_of_size;
using testing_support::world_size;

const models::MLP kModel{2, 32, false, true};
const Shape kInput = {8, 16};

nn::LossFn loss_fn() {
  return [](const nn::VarTree& params, const nn::Batch& batch) {
    return nn::sum_loss(kModel.apply(nn::ParamView(params), models::ApplyContext{models::tutorial_rules()}, nn::Var(batch.x)));
  };
}

// The batch of step s: drawn from the RNG keyed by (seed, "data/<s>"), so it is the same
// whenever the step is run.
nn::Batch batch_of(const Mesh& mesh, std::int64_t step) {
  const RngKey key = rng_key(3, "data/" + std::to_string(step));
  return {ShardedTensor::from_fn(mesh, parse_spec("P(data, None)"), kInput, DType::f32,
                                 [&](std::int64_t i) { return normal(key, i); }, "x")};
}

void run_steps(nn::TrainState& state, const nn::Optimizer& opt, const Mesh& mesh, int steps) {
  for (int i = 0; i < steps; ++i) nn::train_step(state, opt, loss_fn(), batch_of(mesh, state.step));
}

TEST(TrainResume, StopSaveRestoreContinueIsBitIdentical) {
  TempDir dir("ckpt");
  const nn::Optimizer opt = nn::adam(1e-2);
  for (const auto& shape : meshes_of_size(world_size(), true)) {
    if (shape.ndim() != 2) continue;
    Mesh mesh = Mesh::world(shape);
    const auto infos = nn::abstract_init(kModel, shape, models::tutorial_rules(), kInput);
    nn::TrainState straight = nn::create_train_state(nn::init_params(infos, mesh, 11), opt);
    run_steps(straight, opt, mesh, 10);

    nn::TrainState first = nn::create_train_state(nn::init_params(infos, mesh, 11), opt);
    run_steps(first, opt, mesh, 5);
    const std::string saved = save_train_state(first, dir.path(), {11, R"({"steps": 10})", infos});
    // A new process group: a new communicator and mesh, and a state of zeros to restore into.
    Mesh again = Mesh::world(shape);
    TrainCheckpointMeta meta;
    nn::TrainState resumed = restore_train_state(dir.path(), abstract_train_state(infos, again, opt), &meta);
    EXPECT_EQ(meta.seed, 11u);
    EXPECT_EQ(meta.config, R"({"steps": 10})");
    EXPECT_EQ(resumed.step, 5);
    EXPECT_EQ(resumed.opt_state.count, 5);
    run_steps(resumed, opt, again, 5);
    EXPECT_EQ(resumed.step, 10);
    for (const auto& [path, p] : straight.params) {
      EXPECT_TRUE(resumed.params.at(path).local().bit_equal(p.local())) << shape.to_string() << " " << path;
      EXPECT_TRUE(resumed.opt_state.mu.at(path).local().bit_equal(straight.opt_state.mu.at(path).local()));
      EXPECT_TRUE(resumed.opt_state.nu.at(path).local().bit_equal(straight.opt_state.nu.at(path).local()));
    }
  }
}

TEST(TrainResume, RestoresOntoEveryMeshOfThisRankCount) {
  TempDir dir("ckpt");
  const nn::Optimizer opt = nn::adam(1e-2);
  const auto shapes = meshes_of_size(world_size(), true);
  Mesh first_mesh = Mesh::world(shapes.front().ndim() == 2 ? shapes.front() : MeshShape({"data", "model"}, {world_size(), 1}));
  const auto infos = nn::abstract_init(kModel, first_mesh.shape(), models::tutorial_rules(), kInput);
  nn::TrainState state = nn::create_train_state(nn::init_params(infos, first_mesh, 5), opt);
  run_steps(state, opt, first_mesh, 3);
  save_train_state(state, dir.path(), {5, "{}", infos});
  for (const auto& shape : shapes) {
    if (shape.ndim() != 2) continue;
    Mesh mesh = Mesh::world(shape);
    const auto target_infos = nn::abstract_init(kModel, shape, models::tutorial_rules(), kInput);
    nn::TrainState restored = restore_train_state(dir.path(), abstract_train_state(target_infos, mesh, opt));
    EXPECT_EQ(restored.step, 3);
    EXPECT_EQ(restored.opt_state.count, 3);
    for (const auto& [path, p] : state.params) {
      EXPECT_TRUE(restored.params.at(path).to_global().bit_equal(p.to_global())) << shape.to_string() << " " << path;
      EXPECT_TRUE(restored.opt_state.nu.at(path).to_global().bit_equal(state.opt_state.nu.at(path).to_global()));
    }
  }
}

// The transformer's meshes of n ranks over data, seq and model.
std::vector<MeshShape> transformer_meshes(int n) {
  std::vector<MeshShape> out;
  for (const char* text : {"data=1", "data=2", "seq=2", "model=2", "data=2,model=2", "seq=2,model=2", "data=2,seq=2",
                           "data=2,seq=2,model=2", "data=2,model=4", "seq=4,model=2"}) {
    MeshShape m = MeshShape::parse(text);
    if (m.size() == n) out.push_back(m);
  }
  return out;
}

// The optimizer `opt` with its state split over the batch's axes of `mesh`, or not.
nn::Optimizer with_state(nn::Optimizer opt, const MeshShape& mesh, bool sharded) {
  if (sharded) opt.shard_state_over = models::Transformer::batch_axes(mesh);
  return opt;
}

TEST(TrainResume, TransformerRestoresBitExactOntoAnotherMesh) {
 for (const bool saved_sharded : {false, true}) {
  TempDir dir("ckpt");
  const nn::Optimizer opt = nn::adam(1e-2);
  models::TransformerConfig config;
  config.d_model = 16;
  config.heads = 4;
  config.d_ff = 32;
  config.layers = 2;
  const models::Transformer model{config};
  const Shape tokens_shape = {4, 8};
  const auto batch_on = [&](const Mesh& mesh, std::int64_t step) {
    Tensor tokens(tokens_shape, DType::i32), labels(tokens_shape, DType::i32);
    for (std::int64_t i = 0; i < 32; ++i) {
      tokens.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 37 + step * 11 + 5) % 256);
      labels.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 37 + step * 11 + 42) % 256);
    }
    const Spec spec = models::Transformer::token_spec(mesh.shape());
    return nn::Batch{ShardedTensor::from_global(mesh, spec, tokens, "tokens"),
                     ShardedTensor::from_global(mesh, spec, labels, "labels")};
  };
  const nn::LossFn loss = [&](const nn::VarTree& params, const nn::Batch& batch) {
    return model.loss(nn::ParamView(params), batch.x, *batch.y);
  };
  const auto shapes = transformer_meshes(world_size());
  ASSERT_FALSE(shapes.empty());
  // Three steps on the first mesh, saved.
  Mesh first = Mesh::world(shapes.front());
  const auto infos = nn::abstract_init(model, first.shape(), {}, tokens_shape);
  nn::TrainState state =
      nn::create_train_state(nn::init_params(infos, first, 7), with_state(opt, first.shape(), saved_sharded));
  for (int s = 0; s < 3; ++s) nn::train_step(state, opt, loss, batch_on(first, state.step));
  save_train_state(state, dir.path(), {7, "{}", infos});
  nn::TrainState next = state;
  const double next_loss = nn::train_step(next, opt, loss, batch_on(first, next.step));
  for (const auto& shape : shapes) {
   for (const bool sharded : {false, true}) {
    Mesh mesh = Mesh::world(shape);
    const auto target_infos = nn::abstract_init(model, shape, {}, tokens_shape);
    const nn::Optimizer target_opt = with_state(opt, shape, sharded);
    nn::TrainState restored = restore_train_state(dir.path(), abstract_train_state(target_infos, mesh, target_opt));
    ASSERT_EQ(restored.step, 3);
    for (const auto& info : target_infos) {
      EXPECT_EQ(restored.params.at(info.path).spec(), info.spec) << info.path;
      EXPECT_EQ(restored.opt_state.mu.at(info.path).spec(), target_opt.state_spec(restored.params.at(info.path)))
          << info.path;
    }
    EXPECT_EQ(restored.opt_state.count, 3);
    for (const auto& [path, p] : state.params) {
      const std::string label = shape.to_string() + (saved_sharded ? " saved sharded" : "") +
                                (sharded ? " restored sharded " : " ") + path;
      EXPECT_TRUE(restored.params.at(path).to_global().bit_equal(p.to_global())) << label;
      EXPECT_TRUE(restored.opt_state.mu.at(path).to_global().bit_equal(state.opt_state.mu.at(path).to_global())) << label;
      EXPECT_TRUE(restored.opt_state.nu.at(path).to_global().bit_equal(state.opt_state.nu.at(path).to_global())) << label;
    }
    const double loss_here = nn::train_step(restored, opt, loss, batch_on(mesh, restored.step));
    EXPECT_NEAR(loss_here, next_loss, 1e-5 * next_loss) << shape.to_string();
   }
  }
 }
}

}  // namespace
}  // namespace tessera
