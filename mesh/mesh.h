// A named Cartesian mesh of MPI ranks. Rank r of the mesh communicator sits at the row-major
// coordinates of r. The mesh caches one communicator per ordered subset of its axes; in such a
// communicator a rank's position is the mixed radix of its coordinates on those axes (the first
// axis most significant), which is exactly the block order of a dimension split by those axes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/mesh_shape.h"
#include "core/spec.h"
#include "mesh/communicator.h"

namespace tessera {

class Mesh {
 public:
  Mesh() = default;
  // The plain row-major mesh over a duplicate of `comm`. Collective over `comm`. Throws
  // MeshError (on every rank) when the mesh size is not the communicator's size.
  Mesh(MeshShape shape, const Communicator& comm);
  // Topology-aware creation, like JAX's create_hybrid_device_mesh: ranks are renumbered so that
  // each node (ranks that share memory) holds a contiguous row-major block of the mesh, which
  // keeps the minor axes inside a node. On one node this is the plain row-major mesh.
  static Mesh create(MeshShape shape, const Communicator& comm);
  // Mesh over MPI_COMM_WORLD, topology-aware.
  static Mesh world(MeshShape shape);

  const MeshShape& shape() const;
  const std::vector<std::string>& axis_names() const { return shape().names(); }
  int size() const { return shape().size(); }
  int axis_size(std::string_view axis) const { return shape().axis_size(axis); }
  int rank() const;
  const std::vector<int>& coords() const;
  int coord(std::string_view axis) const;
  const Communicator& comm() const;

  // The communicator of the ranks that differ from this one only on `axes`, ordered by the
  // mixed radix of their coordinates on `axes`. Cached; the first call for a subset is
  // collective over the mesh (every rank asks for the same subsets in the same order, as SPMD
  // programs do). An empty subset gives a communicator of this rank alone.
  const Communicator& axes_comm(const Axes& axes) const;
  // This rank's position in axes_comm(axes).
  int axes_rank(const Axes& axes) const;
  // A second duplicate of comm() for agreements that must never match a collective of the code
  // they check (shard_map's agreement on its body's outcome, which a rank whose body threw enters
  // while the others may be inside one of the body's collectives). Cached; the first call is
  // collective over the mesh.
  const Communicator& control_comm() const;
  // A third duplicate of comm(), TESSERA_COLLECTIVE_CHECK's alone: its all-reduces must match
  // neither a collective they check nor shard_map's agreement on the control communicator,
  // which a rank whose body threw enters while the others stand at a check of the body's
  // collectives. Cached; the first call is collective over the mesh (Mesh::create makes it when
  // TESSERA_COLLECTIVE_CHECK=1).
  const Communicator& check_comm() const;
  // A fourth duplicate of comm(), for the agreement a rank enters when the user's code it ran in a
  // step (train_step's and value_and_grad's loss function, infer_step's apply function), the
  // backward pass (gradients) or a collective's checks of this rank's arguments threw: the other
  // ranks enter it only when theirs threw too, so it must match no other call
  // (mesh/fail_together.h). Cached; the first call is collective over the mesh, and Mesh::create
  // makes it on more than one rank.
  const Communicator& failure_comm() const;
  // The number of this mesh's checked collectives so far, this one included
  // (TESSERA_COLLECTIVE_CHECK, collectives/collective_check.h); copies share the count.
  std::uint64_t count_collective() const;

  // "mesh(data: 2, model: 4)"
  std::string to_string() const;
  // The same mesh object (copies share it).
  bool operator==(const Mesh& other) const { return impl_ == other.impl_; }
  bool valid() const { return impl_ != nullptr; }

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace tessera
