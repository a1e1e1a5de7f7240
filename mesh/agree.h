// Errors that one rank alone can see (a file it cannot read) are agreed on with one collective,
// so that every rank throws the same error instead of some ranks waiting forever in the next
// collective.
#pragma once

#include <mpi.h>

#include <exception>
#include <optional>
#include <string>

#include "mesh/communicator.h"

namespace tessera {

// `root`'s string on every rank (collective over `comm`).
std::string broadcast_string(const Communicator& comm, std::string value, int root);

// Collective over `comm`. Returns, on every rank, the message of the lowest-numbered rank that
// passed one (prefixed "rank R: "), or nullopt when no rank did.
std::optional<std::string> first_error(const Communicator& comm, const std::optional<std::string>& local_error);

// Collective: when any rank passes the tessera::Error it caught (`local_error` not null), every
// rank throws the lowest such rank's error, with its type and its message prefixed "rank R: "
// (with several ranks); returns when no rank passed one. For errors whose type the callers keep
// (shard_map's body, which is the user's code).
void rethrow_first_error(const Communicator& comm, const std::exception_ptr& local_error);

// How many seconds a rank that failed waits for the other ranks to reach the agreement on it before
// it ends the job: the programs' error path (apps/cli_main.h), a shard_map body that threw
// (nn/shard_map.cpp) and a step's loss function or backward pass that threw (mesh/fail_together.h).
// TESSERA_FAILED_RANK_WAIT (core/env_settings.h): 1, 3 (also when unset), 10, 30 or 100. Checks
// that every rank makes fail within milliseconds of each other; 3 s covers 8 ranks oversubscribed
// on 2 cores, a larger value ranks that reach a check far apart (a job of many hosts). Mesh::create
// refuses any other value on every rank; read without it (an error before the mesh), such a value
// means 3.
int failed_rank_wait_seconds();

// Polls `request`, a nonblocking collective this rank posted, until it completes (true) or
// `seconds` pass (false, also on an error of MPI_Test; the request then stays pending, and the
// caller ends the job or polls on). Yields for the first 10 ms, then sleeps 1 ms between polls,
// so that the ranks it waits for have the cores.
bool wait_until_done(MPI_Request& request, double seconds = failed_rank_wait_seconds());

// Prints "tessera: rank R: <context><message of `thrown`>" on stderr and ends the job over `comm`
// (MPI_Abort) with exit code 3 for an IntegrityError, 1 for an MpiError, 2 for any other: a rank whose own code threw
// while the others may wait inside a collective it left, which nothing can take them out of.
[[noreturn]] void abort_with_error(const Communicator& comm, const std::string& context,
                                   const std::exception_ptr& thrown);

// Collective: throws E(message) on every rank if any rank passed an error.
template <class E>
void agree_or_throw(const Communicator& comm, const std::optional<std::string>& local_error) {
  if (auto message = first_error(comm, local_error)) throw E(*message);
}

}  // namespace tessera
