// demo_mesh: builds a named mesh over all ranks and a sharded tensor from the sharding-invariant
// RNG, and prints the mesh, the tensor's sharding picture and a checksum of its global value.
//   scripts/mpirun/local.sh 8 build/apps/demo_mesh --mesh data=2,model=4 --spec "P(None, model)"
#include <cstdio>
#include <iostream>

#include "apps/cli_main.h"
#include "core/init.h"
#include "core/rng.h"
#include "mesh/environment.h"
#include "mesh/mesh.h"
#include "mesh/sharded_tensor.h"

int main(int argc, char** argv) {
  tessera::Environment env(argc, argv);
  CLI::App app{"tessera demo: a named mesh and a sharded tensor"};
  std::string mesh_text = "data=2,model=4";
  std::string spec_text = "P(None, model)";
  std::vector<std::int64_t> shape = {16, 64};
  std::uint64_t seed = 0;
  app.add_option("--mesh", mesh_text, "mesh axes, name=size,...")->capture_default_str();
  app.add_option("--spec", spec_text, "sharding spec of the tensor")->capture_default_str();
  app.add_option("--shape", shape, "global shape")->capture_default_str();
  app.add_option("--seed", seed, "RNG seed")->capture_default_str();
  return tessera::apps::parse_and_run("demo_mesh", app, argc, argv, [&](int rank) {
    // Every rank gathers the whole tensor (to_global): extents >= 0, at most 2^28 elements (1 GiB).
    for (auto d : shape) {
      if (d < 0) throw tessera::UsageError("--shape " + tessera::shape_to_string(shape) + " has a negative extent");
    }
    const std::int64_t elements = tessera::numel(shape);
    if (elements > (std::int64_t{1} << 28)) {
      throw tessera::UsageError("--shape " + tessera::shape_to_string(shape) + " has " + std::to_string(elements) +
                                " elements; demo_mesh gathers the tensor on every rank, at most 268435456");
    }
    tessera::Mesh mesh = tessera::Mesh::world(tessera::MeshShape::parse(mesh_text));
    tessera::Spec spec = tessera::parse_spec(spec_text);
    const tessera::RngKey key = tessera::rng_key(seed, "demo/W1");
    auto w = tessera::ShardedTensor::from_block_fn(
        mesh, spec, shape,
        [&](const std::vector<std::int64_t>& offsets, const tessera::Shape& block) {
          return tessera::init_block(tessera::initializers::xavier_normal(), key, shape, offsets, block);
        },
        "W1");
    tessera::Tensor global = w.to_global();
    double sum = 0;
    for (float v : global.values<float>()) sum += v;
    if (rank == 0) {
      std::cout << mesh.to_string() << " over " << mesh.size() << " ranks\n"
                << w.picture() << "local block " << tessera::shape_to_string(w.local().shape())
                << ", global sum " << sum << '\n';
    }
    return 0;
  });
}
