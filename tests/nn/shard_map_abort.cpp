// shard_map_abort [N]: a shard_map body that throws on the last rank only, while the others call
// N psums over the whole mesh (N = 0: none). The rank that threw left those psums, so the others
// can never leave them: with N > 0 the job must end within seconds, with the error and exit code
// 2 (tests/nn/CMakeLists.txt checks both through tests/apps/expect_error.sh); with N = 0 every
// rank reaches the agreement and every rank throws the error, which this program prints from
// rank 0 and exits 2 on every rank.
#include <mpi.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "core/error.h"
#include "core/spec.h"
#include "mesh/environment.h"
#include "mesh/mesh.h"
#include "nn/shard_map.h"
#include "nn/spmd_collectives.h"

int main(int argc, char** argv) {
  tessera::Environment env(argc, argv);
  using namespace tessera;
  const int psums = argc > 1 ? std::atoi(argv[1]) : 1;
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Mesh mesh = Mesh::world(MeshShape({"model"}, {size}));
  const Spec rows = parse_spec("P(model)");
  nn::Var x(ShardedTensor::zeros(mesh, rows, {2 * size}, DType::f32, "x"));
  auto body = [&](const std::vector<nn::Var>& a) {
    if (mesh.rank() == size - 1) throw ShapeError("the body's check failed on the last rank");
    nn::Var y = a[0];
    for (int i = 0; i < psums; ++i) y = nn::psum(y, "model");
    return std::vector<nn::Var>{y};
  };
  try {
    nn::shard_map(mesh, body, {rows}, {rows}, {x});
  } catch (const ShapeError& e) {
    if (mesh.rank() == 0) std::cerr << "shard_map_abort: " << e.what() << std::endl;
    return 2;
  }
  std::cerr << "shard_map_abort: rank " << mesh.rank() << ": the body's error was lost" << std::endl;
  return 1;
}
