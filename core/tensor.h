// The dense local tensor: row-major, owning, 64-byte aligned storage. Copies are deep (value
// semantics); moves are cheap. Compute kernels live in .cpp files; this header has no Eigen.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"

namespace tessera {

class Tensor {
 public:
  Tensor();
  // A zero-filled tensor.
  explicit Tensor(Shape shape, DType dtype = DType::f32);

  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  ~Tensor() = default;

  static Tensor zeros(Shape shape, DType dtype = DType::f32) { return Tensor(std::move(shape), dtype); }
  // Storage left uninitialised, for outputs that are overwritten whole (collectives, copies):
  // skips the zero fill that doubles the cost of a large fresh allocation.
  static Tensor empty(Shape shape, DType dtype = DType::f32);
  template <class T>
  static Tensor from_vector(Shape shape, const std::vector<T>& values);
  // A tensor of `shape` filled with `value` (converted to dtype).
  static Tensor full(Shape shape, double value, DType dtype = DType::f32);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  std::int64_t numel() const { return numel_; }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }

  void* raw() { return data_.get(); }
  const void* raw() const { return data_.get(); }

  // Typed access; throws DTypeError when T does not match dtype().
  template <class T>
  T* data() {
    check_dtype(dtype_of_v<T>);
    return static_cast<T*>(raw());
  }
  template <class T>
  const T* data() const {
    check_dtype(dtype_of_v<T>);
    return static_cast<const T*>(raw());
  }
  template <class T>
  std::span<T> values() {
    return {data<T>(), static_cast<std::size_t>(numel_)};
  }
  template <class T>
  std::span<const T> values() const {
    return {data<T>(), static_cast<std::size_t>(numel_)};
  }
  // The element at flat index i as a double (any dtype).
  double at(std::int64_t i) const;

  // The same bytes seen with another shape of the same element count.
  Tensor reshaped(Shape shape) const&;
  Tensor reshaped(Shape shape) &&;
  // Element-wise conversion. Floating to i32 truncates toward zero and saturates, as XLA's
  // convert: NaN gives 0, a value beyond i32's range the nearest of INT32_MIN and INT32_MAX.
  Tensor astype(DType dtype) const;
  void fill_zero();

  // Bitwise equality of dtype, shape and bytes.
  bool bit_equal(const Tensor& other) const;

 private:
  // Blocks go back to a per-process cache for the next tensor of the same size
  // (core/buffer_pool.h), so repeated ops neither fault in fresh pages nor call the allocator.
  struct Free {
    Free() noexcept : bytes(0) {}
    explicit Free(std::size_t b) noexcept : bytes(b) {}
    std::size_t bytes;  // the allocation's rounded size, for the buffer pool
    void operator()(std::byte* p) const noexcept;
  };
  void check_dtype(DType requested) const;
  static std::unique_ptr<std::byte[], Free> allocate(std::size_t bytes, bool zero = true);
  // The storage of `shape`, zeroed or not (Tensor(shape, dtype), empty), allocated once.
  Tensor(Shape shape, DType dtype, bool zero);

  DType dtype_ = DType::f32;
  Shape shape_;
  std::int64_t numel_ = 0;
  std::unique_ptr<std::byte[], Free> data_;
};

template <class T>
Tensor Tensor::from_vector(Shape shape, const std::vector<T>& values) {
  Tensor t(std::move(shape), dtype_of_v<T>);
  if (static_cast<std::int64_t>(values.size()) != t.numel()) {
    throw ShapeError("Tensor::from_vector: " + std::to_string(values.size()) + " values for shape " +
                     shape_to_string(t.shape()));
  }
  if (!values.empty()) std::memcpy(t.raw(), values.data(), t.nbytes());
  return t;
}

// Copies the block [offsets, offsets + block_shape) of `src` into a new tensor.
Tensor extract_block(const Tensor& src, const std::vector<std::int64_t>& offsets, const Shape& block_shape);
// Writes `block` into `dst` at `offsets`.
void insert_block(Tensor& dst, const Tensor& block, const std::vector<std::int64_t>& offsets);
// Adds `block` elementwise into `dst` at `offsets` (dtypes must match).
void add_block(Tensor& dst, const Tensor& block, const std::vector<std::int64_t>& offsets);
// Adds `slab` elementwise into dst[index], the slab of dimension 0 at `index`: `slab` has dst's
// shape without dimension 0 (dtypes must match). No copy of `slab` is made.
void add_to_slab(Tensor& dst, std::int64_t index, const Tensor& slab);
// Writes `slab` into dst[index], as add_to_slab adds it.
void copy_to_slab(Tensor& dst, std::int64_t index, const Tensor& slab);

}  // namespace tessera
