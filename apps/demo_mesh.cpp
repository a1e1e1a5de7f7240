// demo_mesh: builds a named mesh over all ranks and a sharded tensor from the sharding-invariant
// RNG, and prints the mesh, the tensor's sharding picture and a checksum of its global value.
// The sharding is JAX text or a seqax shape string (whose sizes and names are checked against
// --shape in a shape scope). --hosts prints, instead of the tensor, each rank's host and mesh
// coordinates and, for a 2-D mesh, the mesh as a picture of host names (which ranks share a host):
//   scripts/mpirun/local.sh 8 build/apps/demo_mesh --mesh data=2,model=4 --spec "P(None, model)"
//   scripts/mpirun/local.sh 8 build/apps/demo_mesh --shape 16,64 --spec "rows/data cols/model"
//   scripts/mpirun/local.sh 8 build/apps/demo_mesh --mesh data=2,model=4 --hosts
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <mpi.h>

#include "apps/cli_main.h"
#include "apps/run_support.h"
#include "core/init.h"
#include "core/rng.h"
#include "core/shape_scope.h"
#include "core/text.h"
#include "mesh/environment.h"
#include "mesh/mesh.h"
#include "mesh/sharded_tensor.h"

namespace {

// Gathers (world rank, host name) in mesh order and prints, on world rank 0, one line per mesh
// rank ("mesh rank 5 coords (1,1) world rank 3 host node2") and for a 2-D mesh a grid whose rows
// are the first axis, columns the second, each cell "mesh rank@host".
int print_hosts(const tessera::Mesh& mesh, int world_rank) {
  constexpr int kName = MPI_MAX_PROCESSOR_NAME;
  char name[kName] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  const int n = mesh.size();
  std::vector<char> names(static_cast<std::size_t>(n) * kName);
  std::vector<int> world_ranks(static_cast<std::size_t>(n));
  MPI_Comm comm = mesh.comm().handle();
  MPI_Allgather(name, kName, MPI_CHAR, names.data(), kName, MPI_CHAR, comm);
  MPI_Allgather(&world_rank, 1, MPI_INT, world_ranks.data(), 1, MPI_INT, comm);
  if (world_rank != 0) return 0;
  const auto& sizes = mesh.shape().sizes();
  auto coords_of = [&](int r) {
    std::vector<int> c(sizes.size());
    for (int a = static_cast<int>(sizes.size()) - 1; a >= 0; --a) {
      c[a] = r % sizes[a];
      r /= sizes[a];
    }
    return c;
  };
  std::cout << mesh.to_string() << " over " << n << " ranks\n";
  for (int r = 0; r < n; ++r) {
    std::string coords;
    for (int c : coords_of(r)) coords += (coords.empty() ? "" : ",") + std::to_string(c);
    std::cout << "mesh rank " << r << " coords (" << coords << ") world rank " << world_ranks[r] << " host "
              << &names[static_cast<std::size_t>(r) * kName] << '\n';
  }
  if (sizes.size() == 2) {
    std::vector<std::string> cells(static_cast<std::size_t>(n));
    std::size_t width = 0;
    for (int r = 0; r < n; ++r) {
      cells[r] = std::to_string(r) + "@" + &names[static_cast<std::size_t>(r) * kName];
      width = std::max(width, cells[r].size());
    }
    std::string rule = "+";
    for (int j = 0; j < sizes[1]; ++j) rule += std::string(width + 2, '-') + "+";
    std::cout << "rows: " << mesh.shape().names()[0] << ", columns: " << mesh.shape().names()[1] << '\n'
              << rule << '\n';
    for (int i = 0; i < sizes[0]; ++i) {
      std::cout << "|";
      for (int j = 0; j < sizes[1]; ++j) {
        const std::string& cell = cells[static_cast<std::size_t>(i * sizes[1] + j)];
        std::cout << ' ' << cell << std::string(width - cell.size() + 1, ' ') << "|";
      }
      std::cout << '\n' << rule << '\n';
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tessera::Environment env(argc, argv);
  tessera::apps::CommandLine app{"tessera demo: a named mesh and a sharded tensor"};
  std::string mesh_text = "data=2,model=4";
  std::string spec_text = "P(None, model)";
  std::vector<std::string> shape_args = {"16,64"};
  std::uint64_t seed = 0;
  app.add_option("--mesh", mesh_text, "mesh axes, name=size,...").capture_default_str();
  app.add_option("--spec", spec_text, "sharding: JAX text P(...) or a seqax shape string (rows/data cols)")
      .capture_default_str();
  // Text, split here: CLI11's delimiter dropped empty elements (16,,64 ran as [16, 64]). The extents
  // may also come as separate arguments (--shape 16 64).
  app.add_option("--shape", shape_args, "global shape, comma-separated decimal extents").capture_default_str();
  app.add_option("--seed", seed, "RNG seed").capture_default_str();
  bool hosts = false;
  app.add_flag("--hosts", hosts, "print each rank's host name and mesh coordinates instead of the tensor");
  return tessera::apps::parse_and_run("demo_mesh", app, argc, argv, [&](int rank) {
    // Every check before the mesh is made: replicated input fails on every rank alike.
    const std::string shape_text = tessera::join(shape_args, ",");
    std::vector<std::int64_t> shape;
    for (std::size_t start = 0;;) {
      const std::size_t comma = std::min(shape_text.find(',', start), shape_text.size());
      std::string extent = shape_text.substr(start, comma - start);
      if (const std::string why = tessera::apps::canonical_decimal(extent, false); !why.empty()) {
        throw tessera::UsageError("--shape '" + shape_text + "': extent " + std::to_string(shape.size()) + ": " + why);
      }
      shape.push_back(std::stoll(extent));
      if (comma == shape_text.size()) break;
      start = comma + 1;
    }
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
    if (hosts) return print_hosts(mesh, rank);
    // What a rank holds at once, f32: its block (and its padded copy), the blocks gathered from the
    // ranks that hold distinct ones (ShardedTensor::to_global) and as much again inside MPI's
    // all-gather, a block's buffer and the global tensor (measured: 8192 x 8192 P(data, model)
    // on 2x4 peaked at 909 MB a rank, 1.33 GB on one rank). Refused on every rank before any of
    // it is allocated (until the forty-fifth session only the 2^28 elements were checked, and 8
    // ranks of a replicated tensor that size needed 32 GiB, or of 16384 x 16384 P(data, model) 26).
    double group = 1;
    for (const std::string& axis : spec.used_axes()) group *= mesh_shape.axis_size(axis);
    const double block = static_cast<double>(tessera::numel(tessera::max_local_shape(spec, mesh_shape, shape)));
    tessera::apps::check_memory(4.0 * (static_cast<double>(elements) + block * (2 * group + 3)));
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
