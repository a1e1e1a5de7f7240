// RAII MPI initialisation.
#include "mesh/environment.h"

#include <mpi.h>

#include "mesh/mpi_check.h"

namespace tessera {

Environment::Environment(int& argc, char**& argv) {
  if (!initialized()) check_mpi(MPI_Init(&argc, &argv), "MPI_Init");
  check_mpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
}

Environment::~Environment() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

bool Environment::initialized() {
  int flag = 0;
  MPI_Initialized(&flag);
  return flag != 0;
}

}  // namespace tessera
