// File errors in the error discipline of docs/design.md: a step only some ranks may fail (a file,
// a checksum) is run under capture_error, and its message is agreed on by every rank before the
// next collective; integrity failures come back as IntegrityError (exit code 3).
#pragma once

#include <optional>
#include <string>

#include "core/error.h"
#include "mesh/communicator.h"

namespace tessera::checkpoint_io {

// Runs `step` and returns the message of the tessera::Error (or std::exception) it threw, so
// the caller can agree on it with first_error before anything else.
template <class F>
std::optional<std::string> capture_error(F&& step) {
  try {
    step();
  } catch (const std::exception& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

// Every message of a data integrity failure ends in one of these phrases, so that an error agreed
// on as text (agree.h) is raised again as an IntegrityError.
inline constexpr const char* corrupt_phrase = "the file is corrupt";
inline constexpr const char* incomplete_phrase = "the file is incomplete";
inline constexpr const char* truncated_phrase = "truncated file";

// Throws IntegrityError(message) when it names an integrity failure, else IoError(message).
[[noreturn]] void throw_io_error(const std::string& message);

// Collective: every rank throws the first error any rank passed (see throw_io_error).
void agree_or_throw_io(const Communicator& comm, const std::optional<std::string>& local_error);

}  // namespace tessera::checkpoint_io
