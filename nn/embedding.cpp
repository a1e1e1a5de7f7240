// The vocab-parallel embedding: a masked local lookup, one psum; its scatter-add backward.
#include "nn/embedding.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "collectives/reshard.h"
#include "core/error.h"
#include "mesh/agree.h"
#include "nn/propagation.h"

namespace tessera::nn {

namespace {

bool contains(const Axes& axes, const std::string& a) { return std::find(axes.begin(), axes.end(), a) != axes.end(); }

Axes without(const Axes& axes, const Axes& drop) {
  Axes out;
  for (const auto& a : axes)
    if (!contains(drop, a)) out.push_back(a);
  return out;
}

// The mesh axes `spec` splits some dimension over, in the mesh's order.
Axes used_axes(const Spec& spec, const Mesh& mesh) {
  Axes out;
  for (const auto& name : mesh.shape().names())
    for (const auto& d : spec.dims)
      if (contains(d, name)) out.push_back(name);
  return out;
}

template <class T>
void lookup(const Tensor& table, const Tensor& tokens, std::int64_t v0, Tensor& out) {
  const std::int64_t rows = table.shape()[0], d = table.shape()[1];
  const T* src = table.data<T>();
  T* dst = out.data<T>();
  const std::int32_t* ids = tokens.data<std::int32_t>();
  for (std::int64_t i = 0; i < tokens.numel(); ++i) {
    const std::int64_t row = ids[i] - v0;
    if (row >= 0 && row < rows) std::copy(src + row * d, src + (row + 1) * d, dst + i * d);
    else std::fill(dst + i * d, dst + (i + 1) * d, T(0));
  }
}

template <class T>
void scatter_add(const Tensor& g, const Tensor& tokens, std::int64_t v0, Tensor& out) {
  const std::int64_t rows = out.shape()[0], d = out.shape()[1];
  const T* src = g.data<T>();
  T* dst = out.data<T>();
  const std::int32_t* ids = tokens.data<std::int32_t>();
  for (std::int64_t i = 0; i < tokens.numel(); ++i) {
    const std::int64_t row = ids[i] - v0;
    if (row < 0 || row >= rows) continue;
    for (std::int64_t j = 0; j < d; ++j) dst[row * d + j] += src[i * d + j];
  }
}

}  // namespace

Var embed(const Var& table_var, const ShardedTensor& tokens_in) {
  const ShardedTensor& table_in = table_var.value();
  check_same_mesh(table_in, tokens_in, "embed");
  if (table_in.ndim() != 2) throw ShapeError("embed: table " + operand_string(table_in) + " is not [vocabulary, d]");
  if (tokens_in.dtype() != DType::i32) {
    throw DTypeError("embed: tokens " + operand_string(tokens_in) + " have dtype " + std::string(dtype_name(tokens_in.dtype())) +
                     ", not i32");
  }
  if (table_in.dtype() != DType::f32 && table_in.dtype() != DType::f64) {
    throw DTypeError("embed: table " + operand_string(table_in) + " is not f32 or f64");
  }
  const Mesh& mesh = table_in.mesh();
  // The table and tokens are read where they lie when no reshard is needed (no copy).
  const Axes vocab = table_in.spec().axes(0);
  // Tokens off the vocabulary axes (each vocabulary shard needs every token of its rows' block).
  Spec tokens_spec = tokens_in.spec().without_partial();
  for (auto& d : tokens_spec.dims) d = without(d, vocab);
  ShardedTensor tokens_moved;
  const ShardedTensor& tokens = on_spec(tokens_in, tokens_spec, tokens_moved);
  const Axes token_axes = used_axes(tokens_spec, mesh);
  // Its partial axes summed away and d off the token axes, in one reshard.
  Spec table_spec(std::vector<Axes>{vocab, without(table_in.spec().axes(1), token_axes)});
  ShardedTensor table_moved;
  const ShardedTensor& table = on_spec(table_in, table_spec, table_moved);

  const std::int64_t vocabulary = table.global_shape()[0];
  const std::int64_t v0 = block_offsets(table_spec, mesh.shape(), table.global_shape(), mesh.coords())[0];
  {
    const std::int32_t* ids = tokens.local().data<std::int32_t>();
    std::optional<std::string> bad;
    for (std::int64_t i = 0; i < tokens.local().numel() && !bad; ++i) {
      if (ids[i] < 0 || ids[i] >= vocabulary) {
        bad = "embed: token id " + std::to_string(ids[i]) + " in " + operand_string(tokens_in) +
              " is outside the vocabulary [0, " + std::to_string(vocabulary) + ") of " + operand_string(table_in);
      }
    }
    // Agreed on, in one small all-reduce: the ids are data, which only the ranks holding them see,
    // and a rank that threw alone left the others in the result's all-reduce for ever.
    agree_or_throw<ShapeError>(mesh.comm(), bad);
  }
  Shape out_shape = tokens.global_shape();
  out_shape.push_back(table.global_shape()[1]);
  std::vector<Axes> out_dims = tokens_spec.dims;
  out_dims.push_back(table_spec.axes(1));
  Spec out_spec(out_dims, vocab);
  Tensor local(local_shape(out_spec, mesh.shape(), out_shape, mesh.coords()), table.dtype());
  if (table.dtype() == DType::f32) lookup<float>(table.local(), tokens.local(), v0, local);
  else lookup<double>(table.local(), tokens.local(), v0, local);
  // The one psum over the vocabulary axes.
  ShardedTensor y = resolve_partial(ShardedTensor(mesh, out_spec, out_shape, std::move(local)));

  return make_result("embed", std::move(y), {table_var},
                     [tokens = tokens, table_spec, token_axes, v0, table_shape = table.global_shape(),
                      y_spec = out_spec.without_partial()](const ShardedTensor& g, GradSink& sink) {
                       ShardedTensor moved;
                       const ShardedTensor& gy = on_spec(g, y_spec, moved);
                       const Mesh& mesh = gy.mesh();
                       Spec spec(table_spec.dims, token_axes);
                       Tensor local(local_shape(spec, mesh.shape(), table_shape, mesh.coords()), gy.dtype());
                       if (gy.dtype() == DType::f32) scatter_add<float>(gy.local(), tokens.local(), v0, local);
                       else scatter_add<double>(gy.local(), tokens.local(), v0, local);
                       sink.add(0, ShardedTensor(mesh, spec, table_shape, std::move(local)));
                     });
}

}  // namespace tessera::nn
