// permute: one MPI_Sendrecv per rank (MPI_PROC_NULL for the side it has no partner on), like
// jax.lax.ppermute. The permutation is checked on every rank before any communication.
#include <string>
#include <vector>

#include "collectives/collective_check.h"
#include "core/text.h"
#include "collectives/collectives.h"
#include "collectives/comm_stats.h"
#include "collectives/layout.h"
#include "core/error.h"
#include "mesh/mpi_check.h"

namespace tessera {

Tensor permute(const Mesh& mesh, const Tensor& local, const Axes& axes, const std::vector<std::pair<int, int>>& perm) {
  const detail::CollectiveCheck checked(mesh, [&] {
    std::string pairs;
    for (const auto& [from, to] : perm) pairs += (pairs.empty() ? "" : ", ") + std::to_string(from) + "->" + std::to_string(to);
    return "permute over " + parenthesized(axes) + " of " + detail::blocks_text(local) + " by pairs (" + pairs + ")";
  });
  const CommTimer timer;  // this rank's time inside collectives (CommStats::seconds)
  const int n = mesh.shape().axes_size(axes);
  std::vector<int> dest_of(n, -1), source_of(n, -1);
  for (const auto& [from, to] : perm) {
    if (from < 0 || from >= n || to < 0 || to >= n) {
      throw SpecError("permute: pair (" + std::to_string(from) + ", " + std::to_string(to) +
                      ") is out of range for " + std::to_string(n) + " ranks");
    }
    if (dest_of[from] != -1) throw SpecError("permute: position " + std::to_string(from) + " is a source twice");
    if (source_of[to] != -1) throw SpecError("permute: position " + std::to_string(to) + " is a destination twice");
    dest_of[from] = to;
    source_of[to] = from;
  }
  const Communicator& comm = mesh.axes_comm(axes);
  const int me = mesh.axes_rank(axes);
  const int dest = dest_of[me];
  const int source = source_of[me];
  const std::int64_t bytes = static_cast<std::int64_t>(local.nbytes());
  CommStats::global().record({CommOp::permute, axes, -1, send_bytes(CommOp::permute, n, dest >= 0 && dest != me ? bytes : 0)});
  if (source == me) return local;
  Tensor out(local.shape(), local.dtype());  // zeros where no one sends to this rank
  if (bytes == 0 || (dest < 0 && source < 0)) return out;
  detail::Message message = detail::contiguous_message(bytes, "permute");
  const bool sends = dest >= 0 && dest != me;
  check_mpi(MPI_Sendrecv(local.raw(), sends ? message.count : 0, message.type.get(), sends ? dest : MPI_PROC_NULL, 0,
                         out.raw(), source >= 0 ? message.count : 0, message.type.get(),
                         source >= 0 ? source : MPI_PROC_NULL, 0, comm.handle(), MPI_STATUS_IGNORE),
            "MPI_Sendrecv (permute)");
  return out;
}

}  // namespace tessera
