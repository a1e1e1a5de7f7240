// Local-view collectives: each takes this rank's block and an ordered subset of mesh axes and
// runs one MPI collective on Mesh::axes_comm(axes), whose rank order (mixed radix of the axes'
// coordinates, first axis most significant) is the block order of a dimension split by those
// axes. They are what reshard is made of, and what shard_map's psum / all_gather / ... call.
//
// Every call is collective over axes_comm(axes): all ranks of it call it with the same axes,
// dimensions and block shape. Every call appends one CommRecord (see comm_stats.h) to
// CommStats::global(). Blocks move without packing when the dimension is the outermost one
// (all dimensions before it have extent 1); inner dimensions move through strided MPI datatypes
// (or memcpy packing, see layout.h). Errors (a dimension out of range, a size that does not
// divide, a bad permutation) are ShapeError / SpecError raised before any communication.
//
// Uneven blocks (core/spec.h's block rule, or any extents): the overloads taking block extents
// move blocks of different sizes along the dimension (MPI_Allgatherv, MPI_Alltoallv over
// block-major packed buffers). reduce_scatter and all_to_all without extents split a dimension
// that n does not divide by the block rule. Records count the real bytes:
// an all_gather sends (n - 1) times this rank's block, a reduce_scatter or all_to_all its input
// less the piece it keeps.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "collectives/comm_stats.h"
#include "core/spec.h"
#include "core/tensor.h"
#include "mesh/mesh.h"

namespace tessera {

// Concatenates the blocks of all ranks of axes_comm(axes) along `dim`, in rank order.
// Result: local.shape with dim multiplied by n.
Tensor all_gather(const Mesh& mesh, const Tensor& local, const Axes& axes, int dim);

// Uneven blocks: rank k's block has extents[k] along `dim` (extents[axes_rank] must be this
// rank's); the result has their sum.
Tensor all_gather(const Mesh& mesh, const Tensor& local, const Axes& axes, int dim,
                  const std::vector<std::int64_t>& extents);

// all_gather into the gathered tensor itself: `whole` holds this rank's block, extents[k] along
// `dim` at the offset of the extents before it, in place, and receives every other rank's block
// at its place. `dim` must be outermost (the dimensions before it of extent 1), so that blocks
// are consecutive in memory; else ShapeError. Used where a rank updated its part of a block that
// all ranks of the group hold (ZeRO's first stage, nn::Optimizer::shard_state_over).
void all_gather_in_place(const Mesh& mesh, Tensor& whole, const Axes& axes, int dim,
                         const std::vector<std::int64_t>& extents);

// Sums the blocks of all ranks, then keeps block axes_rank(axes) of n along `dim`, by the block
// rule of core/spec.h (blocks of ceil(size / n), the trailing ones short or empty). Each element
// is the sum in rank order of the ranks' values (an all-to-all to the block's owner, which adds:
// ordered_reduce.h), for every dtype and every MPI.
Tensor reduce_scatter(const Mesh& mesh, const Tensor& local, const Axes& axes, int dim);
// Rank k keeps the k-th piece of the given extents (they add up to local.shape[dim]).
Tensor reduce_scatter(const Mesh& mesh, const Tensor& local, const Axes& axes, int dim,
                      const std::vector<std::int64_t>& extents);

// Splits `split_dim` into n pieces (the block rule) and sends piece k to rank k; the pieces
// received are concatenated along `concat_dim` in rank order (every rank's concat extent is taken
// to be this rank's). Result: split_dim / n, concat_dim * n when n divides split_dim.
Tensor all_to_all(const Mesh& mesh, const Tensor& local, const Axes& axes, int split_dim, int concat_dim);
// Uneven: piece k has split_extents[k] along split_dim; rank k's block has concat_extents[k]
// along concat_dim.
Tensor all_to_all(const Mesh& mesh, const Tensor& local, const Axes& axes, int split_dim,
                  const std::vector<std::int64_t>& split_extents, int concat_dim,
                  const std::vector<std::int64_t>& concat_extents);

enum class ReduceOp { sum, max };
// Elementwise sum (or max) over the ranks of axes_comm(axes); every rank gets the same bits.
Tensor all_reduce(const Mesh& mesh, const Tensor& local, const Axes& axes, ReduceOp op = ReduceOp::sum);
// In place: reuses the storage of `local`.
Tensor all_reduce(const Mesh& mesh, Tensor&& local, const Axes& axes, ReduceOp op = ReduceOp::sum);

// Every rank gets the block of the rank at position `root` of axes_comm(axes).
Tensor broadcast(const Mesh& mesh, const Tensor& local, const Axes& axes, int root);

// How the collectives move blocks of an inner dimension (not consecutive in memory): through a
// strided MPI datatype (the default) or by memcpy packing into a block-major buffer. The
// environment variable TESSERA_PACK=memcpy|datatype sets the initial value; bench_collectives
// --pack compares the two.
enum class PackMethod { memcpy, datatype };
PackMethod pack_method();
void set_pack_method(PackMethod method);

// perm: pairs (source position, destination position) within axes_comm(axes), like
// jax.lax.ppermute: each position is a source at most once and a destination at most once; a
// rank that is no pair's destination gets zeros.
Tensor permute(const Mesh& mesh, const Tensor& local, const Axes& axes, const std::vector<std::pair<int, int>>& perm);

}  // namespace tessera
