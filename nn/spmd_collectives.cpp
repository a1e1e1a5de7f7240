// Local-view collectives as taped ops: forward through collectives/collectives.h on the real
// mesh, backward through the transpose pair (see spmd_collectives.h).
#include "nn/spmd_collectives.h"

#include <algorithm>

#include "collectives/collectives.h"
#include "core/error.h"
#include "core/kernels.h"
#include "nn/spmd_frame.h"
#include "core/text.h"

namespace tessera::nn {

namespace detail {

namespace {
thread_local std::vector<SpmdFrame*> frames;
}  // namespace

SpmdFrame* current_frame() { return frames.empty() ? nullptr : frames.back(); }
FrameGuard::FrameGuard(SpmdFrame& frame) { frames.push_back(&frame); }
FrameGuard::~FrameGuard() { frames.pop_back(); }

std::uint64_t axis_mask(const MeshShape& mesh, const Axes& axes) {
  std::uint64_t mask = 0;
  for (const auto& a : axes) mask |= std::uint64_t{1} << mesh.axis_index(a);
  return mask;
}

}  // namespace detail

namespace {

using detail::SpmdFrame;

// The enclosing frame, with `axes` checked against its mesh (same text on every rank).
SpmdFrame& frame_for(const char* op, const Axes& axes) {
  SpmdFrame* frame = detail::current_frame();
  if (frame == nullptr) throw Error(std::string(op) + ": called outside shard_map (no mesh axes are bound)");
  if (axes.empty()) throw SpecError(std::string(op) + ": no mesh axis named");
  for (std::size_t i = 0; i < axes.size(); ++i) {
    if (!frame->mesh.shape().has_axis(axes[i])) {
      throw SpecError(std::string(op) + ": mesh axis '" + axes[i] + "' is not in " + frame->mesh.to_string());
    }
    if (std::find(axes.begin(), axes.begin() + i, axes[i]) != axes.begin() + i) {
      throw SpecError(std::string(op) + ": mesh axis '" + axes[i] + "' appears twice in " + parenthesized(axes));
    }
  }
  return *frame;
}

void check_local_var(const char* op, const Var& x, const SpmdFrame& frame) {
  if (!(x.mesh() == frame.local)) {
    throw MeshError(std::string(op) + ": the operand is not a local block of the enclosing shard_map (it lives on " +
                    x.mesh().to_string() + ")");
  }
}

void check_dim(const char* op, const Var& x, int dim, const char* what = "dimension") {
  if (dim < 0 || dim >= x.ndim()) {
    throw ShapeError(std::string(op) + ": " + what + " " + std::to_string(dim) + " is out of range for a block of shape " +
                     shape_to_string(x.value().local().shape()));
  }
}

void check_divides(const char* op, const Var& x, int dim, const Axes& axes, int n) {
  const std::int64_t size = x.value().local().shape()[dim];
  if (size % n != 0) {
    throw ShapeError(std::string(op) + ": dimension " + std::to_string(dim) + " of the block (size " +
                     std::to_string(size) + ") does not divide over axes " + parenthesized(axes) + " of size " +
                     std::to_string(n));
  }
}

// Over axes of total size 1 every collective is the identity: no call, no record (as reshard,
// whose steps skip such axes).
bool trivial(const Mesh& mesh, const Axes& axes) { return mesh.shape().axes_size(axes) == 1; }

ShardedTensor wrap(const Mesh& local, Tensor t) {
  Shape shape = t.shape();
  return ShardedTensor(local, Spec::replicated(static_cast<int>(shape.size())), shape, std::move(t));
}

// Records the result's vary rule in the frame (when the tape kept the node).
Var finish(SpmdFrame& frame, Var out, detail::VaryRule rule) {
  frame.rules[out.node().get()] = rule;
  return out;
}

}  // namespace

bool in_shard_map() { return detail::current_frame() != nullptr; }

const Mesh& shard_map_mesh() {
  SpmdFrame* frame = detail::current_frame();
  if (frame == nullptr) throw Error("shard_map_mesh: called outside shard_map");
  return frame->mesh;
}

int axis_index(const Axes& axes) { return frame_for("axis_index", axes).mesh.axes_rank(axes); }
int axis_index(const std::string& axis) { return axis_index(Axes{axis}); }
int axis_size(const Axes& axes) { return frame_for("axis_size", axes).mesh.shape().axes_size(axes); }
int axis_size(const std::string& axis) { return axis_size(Axes{axis}); }

Var psum(const Var& x, const Axes& axes) {
  SpmdFrame& frame = frame_for("psum", axes);
  check_local_var("psum", x, frame);
  Tensor out = trivial(frame.mesh, axes) ? x.value().local()
                                         : tessera::all_reduce(frame.mesh, x.value().local(), axes, ReduceOp::sum);
  // pbroadcast: the cotangent of a value replicated over `axes` is used as is on every rank.
  Var result = make_result("psum", wrap(frame.local, std::move(out)), {x},
                           [](const ShardedTensor& g, GradSink& sink) { sink.add(0, g); });
  return finish(frame, result, {0, detail::axis_mask(frame.mesh.shape(), axes)});
}
Var psum(const Var& x, const std::string& axis) { return psum(x, Axes{axis}); }

Var pmax(const Var& x, const Axes& axes) {
  SpmdFrame& frame = frame_for("pmax", axes);
  check_local_var("pmax", x, frame);
  if (trivial(frame.mesh, axes)) return psum(x, axes);  // the maximum of one block
  Tensor out = tessera::all_reduce(frame.mesh, x.value().local(), axes, ReduceOp::max);
  Mesh mesh = frame.mesh, local = frame.local;
  ShardedTensor value = wrap(local, std::move(out));
  Var result = make_result(
      "pmax", value, {x}, [mesh, local, axes, input = x.value().local(), max = value.local()](const ShardedTensor& g,
                                                                                             GradSink& sink) {
        // The maximum's holders share the cotangent (jnp.max's rule, across ranks).
        Tensor holds = binary(BinaryOp::sub, input, max);
        dispatch_dtype(holds.dtype(), [&](auto zero) {
          using T = decltype(zero);
          for (auto& v : holds.values<T>()) v = v == T(0) ? T(1) : T(0);
        });
        Tensor count = tessera::all_reduce(mesh, holds, axes, ReduceOp::sum);
        Tensor share = binary(BinaryOp::div, binary(BinaryOp::mul, g.local(), holds), count);
        sink.add(0, wrap(local, std::move(share)));
      });
  return finish(frame, result, {0, detail::axis_mask(frame.mesh.shape(), axes)});
}
Var pmax(const Var& x, const std::string& axis) { return pmax(x, Axes{axis}); }

Var all_gather(const Var& x, const Axes& axes, int dim) {
  SpmdFrame& frame = frame_for("all_gather", axes);
  check_local_var("all_gather", x, frame);
  check_dim("all_gather", x, dim);
  const bool one = trivial(frame.mesh, axes);
  Tensor out = one ? x.value().local() : tessera::all_gather(frame.mesh, x.value().local(), axes, dim);
  Mesh mesh = frame.mesh, local = frame.local;
  Var result = make_result("all_gather", wrap(local, std::move(out)), {x},
                           [mesh, local, axes, dim, one](const ShardedTensor& g, GradSink& sink) {
                             sink.add(0, one ? g : wrap(local, tessera::reduce_scatter(mesh, g.local(), axes, dim)));
                           });
  // The gathered value is typed as varying (its transpose is psum_scatter), as in JAX.
  return finish(frame, result, {detail::axis_mask(frame.mesh.shape(), axes), 0});
}
Var all_gather(const Var& x, const std::string& axis, int dim) { return all_gather(x, Axes{axis}, dim); }

Var psum_scatter(const Var& x, const Axes& axes, int dim) {
  SpmdFrame& frame = frame_for("psum_scatter", axes);
  check_local_var("psum_scatter", x, frame);
  check_dim("psum_scatter", x, dim);
  check_divides("psum_scatter", x, dim, axes, frame.mesh.shape().axes_size(axes));
  const bool one = trivial(frame.mesh, axes);
  Tensor out = one ? x.value().local() : tessera::reduce_scatter(frame.mesh, x.value().local(), axes, dim);
  Mesh mesh = frame.mesh, local = frame.local;
  Var result = make_result("psum_scatter", wrap(local, std::move(out)), {x},
                           [mesh, local, axes, dim, one](const ShardedTensor& g, GradSink& sink) {
                             sink.add(0, one ? g : wrap(local, tessera::all_gather(mesh, g.local(), axes, dim)));
                           });
  return finish(frame, result, {detail::axis_mask(frame.mesh.shape(), axes), 0});
}
Var psum_scatter(const Var& x, const std::string& axis, int dim) { return psum_scatter(x, Axes{axis}, dim); }

Var all_to_all(const Var& x, const Axes& axes, int split_dim, int concat_dim) {
  SpmdFrame& frame = frame_for("all_to_all", axes);
  check_local_var("all_to_all", x, frame);
  check_dim("all_to_all", x, split_dim, "split dimension");
  check_dim("all_to_all", x, concat_dim, "concat dimension");
  check_divides("all_to_all", x, split_dim, axes, frame.mesh.shape().axes_size(axes));
  const bool one = trivial(frame.mesh, axes);
  Tensor out = one ? x.value().local() : tessera::all_to_all(frame.mesh, x.value().local(), axes, split_dim, concat_dim);
  Mesh mesh = frame.mesh, local = frame.local;
  Var result = make_result("all_to_all", wrap(local, std::move(out)), {x},
                           [mesh, local, axes, split_dim, concat_dim, one](const ShardedTensor& g, GradSink& sink) {
                             sink.add(0, one ? g
                                             : wrap(local, tessera::all_to_all(mesh, g.local(), axes, concat_dim,
                                                                               split_dim)));
                           });
  return finish(frame, result, {detail::axis_mask(frame.mesh.shape(), axes), 0});
}
Var all_to_all(const Var& x, const std::string& axis, int split_dim, int concat_dim) {
  return all_to_all(x, Axes{axis}, split_dim, concat_dim);
}

Var ppermute(const Var& x, const Axes& axes, const std::vector<std::pair<int, int>>& perm) {
  SpmdFrame& frame = frame_for("ppermute", axes);
  check_local_var("ppermute", x, frame);
  Tensor out = tessera::permute(frame.mesh, x.value().local(), axes, perm);
  std::vector<std::pair<int, int>> inverse;
  for (const auto& [from, to] : perm) inverse.emplace_back(to, from);
  Mesh mesh = frame.mesh, local = frame.local;
  Var result = make_result("ppermute", wrap(local, std::move(out)), {x},
                           [mesh, local, axes, inverse](const ShardedTensor& g, GradSink& sink) {
                             sink.add(0, wrap(local, tessera::permute(mesh, g.local(), axes, inverse)));
                           });
  return finish(frame, result, {detail::axis_mask(frame.mesh.shape(), axes), 0});
}
Var ppermute(const Var& x, const std::string& axis, const std::vector<std::pair<int, int>>& perm) {
  return ppermute(x, Axes{axis}, perm);
}

}  // namespace tessera::nn
