// Plans pinned without MPI (the planner is a pure function of mesh shape, specs, shape, dtype):
// the docs/design.md table's steps, their bytes, the per-axis table bound and explain's text.
#include <gtest/gtest.h>

#include "collectives/reshard.h"
#include "core/error.h"

namespace tessera {
namespace {

const MeshShape k2x4({"data", "model"}, {2, 4});
const MeshShape k2x2x2({"x", "y", "z"}, {2, 2, 2});

ReshardPlan plan(const MeshShape& mesh, const std::string& from, const std::string& to, const Shape& shape = {16, 32}) {
  return plan_reshard(mesh, parse_spec(from), parse_spec(to), shape, DType::f32);
}

std::vector<std::string> ops(const ReshardPlan& p) {
  std::vector<std::string> out;
  for (const auto& s : p.steps) out.emplace_back(to_string(s.op));
  return out;
}

// [16, 32] f32 = 2048 bytes; P(data, None) on 2x4 holds 1024 bytes per rank.
TEST(ReshardPlan, SplitToOtherDimensionIsOneAllToAll) {
  auto p = plan(k2x4, "P(data, None)", "P(None, data)");
  ASSERT_EQ(ops(p), std::vector<std::string>{"all_to_all"});
  EXPECT_EQ(p.steps[0].axes, Axes{"data"});
  EXPECT_EQ(p.steps[0].dim, 0);
  EXPECT_EQ(p.steps[0].dim_to, 1);
  EXPECT_EQ(p.bytes_per_rank(), 512);
  EXPECT_EQ(p.to_string(), "all_to_all over (data) from dim 0 to dim 1: 512 bytes per rank\n");
}

TEST(ReshardPlan, ReplicatedToShardedMovesNothing) {
  for (const char* target : {"P(data, None)", "P(None, (model, data))", "P(model, data)", "P(None, None; partial=model)"}) {
    auto p = plan(k2x4, "P()", target);
    EXPECT_EQ(p.bytes_per_rank(), 0) << target;
    for (const auto& s : p.steps) EXPECT_TRUE(s.op == CommOp::slice || s.op == CommOp::zero) << s.op;
  }
  EXPECT_EQ(plan(k2x4, "P()", "P(model, data)").to_string(),
            "slice over (model) on dim 0: local, 0 bytes\nslice over (data) on dim 1: local, 0 bytes\n");
}

TEST(ReshardPlan, PartialToShardedIsOneReduceScatter) {
  auto p = plan(k2x4, "P(None, None; partial=model)", "P(None, model)");
  ASSERT_EQ(ops(p), std::vector<std::string>{"reduce_scatter"});
  EXPECT_EQ(p.steps[0].axes, Axes{"model"});
  EXPECT_EQ(p.bytes_per_rank(), 3 * 2048 / 4);
  // Both axes partial onto one dimension: still one reduce-scatter, in the target's order.
  auto both = plan(k2x4, "P(None, None; partial=(data, model))", "P((model, data), None)");
  ASSERT_EQ(ops(both), std::vector<std::string>{"reduce_scatter"});
  EXPECT_EQ(both.steps[0].axes, (Axes{"model", "data"}));
  EXPECT_EQ(both.bytes_per_rank(), 7 * 2048 / 8);
}

TEST(ReshardPlan, PartialToReplicatedIsOneAllReduceOverExactlyThePartialAxes) {
  auto p = plan(k2x4, "P(data, None; partial=model)", "P(data, None)");
  ASSERT_EQ(ops(p), std::vector<std::string>{"all_reduce"});
  EXPECT_EQ(p.steps[0].axes, Axes{"model"});
  EXPECT_EQ(p.bytes_per_rank(), 2 * 3 * 1024 / 4);
  // Two partial axes: ONE all-reduce over both (the nn layer pins this), in mesh order.
  auto both = plan(k2x4, "P(None, None; partial=(model, data))", "P()");
  ASSERT_EQ(ops(both), std::vector<std::string>{"all_reduce"});
  EXPECT_EQ(both.steps[0].axes, (Axes{"data", "model"}));
  EXPECT_EQ(both.to_string(), "all_reduce over (data, model): 3584 bytes per rank\n");
  // Weight gradients of DotReluDot: partial over data, reduced to the parameter's spec.
  EXPECT_EQ(ops(plan(k2x4, "P(None, model; partial=data)", "P(None, model)")), std::vector<std::string>{"all_reduce"});
  EXPECT_EQ(ops(plan(k2x4, "P(model, None; partial=data)", "P(model, None)")), std::vector<std::string>{"all_reduce"});
}

TEST(ReshardPlan, GathersComeLast) {
  // A slice that shrinks the block goes first, the gather after it.
  auto p = plan(k2x4, "P(None, model)", "P(data, None)");
  EXPECT_EQ(p.to_string(),
            "slice over (data) on dim 0: local, 0 bytes\nall_gather over (model) on dim 1: 768 bytes per rank\n");
  EXPECT_EQ(p.bytes_per_rank(), p.table_bytes);
  EXPECT_EQ(plan(k2x4, "P(data, model)", "P()").to_string(),
            "all_gather over (data) on dim 0: 256 bytes per rank\nall_gather over (model) on dim 1: 1536 bytes per rank\n");
}

TEST(ReshardPlan, AxisOrderChangeIsOneRelayoutAndSaysSo) {
  // The same two axes, the other order: a permutation of blocks, with a note.
  auto p = plan(k2x4, "P((data, model), None)", "P((model, data), None)");
  ASSERT_EQ(ops(p), std::vector<std::string>{"permute"});
  EXPECT_EQ(p.table_bytes, -1);
  EXPECT_EQ(p.bytes_per_rank(), 256);
  EXPECT_EQ(p.to_string(),
            "permute over (data, model) to P((model, data), None): 256 bytes per rank; axis order change: no order "
            "of the per-axis table's steps reaches the target's axis order; every element moves at most once\n");
  // Two axes that swap dimensions: no order of one-axis all-to-alls works (each blocks the
  // other), one relayout moves every element at most once.
  auto swap = plan(k2x4, "P(data, model)", "P(model, data)");
  EXPECT_EQ(ops(swap), std::vector<std::string>{"redistribute"});
  EXPECT_EQ(swap.table_bytes, -1);
  EXPECT_EQ(swap.bytes_per_rank(), 256);  // of a 256-byte block: the most any rank sends
  EXPECT_NE(swap.steps[0].note.find("axis order change"), std::string::npos);
}

TEST(ReshardPlan, TableBytesArePinned) {
  // all_gather (n-1)B, reduce_scatter and all_to_all (n-1)/n B, all_reduce 2(n-1)/n B.
  EXPECT_EQ(table_bytes(k2x4, parse_spec("P(data, model)"), parse_spec("P()"), {16, 32}, DType::f32), 256 * 7);
  EXPECT_EQ(table_bytes(k2x4, parse_spec("P(data, None)"), parse_spec("P(None, data)"), {16, 32}, DType::f32), 512);
  // Per axis: 2(2-1)/2 + 2(4-1)/4 of 2048 (the plan's single all-reduce does 2(8-1)/8).
  EXPECT_EQ(table_bytes(k2x4, parse_spec("P(None, None; partial=(data, model))"), parse_spec("P()"), {16, 32},
                        DType::f32),
            2048 + 3072);
  // Slice first (model: 2048 -> 512), then reduce-scatter over data on the smaller block.
  EXPECT_EQ(table_bytes(k2x4, parse_spec("P(None, None; partial=data)"), parse_spec("P(data, model)"), {16, 32},
                        DType::f32),
            256);
  // x must leave dim 0 (gather) before y can arrive there (all-to-all from dim 1).
  EXPECT_EQ(table_bytes(k2x2x2, parse_spec("P(x, y)"), parse_spec("P(y, None)"), {8, 8}, DType::f32), 64 + 64);
  EXPECT_EQ(table_bytes(k2x2x2, parse_spec("P(x, y)"), parse_spec("P(y, x)"), {8, 8}, DType::f32), -1);
  EXPECT_EQ(table_bytes(k2x4, parse_spec("P(model)"), parse_spec("P((data, model))"), {16, 32}, DType::f32), -1);
}

TEST(ReshardPlan, AxesOfSizeOneNeverCostAStep) {
  const MeshShape one_by_eight({"data", "model"}, {1, 8});
  EXPECT_TRUE(plan(one_by_eight, "P(data, None)", "P(None, data)").steps.empty());
  auto p = plan(one_by_eight, "P(None, None; partial=(data, model))", "P(data, None)");
  ASSERT_EQ(ops(p), std::vector<std::string>{"all_reduce"});
  EXPECT_EQ(p.steps[0].axes, Axes{"model"});
}

TEST(ReshardPlan, InvalidSpecsAreSpecErrors) {
  // Twice each: the plan cache keeps valid plans only, so a refused pair is refused again.
  for (int pass = 0; pass < 2; ++pass) {
    EXPECT_THROW(plan(k2x4, "P(data, None)", "P(nope, None)"), SpecError);
    EXPECT_THROW(plan(k2x4, "P(data, None)", "P(data, data)"), SpecError);
    EXPECT_THROW(plan(k2x4, "P(data, None)", "P(None, None, model)"), SpecError);
    EXPECT_THROW(plan(k2x4, "P(data, data)", "P(None, model)"), SpecError);
  }
  // A valid pair first, then the same specs on a mesh without the axis and on a shape of fewer
  // dimensions: every argument is in the cache's key.
  EXPECT_NO_THROW(plan(k2x4, "P(data, None)", "P(None, model)"));
  EXPECT_THROW(plan(MeshShape({"data", "expert"}, {2, 4}), "P(data, None)", "P(None, model)"), SpecError);
  EXPECT_THROW(plan(k2x4, "P(data, None)", "P(None, model)", {16}), SpecError);
}

// The cache hands out one plan per argument list; specs written with or without trailing
// unsplit dimensions, and partial axes in either order, plan alike.
TEST(ReshardPlan, CachedPlansAreSharedAndEqualAcrossSpellings) {
  const auto first = cached_reshard_plan(k2x4, parse_spec("P(data)"), parse_spec("P(None, model)"), {16, 32}, DType::f32);
  const auto again = cached_reshard_plan(k2x4, parse_spec("P(data)"), parse_spec("P(None, model)"), {16, 32}, DType::f32);
  EXPECT_EQ(first.get(), again.get());
  const auto padded =
      cached_reshard_plan(k2x4, parse_spec("P(data, None)"), parse_spec("P(None, model)"), {16, 32}, DType::f32);
  EXPECT_EQ(padded->to_string(), first->to_string());
  EXPECT_EQ(padded->bytes_per_rank(), first->bytes_per_rank());
  EXPECT_EQ(plan(k2x4, "P(None; partial=(data, model))", "P(data, model)").to_string(),
            plan(k2x4, "P(None; partial=(model, data))", "P(data, model)").to_string());
  // Another dtype or shape is another plan.
  const auto f64 = cached_reshard_plan(k2x4, parse_spec("P(data)"), parse_spec("P(None, model)"), {16, 32}, DType::f64);
  EXPECT_EQ(f64->bytes_per_rank(), 2 * first->bytes_per_rank());
  const auto wider = cached_reshard_plan(k2x4, parse_spec("P(data)"), parse_spec("P(None, model)"), {16, 64}, DType::f32);
  EXPECT_EQ(wider->bytes_per_rank(), 2 * first->bytes_per_rank());
}

}  // namespace
}  // namespace tessera
