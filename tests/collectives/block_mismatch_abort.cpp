// block_mismatch_abort all_gather|all_to_all: the last rank passes an uneven collective a block of
// another extent than the call's extents give it (2 rows where they say 1), the other ranks their
// right blocks. Its check fails on that rank alone, and the others go into the collective's
// messages, which it never joins: the job must end within seconds with the error and exit code 2
// (tests/collectives/CMakeLists.txt checks both through tests/apps/expect_error.sh). Until the
// forty-fourth session the last rank threw and the others waited for ever.
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "mesh/environment.h"
#include "mesh/mesh.h"

int main(int argc, char** argv) {
  tessera::Environment env(argc, argv);
  using namespace tessera;
  const std::string mode = argc > 1 ? argv[1] : "all_gather";
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Mesh mesh = Mesh::world(MeshShape({"a"}, {size}));
  std::vector<std::int64_t> extents(static_cast<std::size_t>(size), 2);
  extents.back() = 1;
  const std::int64_t rows = mesh.rank() == size - 1 ? 2 : extents[static_cast<std::size_t>(mesh.rank())];
  if (mode == "all_gather") {
    (void)all_gather(mesh, Tensor::zeros({rows, 3}, DType::f32), {"a"}, 0, extents);
  } else {
    // Rows concatenated over the group (dimension 0), one column to each rank (dimension 1).
    (void)all_to_all(mesh, Tensor::zeros({rows, size}, DType::f32), {"a"}, 1,
                     std::vector<std::int64_t>(static_cast<std::size_t>(size), 1), 0, extents);
  }
  MPI_Barrier(MPI_COMM_WORLD);  // never reached: the last rank ends the job
  return 0;
}
