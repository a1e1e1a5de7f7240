// The MPI environment as an RAII object: MPI_Init in the constructor, MPI_Finalize in the
// destructor. Errors on MPI_COMM_WORLD return codes (checked by check_mpi) instead of aborting.
// For its lifetime the thread that makes it flushes subnormal floats to zero, as XLA:CPU does,
// unless TESSERA_DENORMALS=keep (core/denormals.h); the destructor restores the thread's mode.
// Any other value of the variable flushes here and is refused by Mesh::create on every rank.
#pragma once

#include "core/denormals.h"

namespace tessera {

class Environment {
 public:
  Environment(int& argc, char**& argv);
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;
  ~Environment();

  static bool initialized();

 private:
  FlushDenormals denormals_;
};

}  // namespace tessera
