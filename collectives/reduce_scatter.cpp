// reduce_scatter: an all-to-all on the axes communicator and a sum in rank order on each block's
// owner (ordered_reduce.h: several times faster than Open MPI's MPI_Reduce_scatter_block here,
// and the same bits for every MPI; bf16 summed in f32). Rank k's block of the sum must be the
// k-th consecutive chunk of the send buffer, so an inner dimension is packed first: on one node
// straight into the shared-memory channel's slot (node_collectives.h), else into a buffer.
#include "collectives/ordered_reduce.h"
#include "collectives/collective_check.h"
#include "core/text.h"
#include "collectives/collectives.h"
#include "collectives/comm_stats.h"
#include "collectives/layout.h"
#include "collectives/node_collectives.h"
#include "mesh/mpi_check.h"

namespace tessera {

Tensor reduce_scatter(const Mesh& mesh, const Tensor& local, const Axes& axes, int dim) {
  const detail::CollectiveCheck checked(mesh, [&] {
    return "reduce_scatter over " + parenthesized(axes) + " of " + detail::blocks_text(local) + " along dimension " +
           std::to_string(dim);
  });
  const CommTimer timer;  // this rank's time inside collectives (CommStats::seconds)
  const Communicator& comm = mesh.axes_comm(axes);
  const int n = comm.size();
  if (dim >= 0 && dim < local.ndim() && local.shape()[dim] % n != 0) {
    return reduce_scatter(mesh, local, axes, dim, block_extents(local.shape()[dim], n));
  }
  const detail::BlockLayout layout = detail::block_layout(local.shape(), local.dtype(), dim, n, "reduce_scatter");
  const std::int64_t bytes = static_cast<std::int64_t>(local.nbytes());
  CommStats::global().record({CommOp::reduce_scatter, axes, dim, send_bytes(CommOp::reduce_scatter, n, bytes)});
  if (n == 1) return local;
  Shape out_shape = local.shape();
  out_shape[dim] /= n;
  Tensor out = Tensor::empty(out_shape, local.dtype());
  if (bytes == 0) return out;
  const int count = detail::checked_count(out.numel(), "reduce_scatter");
  // On one node the blocks go straight into the channel's slot, packed there when they are not
  // consecutive (an inner dimension).
  if (detail::node_reduce_scatter_blocks(local.raw(), layout, out.raw(), local.dtype(), comm)) return out;
  const void* send = local.raw();
  Tensor packed;
  if (!layout.consecutive()) {
    packed = detail::scratch_buffer(bytes);
    detail::pack_blocks(local.raw(), packed.raw(), layout);
    send = packed.raw();
  }
  detail::reduce_scatter_ordered(send, out.raw(), count, local.dtype(), comm);
  return out;
}

}  // namespace tessera
