// demo_mesh: builds a named mesh over all ranks and a sharded tensor from the sharding-invariant
// RNG, and prints the mesh, the tensor's sharding picture and a checksum of its global value.
// The sharding is JAX text or a seqax shape string (whose sizes and names are checked against
// --shape in a shape scope):
//   scripts/mpirun/local.sh 8 build/apps/demo_mesh --mesh data=2,model=4 --spec "P(None, model)"
//   scripts/mpirun/local.sh 8 build/apps/demo_mesh --shape 16,64 --spec "rows/data cols/model"
#include <cstdio>
#include <iostream>

#include "apps/cli_main.h"
#include "core/init.h"
#include "core/rng.h"
#include "core/shape_scope.h"
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
  app.add_option("--spec", spec_text, "sharding: JAX text P(...) or a seqax shape string (rows/data cols)")
      ->capture_default_str();
  app.add_option("--shape", shape, "global shape, comma-separated")->delimiter(',')->capture_default_str();
  app.add_option("--seed", seed, "RNG seed")->capture_default_str();
  return tessera::apps::parse_and_run("demo_mesh", app, argc, argv, [&](int rank) {
    // Every check before the mesh is made: replicated input fails on every rank alike.
    // Every rank gathers the whole tensor (to_global): extents >= 0, at most 2^28 elements (1 GiB).
    for (auto d : shape) {
      if (d < 0) throw tessera::UsageError("--shape " + tessera::shape_to_string(shape) + " has a negative extent");
    }
    const std::int64_t elements = tessera::numel(shape);
    if (elements > (std::int64_t{1} << 28)) {
      throw tessera::UsageError("--shape " + tessera::shape_to_string(shape) + " has " + std::to_string(elements) +
                                " elements; demo_mesh gathers the tensor on every rank, at most 268435456");
    }
    const tessera::MeshShape mesh_shape = tessera::MeshShape::parse(mesh_text);
    tessera::Spec spec;
    if (spec_text.rfind("P(", 0) == 0) {
      spec = tessera::parse_spec(spec_text);
    } else {
      const tessera::ShapeString shape_string = tessera::parse_shape_string(spec_text);
      tessera::ShapeScope scope;
      tessera::check_global(shape_string, shape, mesh_shape, "--spec");
      spec = shape_string.spec();
    }
    tessera::validate_spec(spec, mesh_shape, shape, "W1");
    tessera::Mesh mesh = tessera::Mesh::world(mesh_shape);
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
