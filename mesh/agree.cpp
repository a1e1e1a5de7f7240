// One allreduce finds the first failing rank, one broadcast sends its message to all.
#include "mesh/agree.h"

#include <climits>

#include "mesh/mpi_check.h"

namespace tessera {

std::optional<std::string> first_error(const Communicator& comm, const std::optional<std::string>& local_error) {
  int mine = local_error ? comm.rank() : INT_MAX;
  int first = INT_MAX;
  check_mpi(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm.handle()), "MPI_Allreduce");
  if (first == INT_MAX) return std::nullopt;
  std::string message = first == comm.rank() ? *local_error : std::string();
  int length = static_cast<int>(message.size());
  check_mpi(MPI_Bcast(&length, 1, MPI_INT, first, comm.handle()), "MPI_Bcast");
  message.resize(length);
  check_mpi(MPI_Bcast(message.data(), length, MPI_CHAR, first, comm.handle()), "MPI_Bcast");
  if (comm.size() > 1) message = "rank " + std::to_string(first) + ": " + message;
  return message;
}

}  // namespace tessera
