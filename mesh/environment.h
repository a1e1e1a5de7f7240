// The MPI environment as an RAII object: MPI_Init in the constructor, MPI_Finalize in the
// destructor. Errors on MPI_COMM_WORLD return codes (checked by check_mpi) instead of aborting.
#pragma once

namespace tessera {

class Environment {
 public:
  Environment(int& argc, char**& argv);
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;
  ~Environment();

  static bool initialized();
};

}  // namespace tessera
