// Normalisations over the last dimension (the features), as in a transformer's blocks. weight and
// bias have shape [d] (the last dimension) and broadcast over the rows; the result keeps x's spec
// (without partial axes).
//
// rmsnorm with whole rows on each rank (the features unsplit; x's other dimensions split any way)
// is one op each way (core/kernels.h, rmsnorm_forward and _backward): one pass over x forward,
// one back, the rows' statistics kept between them, the weight used replicated (gathered first if
// it is split) and its gradient a sum over each rank's rows, partial over the axes splitting them
// until the tape reduces it. With the features split over axes (and layernorm always) the ops are
// global-view ops: the statistics are means over the last dimension, so each rank sums its slice
// and the [..., 1] statistics are all-reduced over those axes (the only communication: one value
// per row).
#pragma once

#include "nn/var.h"

namespace tessera::nn {

// x / sqrt(mean(x^2) + eps) * weight (Zhang & Sennrich 2019).
Var rmsnorm(const Var& x, const Var& weight, double eps = 1e-6);
// (x - mean(x)) / sqrt(var(x) + eps) * weight + bias, the variance biased (as in PyTorch).
Var layernorm(const Var& x, const Var& weight, const Var& bias, double eps = 1e-5);

}  // namespace tessera::nn
