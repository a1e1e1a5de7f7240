// Work that may throw on some ranks only, run so that those ranks do not leave the others waiting
// for ever in a collective the throwing ranks never join: a step's user code and the backward pass
// (nn/train.cpp, nn/autodiff.cpp), and a collective's own checks of this rank's arguments before
// its messages (collectives/variable.cpp, collectives/redistribute.cpp).
#pragma once

#include <exception>
#include <utility>

#include "mesh/mesh.h"

namespace tessera::detail {

// The mesh whose ranks run a call together, with its failure communicator (Mesh::failure_comm);
// null on one rank, or without a mesh. Mesh::create makes the communicator while every rank is
// there, so a call on some ranks only is safe.
const Mesh* failure_mesh(const Mesh& mesh);

// The rank that caught `thrown` from `what` (a step's loss function, the backward pass, a
// collective's checks) waits up to failed_rank_wait_seconds() (mesh/agree.h) for every rank of
// `mesh` to throw as well (a barrier on the failure communicator, which only such ranks enter) and
// returns when they did; where they did not, it prints "tessera: rank R: <what> threw on this rank and the other ranks did not throw
// within N s (<where_others_are>); ending the job: <its message>" and ends the job (exit code 2, 3
// for an IntegrityError), as shard_map's body does.
void wait_for_every_rank_to_throw(const char* what, const char* where_others_are, const Mesh& mesh,
                                  const std::exception_ptr& thrown);

// f() on this rank. An exception it throws on every rank of `mesh` (null: one rank) stands on each,
// as it was, and the caller may catch it and go on; one it throws on some ranks only ends the job
// (wait_for_every_rank_to_throw). A call that returns pays nothing.
template <class F>
auto fail_together(const char* what, const char* where_others_are, const Mesh* mesh, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (...) {
    if (mesh != nullptr) wait_for_every_rank_to_throw(what, where_others_are, *mesh, std::current_exception());
    throw;
  }
}

}  // namespace tessera::detail
