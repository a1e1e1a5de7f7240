// abort_exit_code integrity|mpi|error|unknown: the last rank ends the job through
// abort_with_error (mesh/agree.h) with an error of that kind while the other ranks wait in a
// barrier it never joins. tests/mesh/CMakeLists.txt checks the exit code the job ends with (3 for
// an IntegrityError, 1 for an MpiError, 2 for any other error or a throw of something that is not
// a std::exception) and the message, printed once, through tests/apps/expect_error.sh.
#include <mpi.h>

#include <exception>
#include <string>

#include "core/error.h"
#include "mesh/agree.h"
#include "mesh/communicator.h"
#include "mesh/environment.h"

int main(int argc, char** argv) {
  tessera::Environment env(argc, argv);
  using namespace tessera;
  const std::string mode = argc > 1 ? argv[1] : "error";
  const Communicator world = Communicator::world();
  if (world.rank() == world.size() - 1) {
    std::exception_ptr thrown;
    if (mode == "integrity") {
      thrown = std::make_exception_ptr(IntegrityError("chunk 3 fails its checksum"));
    } else if (mode == "mpi") {
      thrown = std::make_exception_ptr(MpiError("MPI_Allreduce failed"));
    } else if (mode == "error") {
      thrown = std::make_exception_ptr(ShapeError("shapes differ"));
    } else {
      thrown = std::make_exception_ptr(42);
    }
    abort_with_error(world, "the test's " + mode + " threw: ", thrown);
  }
  MPI_Barrier(MPI_COMM_WORLD);  // never completes: the last rank ends the job
  return 0;
}
