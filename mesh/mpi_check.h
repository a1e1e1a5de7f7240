// Every MPI return code is checked in every build: a failure becomes an MpiError naming the call.
#pragma once

#include <mpi.h>

#include <string_view>

#include "core/dtype.h"

namespace tessera {

// Throws MpiError("<call>: <MPI_Error_string>") unless rc == MPI_SUCCESS.
void check_mpi(int rc, std::string_view call);

// The MPI datatype of a tensor element type.
MPI_Datatype mpi_datatype(DType dtype);

}  // namespace tessera
