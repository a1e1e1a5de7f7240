// all_gather: MPI_Allgather on the axes communicator. The outermost dimension receives straight
// into the result; an inner one receives through a strided datatype (or a memcpy unpack).
#include <vector>

#include "collectives/collective_check.h"
#include "core/text.h"
#include "collectives/collectives.h"
#include "collectives/comm_stats.h"
#include "collectives/layout.h"
#include "collectives/node_collectives.h"
#include "mesh/mpi_check.h"

namespace tessera {

using detail::BlockLayout;

Tensor all_gather(const Mesh& mesh, const Tensor& local, const Axes& axes, int dim) {
  const detail::CollectiveCheck checked(mesh, [&] {
    return "all_gather over " + parenthesized(axes) + " of " + detail::blocks_text(local) + " along dimension " + std::to_string(dim);
  });
  const CommTimer timer;  // this rank's time inside collectives (CommStats::seconds)
  const Communicator& comm = mesh.axes_comm(axes);
  const int n = comm.size();
  Shape out_shape = local.shape();
  // Validates dim before any communication; the layout is that of the result.
  detail::block_layout(local.shape(), local.dtype(), dim, 1, "all_gather");
  out_shape[dim] *= n;
  const BlockLayout layout = detail::block_layout(out_shape, local.dtype(), dim, n, "all_gather");
  const std::int64_t bytes = static_cast<std::int64_t>(local.nbytes());
  CommStats::global().record({CommOp::all_gather, axes, dim, send_bytes(CommOp::all_gather, n, bytes)});
  if (n == 1) return local;
  Tensor out = Tensor::empty(out_shape, local.dtype());
  if (bytes == 0) return out;
  if (detail::node_all_gather(local.raw(), out.raw(), layout, comm)) return out;
  detail::Message send = detail::contiguous_message(bytes, "all_gather");
  if (layout.consecutive()) {
    check_mpi(MPI_Allgather(local.raw(), send.count, send.type.get(), out.raw(), send.count, send.type.get(),
                            comm.handle()),
              "MPI_Allgather (all_gather)");
  } else if (pack_method() == PackMethod::datatype) {
    detail::MpiType block = detail::strided_block_type(layout, "all_gather");
    check_mpi(MPI_Allgather(local.raw(), send.count, send.type.get(), out.raw(), 1, block.get(), comm.handle()),
              "MPI_Allgather (all_gather)");
  } else {
    Tensor packed = detail::scratch_buffer(static_cast<std::int64_t>(out.nbytes()));
    check_mpi(MPI_Allgather(local.raw(), send.count, send.type.get(), packed.raw(), send.count, send.type.get(),
                            comm.handle()),
              "MPI_Allgather (all_gather)");
    detail::unpack_blocks(packed.raw(), out.raw(), layout);
  }
  return out;
}

}  // namespace tessera
