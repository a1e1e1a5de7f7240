// A communicator wrapper that frees only what it owns (never MPI_COMM_WORLD). Move-only: a
// communicator handle has one owner; Mesh shares its communicators through shared pointers.
#pragma once

#include <mpi.h>

#include <memory>

#include "mesh/node_channel.h"

namespace tessera {

// Whether the launcher reports every rank of the job on this node (Open MPI's local size equals
// its world size): the same answer on every rank, found without a collective. False when the
// launcher says nothing (then only a collective, such as split_shared, can tell).
bool job_on_one_node();

class Communicator {
 public:
  // MPI_COMM_WORLD, not owned.
  static Communicator world();
  Communicator() = default;
  Communicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {}
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  Communicator(Communicator&& other) noexcept;
  Communicator& operator=(Communicator&& other) noexcept;
  ~Communicator();

  MPI_Comm handle() const { return comm_; }
  int rank() const;
  int size() const;

  // Owned communicators made from this one (collective over it).
  Communicator dup() const;
  Communicator split(int color, int key) const;
  // The ranks that share memory with this one (one node).
  Communicator split_shared() const;
  void barrier() const;
  // A barrier whose waiting ranks sleep instead of polling MPI's progress loop: for a rank that
  // finishes long work (file I/O) before the others, so that it takes no CPU from ranks still
  // working on the same cores (more ranks than cores). On one node (a node channel) they sleep on
  // the channel's futex until the last rank comes and wakes them; across nodes they sleep
  // `pause_us` microseconds between tests of an MPI_Ibarrier. Collective, like node_channel().
  void barrier_sleeping(long pause_us = 100) const;

  // Shared memory among this communicator's ranks when they all run on one node
  // (mesh/node_channel.h), nullptr otherwise. Made by the first call, which is collective:
  // every rank of the communicator calls it at the same point (the collectives do, before any
  // block of more than one rank).
  NodeChannel* node_channel() const;

 private:
  void release() noexcept;
  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owned_ = false;
  mutable bool channel_opened_ = false;
  mutable std::unique_ptr<NodeChannel> channel_;
};

}  // namespace tessera
