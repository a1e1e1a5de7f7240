// Shape ops: each rank reshapes, permutes or cuts its own block; the spec follows the data.
#include "nn/shape_ops.h"

#include <algorithm>
#include <numeric>

#include "collectives/reshard.h"
#include "core/error.h"
#include "core/kernels.h"
#include "nn/propagation.h"

namespace tessera::nn {

namespace {

int normalize_dim(int dim, int ndim, const char* op, const ShardedTensor& x) {
  const int given = dim;  // named as the caller gave it (-3, not -1 of a 2-d tensor)
  if (dim < 0) dim += ndim;
  if (dim < 0 || dim >= ndim) {
    throw ShapeError(std::string(op) + ": dimension " + std::to_string(given) + " out of range for " + operand_string(x));
  }
  return dim;
}

// The spec of x reshaped to `shape` (see the header's rule), or a ShapeError.
Spec reshaped_spec(const ShardedTensor& x, const Shape& shape) {
  const Shape& old = x.global_shape();
  const int no = static_cast<int>(old.size()), nn = static_cast<int>(shape.size());
  Spec spec = Spec::replicated(nn);
  spec.partial = x.spec().partial;
  // No elements: every block is empty whatever the spec, and the grouping below has no sizes to
  // follow ([1, 0] into [0]); the result is replicated, as the reshape of an empty array is in JAX.
  if (numel(old) == 0 && old != shape) return spec;
  int i = 0, j = 0;
  while (i < no || j < nn) {
    std::vector<int> olds, news;
    std::int64_t po = 1, pn = 1;
    if (i < no) po *= old[i], olds.push_back(i++);
    if (j < nn) pn *= shape[j], news.push_back(j++);
    while (po != pn) {
      if ((po < pn && i >= no) || (po > pn && j >= nn)) throw ShapeError("reshape: no grouping of " + operand_string(x) + " into " + shape_to_string(shape));
      if (po < pn) po *= old[i], olds.push_back(i++);
      else pn *= shape[j], news.push_back(j++);
    }
    auto major = [](const std::vector<int>& dims, const Shape& s) {
      for (int d : dims)
        if (s[d] > 1) return d;
      return dims.empty() ? -1 : dims.front();
    };
    const int old_major = major(olds, old), new_major = major(news, shape);
    for (int d : olds) {
      const Axes& axes = x.spec().axes(d);
      if (axes.empty()) continue;
      if (d != old_major) {
        throw ShapeError("reshape: " + operand_string(x) + " to " + shape_to_string(shape) + ": dimension " +
                         std::to_string(d) + " is split but is not the major dimension of the dimensions it " +
                         "merges or splits into; reshard it first");
      }
      if (new_major < 0) {
        throw ShapeError("reshape: " + operand_string(x) + " to " + shape_to_string(shape) + ": dimension " +
                         std::to_string(d) + " (size " + std::to_string(old[d]) +
                         ") is split and has no dimension of the result to go to; reshard it first");
      }
      const std::int64_t k = x.mesh().shape().axes_size(axes);
      // Local only when the k blocks of dimension d (times the dimensions it merges with) are
      // the k blocks of the new major dimension (times its minor ones) under the block rule.
      bool same_blocks = true;
      {
        std::int64_t old_minor = 1, new_minor = 1;
        for (int e : olds) old_minor *= e > d ? old[e] : 1;
        for (int e : news) new_minor *= e > new_major ? shape[e] : 1;
        for (std::int64_t b = 1; b < k && same_blocks; ++b) {
          same_blocks = block_begin(old[d], k, b) * old_minor == block_begin(shape[new_major], k, b) * new_minor;
        }
      }
      if (!same_blocks) {
        throw ShapeError("reshape: " + operand_string(x) + " to " + shape_to_string(shape) + ": dimension " +
                         std::to_string(new_major) + " (size " + std::to_string(shape[new_major]) +
                         ") does not divide over the " + std::to_string(k) + " shards of dimension " +
                         std::to_string(d) + " into the same blocks; reshard it first");
      }
      spec.dims[new_major] = axes;
    }
  }
  return spec;
}

ShardedTensor reshape_value(const ShardedTensor& x, const Shape& shape) {
  Spec spec = reshaped_spec(x, shape);
  Shape local = local_shape(spec, x.mesh().shape(), shape, x.mesh().coords());
  return ShardedTensor(x.mesh(), spec, shape, x.local().reshaped(std::move(local)));
}

ShardedTensor permute_value(const ShardedTensor& x, const std::vector<int>& perm) {
  Spec spec = Spec::replicated(x.ndim());
  spec.partial = x.spec().partial;
  Shape shape(x.ndim());
  for (int d = 0; d < x.ndim(); ++d) {
    spec.dims[d] = x.spec().axes(perm[d]);
    shape[d] = x.global_shape()[perm[d]];
  }
  return ShardedTensor(x.mesh(), std::move(spec), std::move(shape), permute_dims(x.local(), perm));
}

// x (whole along dim) placed at `start` of dimension `dim` in zeros of extent `extent` there.
ShardedTensor pad_along(const ShardedTensor& x, int dim, std::int64_t start, std::int64_t extent) {
  Shape shape = x.global_shape();
  shape[dim] = extent;
  Shape local = x.local().shape();
  local[dim] = extent;
  Tensor out(local, x.dtype());
  std::vector<std::int64_t> at(x.ndim(), 0);
  at[dim] = start;
  insert_block(out, x.local(), at);
  return ShardedTensor(x.mesh(), x.spec(), std::move(shape), std::move(out));
}

}  // namespace

Var reshape(const Var& x, Shape shape) {
  const std::int64_t total = numel(x.shape());
  int inferred = -1;
  std::int64_t known = 1;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
    if (shape[d] == -1 && inferred < 0) inferred = d;
    else known *= shape[d];
  }
  if (inferred >= 0 && known > 0 && total % known == 0) shape[inferred] = total / known;
  if (numel(shape) != total || std::any_of(shape.begin(), shape.end(), [](std::int64_t s) { return s < 0; })) {
    throw ShapeError("reshape: " + operand_string(x.value()) + " has " + std::to_string(total) + " elements, not those of " +
                     shape_to_string(shape));
  }
  ShardedTensor y = reshape_value(x.value(), shape);
  Spec y_spec = y.spec().without_partial();
  return make_result("reshape", std::move(y), {x}, [old = x.shape(), y_spec](const ShardedTensor& g, GradSink& sink) {
    // The cotangent in the result's spec reshapes back to x's spec without moving.
    ShardedTensor moved;
    const ShardedTensor& gy = g.spec().without_partial() == y_spec ? g : on_spec(g, y_spec, moved);
    sink.add(0, reshape_value(gy, old));
  });
}

Var permute(const Var& x, const std::vector<int>& perm) {
  std::vector<int> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> identity(x.ndim());
  std::iota(identity.begin(), identity.end(), 0);
  if (sorted != identity) {
    std::string p;
    for (int d : perm) p += (p.empty() ? "" : ", ") + std::to_string(d);
    throw ShapeError("permute: (" + p + ") is not a permutation of the dimensions of " + operand_string(x.value()));
  }
  std::vector<int> inverse(perm.size());
  for (int d = 0; d < x.ndim(); ++d) inverse[perm[d]] = d;
  return make_result("permute", permute_value(x.value(), perm), {x},
                     [inverse](const ShardedTensor& g, GradSink& sink) { sink.add(0, permute_value(g, inverse)); });
}

Var transpose(const Var& x, int d0, int d1) {
  d0 = normalize_dim(d0, x.ndim(), "transpose", x.value());
  d1 = normalize_dim(d1, x.ndim(), "transpose", x.value());
  std::vector<int> perm(x.ndim());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[d0], perm[d1]);
  return permute(x, perm);
}

Var concat(const std::vector<Var>& xs, int dim) {
  if (xs.empty()) throw ShapeError("concat: no inputs");
  const ShardedTensor& first = xs[0].value();
  dim = normalize_dim(dim, first.ndim(), "concat", first);
  Spec target = first.spec().without_partial();
  target.dims[dim].clear();
  std::vector<ShardedTensor> parts;
  std::vector<std::int64_t> starts;
  std::int64_t extent = 0;
  for (const auto& x : xs) {
    check_same_mesh(first, x.value(), "concat");
    if (x.dtype() != first.dtype()) {
      throw DTypeError("concat: " + operand_string(x.value()) + " is " + std::string(dtype_name(x.dtype())) + ", " +
                       operand_string(first) + " is " + std::string(dtype_name(first.dtype())));
    }
    bool fits = x.ndim() == first.ndim();
    for (int d = 0; fits && d < first.ndim(); ++d) fits = d == dim || x.shape()[d] == first.global_shape()[d];
    if (!fits) {
      throw ShapeError("concat: " + operand_string(x.value()) + " does not fit " + operand_string(first) + " along dimension " +
                       std::to_string(dim));
    }
    starts.push_back(extent);
    extent += x.shape()[dim];
    parts.push_back(to_spec(resolve_partial(x.value()), target));
  }
  Shape shape = first.global_shape();
  shape[dim] = extent;
  Shape local = local_shape(target, first.mesh().shape(), shape, first.mesh().coords());
  Tensor out(local, first.dtype());
  for (std::size_t i = 0; i < parts.size(); ++i) {
    std::vector<std::int64_t> at(first.ndim(), 0);
    at[dim] = starts[i];
    insert_block(out, parts[i].local(), at);
  }
  ShardedTensor y(first.mesh(), target, shape, std::move(out));
  std::vector<std::int64_t> lengths;
  for (const auto& x : xs) lengths.push_back(x.shape()[dim]);
  return make_result("concat", std::move(y), xs, [dim, starts, lengths](const ShardedTensor& g, GradSink& sink) {
    ShardedTensor moved;
    const ShardedTensor& gw = whole_along(g, dim, moved);
    for (std::size_t i = 0; i < starts.size(); ++i) {
      if (!sink.wants(static_cast<int>(i))) continue;
      Shape shape = gw.global_shape(), block = gw.local().shape();
      shape[dim] = block[dim] = lengths[i];
      std::vector<std::int64_t> at(gw.ndim(), 0);
      at[dim] = starts[i];
      sink.add(static_cast<int>(i), ShardedTensor(gw.mesh(), gw.spec(), shape, extract_block(gw.local(), at, block)));
    }
  });
}

Var slice(const Var& x, int dim, std::int64_t start, std::int64_t length) {
  dim = normalize_dim(dim, x.ndim(), "slice", x.value());
  const std::int64_t extent = x.shape()[dim];
  // start > extent - length, not start + length > extent: that sum wrapped for a start near 2^63,
  // and the slice read outside the tensor.
  if (start < 0 || length < 0 || length > extent || start > extent - length) {
    throw ShapeError("slice: " + std::to_string(length) + " from " + std::to_string(start) + " of dimension " +
                     std::to_string(dim) + " is out of range for " + operand_string(x.value()));
  }
  ShardedTensor moved;
  const ShardedTensor& src = x.spec().axes(dim).empty() ? x.value() : whole_along(x.value(), dim, moved);
  Shape shape = src.global_shape(), block = src.local().shape();
  shape[dim] = block[dim] = length;
  std::vector<std::int64_t> at(src.ndim(), 0);
  at[dim] = start;
  ShardedTensor y(src.mesh(), src.spec(), shape, extract_block(src.local(), at, block));
  return make_result("slice", std::move(y), {x}, [dim, start, extent](const ShardedTensor& g, GradSink& sink) {
    ShardedTensor moved;
    const ShardedTensor& gw = g.spec().axes(dim).empty() ? g : whole_along(g, dim, moved);
    sink.add(0, pad_along(gw, dim, start, extent));
  });
}

std::vector<Var> split(const Var& x, const std::vector<std::int64_t>& sizes, int dim) {
  dim = normalize_dim(dim, x.ndim(), "split", x.value());
  std::int64_t total = 0;
  for (auto s : sizes) total += s;
  if (total != x.shape()[dim]) {
    throw ShapeError("split: sizes summing to " + std::to_string(total) + " do not cut dimension " +
                     std::to_string(dim) + " of " + operand_string(x.value()));
  }
  std::vector<Var> out;
  std::int64_t start = 0;
  for (auto s : sizes) {
    out.push_back(slice(x, dim, start, s));
    start += s;
  }
  return out;
}

}  // namespace tessera::nn
