// all_reduce: on the axes communicator, blocks of 64 KiB and more as an all-to-all, a sum in rank
// order and an all-gather (ordered_reduce.h), smaller ones as one MPI_Allreduce (its recursive
// doubling has the lower latency there). Open MPI 4.1's MPI_Allreduce slows down on large
// messages over shared memory: measured here, f32 on 2 / 8 ranks, 16 MiB 12.8 / 75 ms against
// 4.1 / 32.5 ms, 64 MiB 221 / 812 ms against 49 / 148 ms. bf16 always takes the ordered path
// (summed in f32). The rvalue overload reduces in place.
#include "collectives/ordered_reduce.h"
#include "collectives/collectives.h"
#include "collectives/comm_stats.h"
#include "mesh/mpi_check.h"

namespace tessera {

namespace {

// Blocks from this size on take the ordered all-reduce (about equal to MPI_Allreduce at 64 KiB
// on 2 and 8 ranks here, faster above).
constexpr std::size_t kOrderedFromBytes = std::size_t{64} << 10;

void reduce_chunks(const void* send, void* recv, const Tensor& shape_of, const Communicator& comm, ReduceOp op) {
  if (shape_of.dtype() == DType::bf16 || shape_of.nbytes() >= kOrderedFromBytes) {
    const void* in = send == MPI_IN_PLACE ? recv : send;
    detail::all_reduce_ordered(in, recv, shape_of.numel(), shape_of.dtype(), comm, op);
    return;
  }
  // Below 64 KiB, so the count is an int.
  const int count = static_cast<int>(shape_of.numel());
  check_mpi(MPI_Allreduce(send, recv, count, mpi_datatype(shape_of.dtype()), op == ReduceOp::sum ? MPI_SUM : MPI_MAX,
                          comm.handle()),
            "MPI_Allreduce (all_reduce)");
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
