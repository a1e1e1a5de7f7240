// RAII MPI initialisation.
#include "mesh/environment.h"

#include <mpi.h>

#include "core/env_settings.h"
#include "mesh/mpi_check.h"

namespace tessera {

namespace {

// TESSERA_DENORMALS: keep only when it says so. A value outside the list flushes here, before MPI
// exists to agree on it; Mesh::create then refuses it with one message on every rank.
bool flush_denormals() { return env_choice(env_setting("TESSERA_DENORMALS")) != 1; }

}  // namespace

Environment::Environment(int& argc, char**& argv) : denormals_(flush_denormals()) {
  // FUNNELED: only this thread calls MPI; a save's background removal of old checkpoints
  // (io/checkpoint_dir.h) is another thread, which never does.
  int provided = 0;
  if (!initialized()) check_mpi(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
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
