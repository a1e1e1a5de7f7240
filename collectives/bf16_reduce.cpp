// bf16 reductions as all-to-all, f32 sums in rank order, all-gather (see bf16_reduce.h).
#include "collectives/bf16_reduce.h"

#include <algorithm>
#include <climits>
#include <vector>

#include "collectives/layout.h"
#include "mesh/mpi_check.h"

namespace tessera::detail {

namespace {

// out[i] = round(combine over k < n of in[k * count + i]), in k order, in f32.
void combine_pieces(const bfloat16* in, bfloat16* out, std::int64_t count, int n, ReduceOp op) {
  Tensor acc_storage = Tensor::empty({count}, DType::f32);
  float* acc = acc_storage.data<float>();
  convert_bf16_to_f32(in, acc, static_cast<std::size_t>(count));
  for (int k = 1; k < n; ++k) {
    const bfloat16* piece = in + k * count;
    if (op == ReduceOp::sum) {
      for (std::int64_t i = 0; i < count; ++i) acc[i] += float(piece[i]);
    } else {
      for (std::int64_t i = 0; i < count; ++i) acc[i] = std::max(acc[i], float(piece[i]));
    }
  }
  convert_f32_to_bf16(acc, out, static_cast<std::size_t>(count));
}

}  // namespace

void all_reduce_bf16(const bfloat16* send, bfloat16* recv, std::int64_t count, const Communicator& comm, ReduceOp op) {
  const int n = comm.size();
  const int me = comm.rank();
  std::vector<int> counts(n), displs(n), recv_counts(n), recv_displs(n);
  // Segments of at most INT_MAX elements keep every count and displacement an int.
  for (std::int64_t begin = 0; begin < count; begin += INT_MAX) {
    const std::int64_t length = std::min<std::int64_t>(INT_MAX, count - begin);
    for (int k = 0, at = 0; k < n; ++k) {  // piece k (owned by rank k): balanced sizes
      counts[k] = static_cast<int>(length / n + (k < length % n ? 1 : 0));
      displs[k] = at;
      at += counts[k];
    }
    const int mine = counts[me];
    for (int k = 0; k < n; ++k) {
      recv_counts[k] = mine;
      recv_displs[k] = k * mine;
    }
    Tensor pieces = scratch_buffer(static_cast<std::int64_t>(n) * mine * 2);
    Tensor reduced = scratch_buffer(static_cast<std::int64_t>(mine) * 2);
    auto* gathered = static_cast<bfloat16*>(pieces.raw());
    auto* owned = static_cast<bfloat16*>(reduced.raw());
    check_mpi(MPI_Alltoallv(send + begin, counts.data(), displs.data(), MPI_UINT16_T, gathered, recv_counts.data(),
                            recv_displs.data(), MPI_UINT16_T, comm.handle()),
              "MPI_Alltoallv (bf16 all_reduce)");
    combine_pieces(gathered, owned, mine, n, op);
    check_mpi(MPI_Allgatherv(owned, mine, MPI_UINT16_T, recv + begin, counts.data(), displs.data(), MPI_UINT16_T,
                             comm.handle()),
              "MPI_Allgatherv (bf16 all_reduce)");
  }
}

void reduce_scatter_bf16(const bfloat16* send, bfloat16* recv, int count, const Communicator& comm) {
  const int n = comm.size();
  Tensor pieces = scratch_buffer(static_cast<std::int64_t>(n) * count * 2);
  auto* gathered = static_cast<bfloat16*>(pieces.raw());
  check_mpi(MPI_Alltoall(send, count, MPI_UINT16_T, gathered, count, MPI_UINT16_T, comm.handle()),
            "MPI_Alltoall (bf16 reduce_scatter)");
  combine_pieces(gathered, recv, count, n, ReduceOp::sum);
}

void reduce_scatter_bf16_v(const bfloat16* send, bfloat16* recv, const std::vector<int>& counts,
                           const Communicator& comm) {
  const int n = comm.size();
  const int mine = counts[comm.rank()];
  std::vector<int> displs(n), recv_counts(n, mine), recv_displs(n);
  for (int k = 0, at = 0; k < n; ++k) {
    displs[k] = at;
    at += counts[k];
    recv_displs[k] = k * mine;
  }
  checked_count(static_cast<std::int64_t>(n) * mine, "bf16 reduce_scatter");
  Tensor pieces = scratch_buffer(static_cast<std::int64_t>(n) * mine * 2);
  auto* gathered = static_cast<bfloat16*>(pieces.raw());
  check_mpi(MPI_Alltoallv(send, counts.data(), displs.data(), MPI_UINT16_T, gathered, recv_counts.data(),
                          recv_displs.data(), MPI_UINT16_T, comm.handle()),
            "MPI_Alltoallv (bf16 reduce_scatter)");
  if (mine > 0) combine_pieces(gathered, recv, mine, n, ReduceOp::sum);
}

}  // namespace tessera::detail
