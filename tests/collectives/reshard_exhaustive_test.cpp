// docs/design.md's reshard check: every pair of specs (partial sources and targets included) for 2-D
// and 3-D tensors on every mesh of this rank count (2x2 at 4 ranks; 2x4, 4x2, 8 and 2x2x2 at 8)
// reshards to the exact global value, the bytes counted on the ranks equal the plan's, and the
// plan moves no more than the per-axis table implies (table_bytes); where no order of table
// steps reaches the target (an axis order change), the plan says so and stays under the cost of
// replicating everything and slicing again. Values are small integers, so partial sums are exact.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstring>

#include "collectives/reshard.h"
#include "tests/collectives/reshard_test_support.h"
#include "tests/test_meshes.h"

namespace tessera {
namespace {

using testing_support::all_specs;
using testing_support::meshes_of_size;
using testing_support::world_rank;
using testing_support::world_size;

using reshard_testing::partial_source;
using reshard_testing::value;

// Replicate everything (all-gather every split axis), all-reduce the partial axes on the whole
// tensor, slice: what a planner without the table would do.
std::int64_t replicate_and_slice_bytes(const MeshShape& mesh, const Spec& s, const Shape& global) {
  const std::int64_t whole = numel(global) * 4;
  std::int64_t split = 1;
  for (const auto& d : s.dims) split *= mesh.axes_size(d);
  const std::int64_t parts = mesh.axes_size(s.partial);
  return (split - 1) * (whole / split) + 2 * (parts - 1) * whole / parts;
}

// The global values of several sharded tensors (same mesh) with ONE MPI_Allgather of all their
// blocks: as ShardedTensor::to_global, which costs a collective per tensor.
std::vector<Tensor> to_global_all(const std::vector<ShardedTensor>& xs) {
  if (xs.empty()) return {};
  const Mesh& mesh = xs[0].mesh();
  const MeshShape& shape = mesh.shape();
  std::size_t total = 0;
  for (const auto& x : xs) total += x.local().nbytes();
  std::vector<std::byte> mine(total), all(total * shape.size());
  std::size_t at = 0;
  for (const auto& x : xs) {
    std::memcpy(mine.data() + at, x.local().raw(), x.local().nbytes());
    at += x.local().nbytes();
  }
  MPI_Allgather(mine.data(), static_cast<int>(total), MPI_BYTE, all.data(), static_cast<int>(total), MPI_BYTE,
                mesh.comm().handle());
  std::vector<Tensor> out;
  at = 0;
  for (const auto& x : xs) {
    Tensor global(x.global_shape(), x.dtype());
    Tensor block(x.local().shape(), x.dtype());
    for (int r = 0; r < shape.size(); ++r) {
      const auto coords = shape.coords_of(r);
      bool contributes = true;  // one replica per unmentioned axis, every rank of a partial axis
      for (int a = 0; a < shape.ndim(); ++a) {
        const auto& axis = shape.names()[a];
        if (x.spec().dim_of(axis) < 0 && !x.spec().is_partial_on(axis) && coords[a] != 0) contributes = false;
      }
      if (!contributes) continue;
      std::memcpy(block.raw(), all.data() + total * r + at, block.nbytes());
      add_block(global, block, block_offsets(x.spec(), shape, x.global_shape(), coords));
    }
    at += x.local().nbytes();
    out.push_back(std::move(global));
  }
  return out;
}

TEST(ReshardExhaustive, EveryPairOfSpecsKeepsTheValueAndTheByteBound) {
  int pairs = 0, relayout_pairs = 0;
  for (const auto& shape : meshes_of_size(world_size())) {
    Mesh mesh = Mesh::world(shape);
    for (const Shape& global : {Shape{8, 8}, Shape{8, 8, 8}}) {
      const int rank = static_cast<int>(global.size());
      const Tensor reference = ShardedTensor::from_fn(mesh, Spec(), global, DType::f32, value).local();
      const auto specs = all_specs(shape, rank, true);
      std::vector<std::int64_t> counted;  // per pair: bytes this rank sent
      std::vector<std::int64_t> planned;
      for (const auto& source : specs) {
        const ShardedTensor x = partial_source(mesh, source, global);
        std::vector<ShardedTensor> partial_results;
        for (const auto& target : specs) {
          CommScope scope;
          ShardedTensor y = reshard(x, target);
          counted.push_back(scope.total_bytes());
          ASSERT_EQ(y.spec(), target.padded(rank));
          if (target.is_partial()) {
            partial_results.push_back(std::move(y));  // checked below, all at once
          } else {
            // Non-partial targets: this rank's block, checked without communication.
            EXPECT_TRUE(y.local().bit_equal(extract_block(reference, y.block_offsets(), y.local().shape())))
                << shape.to_string() << " " << source.to_string() << " -> " << target.to_string();
          }
          if (world_rank() == 0) {
            const ReshardPlan plan = plan_reshard(shape, source, target, global, DType::f32);
            planned.push_back(plan.bytes_per_rank());
            int communicating = 0;
            for (const auto& step : plan.steps) {
              communicating += communicates(step.op);
            }
            EXPECT_EQ(static_cast<int>(scope.records().size()), communicating) << plan.to_string();
            const bool relayout = plan.to_string().find("axis order change") != std::string::npos;
            relayout_pairs += relayout;
            if (plan.table_bytes >= 0) {
              EXPECT_LE(plan.bytes_per_rank(), plan.table_bytes)
                  << shape.to_string() << " " << source.to_string() << " -> " << target.to_string() << "\n"
                  << plan.to_string();
            } else {
              EXPECT_TRUE(relayout) << plan.to_string();
              EXPECT_LE(plan.bytes_per_rank(), replicate_and_slice_bytes(shape, source.padded(rank), global))
                  << source.to_string() << " -> " << target.to_string() << "\n" << plan.to_string();
            }
          }
          ++pairs;
        }
        for (const Tensor& value : to_global_all(partial_results)) {
          EXPECT_TRUE(value.bit_equal(reference)) << shape.to_string() << " " << source.to_string() << " -> partial";
        }
      }
      // The plan's bytes per rank are the most any rank sends: compare with the ranks' counts.
      std::vector<std::int64_t> most(counted.size());
      MPI_Allreduce(counted.data(), most.data(), static_cast<int>(counted.size()), MPI_INT64_T, MPI_MAX,
                    MPI_COMM_WORLD);
      if (world_rank() == 0) {
        for (std::size_t i = 0; i < most.size(); ++i) {
          ASSERT_EQ(most[i], planned[i]) << shape.to_string() << " pair " << i << ": counted vs planned bytes";
        }
      }
    }
  }
  if (world_rank() == 0) {
    std::printf("[ reshard  ] %d ranks: %d spec pairs checked (%d with an axis order change relayout)\n",
                world_size(), pairs, relayout_pairs);
  }
}

}  // namespace
}  // namespace tessera
