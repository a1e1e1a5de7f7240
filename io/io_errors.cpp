// File errors as IoError or IntegrityError, agreed on by every rank.
#include "io/io_errors.h"

#include "mesh/agree.h"

namespace tessera::checkpoint_io {

void throw_io_error(const std::string& message) {
  for (const char* phrase : {corrupt_phrase, incomplete_phrase, truncated_phrase}) {
    if (message.find(phrase) != std::string::npos) throw IntegrityError(message);
  }
  throw IoError(message);
}

void agree_or_throw_io(const Communicator& comm, const std::optional<std::string>& local_error) {
  if (auto message = first_error(comm, local_error)) throw_io_error(*message);
}

}  // namespace tessera::checkpoint_io
