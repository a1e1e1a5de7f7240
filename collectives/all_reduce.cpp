// all_reduce: on the axes communicator, blocks of 16 MiB and more as an all-to-all, a sum in rank
// order and an all-gather (ordered_reduce.h), smaller ones as one MPI_Allreduce. Open MPI 4.1's
// MPI_Allreduce falls off a cliff between 24 and 64 MiB over shared memory: bench_collectives,
// f32, 2 / 8 ranks, 64 MiB: 272 / 905 ms against 17.6 / 164 ms ordered; at 16-24 MiB the two are
// within 15% of each other (0.88-1.22), and below MPI's is faster on 2 ranks (1 MiB: 168 against
// 285 us). bf16 always takes the ordered path (summed in f32). The rvalue overload reduces in
// place.
#include "collectives/node_collectives.h"
#include "collectives/ordered_reduce.h"
#include "collectives/collective_check.h"
#include "core/text.h"
#include "collectives/collectives.h"
#include "collectives/comm_stats.h"
#include "mesh/mpi_check.h"

namespace tessera {

namespace {

void reduce_chunks(const void* send, void* recv, const Tensor& shape_of, const Communicator& comm, ReduceOp op) {
  const void* in = send == MPI_IN_PLACE ? recv : send;
  // On one node, blocks up to the channel's slot take shared memory.
  if (detail::node_all_reduce(in, recv, shape_of.numel(), shape_of.dtype(), comm, op)) return;
  // bf16, and blocks from detail::kOrderedAllReduceBytes on, take the ordered all-reduce.
  if (shape_of.dtype() == DType::bf16 || shape_of.nbytes() >= detail::kOrderedAllReduceBytes) {
    detail::all_reduce_ordered(in, recv, shape_of.numel(), shape_of.dtype(), comm, op);
    return;
  }
  // Below 16 MiB, so the count is an int.
  const int count = static_cast<int>(shape_of.numel());
  check_mpi(MPI_Allreduce(send, recv, count, mpi_datatype(shape_of.dtype()), op == ReduceOp::sum ? MPI_SUM : MPI_MAX,
                          comm.handle()),
            "MPI_Allreduce (all_reduce)");
}

}  // namespace

Tensor all_reduce(const Mesh& mesh, const Tensor& local, const Axes& axes, ReduceOp op) {
  const detail::CollectiveCheck checked(mesh, [&] {
    return std::string("all_reduce (") + (op == ReduceOp::sum ? "sum" : "max") + ") over " + parenthesized(axes) + " of " +
           detail::blocks_text(local);
  });
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
  const detail::CollectiveCheck checked(mesh, [&] {
    return std::string("all_reduce (") + (op == ReduceOp::sum ? "sum" : "max") + ") over " + parenthesized(axes) + " of " +
           detail::blocks_text(local);
  });
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
