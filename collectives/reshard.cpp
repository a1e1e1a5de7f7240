// The reshard executor: validates the target on every rank before any communication, plans, and
// runs the plan's steps on this rank's block with the local-view collectives.
#include "collectives/reshard.h"

#include <algorithm>

#include "collectives/collective_check.h"
#include "collectives/collectives.h"
#include "collectives/redistribute.h"
#include "core/error.h"

namespace tessera {

namespace {

// The target padded to the tensor's rank; SpecError "reshard: ..." with the same text on every
// rank (it depends only on replicated facts).
Spec checked_target(const ShardedTensor& x, const Spec& target) {
  try {
    validate_spec(target, x.mesh().shape(), x.global_shape(), x.name());
  } catch (const SpecError& e) {
    throw SpecError(std::string("reshard: ") + e.what());
  }
  return target.padded(x.ndim());
}

// The offsets of this rank's `inner` block inside its `outer` block (a slice's or a pad's).
std::vector<std::int64_t> offsets_within(const Mesh& mesh, const Shape& global, const Spec& inner, const Spec& outer) {
  auto at = block_offsets(inner, mesh.shape(), global, mesh.coords());
  const auto base = block_offsets(outer, mesh.shape(), global, mesh.coords());
  for (std::size_t d = 0; d < at.size(); ++d) at[d] -= base[d];
  return at;
}

bool holds_value_on(const Mesh& mesh, const Axes& axes) {
  for (const auto& a : axes) {
    if (mesh.coord(a) != 0) return false;
  }
  return true;
}

// Runs the steps. `owned` is true when `local` may be overwritten (rvalue reshard).
Tensor run_steps(const Mesh& mesh, const Shape& global, Spec cur, const std::vector<ReshardStep>& steps, Tensor local,
                 bool owned_input, const Tensor* borrowed) {
  // `x` is the current block: the borrowed input until the first step writes a new one.
  bool owned = owned_input;
  auto current = [&]() -> const Tensor& { return owned ? local : *borrowed; };
  for (const auto& step : steps) {
    const Tensor& x = current();
    const Shape block = local_shape(step.after, mesh.shape(), global, mesh.coords());  // this rank's, after the step
    Tensor next;
    switch (step.op) {
      case CommOp::slice:
        next = extract_block(x, offsets_within(mesh, global, step.after, cur), block);
        break;
      case CommOp::all_gather:
        next = all_gather(mesh, x, step.axes, step.dim,
                          group_block_extents(cur, mesh.shape(), global, step.dim, step.axes, mesh.coords()));
        break;
      case CommOp::reduce_scatter:
        next = reduce_scatter(mesh, x, step.axes, step.dim,
                              group_block_extents(step.after, mesh.shape(), global, step.dim, step.axes, mesh.coords()));
        break;
      case CommOp::all_to_all:
        // The axes leave dimension `dim` (its blocks are concatenated) and split `dim_to`.
        next = all_to_all(mesh, x, step.axes, step.dim_to,
                          group_block_extents(step.after, mesh.shape(), global, step.dim_to, step.axes, mesh.coords()),
                          step.dim, group_block_extents(cur, mesh.shape(), global, step.dim, step.axes, mesh.coords()));
        break;
      case CommOp::all_reduce:
        next = owned ? all_reduce(mesh, std::move(local), step.axes) : all_reduce(mesh, x, step.axes);
        break;
      case CommOp::zero:
        if (holds_value_on(mesh, step.axes)) {
          // Not `owned ? std::move(local) : x`: that conditional is a const Tensor, which
          // `next =` copies instead of taking the moved block.
          if (owned) {
            next = std::move(local);
          } else {
            next = x;
          }
        } else if (owned) {
          next = std::move(local);
          next.fill_zero();
        } else {
          next = Tensor(x.shape(), x.dtype());
        }
        break;
      case CommOp::pad:
        next = Tensor(block, x.dtype());
        insert_block(next, x, offsets_within(mesh, global, cur, step.after));
        break;
      case CommOp::permute:
        next = permute(mesh, x, step.axes, step.pairs);
        break;
      case CommOp::redistribute:
        next = detail::redistribute(mesh, cur, step.after, global, x);
        break;
      case CommOp::broadcast:
        throw Error("reshard: a plan has no broadcast step");
    }
    if (next.shape() != block) {
      throw Error("reshard: step '" + step.to_string() + "' gave a block of shape " + shape_to_string(next.shape()) +
                  ", expected " + shape_to_string(block));
    }
    local = std::move(next);
    owned = true;
    cur = step.after;
  }
  if (owned) return local;
  return *borrowed;
}

// `owned_local` is x's block moved out of x (rvalue reshard) when `owned`; x's own block otherwise.
ShardedTensor execute(const ShardedTensor& x, const Spec& target, Tensor owned_local, bool owned) {
  const DType dtype = owned ? owned_local.dtype() : x.dtype();
  const auto plan = cached_reshard_plan(x.mesh().shape(), x.spec(), target, x.global_shape(), dtype);
  // The planner works without size-1 axes; the first step's input spec is the source's.
  Spec cur = x.spec();
  for (auto& d : cur.dims) {
    d.erase(std::remove_if(d.begin(), d.end(), [&](const std::string& a) { return x.mesh().axis_size(a) == 1; }),
            d.end());
  }
  cur.partial.erase(std::remove_if(cur.partial.begin(), cur.partial.end(),
                                   [&](const std::string& a) { return x.mesh().axis_size(a) == 1; }),
                    cur.partial.end());
  Tensor local = run_steps(x.mesh(), x.global_shape(), cur, plan->steps, std::move(owned_local), owned, &x.local());
  return ShardedTensor(x.mesh(), target, x.global_shape(), std::move(local), x.name());
}

// TESSERA_COLLECTIVE_CHECK's description of a reshard: what every rank passes (the target as
// given, checked before it is validated, so that ranks passing different targets are named
// rather than some of them refused alone).
std::string reshard_description(const ShardedTensor& x, const Spec& target) {
  return "reshard of " + std::string(dtype_name(x.dtype())) + shape_to_string(x.global_shape()) + " from " +
         x.spec().to_string() + " to " + target.to_string();
}

}  // namespace

ShardedTensor reshard(const ShardedTensor& x, const Spec& target) {
  const detail::CollectiveCheck checked(x.mesh(), [&] { return reshard_description(x, target); });
  const Spec full = checked_target(x, target);
  if (full == x.spec()) return x;
  return execute(x, full, Tensor(), false);
}

ShardedTensor reshard(ShardedTensor&& x, const Spec& target) {
  const detail::CollectiveCheck checked(x.mesh(), [&] { return reshard_description(x, target); });
  const Spec full = checked_target(x, target);
  if (full == x.spec()) return std::move(x);
  Tensor local = std::move(x.local());
  return execute(x, full, std::move(local), true);
}

ShardedTensor reshard(const ShardedTensor& x, const Mesh& mesh, const Spec& target) {
  if (!(mesh == x.mesh())) {
    const bool same_shape = mesh.valid() && x.mesh().valid() && mesh.shape() == x.mesh().shape();
    throw MeshError("reshard: '" + x.name() + "' lives on " + x.mesh().to_string() + " but the target sharding " +
                    target.to_string() + " is on " + (mesh.valid() ? mesh.to_string() : std::string("an empty mesh")) +
                    (same_shape ? ", a different Mesh object of the same shape" : "") +
                    "; move it between meshes through a checkpoint or to_global");
  }
  return reshard(x, target);
}

std::string explain(const ShardedTensor& x, const Spec& target) {
  const Spec full = checked_target(x, target);
  return plan_reshard(x.mesh().shape(), x.spec(), full, x.global_shape(), x.dtype()).to_string();
}

ShardedTensor with_sharding_constraint(const ShardedTensor& x, const Spec& spec) { return reshard(x, spec); }
ShardedTensor with_sharding_constraint(ShardedTensor&& x, const Spec& spec) { return reshard(std::move(x), spec); }

}  // namespace tessera
