// The global-view sharded tensor: from_fn / from_global / to_global on every mesh of this rank
// count, for specs with one and several axes per dimension, partial specs, errors and pictures.
#include "mesh/sharded_tensor.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "core/init.h"
#include "core/rng.h"
#include "tests/test_meshes.h"

namespace tessera {
namespace {

using testing_support::all_specs;
using testing_support::meshes_of_size;
using testing_support::world_size;

// A value that differs for every index and is exact in f32.
double hashed(std::int64_t i) { return static_cast<double>((i * 7919) % 1000003) / 64.0; }

Tensor reference(const Shape& shape) {
  Tensor t(shape, DType::f32);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(hashed(i));
  return t;
}

TEST(ShardedTensor, FromFnToGlobalEqualsReferenceForEverySpec) {
  int checked = 0;
  for (const auto& shape : meshes_of_size(world_size())) {
    Mesh mesh = Mesh::world(shape);
    for (const Shape& global : {Shape{8, 16}, Shape{8, 8, 8}}) {
      Tensor expected = reference(global);
      for (const Spec& spec : all_specs(shape, static_cast<int>(global.size()), false)) {
        auto x = ShardedTensor::from_fn(mesh, spec, global, DType::f32, hashed, "x");
        EXPECT_EQ(x.local().shape(), local_shape(spec, shape, global, mesh.coords()));
        EXPECT_TRUE(x.to_global().bit_equal(expected)) << shape.to_string() << " " << spec.to_string();
        // The block is where the layout rule says: its first element is the offsets' element.
        auto offsets = x.block_offsets();
        std::int64_t flat = 0;
        auto strides = row_major_strides(global);
        for (std::size_t d = 0; d < global.size(); ++d) flat += offsets[d] * strides[d];
        EXPECT_EQ(x.local().at(0), static_cast<float>(hashed(flat)));
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
}

// docs/design.md semantics 5: values made from a seed are the same global values, bit for bit, on
// every mesh and spec, with each rank computing only its block.
TEST(ShardedTensor, RngInitIsShardingInvariant) {
  const RngKey key = rng_key(1234, "MLP_0/DotReluDot_0/W1");
  const Shape global = {8, 16};
  const Tensor expected_normal = [&] {
    Tensor t(global, DType::f32);
    for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(normal(key, i));
    return t;
  }();
  const Tensor expected_xavier = init_full(initializers::xavier_normal(), key, global, DType::f32);
  int checked = 0;
  for (const auto& shape : meshes_of_size(world_size())) {
    Mesh mesh = Mesh::world(shape);
    for (const Spec& spec : all_specs(shape, 2, false)) {
      auto x = ShardedTensor::from_fn(
          mesh, spec, global, DType::f32, [&](std::int64_t i) { return normal(key, i); }, "x");
      EXPECT_TRUE(x.to_global().bit_equal(expected_normal)) << shape.to_string() << " " << spec.to_string();
      auto w = ShardedTensor::from_block_fn(
          mesh, spec, global,
          [&](const std::vector<std::int64_t>& offsets, const Shape& block) {
            return init_block(initializers::xavier_normal(), key, global, offsets, block, DType::f32);
          },
          "W1");
      EXPECT_TRUE(w.to_global().bit_equal(expected_xavier)) << shape.to_string() << " " << spec.to_string();
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(ShardedTensor, FromGlobalWithPartialAxesSumsBack) {
  for (const auto& shape : meshes_of_size(world_size())) {
    Mesh mesh = Mesh::world(shape);
    Tensor global = reference({8, 16});
    for (const Spec& spec : all_specs(shape, 2, true)) {
      auto x = ShardedTensor::from_global(mesh, spec, global, "x");
      // Replicated -> partial keeps the value on one replica and zeros elsewhere.
      if (!x.holds_partial_value()) {
        for (float v : x.local().values<float>()) ASSERT_EQ(v, 0.0f) << spec.to_string();
      }
      EXPECT_TRUE(x.to_global().bit_equal(global)) << shape.to_string() << " " << spec.to_string();
    }
  }
}

// A size the axes do not divide follows the block rule: blocks of ceil(n / s), the trailing ones
// short or empty (25 over 8: six blocks of 4, then 1, then 0); the global value comes back.
TEST(ShardedTensor, UnevenSizeFollowsTheBlockRule) {
  const int n = world_size();
  Mesh mesh = Mesh::world(MeshShape({"data"}, {n}));
  const std::int64_t cols = 3 * n + 1;
  auto x = ShardedTensor::from_fn(mesh, parse_spec("P(None, data)"), {4, cols}, DType::f32, hashed, "W2");
  const std::int64_t chunk = (cols + n - 1) / n;
  const std::int64_t begin = std::min<std::int64_t>(cols, mesh.rank() * chunk);
  const std::int64_t end = std::min<std::int64_t>(cols, (mesh.rank() + 1) * chunk);
  EXPECT_EQ(x.local().shape(), (Shape{4, end - begin}));
  EXPECT_EQ(x.block_offsets(), (std::vector<std::int64_t>{0, begin}));
  EXPECT_TRUE(x.to_global().bit_equal(reference({4, cols})));
  if (n == 8) {
    EXPECT_EQ(block_extents(cols, n), (std::vector<std::int64_t>{4, 4, 4, 4, 4, 4, 1, 0}));
  }
}

TEST(ShardedTensor, UnknownAxisAndAxisTwiceAreErrors) {
  Mesh mesh = Mesh::world(MeshShape({"data"}, {world_size()}));
  try {
    ShardedTensor::zeros(mesh, parse_spec("P(model)"), {8}, DType::f32, "b");
    FAIL();
  } catch (const SpecError& e) {
    EXPECT_EQ(std::string(e.what()),
              "spec P(model) of 'b': unknown mesh axis 'model' (mesh has data: " + std::to_string(world_size()) + ")");
  }
  try {
    ShardedTensor::zeros(mesh, parse_spec("P(data, data)"), {8, 8}, DType::f32, "W");
    FAIL();
  } catch (const SpecError& e) {
    EXPECT_EQ(std::string(e.what()), "spec P(data, data) of 'W': mesh axis 'data' is used more than once");
  }
}

TEST(ShardedTensor, WrongLocalBlockShapeIsAnError) {
  Mesh mesh = Mesh::world(MeshShape({"data"}, {world_size()}));
  Tensor block({3, 3});
  try {
    ShardedTensor(mesh, parse_spec("P(data)"), {8 * world_size(), 3}, block, "x");
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_EQ(std::string(e.what()), "sharded tensor 'x' [" + std::to_string(8 * world_size()) +
                                         ", 3] P(data, None) on mesh(data: " + std::to_string(world_size()) +
                                         "): local block has shape [3, 3], expected [8, 3]");
  }
}

TEST(ShardedTensor, PictureShowsWhichRanksHoldWhichBlock) {
  if (world_size() != 8) GTEST_SKIP() << "picture pinned on the 2x4 mesh";
  Mesh mesh = Mesh::world(MeshShape({"data", "model"}, {2, 4}));
  auto w1 = ShardedTensor::zeros(mesh, parse_spec("P(None, model)"), {16, 64}, DType::f32, "W1");
  EXPECT_EQ(w1.picture(),
            "W1: f32[16, 64] P(None, model) on mesh(data: 2, model: 4)\n"
            "+-----+-----+-----+-----+\n"
            "| 0,4 | 1,5 | 2,6 | 3,7 |\n"
            "+-----+-----+-----+-----+\n");
  auto x = ShardedTensor::zeros(mesh, parse_spec("P(data, None; partial=model)"), {8, 4}, DType::f32, "y");
  EXPECT_EQ(x.picture(),
            "y: f32[8, 4] P(data, None; partial=model) on mesh(data: 2, model: 4)\n"
            "+---------+\n"
            "| 0,1,2,3 |\n"
            "+---------+\n"
            "| 4,5,6,7 |\n"
            "+---------+\n"
            "partial over model: each cell's value is the sum of its ranks' blocks\n");
  // Uneven blocks (10 over 4: 3, 3, 3, 1): each cell names its block's shape.
  auto u = ShardedTensor::zeros(mesh, parse_spec("P(None, model)"), {16, 10}, DType::f32, "U");
  EXPECT_EQ(u.picture(),
            "U: f32[16, 10] P(None, model) on mesh(data: 2, model: 4)\n"
            "+----------+----------+----------+----------+\n"
            "| 0,4 16x3 | 1,5 16x3 | 2,6 16x3 | 3,7 16x1 |\n"
            "+----------+----------+----------+----------+\n");
}

}  // namespace
}  // namespace tessera
