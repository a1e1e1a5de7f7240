// Shape ops on Vars: reshape, permute / transpose, concat, slice / split. What each moves:
//
//   reshape    nothing. Dimensions are grouped into runs whose sizes have equal products (a run
//              of old dimensions becomes a run of new ones: a split or a merge). Within a run
//              only the major (first non-1) old dimension may be split; its axes move to the
//              major new dimension of the run, whose size they must divide. Anything else (a
//              split on a minor dimension) is a ShapeError naming the dimension: reshard first.
//              Partial axes are kept (reshape is linear).
//   permute    nothing: the spec's dimensions are permuted with the data, partial axes kept.
//   concat     inputs are resharded to the first input's spec with `dim` unsplit (a gather of
//              that dimension for inputs split there; nothing for the usual case of an unsplit
//              `dim`), partial axes reduced first.
//   slice      nothing when `dim` is unsplit; a split `dim` is gathered first.
// Backward passes move the same data in reverse (each cotangent is resharded to its input's
// spec by the tape, as for every op).
#pragma once

#include <cstdint>
#include <vector>

#include "nn/var.h"

namespace tessera::nn {

// x with the same elements in row-major order and shape `shape` (numel must agree; one entry
// may be -1, inferred).
Var reshape(const Var& x, Shape shape);
// Dimension d of the result is dimension perm[d] of x (numpy.transpose's axes).
Var permute(const Var& x, const std::vector<int>& perm);
// x with dimensions d0 and d1 swapped.
Var transpose(const Var& x, int d0, int d1);
// The inputs joined along `dim`; every other dimension must agree.
Var concat(const std::vector<Var>& xs, int dim);
// Elements [start, start + length) of dimension `dim`.
Var slice(const Var& x, int dim, std::int64_t start, std::int64_t length);
// x cut along `dim` into consecutive pieces of the given sizes (which must sum to the dimension).
std::vector<Var> split(const Var& x, const std::vector<std::int64_t>& sizes, int dim);

}  // namespace tessera::nn
