// bf16 through every collective and reshard: the same values as f32 where nothing is summed,
// sums computed in f32 in rank order and rounded once (the same bits on every rank), and byte
// records exactly half of the f32 run's.
#include <gtest/gtest.h>

#include <algorithm>

#include "collectives/collectives.h"
#include "collectives/reshard.h"
#include "core/bfloat16.h"
#include "core/error.h"
#include "tests/test_meshes.h"

namespace tessera {
namespace {

using testing_support::all_specs;
using testing_support::meshes_of_size;
using testing_support::world_size;

std::vector<Axes> ordered_subsets(const MeshShape& shape) {
  std::vector<Axes> out;
  const int k = shape.ndim();
  for (int mask = 0; mask < (1 << k); ++mask) {
    Axes axes;
    for (int a = 0; a < k; ++a) {
      if (mask & (1 << a)) axes.push_back(shape.names()[a]);
    }
    std::sort(axes.begin(), axes.end());
    do {
      out.push_back(axes);
    } while (std::next_permutation(axes.begin(), axes.end()));
  }
  return out;
}

int member_rank(const Mesh& mesh, const Axes& axes, int q) {
  std::vector<int> coords = mesh.coords();
  for (int i = static_cast<int>(axes.size()) - 1; i >= 0; --i) {
    const int a = mesh.shape().axis_index(axes[i]);
    coords[a] = q % mesh.shape().sizes()[a];
    q /= mesh.shape().sizes()[a];
  }
  return mesh.shape().rank_of(coords);
}

// Rank r's block: bf16-representable values with 8 significant bits, so that sums of several
// ranks' blocks need rounding (f32 keeps them exactly; bf16 does not).
Tensor block_of(int r, const Shape& shape, DType dtype) {
  Tensor t(shape, DType::f32);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    t.data<float>()[i] = bfloat16(static_cast<float>(((r * 131 + i * 29) % 255) - 127) / 64.0f + 3.0f).operator float();
  }
  return t.astype(dtype);
}

// Sum in rank order (position q of the communicator) in f32, then one rounding.
Tensor reference_sum(const Mesh& mesh, const Axes& axes, const Shape& block) {
  const int n = mesh.shape().axes_size(axes);
  Tensor acc = block_of(member_rank(mesh, axes, 0), block, DType::f32);
  for (int q = 1; q < n; ++q) {
    Tensor theirs = block_of(member_rank(mesh, axes, q), block, DType::f32);
    for (std::int64_t i = 0; i < acc.numel(); ++i) acc.data<float>()[i] += theirs.data<float>()[i];
  }
  return acc.astype(DType::bf16);
}

// Runs op on the f32 and bf16 blocks; the bf16 run's records are the f32 run's with half the bytes.
template <class Op>
Tensor run_both(const Mesh& mesh, const Shape& block, Op op, Tensor* f32_result) {
  std::vector<CommRecord> f32_records, bf16_records;
  {
    CommScope scope;
    *f32_result = op(block_of(mesh.rank(), block, DType::f32));
    f32_records = scope.records();
  }
  CommScope scope;
  Tensor out = op(block_of(mesh.rank(), block, DType::bf16));
  bf16_records = scope.records();
  EXPECT_EQ(out.dtype(), DType::bf16);
  EXPECT_EQ(bf16_records.size(), f32_records.size());
  for (std::size_t i = 0; i < std::min(bf16_records.size(), f32_records.size()); ++i) {
    CommRecord halved = f32_records[i];
    EXPECT_EQ(halved.bytes % 2, 0) << to_string(halved);
    halved.bytes /= 2;
    EXPECT_EQ(bf16_records[i], halved);
  }
  return out;
}

TEST(Bf16Collectives, MovesTheSameValuesAtHalfTheBytes) {
  const Shape block = {8, 4, 16};  // 512 elements: every byte formula divides evenly
  for (const auto& shape : meshes_of_size(world_size())) {
    Mesh mesh = Mesh::world(shape);
    for (const auto& axes : ordered_subsets(shape)) {
      const int n = shape.axes_size(axes);
      for (int dim = 0; dim < 3; ++dim) {
        Tensor f32;
        Tensor got = run_both(mesh, block, [&](const Tensor& t) { return all_gather(mesh, t, axes, dim); }, &f32);
        EXPECT_TRUE(got.bit_equal(f32.astype(DType::bf16))) << "all_gather " << shape.to_string();
        if (block[dim] % n == 0) {
          got = run_both(mesh, block, [&](const Tensor& t) { return all_to_all(mesh, t, axes, dim, 2 - dim); }, &f32);
          EXPECT_TRUE(got.bit_equal(f32.astype(DType::bf16))) << "all_to_all " << shape.to_string();
          got = run_both(mesh, block, [&](const Tensor& t) { return reduce_scatter(mesh, t, axes, dim); }, &f32);
          Shape piece = block;
          piece[dim] /= n;
          std::vector<std::int64_t> at(3, 0);
          at[dim] = mesh.axes_rank(axes) * piece[dim];
          EXPECT_TRUE(got.bit_equal(extract_block(reference_sum(mesh, axes, block), at, piece)))
              << "reduce_scatter " << shape.to_string() << " dim " << dim;
        }
      }
      Tensor f32;
      Tensor got = run_both(mesh, block, [&](const Tensor& t) { return all_reduce(mesh, t, axes); }, &f32);
      EXPECT_TRUE(got.bit_equal(reference_sum(mesh, axes, block))) << "all_reduce " << shape.to_string();
      got = run_both(mesh, block, [&](const Tensor& t) { return all_reduce(mesh, t, axes, ReduceOp::max); }, &f32);
      EXPECT_TRUE(got.bit_equal(f32.astype(DType::bf16))) << "all_reduce max " << shape.to_string();
      Tensor in_place = block_of(mesh.rank(), block, DType::bf16);
      const void* storage = in_place.raw();
      Tensor reduced = all_reduce(mesh, std::move(in_place), axes);
      EXPECT_EQ(reduced.raw(), storage);
      EXPECT_TRUE(reduced.bit_equal(reference_sum(mesh, axes, block)));
      got = run_both(mesh, block, [&](const Tensor& t) { return broadcast(mesh, t, axes, n - 1); }, &f32);
      EXPECT_TRUE(got.bit_equal(f32.astype(DType::bf16)));
      std::vector<std::pair<int, int>> shift;
      for (int q = 0; q + 1 < n; ++q) shift.push_back({q, q + 1});
      got = run_both(mesh, block, [&](const Tensor& t) { return permute(mesh, t, axes, shift); }, &f32);
      EXPECT_TRUE(got.bit_equal(f32.astype(DType::bf16)));
    }
  }
}

// A sum whose f32 total differs from a chain of bf16 roundings: 256 from rank 0 and 1 from every
// other rank. Rounded once, 256 + 1 = 257 rounds to 256 (even) but 256 + 3 = 259 rounds to 260;
// rounding after every addition would give 256.
TEST(Bf16Collectives, AllReduceRoundsOnce) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  Mesh mesh = Mesh::world(MeshShape({"all"}, {world_size()}));
  Tensor mine = Tensor::full({4}, mesh.rank() == 0 ? 256.0 : 1.0, DType::bf16);
  const double expected = static_cast<float>(bfloat16(256.0f + static_cast<float>(world_size() - 1)));
  Tensor sum = all_reduce(mesh, mine, {"all"});
  for (std::int64_t i = 0; i < 4; ++i) EXPECT_EQ(sum.at(i), expected);
  EXPECT_NE(expected, 256.0);
}

// A partial bf16 value read back with to_global is summed as a reshard sums it: in f32 in rank
// order, rounded once. to_global added the bf16 blocks one at a time and lost every +1 after 256.
TEST(Bf16Collectives, ToGlobalOfAPartialValueRoundsOnce) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  Mesh mesh = Mesh::world(MeshShape({"all"}, {world_size()}));
  const Tensor mine = Tensor::full({4}, mesh.rank() == 0 ? 256.0 : 1.0, DType::bf16);
  const ShardedTensor partial(mesh, parse_spec("P(None; partial=all)"), {4}, mine);
  const double expected = static_cast<float>(bfloat16(256.0f + static_cast<float>(world_size() - 1)));
  const Tensor global = partial.to_global();
  ASSERT_EQ(global.dtype(), DType::bf16);
  for (std::int64_t i = 0; i < 4; ++i) EXPECT_EQ(global.at(i), expected);
  EXPECT_TRUE(global.bit_equal(reshard(partial, parse_spec("P(None)")).to_global()));
  EXPECT_NE(expected, 256.0);
}

// The order of a bf16 sum shows in its bits when the f32 sum needs rounding: 2^-30 from rank 1, 1
// from rank 2, -1 from rank 3, 0 elsewhere. In rank order 2^-30 + 1 rounds to 1 and the total is
// 0; from the last rank down (or any order adding rank 1's value last) it is 2^-30, which bf16
// holds exactly. The values of MovesTheSameValuesAtHalfTheBytes sum exactly in f32, in any order.
TEST(Bf16Collectives, SumsInRankOrder) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  const int n = world_size();
  Mesh mesh = Mesh::world(MeshShape({"all"}, {n}));
  auto value = [](int r) { return r == 1 ? 0x1p-30f : r == 2 ? 1.0f : r == 3 ? -1.0f : 0.0f; };
  float in_order = 0.0f, reversed = value(0);
  for (int r = 0; r < n; ++r) in_order += value(r);
  for (int r = n - 1; r >= 1; --r) reversed += value(r);
  const double expected = static_cast<float>(bfloat16(in_order));
  ASSERT_EQ(expected, 0.0);
  ASSERT_NE(static_cast<double>(static_cast<float>(bfloat16(reversed))), expected);  // the test can fail

  const Tensor mine = Tensor::full({6}, value(mesh.rank()), DType::bf16);
  const Tensor sum = all_reduce(mesh, mine, {"all"});
  for (std::int64_t i = 0; i < sum.numel(); ++i) EXPECT_EQ(sum.at(i), expected) << "all_reduce at " << i;
  // reduce_scatter, even (2 per rank) and uneven (2n + 1 over n ranks: the variable counts).
  for (const std::int64_t length : {std::int64_t{2} * n, std::int64_t{2} * n + 1}) {
    const Tensor scattered = reduce_scatter(mesh, Tensor::full({length}, value(mesh.rank()), DType::bf16), {"all"}, 0);
    ASSERT_EQ(scattered.numel(), block_extent(length, n, mesh.rank()));
    for (std::int64_t i = 0; i < scattered.numel(); ++i) {
      EXPECT_EQ(scattered.at(i), expected) << "reduce_scatter of " << length << " at " << i;
    }
  }
  // A partial value resharded to replicated, and read back whole.
  const ShardedTensor partial(mesh, parse_spec("P(None; partial=all)"), {6}, mine);
  const Tensor replicated = reshard(partial, parse_spec("P(None)")).local();
  const Tensor global = partial.to_global();
  for (std::int64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(replicated.at(i), expected) << "reshard at " << i;
    EXPECT_EQ(global.at(i), expected) << "to_global at " << i;
  }
}

// reshard between every pair of specs of a 2-D tensor (partial sources included): the bf16 value
// is the f32 one rounded (sums aside, which round once), in exactly half the bytes.
TEST(Bf16Collectives, ReshardEveryPairAtHalfTheBytes) {
  const Shape global = {16, 32};
  for (const auto& shape : meshes_of_size(world_size())) {
    if (shape.ndim() > 2) continue;
    Mesh mesh = Mesh::world(shape);
    Tensor value = block_of(0, global, DType::f32);
    const auto specs = all_specs(shape, 2, true);
    int checked = 0;
    for (const Spec& from : specs) {
      if (!from.partial.empty()) continue;
      ShardedTensor x32 = ShardedTensor::from_global(mesh, from, value, "x");
      ShardedTensor x16 = ShardedTensor::from_global(mesh, from, value.astype(DType::bf16), "x");
      for (const Spec& to : specs) {
        if (!to.partial.empty()) continue;
        std::vector<CommRecord> r32, r16;
        ShardedTensor y32, y16;
        {
          CommScope scope;
          y32 = reshard(x32, to);
          r32 = scope.records();
        }
        {
          CommScope scope;
          y16 = reshard(x16, to);
          r16 = scope.records();
        }
        ASSERT_EQ(r16.size(), r32.size()) << from.to_string() << " -> " << to.to_string();
        for (std::size_t i = 0; i < r16.size(); ++i) {
          CommRecord halved = r32[i];
          halved.bytes /= 2;
          EXPECT_EQ(r16[i], halved) << from.to_string() << " -> " << to.to_string();
        }
        EXPECT_TRUE(y16.local().bit_equal(y32.local().astype(DType::bf16)));
        ++checked;
      }
    }
    EXPECT_GT(checked, 0);
  }
}

}  // namespace
}  // namespace tessera
