// Mesh construction (plain and topology-aware) and the cache of axis-subset communicators.
#include "mesh/mesh.h"

#include <map>

#include "core/env_settings.h"
#include "core/error.h"
#include "mesh/mpi_check.h"

namespace tessera {

struct Mesh::Impl {
  MeshShape shape;
  Communicator comm;
  std::vector<int> coords;
  mutable std::map<Axes, std::unique_ptr<Communicator>> axes_comms;
  mutable std::unique_ptr<Communicator> control;
  mutable std::unique_ptr<Communicator> check;
  mutable std::unique_ptr<Communicator> failure;
  mutable std::uint64_t collectives = 0;
};

namespace {

void check_size(const MeshShape& shape, const Communicator& comm) {
  if (shape.size() != comm.size()) {
    throw MeshError("mesh (" + shape.to_string() + ") has " + std::to_string(shape.size()) +
                    " ranks but the communicator has " + std::to_string(comm.size()));
  }
}

}  // namespace

Mesh::Mesh(MeshShape shape, const Communicator& comm) {
  require_mpi_running("Mesh");
  check_size(shape, comm);
  impl_ = std::make_shared<Impl>();
  impl_->comm = comm.dup();
  impl_->coords = shape.coords_of(impl_->comm.rank());
  impl_->shape = std::move(shape);
}

Mesh Mesh::create(MeshShape shape, const Communicator& comm) {
  require_mpi_running("Mesh::create");
  check_size(shape, comm);
  // Number the nodes by the order of their first rank, then place node n's ranks at mesh
  // positions [n * L, (n + 1) * L): a contiguous row-major block, so the minor axes whose
  // product divides L stay inside a node.
  Communicator node = comm.split_shared();
  const int local_rank = node.rank();
  const int local_size = node.size();
  // One all-reduce (max of each value and of its negation) gives the smallest and largest node
  // size and each environment setting's range of choices over the ranks.
  const auto& settings = env_settings();
  std::vector<int> choices, agreed = {local_size, -local_size};
  for (const auto& s : settings) {
    choices.push_back(env_choice(s));
    agreed.push_back(choices.back());
    agreed.push_back(-choices.back());
  }
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, agreed.data(), static_cast<int>(agreed.size()), MPI_INT, MPI_MAX, comm.handle()),
            "MPI_Allreduce");
  for (std::size_t i = 0; i < settings.size(); ++i) {
    const int lowest = -agreed[2 * i + 3], highest = agreed[2 * i + 2];
    if (lowest < 0) throw UsageError(env_setting_error(settings[i], choices[i] < 0));
    if (settings[i].alike && lowest != highest) {
      throw UsageError(std::string(settings[i].name) + " must be alike on every rank (" + settings[i].values[lowest] +
                       " on some ranks, " + settings[i].values[highest] + " on others)");
    }
  }
  const int min_size = -agreed[1], max_size = agreed[0];
  Communicator leaders = comm.split(local_rank == 0 ? 0 : MPI_UNDEFINED, comm.rank());
  int node_index = local_rank == 0 ? leaders.rank() : 0;
  check_mpi(MPI_Bcast(&node_index, 1, MPI_INT, 0, node.handle()), "MPI_Bcast");
  // Nodes of unequal size cannot be laid out as blocks: keep the communicator's order.
  const int position = min_size == max_size ? node_index * local_size + local_rank : comm.rank();
  Communicator ordered = comm.split(0, position);
  Mesh mesh(std::move(shape), ordered);
  // TESSERA_COLLECTIVE_CHECK (alike on every rank, agreed above) runs its all-reduces on the
  // check communicator: made now, while every rank is here, so that its first use is never the
  // collective that is out of step. A mesh made with the plain constructor makes it at its
  // first check.
  if (env_choice(env_setting("TESSERA_COLLECTIVE_CHECK")) == 1) (void)mesh.check_comm();
  // The failure communicator (mesh/fail_together.h) likewise: a rank whose check inside a
  // collective threw enters it alone.
  if (mesh.size() > 1) (void)mesh.failure_comm();
  return mesh;
}

Mesh Mesh::world(MeshShape shape) { return create(std::move(shape), Communicator::world()); }

const MeshShape& Mesh::shape() const {
  if (!impl_) throw MeshError("use of an empty Mesh");
  return impl_->shape;
}

int Mesh::rank() const { return comm().rank(); }

const std::vector<int>& Mesh::coords() const {
  if (!impl_) throw MeshError("use of an empty Mesh");
  return impl_->coords;
}

int Mesh::coord(std::string_view axis) const { return coords()[shape().axis_index(axis)]; }

const Communicator& Mesh::comm() const {
  if (!impl_) throw MeshError("use of an empty Mesh");
  return impl_->comm;
}

const Communicator& Mesh::axes_comm(const Axes& axes) const {
  shape();  // throws for an empty mesh
  auto it = impl_->axes_comms.find(axes);
  if (it != impl_->axes_comms.end()) return *it->second;
  // Validate: every axis known, none twice.
  for (std::size_t i = 0; i < axes.size(); ++i) {
    shape().axis_index(axes[i]);
    for (std::size_t j = 0; j < i; ++j) {
      if (axes[i] == axes[j]) throw SpecError("mesh axes: axis '" + axes[i] + "' appears twice");
    }
  }
  // Color: coordinates on the other axes; key: mixed radix on `axes`.
  const auto& c = coords();
  int color = 0;
  for (int a = 0; a < shape().ndim(); ++a) {
    bool in_subset = false;
    for (const auto& name : axes) in_subset |= (name == shape().names()[a]);
    color = color * shape().sizes()[a] + (in_subset ? 0 : c[a]);
  }
  auto made = std::make_unique<Communicator>(comm().split(color, axes_rank(axes)));
  auto& slot = impl_->axes_comms[axes];
  slot = std::move(made);
  return *slot;
}

const Communicator& Mesh::control_comm() const {
  shape();  // throws for an empty mesh
  if (!impl_->control) impl_->control = std::make_unique<Communicator>(comm().dup());
  return *impl_->control;
}

const Communicator& Mesh::check_comm() const {
  shape();  // throws for an empty mesh
  if (!impl_->check) impl_->check = std::make_unique<Communicator>(comm().dup());
  return *impl_->check;
}

const Communicator& Mesh::failure_comm() const {
  shape();  // throws for an empty mesh
  if (!impl_->failure) impl_->failure = std::make_unique<Communicator>(comm().dup());
  return *impl_->failure;
}

std::uint64_t Mesh::count_collective() const {
  shape();  // throws for an empty mesh
  return ++impl_->collectives;
}

int Mesh::axes_rank(const Axes& axes) const {
  int key = 0;
  for (const auto& name : axes) {
    int a = shape().axis_index(name);
    key = key * shape().sizes()[a] + coords()[a];
  }
  return key;
}

std::string Mesh::to_string() const { return "mesh(" + shape().to_string() + ")"; }

}  // namespace tessera
