// MPI return codes to typed exceptions; tensor dtypes to MPI datatypes.
#include "mesh/mpi_check.h"

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

}  // namespace tessera
