// A mesh made before MPI is initialised, or after it is finalised, is a UsageError naming the
// cause; Open MPI itself ended the job with "MPI_Comm_size() function was called before MPI_INIT
// was invoked" (or "MPI_Allgather() ... after MPI_FINALIZE"). One process, no launcher: the
// checks run outside MPI's lifetime, where no test main can be. Prints "mpi lifetime ok" when
// every expectation holds, "FAIL: ..." for each that does not.
#include <cstdio>
#include <string>

#include "core/error.h"
#include "mesh/environment.h"
#include "mesh/mesh.h"

namespace {

int failures = 0;

void expect_usage_error(const char* when, const std::string& message) {
  try {
    tessera::Mesh mesh = tessera::Mesh::world(tessera::MeshShape({"x"}, {1}));
    std::printf("FAIL: %s: a mesh of %d ranks was made\n", when, mesh.size());
    ++failures;
  } catch (const tessera::UsageError& e) {
    if (std::string(e.what()) != message) {
      std::printf("FAIL: %s: got '%s', expected '%s'\n", when, e.what(), message.c_str());
      ++failures;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  expect_usage_error("before MPI_Init",
                     "Mesh::create: MPI is not initialised: create a tessera::Environment (or call MPI_Init) first");
  {
    tessera::Environment env(argc, argv);
    tessera::Mesh mesh = tessera::Mesh::world(tessera::MeshShape({"x"}, {1}));
    if (mesh.size() != 1) {
      std::printf("FAIL: inside the environment: a mesh of %d ranks\n", mesh.size());
      ++failures;
    }
  }
  expect_usage_error("after MPI_Finalize",
                     "Mesh::create: MPI is finalised: the tessera::Environment was destroyed (or MPI_Finalize called) "
                     "before this use");
  if (failures == 0) std::printf("mpi lifetime ok\n");
  return failures == 0 ? 0 : 1;
}
