// Every MPI return code is checked in every build: a failure becomes an MpiError naming the call.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "core/dtype.h"

namespace tessera {

// MPI's text for an error code (MPI_Error_string).
std::string mpi_error_text(int code);

// Throws MpiError("<call>: <mpi_error_text(rc)>") unless rc == MPI_SUCCESS.
void check_mpi(int rc, std::string_view call);

// Throws UsageError naming `what` unless MPI is running: initialised and not yet finalised. Open
// MPI ends the job on a call outside that span, with a message of its own that names neither the
// cause nor tessera ("MPI_Comm_size() function was called before MPI_INIT was invoked").
void require_mpi_running(std::string_view what);

// `bytes` contiguous bytes as one MPI message: `count` elements of `type`. MPI_BYTE while the count
// fits an int; beyond, units of 1 MiB (count: their number) and, where bytes are left after the
// last whole unit, one committed struct type of all the bytes (count 1), so that every size up to
// 2^51 bytes has a message. `owned`: the caller frees `type` (MPI_Type_free). Throws MpiError
// naming `what` past 2^51 bytes.
struct ByteMessage {
  MPI_Datatype type = MPI_BYTE;
  int count = 0;
  bool owned = false;
};
ByteMessage byte_message(std::int64_t bytes, std::string_view what);

// The MPI datatype of a tensor element type.
MPI_Datatype mpi_datatype(DType dtype);

}  // namespace tessera
