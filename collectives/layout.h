// How a local tensor splits into n equal blocks along one dimension, and the two ways the
// collectives move such blocks when they are not consecutive in memory: memcpy packing into
// (or out of) a block-major buffer, or an MPI derived datatype that lets MPI read and write the
// strided runs itself (which one: PackMethod in collectives/collectives.h). Internal to the
// collectives layer.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/shape.h"
#include "core/tensor.h"

namespace tessera::detail {

// A tensor seen as [outer][n][run bytes] along one dimension: block k is `outer` runs of
// `run` bytes, `n * run` bytes apart.
struct BlockLayout {
  std::int64_t outer = 1;  // product of the extents before the dimension
  std::int64_t run = 0;    // bytes of one block's slice of one outer index
  int n = 1;
  // Blocks are consecutive in memory: no packing needed.
  bool consecutive() const { return outer == 1; }
  std::int64_t block_bytes() const { return outer * run; }
};

// Throws ShapeError (naming `what`) when shape[dim] does not divide by n.
BlockLayout block_layout(const Shape& shape, DType dtype, int dim, int n, std::string_view what);

// [outer][n][run] -> [n][outer][run]
void pack_blocks(const void* src, void* dst, const BlockLayout& layout);
// [n][outer][run] -> [outer][n][run]
void unpack_blocks(const void* src, void* dst, const BlockLayout& layout);

// Uninitialised scratch storage of at least `bytes` bytes (a Tensor, for its aligned allocation).
Tensor scratch_buffer(std::int64_t bytes);

// An owned MPI datatype (freed in the destructor) or a predefined one (never freed).
class MpiType {
 public:
  MpiType() = default;
  explicit MpiType(MPI_Datatype type, bool owned) : type_(type), owned_(owned) {}
  MpiType(const MpiType&) = delete;
  MpiType& operator=(const MpiType&) = delete;
  MpiType(MpiType&& other) noexcept;
  MpiType& operator=(MpiType&& other) noexcept;
  ~MpiType();
  MPI_Datatype get() const { return type_; }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  bool owned_ = false;
};

// `bytes` contiguous bytes as (count, type): byte_message (mesh/mpi_check.h), its type owned.
struct Message {
  MpiType type;
  int count = 0;
};
Message contiguous_message(std::int64_t bytes, std::string_view what);
// `bytes` contiguous bytes as ONE datatype (a count of 1): MPI_BYTE for a single byte, else a
// committed contiguous type built on contiguous_message. The unit of counts that are not bytes
// (elements, rows of a block).
MpiType contiguous_type(std::int64_t bytes, std::string_view what);

// One block of `layout` as a single MPI datatype whose extent is one run, so that block k of a
// [outer][n][run] buffer starts at k runs: the receive (or send) type of a strided collective.
MpiType strided_block_type(const BlockLayout& layout, std::string_view what);

// An element count as MPI's int; throws MpiError naming `what` instead of overflowing.
int checked_count(std::int64_t count, std::string_view what);

}  // namespace tessera::detail

namespace tessera::detail {

// A tensor seen as [outer][extents[0] + ... + extents[n-1]][row bytes] along one dimension whose
// n blocks have the given extents (uneven blocks, core/spec.h's block rule or any other).
struct VarLayout {
  std::int64_t outer = 1;  // product of the extents before the dimension
  std::int64_t row = 0;    // bytes of one index of the dimension (product of later extents)
  std::vector<std::int64_t> extents;
  std::vector<std::int64_t> starts;  // prefix sums of extents
  std::int64_t total = 0;            // sum of extents
  int n() const { return static_cast<int>(extents.size()); }
  bool consecutive() const { return outer == 1; }
  std::int64_t block_bytes(int k) const { return outer * extents[k] * row; }
};

// Throws ShapeError (naming `what`) when dim is out of range, an extent is negative or the
// extents do not add up to shape[dim].
VarLayout var_layout(const Shape& shape, DType dtype, int dim, std::vector<std::int64_t> extents, std::string_view what);

// [outer][total][row] -> [k][outer][extents[k]][row]
void pack_var(const void* src, void* dst, const VarLayout& layout);
// [k][outer][extents[k]][row] -> [outer][total][row]
void unpack_var(const void* src, void* dst, const VarLayout& layout);

// Whether all n extents are equal.
bool all_equal(const std::vector<std::int64_t>& extents);

}  // namespace tessera::detail
