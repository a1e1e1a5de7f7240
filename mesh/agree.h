// Errors that one rank alone can see (a file it cannot read) are agreed on with one collective,
// so that every rank throws the same error instead of some ranks waiting forever in the next
// collective.
#pragma once

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

// Collective: throws E(message) on every rank if any rank passed an error.
template <class E>
void agree_or_throw(const Communicator& comm, const std::optional<std::string>& local_error) {
  if (auto message = first_error(comm, local_error)) throw E(*message);
}

}  // namespace tessera
