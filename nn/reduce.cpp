// Reductions and their transposes (broadcasts), log_softmax, taking one layer of a stack.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "collectives/reshard.h"
#include "core/error.h"
#include "nn/ops.h"
#include "nn/propagation.h"

namespace tessera::nn {

namespace {

std::vector<int> normalize_dims(std::vector<int> dims, int ndim, const char* what) {
  if (dims.empty()) {
    dims.resize(ndim);
    std::iota(dims.begin(), dims.end(), 0);
  }
  for (int& d : dims) {
    const int given = d;
    if (d < 0) d += ndim;
    if (d < 0 || d >= ndim) {
      throw ShapeError(std::string(what) + ": dimension " + std::to_string(given) + " is out of range for a tensor of " +
                       std::to_string(ndim) + " dimensions");
    }
  }
  std::sort(dims.begin(), dims.end());
  // A dimension given twice (as 0 and 0, or 1 and -1 of two) is refused, as JAX's "repeated axis":
  // summing it once would give another shape than the caller counted on.
  const auto repeated = std::adjacent_find(dims.begin(), dims.end());
  if (repeated != dims.end()) {
    throw ShapeError(std::string(what) + ": dimension " + std::to_string(*repeated) + " is given twice");
  }
  return dims;
}

}  // namespace

ShardedTensor sum(const ShardedTensor& x, std::vector<int> dims, bool keepdims) {
  dims = normalize_dims(std::move(dims), x.ndim(), "sum");
  Spec spec = Spec::replicated(0);
  Shape shape;
  spec.partial = x.spec().partial;
  for (int d = 0; d < x.ndim(); ++d) {
    bool reduced = std::binary_search(dims.begin(), dims.end(), d);
    if (reduced) {
      // Summing a split dimension leaves each rank a partial sum over its axes.
      for (const auto& a : x.spec().axes(d)) spec.partial.push_back(a);
      if (keepdims) {
        spec.dims.push_back({});
        shape.push_back(1);
      }
    } else {
      spec.dims.push_back(x.spec().axes(d));
      shape.push_back(x.global_shape()[d]);
    }
  }
  Tensor local = reduce_sum(x.local(), dims, keepdims);
  return ShardedTensor(x.mesh(), std::move(spec), std::move(shape), std::move(local));
}

ShardedTensor broadcast_to(const ShardedTensor& x, const Shape& shape, const Spec& spec) {
  ShardedTensor src = resolve_partial(x);
  // x's dimensions map to the trailing dimensions of `shape`; where x has extent 1 and the
  // target more, x is broadcast and its spec there is unsplit.
  const int offset = static_cast<int>(shape.size()) - src.ndim();
  Spec want = Spec::replicated(src.ndim());
  for (int d = 0; d < src.ndim(); ++d) {
    if (src.global_shape()[d] == shape[d + offset]) want.dims[d] = spec.axes(d + offset);
  }
  if (!(src.spec() == want)) src = reshard(src, want);
  Shape local = local_shape(spec, x.mesh().shape(), shape, x.mesh().coords());
  return ShardedTensor(x.mesh(), spec, shape, tessera::broadcast_to(src.local(), local));
}

ShardedTensor sum_to_shape(ShardedTensor&& x, const Shape& shape) {
  if (x.global_shape() == shape) return std::move(x);
  return sum_to_shape(static_cast<const ShardedTensor&>(x), shape);
}

ShardedTensor sum_to_shape(const ShardedTensor& x, const Shape& shape) {
  if (x.global_shape() == shape) return x;
  const int offset = x.ndim() - static_cast<int>(shape.size());
  // `shape` must broadcast to x's: no more dimensions, each trailing one x's extent or 1 (a shape
  // of more dimensions indexed the spec before its start).
  bool reduces = offset >= 0;
  for (std::size_t i = 0; reduces && i < shape.size(); ++i) {
    reduces = shape[i] == 1 || shape[i] == x.global_shape()[static_cast<std::size_t>(offset) + i];
  }
  if (!reduces) {
    throw ShapeError("sum_to_shape: " + shape_to_string(x.global_shape()) + " does not sum to " + shape_to_string(shape) +
                     " (the target must broadcast to it)");
  }
  ShardedTensor s = sum(x, broadcast_dims(x.global_shape(), shape), true);
  // Drop the leading dimensions that `shape` does not have (all of extent 1 now).
  Spec spec(std::vector<Axes>(s.spec().dims.begin() + offset, s.spec().dims.end()), s.spec().partial);
  Shape local = local_shape(spec, s.mesh().shape(), shape, s.mesh().coords());
  Tensor block = std::move(s.local()).reshaped(std::move(local));
  return ShardedTensor(s.mesh(), std::move(spec), shape, std::move(block));
}

Var sum(const Var& x, std::vector<int> dims, bool keepdims) {
  dims = normalize_dims(std::move(dims), x.ndim(), "sum");
  ShardedTensor y = sum(x.value(), dims, keepdims);
  return make_result("sum", std::move(y), {x}, [x, dims, keepdims](const ShardedTensor& g, GradSink& sink) {
    // The cotangent spreads back over the summed dimensions, in x's spec (partial dropped).
    ShardedTensor gk = g;
    if (!keepdims) {
      Shape kept = x.shape();
      Spec spec = Spec::replicated(0);
      spec.partial = g.spec().partial;
      int j = 0;
      for (int d = 0; d < x.ndim(); ++d) {
        if (std::binary_search(dims.begin(), dims.end(), d)) {
          kept[d] = 1;
          spec.dims.push_back({});
        } else {
          spec.dims.push_back(g.spec().axes(j++));
        }
      }
      gk = ShardedTensor(g.mesh(), spec, kept, g.local().reshaped(local_shape(spec, g.mesh().shape(), kept, g.mesh().coords())));
    }
    sink.add(0, broadcast_to(gk, x.shape(), x.spec().without_partial()));
  });
}

Var mean(const Var& x, std::vector<int> dims, bool keepdims) {
  dims = normalize_dims(std::move(dims), x.ndim(), "mean");
  std::int64_t count = 1;
  for (int d : dims) count *= x.shape()[d];
  return scale(sum(x, dims, keepdims), 1.0 / static_cast<double>(count));
}

Var log_softmax(const Var& x) {
  const int last = x.ndim() - 1;
  if (last < 0) throw ShapeError("log_softmax: needs at least one dimension");
  // The normalisation needs the whole last dimension on each rank.
  ShardedTensor moved;
  const ShardedTensor& in = whole_along(x.value(), last, moved);
  const Tensor& v = in.local();
  Tensor max = reduce_max(v, {last}, true);
  Tensor shifted = tessera::binary(BinaryOp::sub, v, max);
  Tensor lse = tessera::unary(UnaryOp::log, reduce_sum(tessera::unary(UnaryOp::exp, shifted), {last}, true));
  Tensor out = tessera::binary(BinaryOp::sub, shifted, lse);
  ShardedTensor y(in.mesh(), in.spec(), in.global_shape(), std::move(out));
  ShardedTensor saved = y;
  return make_result("log_softmax", std::move(y), {x},
                     [saved = std::move(saved), last](const ShardedTensor& g, GradSink& sink) {
    ShardedTensor moved;
    const ShardedTensor& gl = on_spec(g, saved.spec(), moved);
    // d/dx = g - softmax(x) * sum(g)
    Tensor softmax = tessera::unary(UnaryOp::exp, saved.local());
    Tensor total = reduce_sum(gl.local(), {last}, true);
    Tensor dx = tessera::binary(BinaryOp::sub, gl.local(), tessera::binary(BinaryOp::mul, softmax, total));
    sink.add(0, ShardedTensor(saved.mesh(), saved.spec(), saved.global_shape(), std::move(dx)));
  });
}

Var take_layer(const Var& stacked, std::int64_t index) {
  const ShardedTensor& s = stacked.value();
  if (s.ndim() < 1 || index < 0 || index >= s.global_shape()[0]) {
    throw ShapeError("take_layer: index " + std::to_string(index) + " out of range for '" + s.name() + "' " +
                     shape_to_string(s.global_shape()));
  }
  // Each rank needs the whole layer: dimension 0 must not be split (gathered if it is).
  ShardedTensor src_store;
  const ShardedTensor* src = &s;
  if (!s.spec().axes(0).empty() || s.spec().is_partial()) {
    Spec whole = s.spec().without_partial();
    whole.dims[0].clear();
    src_store = reshard(s, whole);
    src = &src_store;
  }
  Shape layer_shape(s.global_shape().begin() + 1, s.global_shape().end());
  Spec layer_spec(std::vector<Axes>(src->spec().dims.begin() + 1, src->spec().dims.end()));
  Shape block = src->local().shape();
  block[0] = 1;
  std::vector<std::int64_t> at(s.ndim(), 0);
  at[0] = index;
  Tensor local = extract_block(src->local(), at, block);
  Shape local_layer(block.begin() + 1, block.end());
  ShardedTensor y(s.mesh(), std::move(layer_spec), std::move(layer_shape), std::move(local).reshaped(local_layer),
                  s.name() + "[" + std::to_string(index) + "]");
  return make_result("take_layer", std::move(y), {stacked}, [index](const ShardedTensor& g, GradSink& sink) {
    sink.add_slab(0, index, g);
  });
}

double scalar_value(const ShardedTensor& x) {
  if (numel(x.global_shape()) != 1) {
    throw ShapeError("scalar_value: '" + x.name() + "' has shape " + shape_to_string(x.global_shape()));
  }
  return resolve_partial(x).local().at(0);
}

}  // namespace tessera::nn
