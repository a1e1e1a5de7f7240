// Global view: move a sharded tensor from its spec to any other spec on the same mesh.
//
// plan_reshard turns (source, target) into steps, per mesh axis after docs/design.md's table:
//   split dim i   -> replicated     all_gather on dim i
//   replicated    -> split dim j    slice (local, 0 bytes)
//   split dim i   -> split dim j    all_to_all i -> j
//   partial       -> split dim j    reduce_scatter on dim j
//   partial       -> replicated     all_reduce (ONE call over all such axes)
//   replicated    -> partial        zero (local: the replica at coordinate 0 keeps the value)
//   split dim i   -> partial        pad (local: the block, zero-padded to the whole dimension)
// Steps that shrink the block (slices, reduce-scatters) go first, then all-to-alls and the
// all-reduce, then all-gathers. A dimension split by several axes changes its axes only at the
// minor end (that is where a collective's blocks are contiguous); where the target's axis order
// cannot be reached that way, one "permute" or "redistribute" step moves every element at most
// once, and the plan's note says how many bytes the order change costs beyond the table.
// Axes of size 1 never cost a step. A step's bytes_per_rank is the most any rank sends in it
// (comm_stats.h), from each rank's real block: on uneven dimensions (core/spec.h's block rule)
// blocks differ, and a step is taken only where its collective moves whole blocks (the fine
// blocks tile the coarse ones, blocks_nest); otherwise the plan relayouts. The plan's
// bytes_per_rank is the sum over its steps: what every rank sends when the splits are even, an
// upper bound of what any rank sends when they are not.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collectives/comm_op.h"
#include "collectives/comm_stats.h"
#include "core/dtype.h"
#include "core/mesh_shape.h"
#include "core/spec.h"
#include "mesh/sharded_tensor.h"

namespace tessera {

struct ReshardStep {
  CommOp op = CommOp::slice;  // a local step or a collective (collectives/comm_op.h)
  Axes axes;       // mesh axes of the step, in block order
  int dim = -1;    // tensor dimension (all_to_all: the source dimension i)
  int dim_to = -1;  // all_to_all: the target dimension j
  std::int64_t bytes_per_rank = 0;  // the most any rank sends in this step (send_bytes)
  std::string note;
  Spec after;      // the spec once this step is done
  // permute: the (source, destination) positions in axes_comm(axes), found when planning.
  std::vector<std::pair<int, int>> pairs;

  // "all_to_all over (data) from dim 0 to dim 1: 96 bytes per rank"
  std::string to_string() const;
};

struct ReshardPlan {
  Spec source, target;
  std::vector<ReshardStep> steps;
  // What docs/design.md's table implies for this pair (see table_bytes below); -1 when nothing.
  std::int64_t table_bytes = 0;

  std::int64_t bytes_per_rank() const;
  // One line per step; "no-op: already P(...)" when there is none.
  std::string to_string() const;
};

// A pure function of its arguments (the same plan on every rank). Throws SpecError for specs that
// are invalid on this mesh and shape.
ReshardPlan plan_reshard(const MeshShape& mesh, const Spec& source, const Spec& target, const Shape& global_shape,
                         DType dtype);
// The same plan, shared with the planner's cache (no copy of its steps): what reshard and the
// cost estimates use on every op.
std::shared_ptr<const ReshardPlan> cached_reshard_plan(const MeshShape& mesh, const Spec& source, const Spec& target,
                                                       const Shape& global_shape, DType dtype);

// The bytes per rank that docs/design.md's per-axis table implies: the cheapest order in which to
// apply the table's step to each axis whose place changes, one axis at a time, each step
// valid on the spec it meets (only a dimension's minor-most axis can leave it; an arriving axis
// becomes the minor-most) and the last spec equal to the target (split -> partial counted as a
// local pad). -1 when no order reaches the target: an axis order change that only a relayout
// can make. The planner combines axes (one all-to-all or all-reduce over several is cheaper than
// one per axis) and uses relayouts, so a plan never exceeds this; where it does, or where this is
// -1, the plan's note says so.
std::int64_t table_bytes(const MeshShape& mesh, const Spec& source, const Spec& target, const Shape& global_shape,
                         DType dtype);

// Value-preserving: to_global(reshard(x, t)) == to_global(x) (partial sums aside, which are
// deterministic run to run). Equal specs: the returned object is the only copy, 0 bytes move.
// SpecError (same text on every rank, before any communication) for a target naming an unknown
// axis, an axis twice, or more dimensions than the tensor has (any size is valid: the block rule).
ShardedTensor reshard(const ShardedTensor& x, const Spec& target);
// Reuses x's storage where it can (no-op, zero, in-place all-reduce).
ShardedTensor reshard(ShardedTensor&& x, const Spec& target);
// As above, with the target's mesh named: MeshError unless it is x's mesh (the same object).
ShardedTensor reshard(const ShardedTensor& x, const Mesh& mesh, const Spec& target);

// The plan in words, one line per step.
std::string explain(const ShardedTensor& x, const Spec& target);

// jax.lax.with_sharding_constraint in the global view: a reshard, a no-op when the spec matches.
ShardedTensor with_sharding_constraint(const ShardedTensor& x, const Spec& spec);
ShardedTensor with_sharding_constraint(ShardedTensor&& x, const Spec& spec);

}  // namespace tessera
