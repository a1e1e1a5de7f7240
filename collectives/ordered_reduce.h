// Reductions whose every element is summed in rank order by the one rank that owns it. Every
// element of the result is owned by one rank, which receives that element from every rank (an
// all-to-all), combines the n values in rank order and keeps the result; an all-reduce then sends
// the owners' pieces to every rank (an all-gather). The bytes are those of a ring all-reduce
// (2 (n-1)/n of the block, or (n-1)/n for a reduce-scatter).
//
// reduce-scatter (every dtype): Open MPI 4.1's MPI_Reduce_scatter_block runs a reduce to one
// rank then a scatter, and MPI_Reduce_scatter is little better on shared memory; measured on this
// project's 2-core machine, 16 MiB of f32 per rank, 2 / 8 ranks: 7.7 / 313 ms for
// MPI_Reduce_scatter_block, 85 / 95 ms for MPI_Reduce_scatter, 2.9 / 18.5 ms for MPI_Alltoall
// plus the local sum (and 4.0 / 46 ms for a whole MPI_Allreduce). The sum in rank order also
// makes the result independent of MPI's algorithm choice.
//
// bf16 (all-reduce too): MPI has no bf16 type, and a user-defined MPI_Op would round to bf16 at
// every pairwise step of MPI's reduction tree, in an order that depends on MPI's algorithm
// choice. Its values are added in f32 in rank order and rounded once, the same bits on every
// rank and for every MPI. Internal to the collectives layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/collectives.h"
#include "core/bfloat16.h"
#include "mesh/communicator.h"

namespace tessera::detail {

// all_reduce takes the ordered path for bf16 and for blocks of at least this many bytes (MPI_Allreduce
// below: collectives/all_reduce.cpp).
inline constexpr std::size_t kOrderedAllReduceBytes = std::size_t{16} << 20;

// out[i] = the sum (or maximum) over k < n, in k order, of in[k * stride + i] for i < count
// (elements of `dtype`; bf16: in f32, rounded once; i32 sums wrap).
void combine_pieces(const void* in, std::int64_t stride, void* out, std::int64_t count, int n, DType dtype,
                    ReduceOp op);

// recv[i] = the sum (or maximum) over ranks r, in rank order, of send_r[i] for i < count (bf16:
// in f32, rounded once). send may equal recv. Runs in segments of 4 MiB, so its scratch is two
// segments whatever the count.
void all_reduce_ordered(const void* send, void* recv, std::int64_t count, DType dtype, const Communicator& comm,
                        ReduceOp op);

// send is [n][count] elements of `dtype` (block k for rank k); recv[i] = the sum over ranks r, in
// rank order, of send_r[me][i] (bf16: in f32, rounded once). count <= INT_MAX (the caller
// checks). Every dtype. Through MPI, in rounds of one piece of at most 4 MiB of every block, so
// its scratch is n pieces whatever the count: reduce_scatter tries the node channel first
// (node_reduce_scatter_blocks, which packs an inner dimension straight into its slot).
void reduce_scatter_ordered(const void* send, void* recv, int count, DType dtype, const Communicator& comm);
// Uneven blocks: send is block k (counts[k] elements) for rank k, consecutively; recv gets
// counts[me] elements. The node channel first (node_reduce_scatter), else through MPI in pieces
// as above.
void reduce_scatter_ordered_v(const void* send, void* recv, const std::vector<int>& counts, DType dtype,
                              const Communicator& comm);

}  // namespace tessera::detail
