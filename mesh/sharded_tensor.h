// The global-view sharded tensor: a mesh, a spec, the global shape and this rank's block.
// Rank at coordinates c holds the block given by block_offsets(spec, mesh, global, c) of
// shape local_shape(spec, mesh, global, c) (the block rule of core/spec.h: a dimension need not
// divide; trailing blocks may be short or empty). Along a partial axis the global value is the sum of
// the blocks; along an axis the spec does not mention, every rank holds the same block.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/spec.h"
#include "core/tensor.h"
#include "mesh/mesh.h"

namespace tessera {

class ShardedTensor {
 public:
  ShardedTensor() = default;
  // Wraps a local block. Validates the spec against mesh and shape (SpecError naming `name`)
  // and the block's shape (ShapeError). The spec is padded to the tensor's ndim.
  ShardedTensor(Mesh mesh, Spec spec, Shape global_shape, Tensor local, std::string name = {});

  // Every rank keeps its block of a global tensor that every rank has. With partial axes, the
  // replica at coordinate 0 of each partial axis holds the block and the others hold zeros.
  static ShardedTensor from_global(const Mesh& mesh, const Spec& spec, const Tensor& global, std::string name = {});
  // Every rank computes only its block: fn(flat row-major global index) -> value.
  template <class F>
  static ShardedTensor from_fn(const Mesh& mesh, const Spec& spec, const Shape& global_shape, DType dtype, F&& fn,
                               std::string name = {});
  // Every rank computes only its block: fn(block offsets, block shape) -> Tensor of that shape.
  template <class F>
  static ShardedTensor from_block_fn(const Mesh& mesh, const Spec& spec, const Shape& global_shape, F&& fn,
                                     std::string name = {});
  static ShardedTensor zeros(const Mesh& mesh, const Spec& spec, const Shape& global_shape, DType dtype = DType::f32,
                             std::string name = {});

  // The global value on every rank (collective over the mesh): blocks are gathered and partial
  // axes summed in rank order, so the result is deterministic.
  Tensor to_global() const;

  const Mesh& mesh() const { return mesh_; }
  const Spec& spec() const { return spec_; }
  const Shape& global_shape() const { return global_shape_; }
  const Tensor& local() const { return local_; }
  Tensor& local() { return local_; }
  DType dtype() const { return local_.dtype(); }
  int ndim() const { return static_cast<int>(global_shape_.size()); }
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  // Offsets of this rank's block in the global tensor.
  std::vector<std::int64_t> block_offsets() const;
  // True when this rank holds the value along every partial axis (coordinate 0 there).
  bool holds_partial_value() const;

  // "W1: f32[1024, 4096] P(None, model)"
  std::string describe() const;
  // A text picture of which ranks hold which block (1-D and 2-D tensors), in the manner of
  // jax.debug.visualize_array_sharding; when the dimensions do not divide evenly each cell also
  // shows its block's shape ("0,1 3x4"). Needs no communication.
  std::string picture() const;

 private:
  Mesh mesh_;
  Spec spec_;
  Shape global_shape_;
  Tensor local_;
  std::string name_;
};

// Partial axes hold their value on the replica at coordinate 0 of every partial axis.
bool is_partial_holder(const Spec& spec, const MeshShape& mesh, const std::vector<int>& coords);

template <class F>
ShardedTensor ShardedTensor::from_block_fn(const Mesh& mesh, const Spec& spec, const Shape& global_shape, F&& fn,
                                           std::string name) {
  Spec full = spec.padded(static_cast<int>(global_shape.size()));
  validate_spec(full, mesh.shape(), global_shape, name);
  Shape block_shape = local_shape(full, mesh.shape(), global_shape, mesh.coords());
  auto offsets = tessera::block_offsets(full, mesh.shape(), global_shape, mesh.coords());
  Tensor local = fn(offsets, block_shape);
  if (!is_partial_holder(full, mesh.shape(), mesh.coords())) local.fill_zero();
  return ShardedTensor(mesh, std::move(full), global_shape, std::move(local), std::move(name));
}

template <class F>
ShardedTensor ShardedTensor::from_fn(const Mesh& mesh, const Spec& spec, const Shape& global_shape, DType dtype,
                                     F&& fn, std::string name) {
  return from_block_fn(
      mesh, spec, global_shape,
      [&](const std::vector<std::int64_t>& offsets, const Shape& block_shape) {
        Tensor block(block_shape, dtype);
        const auto strides = row_major_strides(global_shape);
        const int r = static_cast<int>(block_shape.size());
        std::vector<std::int64_t> index(r, 0);
        dispatch_dtype(dtype, [&](auto zero) {
          using T = decltype(zero);
          T* out = block.data<T>();
          for (std::int64_t i = 0; i < block.numel(); ++i) {
            std::int64_t flat = 0;
            for (int d = 0; d < r; ++d) flat += (offsets[d] + index[d]) * strides[d];
            out[i] = static_cast<T>(fn(flat));
            for (int d = r - 1; d >= 0; --d) {
              if (++index[d] < block_shape[d]) break;
              index[d] = 0;
            }
          }
        });
        return block;
      },
      std::move(name));
}

}  // namespace tessera
