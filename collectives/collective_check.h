// TESSERA_COLLECTIVE_CHECK=1: a debug mode that checks, before every collective and every reshard,
// that all ranks of the mesh are at the same one with the same arguments, as PyTorch's
// TORCH_DISTRIBUTED_DEBUG=DETAIL checks collectives' fingerprints.
//
// An SPMD program runs the same collectives in the same order on every rank. A rank that calls
// another one, or the same one with other axes, dimensions, dtype, extents, root or pairs (a
// spec computed from this rank's data, a collective under `if (rank == 0)`), would otherwise
// meet mismatched collectives: a hang, or wrong results. With the check on, each collective and
// each reshard first all-reduces a 64-bit hash of its rank-invariant description (what it is
// and its arguments, not the block's extents, which uneven splits make differ) on a communicator
// of its own (Mesh::check_comm), numbered per mesh. Where the ranks differ, every
// rank throws the same Error before anything moves:
//   rank 1: TESSERA_COLLECTIVE_CHECK: collective 7 on mesh(data: 2, model: 4) differs from rank
//   0's: all_reduce (sum) over (model) of f32 rank-2 blocks here, all_gather over (data) of f32
//   rank-2 blocks along dimension 0 on rank 0; every rank runs the same collectives in the same
//   order with the same arguments
// A rank that waits at a check longer than collective_check_warn_seconds() (60 s) says so on
// stderr, once per interval, naming the collective, and goes on waiting (a slow rank is not an
// error; a rank that never comes is the hang the message points at).
//
// The check costs one small all-reduce per collective and per reshard; it is off by default.
// TESSERA_COLLECTIVE_CHECK must be alike on every rank (core/env_settings.h), and Mesh::create
// makes the check communicator at once when it is on, so that its first use is never the
// collective that is out of step.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "core/tensor.h"
#include "mesh/fail_together.h"
#include "mesh/mesh.h"

namespace tessera {

// Whether the check runs: TESSERA_COLLECTIVE_CHECK (read once), or what set_collective_check gave.
bool collective_check_enabled();
// Turns the check on or off in this process (tests); every rank must pass the same value.
void set_collective_check(bool on);
// How long a rank waits at a check before it says so on stderr (60 s; tests shorten it).
double collective_check_warn_seconds();
void set_collective_check_warn_seconds(double seconds);

namespace detail {

// Collective over `mesh` (its check communicator): checks that every rank is at the same
// collective, described by `description`; throws Error on every rank where they differ.
void check_same_collective(const Mesh& mesh, const std::string& description);

// This thread's depth of checked calls (a reshard's collectives run inside its check).
int& collective_check_depth();

// RAII at the start of every collective and reshard: runs the check when it is on and this is
// the outermost checked call (what runs inside one follows from its checked arguments, and an
// inner call may differ from rank to rank where the outer one does not: an all_to_all whose
// split a rank's block divides on some ranks only). `describe` builds the description only then.
class CollectiveCheck {
 public:
  template <class Describe>
  CollectiveCheck(const Mesh& mesh, Describe&& describe) {
    if (collective_check_depth() == 0 && collective_check_enabled()) check_same_collective(mesh, describe());
    ++collective_check_depth();
  }
  ~CollectiveCheck() { --collective_check_depth(); }
  CollectiveCheck(const CollectiveCheck&) = delete;
  CollectiveCheck& operator=(const CollectiveCheck&) = delete;
};

// A check at the start of a call that encloses collectives checked on their own (shard_map, whose
// body's collectives may differ from rank to rank): runs the check as CollectiveCheck does, but
// leaves the depth alone, so that what follows is checked call by call.
template <class Describe>
void check_entry(const Mesh& mesh, Describe&& describe) {
  if (collective_check_depth() == 0 && collective_check_enabled()) check_same_collective(mesh, describe());
}

// Runs `check`, this rank's checks of its own block before a collective's messages, always (the
// checks above are a debug mode). Where a check fails on some ranks only (a block of another
// extent on one rank, a count past MPI's int on the ranks whose pieces are largest), those ranks
// would throw while the others wait in the messages for ever: a failure on every rank of the mesh
// throws on each, one on some ranks only ends the job with its message (mesh/fail_together.h).
// A check that passes costs nothing.
template <class F>
void check_this_rank(const Mesh& mesh, const char* what, F&& check) {
  fail_together(what, "they wait in its messages", failure_mesh(mesh), std::forward<F>(check));
}

// "f32 rank-2 blocks": what every rank's block has in common.
std::string blocks_text(const Tensor& local);

}  // namespace detail
}  // namespace tessera
