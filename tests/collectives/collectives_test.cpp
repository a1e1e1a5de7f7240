// The local-view collectives against references computed from rank and size: every ordered
// subset of the mesh axes, outer and inner dimensions, both ways of moving inner blocks
// (strided datatypes and memcpy packing), exact byte counts, and errors raised on every rank.
#include "collectives/collectives.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "collectives/layout.h"
#include "collectives/ordered_reduce.h"
#include "core/error.h"
#include "tests/collectives/expect_error.h"
#include "tests/test_meshes.h"

namespace tessera {
namespace {

using testing_support::expect_error;
using testing_support::meshes_of_size;
using testing_support::world_size;

// Every ordered subset of the mesh's axes, the empty one included.
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

// The mesh rank at position q of axes_comm(axes) as seen from this rank.
int member_rank(const Mesh& mesh, const Axes& axes, int q) {
  return mesh.shape().rank_of(mesh.shape().group_member(mesh.coords(), axes, q));
}

// The block that mesh rank r holds: integer-valued, different on every rank and element, so
// sums are exact.
Tensor block_of(int r, const Shape& shape, DType dtype = DType::f32) {
  Tensor t(shape, dtype);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    dispatch_dtype(dtype, [&](auto zero) { t.data<decltype(zero)>()[i] = static_cast<decltype(zero)>(r * 1000 + i % 997); });
  }
  return t;
}

std::vector<std::int64_t> at_dim(int rank, int dim, std::int64_t offset) {
  std::vector<std::int64_t> o(rank, 0);
  o[dim] = offset;
  return o;
}

const std::vector<Shape> kShapes = {{8, 4, 16}, {1, 8, 8}, {16}};

class LocalCollectives : public ::testing::TestWithParam<PackMethod> {
 protected:
  void SetUp() override { set_pack_method(GetParam()); }
  void TearDown() override { set_pack_method(PackMethod::datatype); }
};

TEST_P(LocalCollectives, AllGatherConcatenatesInRankOrder) {
  int checked = 0;
  for (const auto& shape : meshes_of_size(world_size())) {
    Mesh mesh = Mesh::world(shape);
    for (const auto& axes : ordered_subsets(shape)) {
      const int n = shape.axes_size(axes);
      for (const auto& block : kShapes) {
        for (int dim = 0; dim < static_cast<int>(block.size()); ++dim) {
          Tensor mine = block_of(mesh.rank(), block);
          Shape out_shape = block;
          out_shape[dim] *= n;
          Tensor expected(out_shape, DType::f32);
          for (int q = 0; q < n; ++q) {
            insert_block(expected, block_of(member_rank(mesh, axes, q), block), at_dim(block.size(), dim, q * block[dim]));
          }
          CommScope scope;
          Tensor got = all_gather(mesh, mine, axes, dim);
          EXPECT_TRUE(got.bit_equal(expected)) << shape.to_string() << " dim " << dim;
          ASSERT_EQ(scope.records().size(), 1u);
          EXPECT_EQ(scope.records()[0], (CommRecord{CommOp::all_gather, axes, dim, (n - 1) * std::int64_t(mine.nbytes())}));
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
}

TEST_P(LocalCollectives, ReduceScatterSumsThenKeepsMyBlock) {
  for (const auto& shape : meshes_of_size(world_size())) {
    Mesh mesh = Mesh::world(shape);
    for (const auto& axes : ordered_subsets(shape)) {
      const int n = shape.axes_size(axes);
      const int me = mesh.axes_rank(axes);
      for (const auto& block : kShapes) {
        for (int dim = 0; dim < static_cast<int>(block.size()); ++dim) {
          if (block[dim] % n != 0) continue;
          for (DType dtype : {DType::f32, DType::f64, DType::i32}) {
            Tensor sum(block, dtype);
            for (int q = 0; q < n; ++q) add_block(sum, block_of(member_rank(mesh, axes, q), block, dtype), at_dim(block.size(), dim, 0));
            Shape piece = block;
            piece[dim] /= n;
            Tensor expected = extract_block(sum, at_dim(block.size(), dim, me * piece[dim]), piece);
            Tensor mine = block_of(mesh.rank(), block, dtype);
            CommScope scope;
            Tensor got = reduce_scatter(mesh, mine, axes, dim);
            EXPECT_TRUE(got.bit_equal(expected)) << shape.to_string() << " dim " << dim;
            EXPECT_EQ(scope.records().at(0),
                      (CommRecord{CommOp::reduce_scatter, axes, dim, (n - 1) * std::int64_t(mine.nbytes()) / n}));
          }
        }
      }
    }
  }
}

TEST_P(LocalCollectives, AllToAllSplitsOneDimensionAndConcatenatesAnother) {
  for (const auto& shape : meshes_of_size(world_size())) {
    Mesh mesh = Mesh::world(shape);
    for (const auto& axes : ordered_subsets(shape)) {
      const int n = shape.axes_size(axes);
      const int me = mesh.axes_rank(axes);
      for (const auto& block : kShapes) {
        const int rank = static_cast<int>(block.size());
        for (int split = 0; split < rank; ++split) {
          if (block[split] % n != 0) continue;
          for (int concat = 0; concat < rank; ++concat) {
            Shape piece = block;
            piece[split] /= n;
            Shape out_shape = piece;
            out_shape[concat] *= n;
            Tensor expected(out_shape, DType::f32);
            for (int q = 0; q < n; ++q) {
              Tensor theirs = block_of(member_rank(mesh, axes, q), block);
              insert_block(expected, extract_block(theirs, at_dim(rank, split, me * piece[split]), piece),
                           at_dim(rank, concat, q * piece[concat]));
            }
            Tensor mine = block_of(mesh.rank(), block);
            CommScope scope;
            Tensor got = all_to_all(mesh, mine, axes, split, concat);
            EXPECT_TRUE(got.bit_equal(expected)) << shape.to_string() << " " << split << "->" << concat;
            EXPECT_EQ(scope.records().at(0),
                      (CommRecord{CommOp::all_to_all, axes, split, (n - 1) * std::int64_t(mine.nbytes()) / n}));
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(PackMethods, LocalCollectives,
                         ::testing::Values(PackMethod::datatype, PackMethod::memcpy),
                         [](const auto& info) { return info.param == PackMethod::datatype ? "datatype" : "memcpy"; });

TEST(Collectives, AllReduceSumAndMaxGiveTheSameBitsEverywhere) {
  for (const auto& shape : meshes_of_size(world_size())) {
    Mesh mesh = Mesh::world(shape);
    for (const auto& axes : ordered_subsets(shape)) {
      const int n = shape.axes_size(axes);
      const Shape block = {3, 5};
      Tensor sum(block, DType::f32), max = block_of(member_rank(mesh, axes, 0), block);
      for (int q = 0; q < n; ++q) {
        Tensor theirs = block_of(member_rank(mesh, axes, q), block);
        add_block(sum, theirs, {0, 0});
        for (std::int64_t i = 0; i < max.numel(); ++i) {
          max.data<float>()[i] = std::max(max.data<float>()[i], theirs.data<float>()[i]);
        }
      }
      Tensor mine = block_of(mesh.rank(), block);
      CommScope scope;
      EXPECT_TRUE(all_reduce(mesh, mine, axes).bit_equal(sum));
      EXPECT_TRUE(all_reduce(mesh, mine, axes, ReduceOp::max).bit_equal(max));
      Tensor in_place = mine;
      const void* storage = in_place.raw();
      Tensor reduced = all_reduce(mesh, std::move(in_place), axes);
      EXPECT_EQ(reduced.raw(), storage);  // the rvalue overload reuses the storage
      EXPECT_TRUE(reduced.bit_equal(sum));
      ASSERT_EQ(scope.records().size(), 3u);
      EXPECT_EQ(scope.records()[0], (CommRecord{CommOp::all_reduce, axes, -1, 2 * (n - 1) * 60 / n}));
    }
  }
}

// Large blocks take the ordered all-reduce (an all-to-all, each element summed by its owner in
// rank order, an all-gather; in 4 MiB segments), and reduce_scatter always does: the result is
// the left fold in rank order, bit for bit, for values whose sum depends on the order, in every
// dtype, on both sides of the 16 MiB threshold, across segment boundaries and with counts n does
// not divide. i32 sums wrap as two's complement; bf16 sums in f32 and rounds once.
TEST(Collectives, LargeAllReducesAndReduceScattersAreRankOrderFolds) {
  // f32 also from the all-reduce's 16 MiB threshold on, across its 4 MiB segments (the segments
  // and the threshold are dtype-blind byte counts). The largest count is a multiple of 8, so that
  // reduce_scatter's even path through MPI moves blocks of several 4 MiB pieces and a shorter last
  // one (2 and 4 ranks; one piece of 2 MiB on 8).
  const std::int64_t ordered_f32 = static_cast<std::int64_t>(detail::kOrderedAllReduceBytes / 4);
  const std::vector<std::int64_t> sizes = {16383, 16384, 100003, ordered_f32 - 1, ordered_f32 + 8 * 4099};
  // The mesh of the rank count with the most axes: all of them, then its last axis alone.
  const std::vector<MeshShape> meshes = meshes_of_size(world_size());
  const MeshShape& shape = *std::max_element(meshes.begin(), meshes.end(),
                                             [](const MeshShape& a, const MeshShape& b) { return a.ndim() < b.ndim(); });
  Mesh mesh = Mesh::world(shape);
  std::vector<Axes> groups = {shape.names()};
  if (shape.ndim() > 1) groups.push_back({shape.names().back()});
  for (const auto& axes : groups) {
    const int n = shape.axes_size(axes);
    for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::bf16}) {
      for (std::int64_t count : sizes) {
        if (count > 100003 && dtype != DType::f32) continue;
        if (count == ordered_f32 - 1 && world_size() > 2) continue;  // the MPI side of the threshold: 1-2 ranks
        // Rank r's value at i: order-sensitive in floating point (a large and a small part),
        // near the i32 limit for i32 so that sums wrap.
        auto value_of = [&](int r, std::int64_t i) {
          if (dtype == DType::i32) return static_cast<double>(INT32_MAX - 10 + (r * 7 + i) % 11);
          return (r % 2 ? 1e4 : 1.0) * (1.0 + 0.1 * r + 1e-3 * static_cast<double>(i % 1013));
        };
        auto block = [&](int r) {
          Tensor t({count}, dtype);
          dispatch_dtype(dtype, [&](auto zero) {
            using T = decltype(zero);
            if constexpr (std::is_same_v<T, bfloat16>) {
              for (std::int64_t i = 0; i < count; ++i) t.data<T>()[i] = bfloat16(static_cast<float>(value_of(r, i)));
            } else {
              for (std::int64_t i = 0; i < count; ++i) t.data<T>()[i] = static_cast<T>(value_of(r, i));
            }
          });
          return t;
        };
        std::vector<Tensor> blocks;
        for (int q = 0; q < n; ++q) blocks.push_back(block(member_rank(mesh, axes, q)));
        Tensor sum({count}, dtype), max = blocks[0];
        dispatch_dtype(dtype, [&](auto zero) {
          using T = decltype(zero);
          for (std::int64_t i = 0; i < count; ++i) {
            if constexpr (std::is_same_v<T, std::int32_t>) {
              std::uint32_t s = 0;
              for (int q = 0; q < n; ++q) s += static_cast<std::uint32_t>(blocks[q].data<T>()[i]);
              sum.data<T>()[i] = static_cast<T>(s);
            } else if constexpr (std::is_same_v<T, bfloat16>) {
              float s = 0;
              for (int q = 0; q < n; ++q) s += float(blocks[q].data<T>()[i]);
              sum.data<T>()[i] = bfloat16(s);
            } else {
              T s = 0;
              for (int q = 0; q < n; ++q) s += blocks[q].data<T>()[i];
              sum.data<T>()[i] = s;
            }
            for (int q = 1; q < n; ++q) {
              if (max.data<T>()[i] < blocks[q].data<T>()[i]) max.data<T>()[i] = blocks[q].data<T>()[i];
            }
          }
        });
        const std::string label = shape.to_string() + " " + std::string(dtype_name(dtype)) + " count " +
                                  std::to_string(count);
        const Tensor mine = block(mesh.rank());
        // Below 16 MiB MPI_Allreduce sums f32 and f64 (its order is MPI's): integer-valued
        // checks there are left to AllReduceSumAndMaxGiveTheSameBitsEverywhere.
        const bool ordered = dtype == DType::bf16 || mine.nbytes() >= detail::kOrderedAllReduceBytes;
        if (ordered || dtype == DType::i32) {
          EXPECT_TRUE(all_reduce(mesh, mine, axes).bit_equal(sum)) << label;
        }
        EXPECT_TRUE(all_reduce(mesh, mine, axes, ReduceOp::max).bit_equal(max)) << label;
        Tensor in_place = mine;
        EXPECT_TRUE(all_reduce(mesh, std::move(in_place), axes, ReduceOp::max).bit_equal(max)) << label;
        // reduce_scatter always sums in rank order: this rank's block of the rule.
        const std::vector<std::int64_t> extents = block_extents(count, n);
        const int me = mesh.axes_rank(axes);
        const std::int64_t begin = block_begin(count, n, me);
        EXPECT_TRUE(reduce_scatter(mesh, mine, axes, 0).bit_equal(extract_block(sum, {begin}, {extents[me]})))
            << label;
        // Blocks of very different lengths, through MPI in pieces: the short blocks are done
        // rounds before the long one, and send and receive nothing after.
        if (count == sizes.back() && n > 1) {
          std::vector<std::int64_t> skewed(n, 1000);
          skewed[0] = count - 1000 * (n - 1);
          std::int64_t at = 0;
          for (int q = 0; q < me; ++q) at += skewed[q];
          EXPECT_TRUE(reduce_scatter(mesh, mine, axes, 0, skewed).bit_equal(extract_block(sum, {at}, {skewed[me]})))
              << label << " skewed";
        }
      }
    }
  }
}

TEST(Collectives, BroadcastSendsTheRootsBlock) {
  for (const auto& shape : meshes_of_size(world_size())) {
    Mesh mesh = Mesh::world(shape);
    for (const auto& axes : ordered_subsets(shape)) {
      const int n = shape.axes_size(axes);
      for (int root : {0, n - 1}) {
        CommScope scope;
        Tensor got = broadcast(mesh, block_of(mesh.rank(), {4, 4}), axes, root);
        EXPECT_TRUE(got.bit_equal(block_of(member_rank(mesh, axes, root), {4, 4})));
        EXPECT_EQ(scope.total_bytes(), n > 1 ? 64 : 0);
      }
    }
  }
}

TEST(Collectives, PermuteShiftsAndZeroesRanksWithoutASource) {
  for (const auto& shape : meshes_of_size(world_size())) {
    Mesh mesh = Mesh::world(shape);
    for (const auto& axes : ordered_subsets(shape)) {
      const int n = shape.axes_size(axes);
      const int me = mesh.axes_rank(axes);
      std::vector<std::pair<int, int>> shift;
      for (int q = 0; q < n; ++q) shift.emplace_back(q, (q + 1) % n);
      CommScope scope;
      Tensor got = permute(mesh, block_of(mesh.rank(), {2, 8}), axes, shift);
      EXPECT_TRUE(got.bit_equal(block_of(member_rank(mesh, axes, (me + n - 1) % n), {2, 8})));
      EXPECT_EQ(scope.total_bytes(), n > 1 ? 64 : 0);
      // Only 0 -> n-1: the others receive zeros; only position 0 sends.
      CommScope one;
      Tensor partial = permute(mesh, block_of(mesh.rank(), {2, 8}), axes, {{0, n - 1}});
      Tensor expected = me == n - 1 ? block_of(member_rank(mesh, axes, 0), {2, 8}) : Tensor({2, 8}, DType::f32);
      EXPECT_TRUE(partial.bit_equal(expected));
      EXPECT_EQ(one.total_bytes(), me == 0 && n > 1 ? 64 : 0);
    }
  }
}

// Uneven blocks (core/spec.h's block rule): rank k of the group holds extents[k] rows, some of
// them 0. all_gather with extents concatenates them; reduce_scatter without extents splits a
// dimension n does not divide by the rule; all_to_all with extents moves pieces of different
// sizes both ways. Results against references built from every member's block; records count
// the real bytes. f32 and bf16 (whose sums are f32 in rank order, rounded once).
TEST(Collectives, UnevenBlocksMoveWithVariableCounts) {
  int checked = 0;
  for (const auto& shape : meshes_of_size(world_size())) {
    Mesh mesh = Mesh::world(shape);
    for (const auto& axes : ordered_subsets(shape)) {
      const int n = shape.axes_size(axes);
      if (n == 1) continue;
      const int me = mesh.axes_rank(axes);
      for (DType dtype : {DType::f32, DType::bf16}) {
        for (std::int64_t total : {std::int64_t{7}, std::int64_t{13}, std::int64_t{3}}) {
          const auto extents = block_extents(total, n);
          const std::int64_t elem = static_cast<std::int64_t>(dtype_size(dtype));
          for (int dim : {0, 1}) {
            // all_gather: member q holds a block [extents[q], 5] (or [5, extents[q]]) of its values.
            auto block_shape = [&](std::int64_t e) { return dim == 0 ? Shape{e, 5} : Shape{5, e}; };
            Tensor mine = extract_block(block_of(mesh.rank(), block_shape(total), dtype), {0, 0}, block_shape(extents[me]));
            Tensor expected(block_shape(total), dtype);
            std::int64_t at = 0;
            for (int q = 0; q < n; ++q) {
              Tensor theirs = extract_block(block_of(member_rank(mesh, axes, q), block_shape(total), dtype), {0, 0},
                                            block_shape(extents[q]));
              insert_block(expected, theirs, at_dim(2, dim, at));
              at += extents[q];
            }
            CommScope scope;
            Tensor got = all_gather(mesh, mine, axes, dim, extents);
            EXPECT_TRUE(got.bit_equal(expected)) << shape.to_string() << " all_gather dim " << dim << " of " << total;
            ASSERT_EQ(scope.records().size(), 1u);
            EXPECT_EQ(scope.records()[0].bytes, (n - 1) * static_cast<std::int64_t>(mine.nbytes()));

            // reduce_scatter: every member holds [total, 5]; I keep rows block_begin.. of the sum.
            Tensor whole = block_of(mesh.rank(), block_shape(total), dtype);
            Tensor sum(block_shape(total), DType::f32);
            for (int q = 0; q < n; ++q) {
              const Tensor theirs = block_of(member_rank(mesh, axes, q), block_shape(total), dtype).astype(DType::f32);
              for (std::int64_t i = 0; i < sum.numel(); ++i) sum.data<float>()[i] += theirs.data<float>()[i];
            }
            Tensor want = extract_block(sum.astype(dtype), at_dim(2, dim, block_begin(total, n, me)),
                                        block_shape(extents[me]));
            CommScope scope2;
            Tensor scattered = reduce_scatter(mesh, whole, axes, dim);
            EXPECT_TRUE(scattered.bit_equal(want)) << shape.to_string() << " reduce_scatter dim " << dim << " of " << total;
            ASSERT_EQ(scope2.records().size(), 1u);
            EXPECT_EQ(scope2.records()[0].bytes, (total - extents[me]) * 5 * elem);

            // all_to_all: split dim `dim` of [total, 4] (or [4, total]) by the rule, concatenate
            // along the other dimension, whose extent is 1 + q on member q.
            const int other = 1 - dim;
            auto a2a_shape = [&](std::int64_t split, std::int64_t concat) {
              Shape s2(2);
              s2[dim] = split;
              s2[other] = concat;
              return s2;
            };
            Tensor source = block_of(mesh.rank(), a2a_shape(total, 1 + me), dtype);
            std::vector<std::int64_t> concat(n);
            for (int q = 0; q < n; ++q) concat[q] = 1 + q;
            Tensor want_a2a(a2a_shape(extents[me], n * (n + 1) / 2), dtype);
            std::int64_t c_at = 0;
            for (int q = 0; q < n; ++q) {
              Tensor theirs = block_of(member_rank(mesh, axes, q), a2a_shape(total, 1 + q), dtype);
              std::vector<std::int64_t> from(2, 0), to(2, 0);
              from[dim] = block_begin(total, n, me);
              to[other] = c_at;
              insert_block(want_a2a, extract_block(theirs, from, a2a_shape(extents[me], 1 + q)), to);
              c_at += 1 + q;
            }
            CommScope scope3;
            Tensor moved = all_to_all(mesh, source, axes, dim, extents, other, concat);
            EXPECT_TRUE(moved.bit_equal(want_a2a)) << shape.to_string() << " all_to_all dim " << dim << " of " << total;
            ASSERT_EQ(scope3.records().size(), 1u);
            EXPECT_EQ(scope3.records()[0].bytes, (total - extents[me]) * (1 + me) * elem);
            ++checked;
          }
        }
      }
    }
  }
  if (world_size() > 1) {
    EXPECT_GT(checked, 0);
  }
}

// all_gather_in_place: each member writes its block into the gathered tensor at its place (even
// and uneven extents, some empty, of [total, 5] and of [1, total, 3], whose dimension 1 is
// outermost in memory) and gets the bits all_gather gives, the other members' places filled and
// its own left as it was; the record counts what it sent. A dimension after one longer than 1 is
// refused.
TEST(Collectives, AllGatherInPlaceFillsTheOtherMembersPlaces) {
  int checked = 0;
  for (const auto& shape : meshes_of_size(world_size())) {
    Mesh mesh = Mesh::world(shape);
    for (const auto& axes : ordered_subsets(shape)) {
      const int n = shape.axes_size(axes);
      const int me = mesh.axes_rank(axes);
      for (const std::int64_t total : {std::int64_t{3}, std::int64_t{8 * n}, std::int64_t{13}}) {
        const auto extents = block_extents(total, n);
        for (const int dim : {0, 1}) {
          const auto shape_of = [&](std::int64_t e) { return dim == 0 ? Shape{e, 5} : Shape{1, e, 3}; };
          const auto block = [&](int q) {
            return extract_block(block_of(member_rank(mesh, axes, q), shape_of(total)), at_dim(dim == 0 ? 2 : 3, dim, 0),
                                 shape_of(extents[q]));
          };
          const Tensor mine = block(me);
          const Tensor expected = all_gather(mesh, mine, axes, dim, extents);
          // The gathered tensor holding this member's block and -1 elsewhere.
          Tensor whole = Tensor::full(shape_of(total), -1.0, DType::f32);
          insert_block(whole, mine, at_dim(dim == 0 ? 2 : 3, dim, block_begin(total, n, me)));
          CommScope scope;
          all_gather_in_place(mesh, whole, axes, dim, extents);
          EXPECT_TRUE(whole.bit_equal(expected)) << shape.to_string() << " dim " << dim << " of " << total;
          ASSERT_EQ(scope.records().size(), 1u);
          EXPECT_EQ(scope.records()[0],
                    (CommRecord{CommOp::all_gather, axes, dim, (n - 1) * static_cast<std::int64_t>(mine.nbytes())}));
          ++checked;
        }
      }
    }
    const std::string axis = shape.names()[0];
    Tensor inner = Tensor::zeros({2, 3 * shape.sizes()[0]}, DType::f32);
    expect_error<ShapeError>(
        [&] { all_gather_in_place(mesh, inner, {axis}, 1, std::vector<std::int64_t>(shape.sizes()[0], 3)); },
        "all_gather_in_place: dimension 1 of shape " + shape_to_string(inner.shape()) +
            " is not outermost (a dimension before it is longer than 1)");
  }
  EXPECT_GT(checked, 0);
}

// Errors that depend only on replicated facts are raised on every rank before any message.
TEST(Collectives, BadInputIsAnErrorOnEveryRank) {
  for (const auto& shape : meshes_of_size(world_size())) {
    Mesh mesh = Mesh::world(shape);
    const std::string axis = shape.names()[0];
    const int n = shape.sizes()[0];
    Tensor t = block_of(mesh.rank(), {3, 4});
    expect_error<SpecError>([&] { all_gather(mesh, t, {"nope"}, 0); },
                            "unknown mesh axis 'nope' (mesh has " + shape.to_string() + ")");
    expect_error<SpecError>([&] { all_reduce(mesh, t, {axis, axis}); },
                            "mesh axes: axis '" + axis + "' appears twice");
    expect_error<ShapeError>([&] { all_gather(mesh, t, {axis}, 2); },
                             "all_gather: dimension 2 out of range for a tensor of shape [3, 4]");
    // Uneven extents that do not make up the dimension, or are not this rank's.
    expect_error<ShapeError>([&] { reduce_scatter(mesh, t, {axis}, 0, std::vector<std::int64_t>(n, 1)); },
                             "reduce_scatter: blocks of extents " + shape_to_string(Shape(n, 1)) +
                                 " along dimension 0 do not make up its size 3 in shape [3, 4]");
    expect_error<ShapeError>([&] { all_gather(mesh, t, {axis}, 0, std::vector<std::int64_t>(n, 2)); },
                             "all_gather: this rank's block has extent 3 along dimension 0, expected 2 (block extents " +
                                 shape_to_string(Shape(n, 2)) + ")");
    expect_error<SpecError>([&] { permute(mesh, t, {axis}, {{0, 0}, {0, n - 1}}); },
                            "permute: position 0 is a source twice");
    if (n > 1) {
      expect_error<SpecError>([&] { permute(mesh, t, {axis}, {{0, 1}, {1, 1}}); },
                              "permute: position 1 is a destination twice");
    }
    expect_error<SpecError>([&] { permute(mesh, t, {axis}, {{0, n}}); },
                            "permute: pair (0, " + std::to_string(n) + ") is out of range for " + std::to_string(n) +
                                " ranks");
    expect_error<SpecError>([&] { broadcast(mesh, t, {axis}, n); },
                            "broadcast: root " + std::to_string(n) + " is not a position of axes_comm over 1 axes of size " +
                                std::to_string(n));
  }
}

TEST(Collectives, CountsBeyondIntAreAClearError) {
  EXPECT_THROW(detail::checked_count(std::int64_t(1) << 31, "all_gather"), MpiError);
  EXPECT_EQ(detail::checked_count((std::int64_t(1) << 31) - 1, "x"), 2147483647);
  EXPECT_EQ(detail::contiguous_message(100, "x").count, 100);
  // A message over 2 GiB: units of 1 MiB (2^33 bytes: 8192 of them), or one type of all its bytes
  // where some are left after the last unit: 2.24 GB (large_transfer_test's block), and twice a
  // prime above 2^31, which no divisor search below 2^31 splits (until the forty-fourth session
  // every rank tried each in turn, for seconds, then refused the message).
  for (const std::int64_t bytes : {std::int64_t(1) << 33, std::int64_t(2'240'000'000), std::int64_t(2) * 2147483659}) {
    const auto m = detail::contiguous_message(bytes, "all_gather");
    MPI_Count size = 0, lb = 0, extent = 0;
    ASSERT_EQ(MPI_Type_size_x(m.type.get(), &size), MPI_SUCCESS);
    ASSERT_EQ(MPI_Type_get_extent_x(m.type.get(), &lb, &extent), MPI_SUCCESS);
    EXPECT_EQ(m.count, bytes % (1 << 20) == 0 ? bytes >> 20 : 1) << bytes;
    EXPECT_EQ(size * m.count, bytes) << bytes;
    EXPECT_EQ(lb, 0) << bytes;
    EXPECT_EQ(extent, size) << bytes;  // consecutive messages (a gather's blocks) lie back to back
  }
  EXPECT_THROW(detail::contiguous_message(std::int64_t(1) << 52, "x"), MpiError);
  // The limit itself: 2^31 - 1 units of 1 MiB is one count, with or without bytes after the last
  // unit; one unit more is refused.
  for (const std::int64_t rest : {std::int64_t(0), std::int64_t(5)}) {
    const std::int64_t bytes = (std::int64_t(INT_MAX) << 20) + rest;
    const auto m = detail::contiguous_message(bytes, "all_gather");
    MPI_Count size = 0;
    ASSERT_EQ(MPI_Type_size_x(m.type.get(), &size), MPI_SUCCESS);
    EXPECT_EQ(m.count, rest == 0 ? INT_MAX : 1) << bytes;
    EXPECT_EQ(size * m.count, bytes) << bytes;
  }
  EXPECT_THROW(detail::contiguous_message((std::int64_t(INT_MAX) + 1) << 20, "x"), MpiError);
}

// The count refusals name the collective and the count on both sides of MPI's int range: a
// negative count (a wrapped product) as well as one past 2^31 - 1. A strided block type of more
// than 2^31 - 1 runs is refused by name before MPI is handed a wrapped (negative) count; only
// the datatype is built, no buffer. A message of exactly 2^31 - 1 bytes still fits one count of
// MPI_BYTE (mesh/mpi_check.h), not units of 1 MiB.
TEST(Collectives, CountRefusalsNameTheCollectiveAndTheCount) {
  const std::string limit = " exceeds MPI's int limit (2^31 - 1); split the tensor or use smaller blocks";
  expect_error<MpiError>([] { detail::checked_count(-1, "all_to_all"); }, "all_to_all: a count of -1" + limit);
  expect_error<MpiError>([] { detail::checked_count(std::int64_t(1) << 31, "all_gather"); },
                         "all_gather: a count of 2147483648" + limit);
  EXPECT_EQ(detail::checked_count(0, "x"), 0);
  detail::BlockLayout layout;
  layout.n = 2;
  layout.run = 4;
  layout.outer = std::int64_t(1) << 31;
  expect_error<MpiError>([&] { detail::strided_block_type(layout, "all_gather"); },
                         "all_gather: a count of 2147483648" + limit);
  layout.outer = 3;
  MPI_Count size = 0;
  ASSERT_EQ(MPI_Type_size_x(detail::strided_block_type(layout, "all_gather").get(), &size), MPI_SUCCESS);
  EXPECT_EQ(size, 12);
  const detail::Message m = detail::contiguous_message(INT_MAX, "all_gather");
  EXPECT_EQ(m.count, INT_MAX);
  EXPECT_EQ(m.type.get(), MPI_BYTE);
}

TEST(CommScope, CountsOnlyItsLifetimeAndSurvivesAReset) {
  for (const auto& shape : meshes_of_size(world_size())) {
    Mesh mesh = Mesh::world(shape);
    Tensor t = block_of(mesh.rank(), {4});
    all_reduce(mesh, t, {});
    CommScope outer;
    all_gather(mesh, t, mesh.axis_names(), 0);
    {
      CommScope inner;
      all_reduce(mesh, t, mesh.axis_names());
      EXPECT_EQ(inner.records().size(), 1u);
      EXPECT_EQ(inner.count(CommOp::all_reduce), 1);
    }
    EXPECT_EQ(outer.records().size(), 2u);
    EXPECT_EQ(outer.total_bytes(), (mesh.size() - 1) * 16 + 2 * (mesh.size() - 1) * 16 / mesh.size());
    CommStats::global().reset();
    EXPECT_EQ(outer.records().size(), 0u);
    all_reduce(mesh, t, {});
    EXPECT_EQ(outer.records().size(), 1u);
    EXPECT_EQ(to_string(outer.records()[0]), "all_reduce over (): 0 bytes");
  }
}

// One vocabulary: every kind's name round-trips, and the byte cost is the convention of
// collectives/comm_stats.h, written out here by hand.
TEST(CommOp, NamesRoundTripAndSendBytesFollowTheConvention) {
  const std::vector<std::pair<CommOp, std::string>> names = {
      {CommOp::slice, "slice"},           {CommOp::zero, "zero"},
      {CommOp::pad, "pad"},               {CommOp::all_gather, "all_gather"},
      {CommOp::reduce_scatter, "reduce_scatter"}, {CommOp::all_to_all, "all_to_all"},
      {CommOp::all_reduce, "all_reduce"}, {CommOp::broadcast, "broadcast"},
      {CommOp::permute, "permute"},       {CommOp::redistribute, "redistribute"}};
  for (const auto& [op, name] : names) {
    EXPECT_EQ(to_string(op), name);
    EXPECT_EQ(comm_op_from_string(name), op);
    EXPECT_EQ(communicates(op), op != CommOp::slice && op != CommOp::zero && op != CommOp::pad) << name;
    EXPECT_EQ(send_bytes(op, 1, 1000), 0) << name;  // a group of one sends nothing
  }
  EXPECT_EQ(comm_op_from_string("gather_all"), std::nullopt);
  EXPECT_EQ(send_bytes(CommOp::all_gather, 4, 1000), 3000);
  EXPECT_EQ(send_bytes(CommOp::reduce_scatter, 4, 1000), 750);
  EXPECT_EQ(send_bytes(CommOp::all_to_all, 4, 1000), 750);
  EXPECT_EQ(send_bytes(CommOp::all_reduce, 4, 1000), 1500);
  EXPECT_EQ(send_bytes(CommOp::all_reduce, 3, 1000), 1333);  // rounded down
  EXPECT_EQ(send_bytes(CommOp::broadcast, 4, 1000), 1000);
  EXPECT_EQ(send_bytes(CommOp::permute, 4, 1000), 1000);
  EXPECT_EQ(send_bytes(CommOp::redistribute, 4, 640), 640);
  EXPECT_EQ(send_bytes(CommOp::slice, 4, 1000), 0);
  EXPECT_EQ(send_bytes(CommOp::pad, 4, 1000), 0);
  EXPECT_EQ(send_bytes(CommOp::zero, 4, 1000), 0);
}

}  // namespace
}  // namespace tessera
