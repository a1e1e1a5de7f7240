// One allreduce finds the first failing rank, one broadcast sends its message to all.
#include "mesh/agree.h"

#include <chrono>
#include <climits>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "core/checked.h"
#include "core/env_settings.h"
#include "core/error.h"
#include "mesh/mpi_check.h"

namespace tessera {

void abort_with_error(const Communicator& comm, const std::string& context, const std::exception_ptr& thrown) {
  std::string message = "an exception that is not a std::exception";
  int code = 2;
  try {
    std::rethrow_exception(thrown);
  } catch (const IntegrityError& e) {
    message = e.what();
    code = 3;
  } catch (const MpiError& e) {
    message = e.what();
    code = 1;  // a runtime failure, as the programs' exit codes have it (apps/cli_main.h)
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
  }
  std::cerr << "tessera: rank " << comm.rank() << ": " << context << message << std::endl;
  MPI_Abort(comm.handle(), code);
  std::abort();  // MPI_Abort does not return
}

std::string broadcast_string(const Communicator& comm, std::string value, int root) {
  // The length travels first, so every rank refuses an oversized string together.
  long long length = static_cast<long long>(value.size());
  check_mpi(MPI_Bcast(&length, 1, MPI_LONG_LONG, root, comm.handle()), "MPI_Bcast");
  if (length > INT_MAX) {
    throw MpiError("broadcast_string: " + std::to_string(length) + " bytes is more than one MPI_Bcast moves");
  }
  value.resize(static_cast<std::size_t>(length));
  if (length > 0) {
    check_mpi(MPI_Bcast(value.data(), static_cast<int>(length), MPI_CHAR, root, comm.handle()), "MPI_Bcast");
  }
  return value;
}

int failed_rank_wait_seconds() {
  const EnvSetting& setting = env_setting("TESSERA_FAILED_RANK_WAIT");
  const int choice = env_choice(setting);
  return std::stoi(setting.values[choice >= 0 ? choice : setting.unset]);
}

bool wait_until_done(MPI_Request& request, double seconds) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(seconds);
  while (true) {
    int done = 0;
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (done) return true;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    // Yielding for the first 10 ms (most waits end within microseconds: TESSERA_COLLECTIVE_CHECK
    // waits once per collective, and a 1 ms sleep from the start made a suite of many small
    // collectives ten times slower), then sleeping 1 ms between polls.
    if (now - start < std::chrono::milliseconds(10)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

namespace {

// The lowest rank with `failed` set, or INT_MAX when none (one all-reduce).
int first_failing_rank(const Communicator& comm, bool failed) {
  int mine = failed ? comm.rank() : INT_MAX;
  int first = INT_MAX;
  check_mpi(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm.handle()), "MPI_Allreduce");
  return first;
}

// `first`'s message on every rank, prefixed with its rank where there are several.
std::string first_message(const Communicator& comm, int first, const std::string& mine) {
  std::string message = broadcast_string(comm, first == comm.rank() ? mine : std::string(), first);
  return comm.size() > 1 ? "rank " + std::to_string(first) + ": " + message : message;
}

// A tessera::Error's type as a number, and back.
enum class ErrorKind : int { error, spec, shape, dtype, rule, mesh, mpi, io, integrity, usage, overflow };

ErrorKind kind_of(const Error& e) {
  if (dynamic_cast<const IntegrityError*>(&e)) return ErrorKind::integrity;
  if (dynamic_cast<const IoError*>(&e)) return ErrorKind::io;
  if (dynamic_cast<const SpecError*>(&e)) return ErrorKind::spec;
  if (dynamic_cast<const ShapeError*>(&e)) return ErrorKind::shape;
  if (dynamic_cast<const DTypeError*>(&e)) return ErrorKind::dtype;
  if (dynamic_cast<const RuleError*>(&e)) return ErrorKind::rule;
  if (dynamic_cast<const MeshError*>(&e)) return ErrorKind::mesh;
  if (dynamic_cast<const MpiError*>(&e)) return ErrorKind::mpi;
  if (dynamic_cast<const UsageError*>(&e)) return ErrorKind::usage;
  if (dynamic_cast<const OverflowError*>(&e)) return ErrorKind::overflow;
  return ErrorKind::error;
}

[[noreturn]] void throw_kind(ErrorKind kind, const std::string& message) {
  switch (kind) {
    case ErrorKind::spec: throw SpecError(message);
    case ErrorKind::shape: throw ShapeError(message);
    case ErrorKind::dtype: throw DTypeError(message);
    case ErrorKind::rule: throw RuleError(message);
    case ErrorKind::mesh: throw MeshError(message);
    case ErrorKind::mpi: throw MpiError(message);
    case ErrorKind::io: throw IoError(message);
    case ErrorKind::integrity: throw IntegrityError(message);
    case ErrorKind::usage: throw UsageError(message);
    case ErrorKind::overflow: throw OverflowError(message);
    case ErrorKind::error: break;
  }
  throw Error(message);
}

}  // namespace

std::optional<std::string> first_error(const Communicator& comm, const std::optional<std::string>& local_error) {
  const int first = first_failing_rank(comm, local_error.has_value());
  if (first == INT_MAX) return std::nullopt;
  return first_message(comm, first, local_error.value_or(std::string()));
}

void rethrow_first_error(const Communicator& comm, const std::exception_ptr& local_error) {
  const int first = first_failing_rank(comm, local_error != nullptr);
  if (first == INT_MAX) return;
  int kind = static_cast<int>(ErrorKind::error);
  std::string mine;
  if (local_error) {
    try {
      std::rethrow_exception(local_error);
    } catch (const Error& e) {
      kind = static_cast<int>(kind_of(e));
      mine = e.what();
    }
  }
  check_mpi(MPI_Bcast(&kind, 1, MPI_INT, first, comm.handle()), "MPI_Bcast");
  throw_kind(static_cast<ErrorKind>(kind), first_message(comm, first, mine));
}

}  // namespace tessera
