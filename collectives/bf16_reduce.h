// Sums (and maxima) of bf16 blocks across ranks, computed in f32. MPI has no bf16 type, and a
// user-defined MPI_Op would round to bf16 at every pairwise step of MPI's reduction tree, in an
// order that depends on MPI's algorithm choice. Instead every element of the result is owned by
// one rank, which receives that element from every rank (an all-to-all of 2-byte elements),
// adds them in f32 in rank order and rounds once; the owners' pieces then go to every rank (an
// all-gather). The bytes are those of a ring all-reduce (2 (n-1)/n of the block, or (n-1)/n for
// a reduce-scatter), at 2 bytes an element; the result is the f32 sum in rank order rounded once,
// the same bits on every rank and for every MPI. Internal to the collectives layer.
#pragma once

#include <cstdint>
#include <vector>

#include "collectives/collectives.h"
#include "core/bfloat16.h"
#include "mesh/communicator.h"

namespace tessera::detail {

// recv[i] = round(sum over ranks r, in rank order, of f32(send_r[i])) for i < count (or the
// maximum). send may equal recv.
void all_reduce_bf16(const bfloat16* send, bfloat16* recv, std::int64_t count, const Communicator& comm, ReduceOp op);

// send is [n][count] (block k for rank k); recv[i] = round(sum over ranks r of f32(send_r[me][i])).
// count <= INT_MAX (the caller checks).
void reduce_scatter_bf16(const bfloat16* send, bfloat16* recv, int count, const Communicator& comm);
// Uneven pieces: send is piece k (counts[k] elements) for rank k, consecutively; recv gets
// counts[me] elements.
void reduce_scatter_bf16_v(const bfloat16* send, bfloat16* recv, const std::vector<int>& counts,
                           const Communicator& comm);

}  // namespace tessera::detail
