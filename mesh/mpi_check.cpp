// MPI return codes to typed exceptions; tensor dtypes to MPI datatypes.
#include "mesh/mpi_check.h"

#include <climits>
#include <string>

#include "core/error.h"

namespace tessera {

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<std::size_t>(length));
}

void check_mpi(int rc, std::string_view call) {
  if (rc == MPI_SUCCESS) return;
  throw MpiError(std::string(call) + ": " + mpi_error_text(rc));
}

void require_mpi_running(std::string_view what) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);  // both may be called at any time, even outside MPI's lifetime
  MPI_Finalized(&finalized);
  if (!initialized) {
    throw UsageError(std::string(what) + ": MPI is not initialised: create a tessera::Environment (or call MPI_Init) first");
  }
  if (finalized) {
    throw UsageError(std::string(what) +
                     ": MPI is finalised: the tessera::Environment was destroyed (or MPI_Finalize called) before this use");
  }
}

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i32:
      return MPI_INT32_T;
    case DType::bf16:
      return MPI_UINT16_T;  // moved as bits; reductions of bf16 never use MPI's ops (collectives/ordered_reduce.h)
  }
  return MPI_DATATYPE_NULL;
}

ByteMessage byte_message(std::int64_t bytes, std::string_view what) {
  ByteMessage m;
  if (bytes <= INT_MAX) {
    m.count = static_cast<int>(bytes);
    return m;
  }
  // Until the forty-fourth session: a contiguous type of the smallest divisor of `bytes` that
  // brought the count under the limit, found by trying each in turn; twice a prime above 2^31 has
  // none, and every rank tried 2^31 of them (seconds) before refusing the message.
  constexpr std::int64_t unit = std::int64_t{1} << 20;
  const std::int64_t units = bytes / unit, rest = bytes % unit;
  if (units > INT_MAX) {
    throw MpiError(std::string(what) + ": a message of " + std::to_string(bytes) +
                   " bytes is more than MPI's int counts of 1 MiB units describe");
  }
  MPI_Datatype block = MPI_DATATYPE_NULL;
  check_mpi(MPI_Type_contiguous(static_cast<int>(unit), MPI_BYTE, &block), "MPI_Type_contiguous");
  if (rest == 0) {
    m.type = block;
    m.count = static_cast<int>(units);
  } else {
    int lengths[2] = {static_cast<int>(units), static_cast<int>(rest)};
    MPI_Aint displacements[2] = {0, static_cast<MPI_Aint>(units * unit)};
    MPI_Datatype types[2] = {block, MPI_BYTE};
    const int rc = MPI_Type_create_struct(2, lengths, displacements, types, &m.type);
    MPI_Type_free(&block);
    check_mpi(rc, "MPI_Type_create_struct");
    m.count = 1;
  }
  m.owned = true;
  const int rc = MPI_Type_commit(&m.type);
  if (rc != MPI_SUCCESS) MPI_Type_free(&m.type);
  check_mpi(rc, "MPI_Type_commit");
  return m;
}

}  // namespace tessera
