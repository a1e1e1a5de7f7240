// Every MPI return code is checked in every build: a failure becomes an MpiError naming the call.
#pragma once

#include <mpi.h>

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

// The MPI datatype of a tensor element type.
MPI_Datatype mpi_datatype(DType dtype);

}  // namespace tessera
