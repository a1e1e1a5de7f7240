// Transfers of more than 2^31 - 1 bytes per rank (issue: MPI's int counts). Each collective moves
// a block of 2.24 GB (560 M i32) per rank, so every byte count passes the int limit; the results
// are checked element by element against values computed from rank and index. Needs about 7 GB
// per rank at 2 ranks (label `large`, run alone; left out of the sanitizer build).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "collectives/collectives.h"
#include "tests/test_meshes.h"

namespace tessera {
namespace {

using testing_support::world_rank;
using testing_support::world_size;

constexpr std::int64_t kBlock = 560'000'000;  // i32 elements per rank: 2.24 GB

static_assert(kBlock * 4 > INT32_MAX, "the block must pass MPI's int limit in bytes");

// The value rank r holds at index i of its block is value(r, i) = (i mod kPeriod) * 8 + r: exact
// in i32, different for every rank.
constexpr std::int64_t kPeriod = 1000003;

// One period of scale * value(r, c) + shift, c = 0 .. kPeriod-1 (4 MB): the blocks are copied
// from it and compared against it in runs (memcpy and memcmp), so that the test's time is the
// collectives' and not a loop over 5 G elements (most of the test's CPU when walked one by one).
std::vector<std::int32_t> period(int r, std::int32_t scale = 1, std::int32_t shift = 0) {
  std::vector<std::int32_t> values(kPeriod);
  for (std::int64_t c = 0; c < kPeriod; ++c) values[c] = scale * static_cast<std::int32_t>(c * 8 + r) + shift;
  return values;
}

// Calls run(j, c, n) for the runs that cover indices start + j .. start + j + n - 1 of a block,
// each within one period, starting at offset c of it.
template <class Run>
void runs(std::int64_t start, std::int64_t count, Run&& run) {
  std::int64_t c = start % kPeriod;
  for (std::int64_t j = 0; j < count;) {
    const std::int64_t n = std::min(count - j, kPeriod - c);
    run(j, c, n);
    j += n;
    c = 0;
  }
}

void fill(std::int32_t* out, std::int64_t count, int r) {
  const std::vector<std::int32_t> values = period(r);
  runs(0, count, [&](std::int64_t j, std::int64_t c, std::int64_t n) {
    std::memcpy(out + j, values.data() + c, static_cast<std::size_t>(n) * sizeof(std::int32_t));
  });
}

Tensor block_of(int r, Shape shape) {
  Tensor t = Tensor::empty(std::move(shape), DType::i32);
  fill(t.data<std::int32_t>(), t.numel(), r);
  return t;
}

Mesh line() { return Mesh::world(MeshShape({"x"}, {world_size()})); }

// Elements of got[0 .. count) that differ from scale * value(r, start + j) + shift; counted
// instead of one EXPECT per element, element by element only in a run that differs.
std::int64_t mismatches(const std::int32_t* got, std::int64_t count, std::int64_t start, int r, std::int32_t scale = 1,
                        std::int32_t shift = 0) {
  const std::vector<std::int32_t> values = period(r, scale, shift);
  std::int64_t bad = 0;
  runs(start, count, [&](std::int64_t j, std::int64_t c, std::int64_t n) {
    if (std::memcmp(got + j, values.data() + c, static_cast<std::size_t>(n) * sizeof(std::int32_t)) == 0) return;
    for (std::int64_t i = 0; i < n; ++i) bad += got[j + i] != values[c + i];
  });
  return bad;
}

TEST(LargeTransfer, AllGatherOuterDimension) {
  const Mesh mesh = line();
  const int n = world_size();
  Tensor out = all_gather(mesh, block_of(world_rank(), {kBlock}), {"x"}, 0);
  ASSERT_EQ(out.numel(), kBlock * n);
  // Rank k's block, whole, at k * kBlock.
  std::int64_t bad = 0;
  for (int k = 0; k < n; ++k) bad += mismatches(out.data<std::int32_t>() + k * kBlock, kBlock, 0, k);
  EXPECT_EQ(bad, 0);
}

TEST(LargeTransfer, AllGatherInnerDimension) {
  // [2, kBlock / 2] gathered along dimension 1: two strided runs of 1.2 GB per rank.
  const Mesh mesh = line();
  const int n = world_size();
  const std::int64_t cols = kBlock / 2;
  Tensor out = all_gather(mesh, block_of(world_rank(), {2, cols}), {"x"}, 1);
  ASSERT_EQ(out.shape(), (Shape{2, cols * n}));
  // Row `row` of the result is rank 0's row, then rank 1's, ...; rank k's row starts at index
  // row * cols of its block.
  std::int64_t bad = 0;
  for (std::int64_t row = 0; row < 2; ++row) {
    for (int k = 0; k < n; ++k) {
      bad += mismatches(out.data<std::int32_t>() + (row * n + k) * cols, cols, row * cols, k);
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(LargeTransfer, ReduceScatter) {
  const Mesh mesh = line();
  const int n = world_size();
  const int me = world_rank();
  // Every rank holds [n * kBlock] equal to block_of(me) repeated; rank k keeps the sum of chunk k.
  Tensor in = Tensor::empty({kBlock * n}, DType::i32);
  for (int k = 0; k < n; ++k) fill(in.data<std::int32_t>() + k * kBlock, kBlock, me);
  std::int64_t rank_sum = 0;
  for (int r = 0; r < n; ++r) rank_sum += r;
  {
    Tensor out = reduce_scatter(mesh, in, {"x"}, 0);
    ASSERT_EQ(out.numel(), kBlock);
    // sum over r of value(r, i) = n * value(0, i) + (0 + 1 + ... + n-1).
    EXPECT_EQ(mismatches(out.data<std::int32_t>(), kBlock, 0, 0, n, static_cast<std::int32_t>(rank_sum)), 0);
  }
}

}  // namespace
}  // namespace tessera
