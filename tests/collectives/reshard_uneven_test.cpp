// Reshard on uneven dimensions (docs/design.md, "Semantics that must hold", 1: the block rule,
// "Uneven collectives" and "Planning on uneven blocks"): every pair of specs,
// partial sources and targets included, for tensors of extents 7, 10 and 13 (which no axis
// product above 1 divides, so trailing blocks are short or empty) on every mesh of this rank
// count. Each result's global value must equal the source's exactly, its block must be the one
// the block rule gives, each collective's bytes (the most any rank counts) must equal its plan
// step's (from the real block sizes), and the plan must run one collective per communicating step.
// Tensors whose extents divide some axis products and not others (6 = 2 x 3, 12) are covered too.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "collectives/reshard.h"
#include "core/error.h"
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

void every_pair(const std::vector<Shape>& shapes, const char* label, bool always_uneven) {
  int pairs = 0, uneven_pairs = 0;
  for (const auto& mesh_shape : meshes_of_size(world_size())) {
    Mesh mesh = Mesh::world(mesh_shape);
    for (const Shape& global : shapes) {
      const int rank = static_cast<int>(global.size());
      const Tensor reference = ShardedTensor::from_fn(mesh, Spec(), global, DType::f32, value).local();
      const auto specs = all_specs(mesh_shape, rank, true);
      std::vector<std::int64_t> counted, planned;
      std::vector<std::string> whats;
      for (const auto& source : specs) {
        const ShardedTensor x = partial_source(mesh, source, global);
        for (const auto& target : specs) {
          const std::string what = mesh_shape.to_string() + " " + shape_to_string(global) + " " + source.to_string() +
                                   " -> " + target.to_string();
          if (std::getenv("TRACE_PAIRS")) std::fprintf(stderr, "%d %s\n", world_rank(), what.c_str());
          CommScope scope;
          ShardedTensor y = reshard(x, target);
          // Per communicating step: this rank's record, the plan's figure.
          for (const auto& record : scope.records()) {
            counted.push_back(record.bytes);
            whats.push_back(what);
          }
          ASSERT_EQ(y.spec(), target.padded(rank)) << what;
          ASSERT_EQ(y.local().shape(), local_shape(y.spec(), mesh_shape, global, mesh.coords())) << what;
          if (target.is_partial()) {
            ASSERT_TRUE(y.to_global().bit_equal(reference)) << what;
          } else {
            ASSERT_TRUE(y.local().bit_equal(extract_block(reference, y.block_offsets(), y.local().shape()))) << what;
          }
          const ReshardPlan plan = plan_reshard(mesh_shape, source, target, global, DType::f32);
          int communicating = 0;
          for (const auto& step : plan.steps) {
            if (!communicates(step.op)) continue;
            ++communicating;
            planned.push_back(step.bytes_per_rank);
          }
          ASSERT_EQ(static_cast<int>(scope.records().size()), communicating) << what << "\n" << plan.to_string();
          uneven_pairs += !splits_evenly(source.padded(rank), mesh_shape, global) ||
                          !splits_evenly(target.padded(rank), mesh_shape, global);
          ++pairs;
        }
      }
      // Each step's bytes per rank are the most any rank sends in it: compare with the ranks' counts.
      std::vector<std::int64_t> most(counted.size());
      MPI_Allreduce(counted.data(), most.data(), static_cast<int>(counted.size()), MPI_INT64_T, MPI_MAX,
                    MPI_COMM_WORLD);
      for (std::size_t i = 0; i < most.size(); ++i) {
        ASSERT_EQ(most[i], planned[i]) << whats[i] << ": counted vs planned bytes of step " << i;
      }
    }
  }
  if (world_rank() == 0) {
    std::printf("[ reshard  ] %d ranks, %s: %d spec pairs checked, %d of them uneven\n", world_size(), label, pairs,
                uneven_pairs);
  }
  EXPECT_GT(pairs, 0);
  if (always_uneven && world_size() > 1) {
    EXPECT_GT(uneven_pairs, 0);
  }
}

TEST(ReshardUneven, EveryPairOnExtents7_10_13) { every_pair({Shape{7, 10}, Shape{13, 7}, Shape{10, 13}}, "7, 10, 13", true); }

// The 3-D and the partly dividing shapes at up to 4 ranks (at 8 they add some 35 s on two cores
// to the 7/10/13 check above; the even 3-D case runs at 8 in reshard_exhaustive_test).
TEST(ReshardUneven, EveryPairOnThreeDimensions) {
  if (world_size() > 4) GTEST_SKIP() << "run at up to 4 ranks";
  every_pair({Shape{7, 3, 10}}, "[7, 3, 10]", true);
}

TEST(ReshardUneven, EveryPairOnPartlyDividingExtents) {
  if (world_size() > 4) GTEST_SKIP() << "run at up to 4 ranks";
  every_pair({Shape{4, 6}, Shape{6, 12}}, "6, 12", false);
}

// The plan of a gather of 10 rows over 4 ranks names the real bytes: blocks 3, 3, 3, 1 of 8
// columns of f32; the largest block goes to 3 others.
TEST(ReshardUneven, ExplainGivesTheRealBytes) {
  const MeshShape mesh({"x"}, {4});
  const ReshardPlan gather = plan_reshard(mesh, parse_spec("P(x)"), Spec(), {10, 8}, DType::f32);
  ASSERT_EQ(gather.steps.size(), 1u);
  EXPECT_EQ(gather.to_string(), "all_gather over (x) on dim 0: 288 bytes per rank\n");
  // Reduce-scatter of a [10, 8] partial sum: rank 3 keeps 1 row and sends 9 x 32 bytes.
  const ReshardPlan scatter = plan_reshard(mesh, parse_spec("P(None; partial=x)"), parse_spec("P(x)"), {10, 8}, DType::f32);
  EXPECT_EQ(scatter.to_string(), "reduce_scatter over (x) onto dim 0: 288 bytes per rank\n");
  // 10 over 2x2 does not nest in 10 over 2 (blocks [0,5) [5,10) against [0,3) [3,6) ...): no
  // gather over the minor axis alone can make P(a) from P((a, b)), so the plan relayouts.
  const MeshShape mesh2({"a", "b"}, {2, 2});
  const ReshardPlan relayout = plan_reshard(mesh2, parse_spec("P((a, b))"), parse_spec("P(a)"), {10}, DType::f32);
  ASSERT_EQ(relayout.steps.size(), 1u);
  EXPECT_EQ(relayout.steps[0].op, CommOp::redistribute);
  // 7 over 2x2 nests in 7 over 2 ([0,4) [4,7) against [0,2) [2,4) [4,6) [6,7)): one all_gather.
  const ReshardPlan nested = plan_reshard(mesh2, parse_spec("P((a, b))"), parse_spec("P(a)"), {7}, DType::f32);
  ASSERT_EQ(nested.steps.size(), 1u);
  EXPECT_EQ(nested.steps[0].op, CommOp::all_gather);
  EXPECT_EQ(nested.steps[0].bytes_per_rank, 8);
}

}  // namespace
}  // namespace tessera
