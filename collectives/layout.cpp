// Block layouts along a dimension, memcpy packing and strided MPI datatypes.
#include "collectives/layout.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "collectives/collectives.h"
#include "core/env_settings.h"
#include "core/error.h"
#include "mesh/mpi_check.h"

namespace tessera::detail {

BlockLayout block_layout(const Shape& shape, DType dtype, int dim, int n, std::string_view what) {
  const int ndim = static_cast<int>(shape.size());
  if (dim < 0 || dim >= ndim) {
    throw ShapeError(std::string(what) + ": dimension " + std::to_string(dim) + " out of range for a tensor of shape " +
                     shape_to_string(shape));
  }
  if (shape[dim] % n != 0) {
    throw ShapeError(std::string(what) + ": dimension " + std::to_string(dim) + " (size " + std::to_string(shape[dim]) +
                     ") of a tensor of shape " + shape_to_string(shape) + " does not divide into " +
                     std::to_string(n) + " blocks");
  }
  BlockLayout layout;
  layout.n = n;
  for (int d = 0; d < dim; ++d) layout.outer *= shape[d];
  std::int64_t inner = 1;
  for (int d = dim + 1; d < ndim; ++d) inner *= shape[d];
  layout.run = shape[dim] / n * inner * static_cast<std::int64_t>(dtype_size(dtype));
  return layout;
}

void pack_blocks(const void* src, void* dst, const BlockLayout& layout) {
  auto* in = static_cast<const std::byte*>(src);
  auto* out = static_cast<std::byte*>(dst);
  const auto run = static_cast<std::size_t>(layout.run);
  for (int k = 0; k < layout.n; ++k) {
    for (std::int64_t o = 0; o < layout.outer; ++o) {
      std::memcpy(out + (k * layout.outer + o) * run, in + (o * layout.n + k) * run, run);
    }
  }
}

void unpack_blocks(const void* src, void* dst, const BlockLayout& layout) {
  auto* in = static_cast<const std::byte*>(src);
  auto* out = static_cast<std::byte*>(dst);
  const auto run = static_cast<std::size_t>(layout.run);
  for (std::int64_t o = 0; o < layout.outer; ++o) {
    for (int k = 0; k < layout.n; ++k) {
      std::memcpy(out + (o * layout.n + k) * run, in + (k * layout.outer + o) * run, run);
    }
  }
}

Tensor scratch_buffer(std::int64_t bytes) { return Tensor::empty({(bytes + 3) / 4}, DType::f32); }

MpiType::MpiType(MpiType&& other) noexcept
    : type_(std::exchange(other.type_, MPI_DATATYPE_NULL)), owned_(std::exchange(other.owned_, false)) {}

MpiType& MpiType::operator=(MpiType&& other) noexcept {
  if (this != &other) {
    MpiType old(std::move(*this));
    type_ = std::exchange(other.type_, MPI_DATATYPE_NULL);
    owned_ = std::exchange(other.owned_, false);
  }
  return *this;
}

MpiType::~MpiType() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owned_ && type_ != MPI_DATATYPE_NULL && !finalized) MPI_Type_free(&type_);
}

int checked_count(std::int64_t count, std::string_view what) {
  if (count < 0 || count > INT_MAX) {
    throw MpiError(std::string(what) + ": a count of " + std::to_string(count) +
                   " exceeds MPI's int limit (2^31 - 1); split the tensor or use smaller blocks");
  }
  return static_cast<int>(count);
}

namespace {

MpiType commit(MPI_Datatype type) {
  check_mpi(MPI_Type_commit(&type), "MPI_Type_commit");
  return MpiType(type, true);
}

}  // namespace

Message contiguous_message(std::int64_t bytes, std::string_view what) {
  const ByteMessage b = byte_message(bytes, what);
  Message m;
  m.type = MpiType(b.type, b.owned);
  m.count = b.count;
  return m;
}

MpiType contiguous_type(std::int64_t bytes, std::string_view what) {
  Message m = contiguous_message(bytes, what);
  if (m.count == 1) return std::move(m.type);
  MPI_Datatype t;
  check_mpi(MPI_Type_contiguous(m.count, m.type.get(), &t), "MPI_Type_contiguous");
  return commit(t);
}

MpiType strided_block_type(const BlockLayout& layout, std::string_view what) {
  const MpiType run = contiguous_type(layout.run, what);
  MPI_Datatype vector;
  check_mpi(MPI_Type_create_hvector(checked_count(layout.outer, what), 1, static_cast<MPI_Aint>(layout.n * layout.run),
                                    run.get(), &vector),
            "MPI_Type_create_hvector");
  MpiType vector_owner(vector, true);
  MPI_Datatype resized;
  check_mpi(MPI_Type_create_resized(vector, 0, static_cast<MPI_Aint>(layout.run), &resized),
            "MPI_Type_create_resized");
  return commit(resized);
}

}  // namespace tessera::detail

namespace tessera {

namespace {

// TESSERA_PACK (core/env_settings.h): datatype (also when unset) or memcpy; another value throws.
PackMethod initial_pack_method() {
  return checked_env_choice(env_setting("TESSERA_PACK")) == 1 ? PackMethod::memcpy : PackMethod::datatype;
}

PackMethod& current_pack_method() {
  static PackMethod method = initial_pack_method();
  return method;
}

}  // namespace

PackMethod pack_method() { return current_pack_method(); }
void set_pack_method(PackMethod method) { current_pack_method() = method; }

}  // namespace tessera
