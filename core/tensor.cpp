// Dense tensor storage and the block copies that sharding is built on.
#include "core/tensor.h"

#include <sanitizer/asan_interface.h>  // poisoning: no-ops unless built with AddressSanitizer

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <type_traits>

#include "core/buffer_pool.h"
#include "core/checked.h"

namespace tessera {

namespace {

// The storage of every tensor of no bytes (the default tensor, a shape with a zero extent): no
// element is ever read or written through it, so they all share it, and making or dropping one
// takes neither the buffer pool's lock nor its counts. A train step makes and drops many (the
// tutorial's MLP at depth 64 on one rank: 173 of the 232 buffers a step took from the pool were
// such tensors' 64 bytes). Under AddressSanitizer its bytes are poisoned, so code that reads or
// writes an element of a tensor that has none is reported.
alignas(64) std::byte no_bytes[64];
const bool no_bytes_poisoned = [] {
  ASAN_POISON_MEMORY_REGION(no_bytes, sizeof(no_bytes));
  return true;
}();

}  // namespace

void Tensor::Free::operator()(std::byte* p) const noexcept {
  if (p == nullptr || bytes == 0) return;
  count_tensor_free(bytes);
  pool_free(p, bytes);
}

std::unique_ptr<std::byte[], Tensor::Free> Tensor::allocate(std::size_t bytes, bool zero) {
  if (bytes == 0) return std::unique_ptr<std::byte[], Free>(no_bytes, Free{0});
  constexpr std::size_t alignment = 64;
  std::size_t rounded = std::max<std::size_t>(alignment, (bytes + alignment - 1) / alignment * alignment);
  auto* p = static_cast<std::byte*>(pool_allocate(rounded));
  if (p == nullptr) throw Error("Tensor: cannot allocate " + std::to_string(bytes) + " bytes");
  count_tensor_allocation(rounded);
  if (zero) std::memset(p, 0, rounded);
  return std::unique_ptr<std::byte[], Free>(p, Free{rounded});
}

Tensor::Tensor() : data_(allocate(0)) {}

Tensor::Tensor(Shape shape, DType dtype) : Tensor(std::move(shape), dtype, /*zero=*/true) {}

Tensor::Tensor(Shape shape, DType dtype, bool zero) : dtype_(dtype), shape_(std::move(shape)) {
  for (auto d : shape_) {
    if (d < 0) throw ShapeError("Tensor: negative extent in shape " + shape_to_string(shape_));
  }
  numel_ = tessera::numel(shape_);
  checked_mul<std::int64_t>(numel_, static_cast<std::int64_t>(dtype_size(dtype_)), "byte size of a tensor");
  data_ = allocate(nbytes(), zero);
}

Tensor Tensor::empty(Shape shape, DType dtype) { return Tensor(std::move(shape), dtype, /*zero=*/false); }

Tensor::Tensor(const Tensor& other)
    : dtype_(other.dtype_), shape_(other.shape_), numel_(other.numel_), data_(allocate(other.nbytes(), false)) {
  if (nbytes() > 0) std::memcpy(data_.get(), other.data_.get(), nbytes());
  count_tensor_copy(nbytes());
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) {
    Tensor copy(other);
    *this = std::move(copy);
  }
  return *this;
}

Tensor::Tensor(Tensor&& other) noexcept
    : dtype_(other.dtype_), shape_(std::move(other.shape_)), numel_(other.numel_), data_(std::move(other.data_)) {
  other.shape_.clear();
  other.numel_ = 0;
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  dtype_ = other.dtype_;
  shape_ = std::move(other.shape_);
  numel_ = other.numel_;
  data_ = std::move(other.data_);
  other.shape_.clear();
  other.numel_ = 0;
  return *this;
}

Tensor Tensor::full(Shape shape, double value, DType dtype) {
  Tensor t(std::move(shape), dtype);
  dispatch_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    std::fill_n(t.data<T>(), t.numel(), static_cast<T>(value));
  });
  return t;
}

double Tensor::at(std::int64_t i) const {
  if (i < 0 || i >= numel_) {
    throw ShapeError("Tensor::at: index " + std::to_string(i) + " out of range for shape " + shape_to_string(shape_));
  }
  return dispatch_dtype(dtype_, [&](auto zero) {
    using T = decltype(zero);
    return static_cast<double>(static_cast<const T*>(raw())[i]);
  });
}

Tensor Tensor::reshaped(Shape shape) const& {
  Tensor copy(*this);
  return std::move(copy).reshaped(std::move(shape));
}

Tensor Tensor::reshaped(Shape shape) && {
  // Negative extents whose product matched passed ([2, 3] as [-2, -3]).
  if (std::any_of(shape.begin(), shape.end(), [](std::int64_t d) { return d < 0; }) || tessera::numel(shape) != numel_) {
    throw ShapeError("Tensor::reshaped: cannot view " + shape_to_string(shape_) + " as " + shape_to_string(shape));
  }
  Tensor out(std::move(*this));
  out.shape_ = std::move(shape);
  return out;
}

namespace {

template <typename To>
To saturating_integer(double value) {
  if (std::isnan(value)) return To{0};
  if (value <= static_cast<double>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
  if (value >= static_cast<double>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
  return static_cast<To>(value);
}

}  // namespace

Tensor Tensor::astype(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor out = Tensor::empty(shape_, dtype);  // every element is written below
  const auto n = static_cast<std::size_t>(numel_);
  if (dtype_ == DType::f32 && dtype == DType::bf16) {
    convert_f32_to_bf16(data<float>(), out.data<bfloat16>(), n);
    return out;
  }
  if (dtype_ == DType::bf16 && dtype == DType::f32) {
    convert_bf16_to_f32(data<bfloat16>(), out.data<float>(), n);
    return out;
  }
  dispatch_dtype(dtype_, [&](auto from_zero) {
    using From = decltype(from_zero);
    dispatch_dtype(dtype, [&](auto to_zero) {
      using To = decltype(to_zero);
      const From* src = data<From>();
      To* dst = out.data<To>();
      if constexpr (std::is_integral_v<To> && !std::is_integral_v<From>) {
        // Saturating, as XLA's convert: NaN becomes 0, a value beyond the integer's range its
        // nearest end (a plain cast of such a value is undefined behaviour).
        for (std::int64_t i = 0; i < numel_; ++i) dst[i] = saturating_integer<To>(static_cast<double>(src[i]));
      } else {
        for (std::int64_t i = 0; i < numel_; ++i) dst[i] = static_cast<To>(src[i]);
      }
    });
  });
  return out;
}

void Tensor::fill_zero() {
  if (nbytes() > 0) std::memset(data_.get(), 0, nbytes());
}

bool Tensor::bit_equal(const Tensor& other) const {
  return dtype_ == other.dtype_ && shape_ == other.shape_ &&
         (nbytes() == 0 || std::memcmp(raw(), other.raw(), nbytes()) == 0);
}

void Tensor::check_dtype(DType requested) const {
  if (requested != dtype_) {
    throw DTypeError("Tensor: accessed a " + std::string(dtype_name(dtype_)) + " tensor as " +
                     std::string(dtype_name(requested)));
  }
}

namespace {

enum class BlockOp { extract, insert, add };

// Walks the outer dimensions of a block with an odometer and moves the longest contiguous inner
// run at once (trailing dimensions that the block covers whole are merged into the run).
void block_copy(BlockOp op, const Tensor& whole_const, Tensor* whole, const Tensor& block_const, Tensor* block,
                const std::vector<std::int64_t>& offsets, const Shape& block_shape) {
  const Shape& full = whole_const.shape();
  const int rank = static_cast<int>(full.size());
  if (static_cast<int>(offsets.size()) != rank || static_cast<int>(block_shape.size()) != rank) {
    throw ShapeError("block copy: rank mismatch between tensor " + shape_to_string(full) + " and block " +
                     shape_to_string(block_shape));
  }
  for (int d = 0; d < rank; ++d) {
    if (offsets[d] < 0 || block_shape[d] < 0 || offsets[d] + block_shape[d] > full[d]) {
      throw ShapeError("block copy: block " + shape_to_string(block_shape) + " at offset " + shape_to_string(offsets) +
                       " exceeds tensor " + shape_to_string(full));
    }
  }
  if (numel(block_shape) == 0) return;
  const std::size_t elem = dtype_size(whole_const.dtype());
  // Merge trailing dimensions that the block covers entirely.
  int inner = rank;  // dimensions [inner, rank) form the contiguous run
  std::int64_t run = 1;
  while (inner > 0) {
    run *= block_shape[inner - 1];
    --inner;
    if (block_shape[inner] != full[inner]) break;
  }
  // Now [inner, rank) is contiguous in the whole tensor (dimension `inner` may be partial).
  const auto strides = row_major_strides(full);
  std::vector<std::int64_t> index(inner, 0);
  std::int64_t block_pos = 0;
  auto* whole_bytes = static_cast<const std::byte*>(whole_const.raw());
  auto* block_bytes = static_cast<const std::byte*>(block_const.raw());
  while (true) {
    std::int64_t whole_pos = 0;
    for (int d = 0; d < inner; ++d) whole_pos += (offsets[d] + index[d]) * strides[d];
    for (int d = inner; d < rank; ++d) whole_pos += offsets[d] * strides[d];
    const std::size_t bytes = static_cast<std::size_t>(run) * elem;
    switch (op) {
      case BlockOp::extract:
        std::memcpy(static_cast<std::byte*>(block->raw()) + block_pos * elem, whole_bytes + whole_pos * elem, bytes);
        break;
      case BlockOp::insert:
        std::memcpy(static_cast<std::byte*>(whole->raw()) + whole_pos * elem, block_bytes + block_pos * elem, bytes);
        break;
      case BlockOp::add:
        dispatch_dtype(whole_const.dtype(), [&](auto zero) {
          using T = decltype(zero);
          T* dst = whole->data<T>() + whole_pos;
          const T* src = block_const.data<T>() + block_pos;
          for (std::int64_t i = 0; i < run; ++i) dst[i] += src[i];
        });
        break;
    }
    block_pos += run;
    int d = inner - 1;
    while (d >= 0) {
      if (++index[d] < block_shape[d]) break;
      index[d] = 0;
      --d;
    }
    if (d < 0) break;
  }
}

}  // namespace

Tensor extract_block(const Tensor& src, const std::vector<std::int64_t>& offsets, const Shape& block_shape) {
  Tensor out(block_shape, src.dtype());
  block_copy(BlockOp::extract, src, nullptr, out, &out, offsets, block_shape);
  return out;
}

void insert_block(Tensor& dst, const Tensor& block, const std::vector<std::int64_t>& offsets) {
  if (dst.dtype() != block.dtype()) throw DTypeError("insert_block: dtype mismatch");
  block_copy(BlockOp::insert, dst, &dst, block, nullptr, offsets, block.shape());
}

void add_block(Tensor& dst, const Tensor& block, const std::vector<std::int64_t>& offsets) {
  if (dst.dtype() != block.dtype()) throw DTypeError("add_block: dtype mismatch");
  block_copy(BlockOp::add, dst, &dst, block, nullptr, offsets, block.shape());
}

namespace {

// add_to_slab and copy_to_slab: the slab is read in place as a block with a leading dimension of
// 1 (block_copy reads it through its pointer and the shape it is given).
void slab_op(BlockOp op, const char* what, Tensor& dst, std::int64_t index, const Tensor& slab) {
  if (dst.dtype() != slab.dtype()) throw DTypeError(std::string(what) + ": dtype mismatch");
  if (dst.ndim() < 1 || !std::equal(dst.shape().begin() + 1, dst.shape().end(), slab.shape().begin(), slab.shape().end())) {
    throw ShapeError(std::string(what) + ": slab " + shape_to_string(slab.shape()) + " is not a slab of " +
                     shape_to_string(dst.shape()));
  }
  Shape one = slab.shape();
  one.insert(one.begin(), 1);
  std::vector<std::int64_t> at(dst.ndim(), 0);
  at[0] = index;
  block_copy(op, dst, &dst, slab, nullptr, at, one);
}

}  // namespace

void add_to_slab(Tensor& dst, std::int64_t index, const Tensor& slab) {
  slab_op(BlockOp::add, "add_to_slab", dst, index, slab);
}

void copy_to_slab(Tensor& dst, std::int64_t index, const Tensor& slab) {
  slab_op(BlockOp::insert, "copy_to_slab", dst, index, slab);
}

}  // namespace tessera
