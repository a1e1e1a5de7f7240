// Transfers of more than 2^31 - 1 bytes per rank (issue: MPI's int counts). Each collective moves
// a block of 2.24 GB (560 M i32) per rank, so every byte count passes the int limit; the results
// are checked element by element against values computed from rank and index. Needs about 7 GB
// per rank at 2 ranks (label `large`, run alone; left out of the sanitizer build).
#include <gtest/gtest.h>

#include <cstdint>

#include "collectives/collectives.h"
#include "tests/test_meshes.h"

namespace tessera {
namespace {

using testing_support::world_rank;
using testing_support::world_size;

constexpr std::int64_t kBlock = 560'000'000;  // i32 elements per rank: 2.24 GB

static_assert(kBlock * 4 > INT32_MAX, "the block must pass MPI's int limit in bytes");

// The value rank r holds at index i of its block: exact in i32, different for every rank.
std::int32_t value(int r, std::int64_t i) { return static_cast<std::int32_t>((i % 1000003) * 8 + r); }

Tensor block_of(int r, Shape shape) {
  Tensor t = Tensor::empty(std::move(shape), DType::i32);
  auto v = t.values<std::int32_t>();
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(v.size()); ++i) v[i] = value(r, i);
  return t;
}

Mesh line() { return Mesh::world(MeshShape({"x"}, {world_size()})); }

// Counts the mismatches instead of one EXPECT per element.
template <class Want>
std::int64_t mismatches(const Tensor& t, Want&& want) {
  auto v = t.values<std::int32_t>();
  std::int64_t bad = 0;
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(v.size()); ++i) bad += v[i] != want(i);
  return bad;
}

TEST(LargeTransfer, AllGatherOuterDimension) {
  const Mesh mesh = line();
  const int n = world_size();
  Tensor out = all_gather(mesh, block_of(world_rank(), {kBlock}), {"x"}, 0);
  ASSERT_EQ(out.numel(), kBlock * n);
  EXPECT_EQ(mismatches(out, [&](std::int64_t i) { return value(static_cast<int>(i / kBlock), i % kBlock); }), 0);
}

TEST(LargeTransfer, AllGatherInnerDimension) {
  // [2, kBlock / 2] gathered along dimension 1: two strided runs of 1.2 GB per rank.
  const Mesh mesh = line();
  const int n = world_size();
  const std::int64_t cols = kBlock / 2;
  Tensor out = all_gather(mesh, block_of(world_rank(), {2, cols}), {"x"}, 1);
  ASSERT_EQ(out.shape(), (Shape{2, cols * n}));
  EXPECT_EQ(mismatches(out,
                       [&](std::int64_t i) {
                         const std::int64_t row = i / (cols * n), col = i % (cols * n);
                         return value(static_cast<int>(col / cols), row * cols + col % cols);
                       }),
            0);
}

TEST(LargeTransfer, ReduceScatter) {
  const Mesh mesh = line();
  const int n = world_size();
  const int me = world_rank();
  // Every rank holds [n * kBlock] equal to block_of(me) repeated; rank k keeps the sum of chunk k.
  Tensor in = Tensor::empty({kBlock * n}, DType::i32);
  {
    auto v = in.values<std::int32_t>();
    for (std::int64_t i = 0; i < kBlock * n; ++i) v[i] = value(me, i % kBlock);
  }
  std::int64_t rank_sum = 0;
  for (int r = 0; r < n; ++r) rank_sum += r;
  {
    Tensor out = reduce_scatter(mesh, in, {"x"}, 0);
    ASSERT_EQ(out.numel(), kBlock);
    EXPECT_EQ(mismatches(out, [&](std::int64_t i) { return static_cast<std::int32_t>(n * (value(0, i)) + rank_sum); }),
              0);
  }
}

}  // namespace
}  // namespace tessera
