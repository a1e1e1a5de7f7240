// all_reduce: MPI_Allreduce on the axes communicator, in chunks of at most 2^31 - 1 elements so
// that huge tensors never overflow MPI's int counts (bf16: bf16_reduce.h, summed in f32). The
// rvalue overload reduces in place.
#include <algorithm>
#include <climits>

#include "collectives/bf16_reduce.h"
#include "collectives/collectives.h"
#include "collectives/comm_stats.h"
#include "mesh/mpi_check.h"

namespace tessera {

namespace {

void reduce_chunks(const void* send, void* recv, const Tensor& shape_of, const Communicator& comm, ReduceOp op) {
  if (shape_of.dtype() == DType::bf16) {
    const void* in = send == MPI_IN_PLACE ? recv : send;
    detail::all_reduce_bf16(static_cast<const bfloat16*>(in), static_cast<bfloat16*>(recv), shape_of.numel(), comm, op);
    return;
  }
  const MPI_Datatype type = mpi_datatype(shape_of.dtype());
  const MPI_Op mpi_op = op == ReduceOp::sum ? MPI_SUM : MPI_MAX;
  const std::size_t elem = dtype_size(shape_of.dtype());
  for (std::int64_t begin = 0; begin < shape_of.numel(); begin += INT_MAX) {
    const int count = static_cast<int>(std::min<std::int64_t>(INT_MAX, shape_of.numel() - begin));
    const void* in = send == MPI_IN_PLACE ? MPI_IN_PLACE : static_cast<const std::byte*>(send) + begin * elem;
    check_mpi(MPI_Allreduce(in, static_cast<std::byte*>(recv) + begin * elem, count, type, mpi_op, comm.handle()),
              "MPI_Allreduce (all_reduce)");
  }
}

}  // namespace

Tensor all_reduce(const Mesh& mesh, const Tensor& local, const Axes& axes, ReduceOp op) {
  const CommTimer timer;  // this rank's time inside collectives (CommStats::seconds)
  const Communicator& comm = mesh.axes_comm(axes);
  const int n = comm.size();
  CommStats::global().record(
      {CommOp::all_reduce, axes, -1, send_bytes(CommOp::all_reduce, n, static_cast<std::int64_t>(local.nbytes()))});
  if (n == 1) return local;
  Tensor out = Tensor::empty(local.shape(), local.dtype());
  reduce_chunks(local.raw(), out.raw(), local, comm, op);
  return out;
}

Tensor all_reduce(const Mesh& mesh, Tensor&& local, const Axes& axes, ReduceOp op) {
  const CommTimer timer;  // this rank's time inside collectives (CommStats::seconds)
  const Communicator& comm = mesh.axes_comm(axes);
  const int n = comm.size();
  CommStats::global().record(
      {CommOp::all_reduce, axes, -1, send_bytes(CommOp::all_reduce, n, static_cast<std::int64_t>(local.nbytes()))});
  Tensor out = std::move(local);
  if (n > 1) reduce_chunks(MPI_IN_PLACE, out.raw(), out, comm, op);
  return out;
}

}  // namespace tessera
