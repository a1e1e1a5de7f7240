// One allreduce finds the first failing rank, one broadcast sends its message to all.
#include "mesh/agree.h"

#include <climits>

#include "core/error.h"
#include "mesh/mpi_check.h"

namespace tessera {

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

std::optional<std::string> first_error(const Communicator& comm, const std::optional<std::string>& local_error) {
  int mine = local_error ? comm.rank() : INT_MAX;
  int first = INT_MAX;
  check_mpi(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm.handle()), "MPI_Allreduce");
  if (first == INT_MAX) return std::nullopt;
  std::string message = broadcast_string(comm, first == comm.rank() ? *local_error : std::string(), first);
  if (comm.size() > 1) message = "rank " + std::to_string(first) + ": " + message;
  return message;
}

}  // namespace tessera
