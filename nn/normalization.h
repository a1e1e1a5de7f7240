// Normalisations over the last dimension (the features), as in a transformer's blocks.
// Built from global-view ops: the statistics are means over the last dimension, so when that
// dimension is split over axes each rank sums its slice and the [..., 1] statistics are
// all-reduced over those axes (the only communication: one value per row); the result keeps x's
// spec. weight and bias have shape [d] (the last dimension) and broadcast over the rows.
#pragma once

#include "nn/var.h"

namespace tessera::nn {

// x / sqrt(mean(x^2) + eps) * weight (Zhang & Sennrich 2019).
Var rmsnorm(const Var& x, const Var& weight, double eps = 1e-6);
// (x - mean(x)) / sqrt(var(x) + eps) * weight + bias, the variance biased (as in PyTorch).
Var layernorm(const Var& x, const Var& weight, const Var& bias, double eps = 1e-5);

}  // namespace tessera::nn
