// Uses each installed layer: a mesh over all ranks, a tensor made from the sharding-invariant RNG
// resharded from P(None, x) to P(x, None), a checkpoint saved and restored, the tutorial MLP's
// declarations (models, nn). Exits 0 and prints "downstream ok" on rank 0 only when the values
// survive both bit for bit.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include <mpi.h>

#include "collectives/reshard.h"
#include "core/init.h"
#include "core/version.h"
#include "io/checkpoint.h"
#include "mesh/environment.h"
#include "mesh/sharded_tensor.h"
#include "models/mlp.h"

int main(int argc, char** argv) {
  using namespace tessera;
  Environment env(argc, argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: downstream DIR\n");
    return 2;
  }
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  Mesh mesh = Mesh::world(MeshShape::parse("x=" + std::to_string(ranks)));
  const Shape shape = {8, 12};
  const RngKey key = rng_key(0, "downstream/W");
  auto w = ShardedTensor::from_block_fn(
      mesh, parse_spec("P(None, x)"), shape,
      [&](const std::vector<std::int64_t>& offsets, const Shape& block) {
        return init_block(initializers::xavier_normal(), key, shape, offsets, block);
      },
      "W");
  const Tensor before = w.to_global();
  const ShardedTensor moved = reshard(w, parse_spec("P(x, None)"));

  CheckpointState state;
  state.step = 1;
  state.arrays.push_back({"params/W", moved});
  save_checkpoint(state, argv[1]);
  CheckpointState target;
  target.arrays.push_back({"params/W", ShardedTensor::zeros(mesh, parse_spec("P(None, x)"), shape, DType::f32)});
  const CheckpointState restored = restore_checkpoint(argv[1], target);
  const Tensor after = restored.arrays[0].value.to_global();

  // models: the tutorial MLP's declarations (abstract init, nothing allocated).
  const auto infos = nn::abstract_init(models::MLP{1, 8}, MeshShape({"data", "model"}, {1, 1}),
                                       models::tutorial_rules(), {2, 8});

  const Tensor moved_global = moved.to_global();
  const bool same = infos.size() == 2 && std::ranges::equal(before.values<float>(), after.values<float>()) &&
                    std::ranges::equal(before.values<float>(), moved_global.values<float>());
  if (mesh.rank() == 0) {
    std::printf("tessera %s, %d ranks: %s\n", std::string(version_string()).c_str(), mesh.size(),
                same ? "downstream ok" : "values differ");
  }
  return same ? 0 : 1;
}
