// Activations on Vars: elementwise, so a result keeps its input's spec (a partial input is
// reduced first, as for every nonlinear op) and nothing moves otherwise. softmax normalises over
// the last dimension and, like log_softmax, gathers that dimension first when it is split.
#pragma once

#include "nn/var.h"

namespace tessera::nn {

// GELU, exact: x * Phi(x) = 0.5 * x * (1 + erf(x / sqrt(2))).
Var gelu(const Var& x);
// GELU, tanh approximation: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))).
Var gelu_tanh(const Var& x);
// SiLU (swish): x * sigmoid(x), with sigmoid computed without overflow for large |x|.
Var silu(const Var& x);
// 1 / sqrt(x + eps) (the normalisations' scale).
Var rsqrt(const Var& x, double eps = 0.0);
// softmax over the last dimension: exp(log_softmax(x)), stable for large logits.
Var softmax(const Var& x);

}  // namespace tessera::nn
