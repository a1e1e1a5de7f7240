// The general redistribution behind reshard's order changes (the "redistribute" step): every
// rank sends each other rank exactly the part of its block that the other rank's new block needs (one MPI_Alltoallv over the axes
// that split the tensor before or after), so every element moves at most once. Used where the
// named collectives cannot express a move (an axis order change inside a dimension, two axes
// that swap dimensions). Partial axes stay put: summands never mix. Internal to collectives.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/mesh_shape.h"
#include "core/spec.h"
#include "core/tensor.h"
#include "mesh/mesh.h"

namespace tessera::detail {

// One box moved from a rank's `from` block to a peer's `to` block.
struct Box {
  int peer = 0;                        // position of the other rank in axes_comm(redistribute_axes)
  std::vector<std::int64_t> at_from;   // offsets of the box inside the `from` block
  std::vector<std::int64_t> at_to;     // offsets of the box inside the `to` block
  Shape shape;
  std::int64_t numel() const;
};

struct RedistributeBoxes {
  std::vector<Box> sends;     // boxes of my `from` block, by peer (self included)
  std::vector<Box> receives;  // boxes of my `to` block, by peer (self included)
};

// The mesh axes a redistribution communicates over: those that split a dimension in `from` or in
// `to`, in mesh order. `from` and `to` have the same partial axes.
Axes redistribute_axes(const MeshShape& mesh, const Spec& from, const Spec& to);

// The boxes of the rank at `coords`. Each box of a `to` block is taken from the holder whose
// coordinates on the axes that `from` leaves replicated equal the receiver's, so that a
// replicated -> split axis is a local slice.
RedistributeBoxes redistribute_boxes(const MeshShape& mesh, const Spec& from, const Spec& to, const Shape& global,
                                     const std::vector<int>& coords);

// Elements that position s of axes_comm(redistribute_axes) sends to position q (s == q: kept),
// for the group through coordinate 0 on the other axes (every group moves alike).
std::vector<std::vector<std::int64_t>> redistribute_matrix(const MeshShape& mesh, const Spec& from, const Spec& to,
                                                       const Shape& global);

// When every rank sends its whole block to at most one other rank and receives its whole new
// block from at most one: the (source, destination) positions in axes_comm(redistribute_axes), for
// permute(). Empty optional otherwise.
bool redistribute_is_permutation(const MeshShape& mesh, const Spec& from, const Spec& to, const Shape& global,
                             std::vector<std::pair<int, int>>* pairs);

// Moves `local` (this rank's block under `from`) to its block under `to`. Collective over
// axes_comm(redistribute_axes); records one "redistribute" CommRecord.
Tensor redistribute(const Mesh& mesh, const Spec& from, const Spec& to, const Shape& global, const Tensor& local);

}  // namespace tessera::detail
