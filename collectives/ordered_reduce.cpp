// Reductions as an all-to-all, sums in rank order and (all-reduce) an all-gather (see
// ordered_reduce.h).
#include "collectives/ordered_reduce.h"

#include <algorithm>
#include <string>
#include <vector>

#include "collectives/layout.h"
#include "collectives/node_collectives.h"
#include "mesh/mpi_check.h"

namespace tessera::detail {

namespace {

// out[i] = combine over k < n of in[k * stride + i], in k order. In blocks of kCombineBlock
// elements: a block of out stays in L1 while every piece adds into it, so each piece is read once
// and out written once, where a pass of out per piece read and wrote it n times. Each element
// still combines its pieces in k order: the same bits. This file is compiled -O3
// (collectives/CMakeLists.txt), where these loops are vectorized; at -O2 GCC 12 left them
// scalar, 3% of the transformer's CPU on 8 ranks.
constexpr std::int64_t kCombineBlock = 2048;

template <class T>
void combine_typed(const T* in, std::int64_t stride, T* out, std::int64_t count, int n, ReduceOp op) {
  for (std::int64_t start = 0; start < count; start += kCombineBlock) {
    const std::int64_t len = std::min(kCombineBlock, count - start);
    T* __restrict o = out + start;
    const T* __restrict first = in + start;
    for (std::int64_t i = 0; i < len; ++i) o[i] = first[i];
    for (int k = 1; k < n; ++k) {
      const T* __restrict piece = in + k * stride + start;
      if (op == ReduceOp::sum) {
        for (std::int64_t i = 0; i < len; ++i) o[i] += piece[i];
      } else {
        for (std::int64_t i = 0; i < len; ++i) o[i] = std::max(o[i], piece[i]);
      }
    }
  }
}

// The same for bf16, in f32, rounded once.
void combine_bf16(const bfloat16* in, std::int64_t stride, bfloat16* out, std::int64_t count, int n, ReduceOp op) {
  Tensor acc_storage = Tensor::empty({count}, DType::f32);
  float* acc = acc_storage.data<float>();
  convert_bf16_to_f32(in, acc, static_cast<std::size_t>(count));
  for (int k = 1; k < n; ++k) {
    const bfloat16* piece = in + k * stride;
    if (op == ReduceOp::sum) {
      for (std::int64_t i = 0; i < count; ++i) acc[i] += float(piece[i]);
    } else {
      for (std::int64_t i = 0; i < count; ++i) acc[i] = std::max(acc[i], float(piece[i]));
    }
  }
  convert_f32_to_bf16(acc, out, static_cast<std::size_t>(count));
}

}  // namespace

void combine_pieces(const void* in, std::int64_t stride, void* out, std::int64_t count, int n, DType dtype,
                    ReduceOp op) {
  switch (dtype) {
    case DType::f32:
      return combine_typed(static_cast<const float*>(in), stride, static_cast<float*>(out), count, n, op);
    case DType::f64:
      return combine_typed(static_cast<const double*>(in), stride, static_cast<double*>(out), count, n, op);
    case DType::i32:
      if (op == ReduceOp::sum) {
        // As unsigned: the bits of a two's complement sum, without signed overflow.
        return combine_typed(static_cast<const std::uint32_t*>(in), stride, static_cast<std::uint32_t*>(out), count,
                             n, op);
      }
      return combine_typed(static_cast<const std::int32_t*>(in), stride, static_cast<std::int32_t*>(out), count, n,
                           op);
    case DType::bf16:
      return combine_bf16(static_cast<const bfloat16*>(in), stride, static_cast<bfloat16*>(out), count, n, op);
  }
}

namespace {

// An all-reduce moves at most this many bytes per all-to-all and all-gather: the scratch stays
// small and in cache, and a segment's sum overlaps nothing but is short (measured: 256 MiB of
// f32 on 2 ranks, 57 ms in 4 MiB segments, 70 ms in one).
constexpr std::int64_t kSegmentBytes = std::int64_t{4} << 20;

// A reduce-scatter through MPI moves each block in pieces of at most this many bytes, one piece
// of every block a round (reduce_scatter_in_pieces).
constexpr std::int64_t kPieceBytes = std::int64_t{4} << 20;
// Its point-to-point messages' tag on the axes' communicator, which carries no other
// point-to-point message with this tag.
constexpr int kReduceScatterTag = 0x7e55;

}  // namespace

namespace {

// Sends piece k of `send` (counts[k] elements, the pieces consecutive) to rank k and combines the
// n pieces this rank receives, in rank order, into out (counts[me] elements). `pieces` holds at
// least n * counts[me] elements, and n * counts[me] fits an int (the caller checks).
void alltoall_combine(const void* send, const std::vector<int>& counts, void* out, DType dtype, ReduceOp op,
                      const Communicator& comm, void* pieces, const char* what) {
  const int n = comm.size();
  const int mine = counts[comm.rank()];
  std::vector<int> displs(n), recv_counts(n, mine), recv_displs(n);
  for (int k = 0, at = 0; k < n; ++k) {
    displs[k] = at;
    at += counts[k];
    recv_displs[k] = k * mine;
  }
  const MPI_Datatype type = mpi_datatype(dtype);
  check_mpi(MPI_Alltoallv(send, counts.data(), displs.data(), type, pieces, recv_counts.data(), recv_displs.data(),
                          type, comm.handle()),
            std::string("MPI_Alltoallv (") + what + ")");
  if (mine > 0) combine_pieces(pieces, mine, out, mine, n, dtype, op);
}

}  // namespace

void all_reduce_ordered(const void* send, void* recv, std::int64_t count, DType dtype, const Communicator& comm,
                        ReduceOp op) {
  const int n = comm.size();
  const auto item = static_cast<std::int64_t>(dtype_size(dtype));
  const MPI_Datatype type = mpi_datatype(dtype);
  // Whole elements per segment, at least one per rank; a segment's counts stay ints.
  const std::int64_t segment = std::max<std::int64_t>(n, kSegmentBytes / item);
  Tensor pieces = scratch_buffer(std::min(segment, count) * item);
  Tensor reduced = scratch_buffer((std::min(segment, count) / n + 1) * item);
  std::vector<int> counts(n), displs(n);
  for (std::int64_t begin = 0; begin < count; begin += segment) {
    const std::int64_t length = std::min(segment, count - begin);
    for (int k = 0, at = 0; k < n; ++k) {  // piece k (owned by rank k): balanced sizes
      counts[k] = static_cast<int>(length / n + (k < length % n ? 1 : 0));
      displs[k] = at;
      at += counts[k];
    }
    auto* out = static_cast<std::byte*>(recv) + begin * item;
    alltoall_combine(static_cast<const std::byte*>(send) + begin * item, counts, reduced.raw(), dtype, op, comm,
                     pieces.raw(), "all_reduce");
    check_mpi(MPI_Allgatherv(reduced.raw(), counts[comm.rank()], type, out, counts.data(), displs.data(), type,
                             comm.handle()),
              "MPI_Allgatherv (all_reduce)");
  }
}

namespace {

// Block k of `send` (counts[k] elements, the blocks consecutive) goes to rank k, which sums the n
// blocks it receives, in rank order, into recv (counts[me] elements). Each round moves a piece of
// every block: elements [begin, begin + kPieceBytes) of each, point to point, so that every offset
// is computed in 64 bits and the scratch holds n pieces, not n blocks (one MPI_Alltoall of 2.24 GB
// blocks on 2 ranks took 4.5 GB of scratch a rank). Rounds run until the longest block is done
// (the counts are alike on every rank); a block already done sends and receives nothing.
void reduce_scatter_in_pieces(const void* send, const std::vector<std::int64_t>& counts, void* recv, DType dtype,
                              const Communicator& comm) {
  const int n = comm.size();
  const int me = comm.rank();
  const std::int64_t item = static_cast<std::int64_t>(dtype_size(dtype));
  const MPI_Datatype type = mpi_datatype(dtype);
  const std::int64_t piece = std::max<std::int64_t>(1, kPieceBytes / item);
  std::vector<std::int64_t> starts(n);  // where block k begins in send
  for (int k = 1; k < n; ++k) starts[k] = starts[k - 1] + counts[k - 1];
  const std::int64_t longest = *std::max_element(counts.begin(), counts.end());
  const std::int64_t mine = counts[me];
  Tensor pieces = scratch_buffer(static_cast<std::int64_t>(n) * std::min(piece, mine) * item);
  auto* into = static_cast<std::byte*>(pieces.raw());
  std::vector<MPI_Request> requests;
  requests.reserve(2 * static_cast<std::size_t>(n));
  for (std::int64_t begin = 0; begin < longest; begin += piece) {
    const auto length_of = [&](int k) { return std::clamp<std::int64_t>(counts[k] - begin, 0, piece); };
    const std::int64_t length = length_of(me);
    requests.clear();
    if (length > 0) {
      for (int k = 0; k < n; ++k) {
        check_mpi(MPI_Irecv(into + k * length * item, static_cast<int>(length), type, k, kReduceScatterTag,
                            comm.handle(), &requests.emplace_back()),
                  "MPI_Irecv (reduce_scatter)");
      }
    }
    for (int j = 0; j < n; ++j) {
      const int k = (me + j) % n;  // each rank starts with its own piece, then the next rank's
      if (length_of(k) == 0) continue;
      const auto* from = static_cast<const std::byte*>(send) + (starts[k] + begin) * item;
      check_mpi(MPI_Isend(from, static_cast<int>(length_of(k)), type, k, kReduceScatterTag, comm.handle(),
                          &requests.emplace_back()),
                "MPI_Isend (reduce_scatter)");
    }
    check_mpi(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE),
              "MPI_Waitall (reduce_scatter)");
    if (length > 0) {
      combine_pieces(into, length, static_cast<std::byte*>(recv) + begin * item, length, n, dtype, ReduceOp::sum);
    }
  }
}

}  // namespace

void reduce_scatter_ordered(const void* send, void* recv, int count, DType dtype, const Communicator& comm) {
  reduce_scatter_in_pieces(send, std::vector<std::int64_t>(static_cast<std::size_t>(comm.size()), count), recv, dtype,
                           comm);
}

void reduce_scatter_ordered_v(const void* send, void* recv, const std::vector<int>& counts, DType dtype,
                              const Communicator& comm) {
  if (node_reduce_scatter(send, recv, counts, dtype, comm)) return;
  reduce_scatter_in_pieces(send, std::vector<std::int64_t>(counts.begin(), counts.end()), recv, dtype, comm);
}

}  // namespace tessera::detail
