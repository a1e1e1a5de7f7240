// Local-view collectives for the body of a shard_map (see nn/shard_map.h). Inside the body every
// Var is this rank's block on a one-rank "local" mesh; these ops name mesh axes of the REAL mesh
// of the innermost enclosing shard_map (no mesh argument, as in JAX) and run one collective of
// collectives/collectives.h on it, so every byte is counted in CommStats.
//
// Their gradients are the transpose pairs of JAX's shard_map design:
//   psum          <-> pbroadcast (identity: no communication)
//   pmax          -> the cotangent goes to the ranks holding the maximum (ties split evenly;
//                    counting the ties is one all-reduce of a 0/1 mask)
//   all_gather    <-> psum_scatter
//   all_to_all    <-> all_to_all with split and concat dimensions swapped
//   ppermute      <-> ppermute with the inverse permutation
// Every op throws, before any communication and identically on every rank, for an axis that is
// not in the mesh (SpecError), an axis named twice, a dimension out of range or a size that does
// not divide (ShapeError), or a call outside shard_map (Error).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "nn/var.h"

namespace tessera::nn {

// Whether this thread is inside the body of a shard_map.
bool in_shard_map();
// The real mesh of the innermost enclosing shard_map; Error outside one.
const Mesh& shard_map_mesh();

// This rank's position along `axes` (mixed radix, first axis most significant) and the number
// of positions. Plain integers: a Var made from them is a constant to the replication check.
int axis_index(const Axes& axes);
int axis_index(const std::string& axis);
int axis_size(const Axes& axes);
int axis_size(const std::string& axis);

// Sum / maximum over the ranks along `axes`; every rank gets the same block.
Var psum(const Var& x, const Axes& axes);
Var psum(const Var& x, const std::string& axis);
Var pmax(const Var& x, const Axes& axes);
Var pmax(const Var& x, const std::string& axis);

// Concatenation of the blocks along `axes` on dimension `dim` (tiled, in block order).
Var all_gather(const Var& x, const Axes& axes, int dim);
Var all_gather(const Var& x, const std::string& axis, int dim);

// Sum over `axes`, then this rank keeps its block of `dim` (dim divided by the axes' size).
Var psum_scatter(const Var& x, const Axes& axes, int dim);
Var psum_scatter(const Var& x, const std::string& axis, int dim);

// Splits `split_dim` in n pieces, piece k to position k; received pieces concatenated on
// `concat_dim` in position order.
Var all_to_all(const Var& x, const Axes& axes, int split_dim, int concat_dim);
Var all_to_all(const Var& x, const std::string& axis, int split_dim, int concat_dim);

// jax.lax.ppermute: pairs (source position, destination position) along `axes`; a position that
// is no pair's destination gets zeros.
Var ppermute(const Var& x, const Axes& axes, const std::vector<std::pair<int, int>>& perm);
Var ppermute(const Var& x, const std::string& axis, const std::vector<std::pair<int, int>>& perm);

}  // namespace tessera::nn
