// apps::SyntheticData, train_mlp's batches (apps/synthetic_data.h): with --loss xent each row's
// label is one-hot at the teacher's argmax (the teacher's output is the mse targets of the same
// seed), and with a pool of examples row r of step s's batch is the pool's example drawn for
// (s, r), whichever block of the batch a rank holds.
#include "apps/synthetic_data.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "tests/test_meshes.h"

namespace tessera::apps {
namespace {

using testing_support::world_size;

// A tensor's global value, every rank.
std::vector<float> synthetic_global_values(const ShardedTensor& t) {
  const Tensor global = t.to_global();
  const auto values = global.values<float>();
  return {values.begin(), values.end()};
}

TEST(SyntheticData, XentLabelsAreOneHotAtTheTeachersArgmax) {
  const Rules rules = parse_rules("batch=data,hidden=model");
  for (const MeshShape& shape : testing_support::meshes_2d_of_size(world_size())) {
    const Mesh mesh = Mesh::world(shape);
    DataConfig config;
    config.batch = 8;
    config.width = 16;
    config.seed = 5;
    config.loss = LossKind::mse;
    const SyntheticData regression(config, mesh, rules);
    config.loss = LossKind::xent;
    const SyntheticData classes(config, mesh, rules);
    for (const std::int64_t step : {0, 3}) {
      const nn::Batch targets = regression.batch(step);
      const nn::Batch labels = classes.batch(step);
      EXPECT_EQ(synthetic_global_values(labels.x), synthetic_global_values(targets.x)) << shape.to_string();
      const std::vector<float> teacher = synthetic_global_values(*targets.y), label = synthetic_global_values(*labels.y);
      ASSERT_EQ(label.size(), static_cast<std::size_t>(8 * 16));
      int rows_with_other_argmin = 0;
      for (int r = 0; r < 8; ++r) {
        const auto row = teacher.begin() + r * 16;
        const auto best = std::max_element(row, row + 16) - row;
        rows_with_other_argmin += best != std::min_element(row, row + 16) - row;
        for (int c = 0; c < 16; ++c) {
          EXPECT_EQ(label[r * 16 + c], c == best ? 1.0f : 0.0f)
              << shape.to_string() << " step " << step << " row " << r << " column " << c;
        }
      }
      EXPECT_EQ(rows_with_other_argmin, 8);
    }
  }
}

TEST(SyntheticData, PoolRowsAreTheDrawnExamples) {
  // The rows split over data, the columns over model (logical names, embed=model), so that each
  // rank's block starts at a row and a column of its own.
  const Rules rules = parse_rules("batch=data,embed=model,hidden=model");
  for (const MeshShape& shape : testing_support::meshes_2d_of_size(world_size())) {
    const Mesh mesh = Mesh::world(shape);
    DataConfig config;
    config.batch = 8;
    config.width = 16;
    config.seed = 9;
    config.loss = LossKind::sum;
    config.logical = true;
    config.examples = 3;
    const SyntheticData data(config, mesh, rules);
    for (const std::int64_t step : {0, 7}) {
      const std::vector<float> x = synthetic_global_values(data.batch(step).x);
      const RngKey key = rng_key(9, "data/" + std::to_string(step));
      const RngKey pool_key = rng_key(9, "data/examples");
      for (int r = 0; r < 8; ++r) {
        const std::uint64_t example = random_bits(key, static_cast<std::uint64_t>(r))[0] % 3;
        for (int c = 0; c < 16; ++c) {
          EXPECT_EQ(x[r * 16 + c], static_cast<float>(normal(pool_key, example * 16 + c)))
              << shape.to_string() << " step " << step << " row " << r << " column " << c;
        }
      }
    }
  }
}

TEST(SyntheticData, XentRefusesASplitClassDimension) {
  const int n = world_size();
  if (n == 1) GTEST_SKIP() << "a split needs 2 ranks";
  const Mesh mesh = Mesh::world(MeshShape({"data", "model"}, {1, n}));
  DataConfig config;
  config.batch = 8;
  config.width = 16;
  config.loss = LossKind::xent;
  config.logical = true;
  try {
    SyntheticData data(config, mesh, parse_rules("batch=data,embed=model"));
    ADD_FAILURE() << "a split class dimension was taken";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "--loss xent needs the embed dimension unsplit, got P(data, model)");
  }
}

TEST(SyntheticData, LossAndInputNames) {
  EXPECT_EQ(parse_loss_kind("sum"), LossKind::sum);
  EXPECT_EQ(parse_loss_kind("mse"), LossKind::mse);
  EXPECT_EQ(parse_loss_kind("xent"), LossKind::xent);
  EXPECT_EQ(parse_input_kind("ones"), InputKind::ones);
  EXPECT_EQ(parse_input_kind("random"), InputKind::random);
  try {
    parse_loss_kind("l1");
    ADD_FAILURE() << "loss l1 was taken";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "unknown loss 'l1' (expected sum, mse or xent)");
  }
  try {
    parse_input_kind("zeros");
    ADD_FAILURE() << "input zeros was taken";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "unknown input 'zeros' (expected ones or random)");
  }
}

}  // namespace
}  // namespace tessera::apps
