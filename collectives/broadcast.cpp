// broadcast: MPI_Bcast from a position of the axes communicator. The root's block is sent from
// the input itself; the others receive into a fresh tensor.
#include <string>

#include "collectives/collective_check.h"
#include "core/text.h"
#include "collectives/collectives.h"
#include "collectives/comm_stats.h"
#include "collectives/layout.h"
#include "core/error.h"
#include "mesh/mpi_check.h"

namespace tessera {

Tensor broadcast(const Mesh& mesh, const Tensor& local, const Axes& axes, int root) {
  const detail::CollectiveCheck checked(mesh, [&] {
    return "broadcast over " + parenthesized(axes) + " of " + detail::blocks_text(local) + " from position " + std::to_string(root);
  });
  const CommTimer timer;  // this rank's time inside collectives (CommStats::seconds)
  const int n = mesh.shape().axes_size(axes);
  if (root < 0 || root >= n) {
    throw SpecError("broadcast: root " + std::to_string(root) + " is not a position of axes_comm over " +
                    std::to_string(axes.size()) + " axes of size " + std::to_string(n));
  }
  const Communicator& comm = mesh.axes_comm(axes);
  const std::int64_t bytes = static_cast<std::int64_t>(local.nbytes());
  CommStats::global().record({CommOp::broadcast, axes, -1, send_bytes(CommOp::broadcast, n, bytes)});
  if (n == 1) return local;
  detail::Message message = detail::contiguous_message(bytes, "broadcast");
  if (comm.rank() == root) {
    // MPI_Bcast does not write the root's buffer, but its signature is not const.
    check_mpi(MPI_Bcast(const_cast<void*>(local.raw()), message.count, message.type.get(), root, comm.handle()),
              "MPI_Bcast (broadcast)");
    return local;
  }
  Tensor out = Tensor::empty(local.shape(), local.dtype());
  check_mpi(MPI_Bcast(out.raw(), message.count, message.type.get(), root, comm.handle()), "MPI_Bcast (broadcast)");
  return out;
}

}  // namespace tessera
