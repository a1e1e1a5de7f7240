// all_to_all: MPI_Alltoall on the axes communicator. Pieces of the split dimension go out
// straight from the tensor when it is the outermost dimension, through a strided datatype (or a
// memcpy pack) otherwise; likewise the received pieces land along the concat dimension.
#include "collectives/collective_check.h"
#include "core/text.h"
#include "collectives/collectives.h"
#include "collectives/comm_stats.h"
#include "collectives/layout.h"
#include "collectives/node_collectives.h"
#include "mesh/mpi_check.h"

namespace tessera {

Tensor all_to_all(const Mesh& mesh, const Tensor& local, const Axes& axes, int split_dim, int concat_dim) {
  const detail::CollectiveCheck checked(mesh, [&] {
    return "all_to_all over " + parenthesized(axes) + " of " + detail::blocks_text(local) + ", split dimension " +
           std::to_string(split_dim) + ", concat dimension " + std::to_string(concat_dim);
  });
  const CommTimer timer;  // this rank's time inside collectives (CommStats::seconds)
  const Communicator& comm = mesh.axes_comm(axes);
  const int n = comm.size();
  if (split_dim >= 0 && split_dim < local.ndim() && concat_dim >= 0 && concat_dim < local.ndim() &&
      local.shape()[split_dim] % n != 0) {
    return all_to_all(mesh, local, axes, split_dim, block_extents(local.shape()[split_dim], n), concat_dim,
                      std::vector<std::int64_t>(n, local.shape()[concat_dim]));
  }
  const detail::BlockLayout send_layout =
      detail::block_layout(local.shape(), local.dtype(), split_dim, n, "all_to_all (split dimension)");
  detail::block_layout(local.shape(), local.dtype(), concat_dim, 1, "all_to_all (concat dimension)");
  const std::int64_t bytes = static_cast<std::int64_t>(local.nbytes());
  CommStats::global().record({CommOp::all_to_all, axes, split_dim, send_bytes(CommOp::all_to_all, n, bytes)});
  if (n == 1) return local;
  Shape out_shape = local.shape();
  out_shape[split_dim] /= n;
  out_shape[concat_dim] *= n;
  const detail::BlockLayout recv_layout = detail::block_layout(out_shape, local.dtype(), concat_dim, n, "all_to_all");
  Tensor out = Tensor::empty(out_shape, local.dtype());
  if (bytes == 0) return out;
  if (detail::node_all_to_all(local.raw(), send_layout, out.raw(), recv_layout, comm)) return out;
  const bool use_datatype = pack_method() == PackMethod::datatype;
  detail::Message piece = detail::contiguous_message(bytes / n, "all_to_all");

  // Send side: (buffer, count, type).
  const void* send = local.raw();
  int send_count = piece.count;
  MPI_Datatype send_type = piece.type.get();
  detail::MpiType send_block;
  Tensor send_packed;
  if (!send_layout.consecutive()) {
    if (use_datatype) {
      send_block = detail::strided_block_type(send_layout, "all_to_all");
      send_count = 1;
      send_type = send_block.get();
    } else {
      send_packed = detail::scratch_buffer(bytes);
      detail::pack_blocks(local.raw(), send_packed.raw(), send_layout);
      send = send_packed.raw();
    }
  }
  // Receive side.
  void* recv = out.raw();
  int recv_count = piece.count;
  MPI_Datatype recv_type = piece.type.get();
  detail::MpiType recv_block;
  Tensor recv_packed;
  if (!recv_layout.consecutive()) {
    if (use_datatype) {
      recv_block = detail::strided_block_type(recv_layout, "all_to_all");
      recv_count = 1;
      recv_type = recv_block.get();
    } else {
      recv_packed = detail::scratch_buffer(bytes);
      recv = recv_packed.raw();
    }
  }
  check_mpi(MPI_Alltoall(send, send_count, send_type, recv, recv_count, recv_type, comm.handle()),
            "MPI_Alltoall (all_to_all)");
  if (!recv_layout.consecutive() && !use_datatype) detail::unpack_blocks(recv_packed.raw(), out.raw(), recv_layout);
  return out;
}

}  // namespace tessera
