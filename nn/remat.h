// Rematerialisation (jax.checkpoint): remat(fn) is fn, except that the tape keeps only the
// block's inputs and its output, not the activations inside it. The forward pass runs fn with
// the tape off (NoTape); the backward pass runs fn again on the same inputs, with the tape on,
// and differentiates that recomputation. Peak memory drops by the block's activations; the cost
// is one more forward pass of the block (and its collectives) per backward pass.
//
// fn must be a pure function of its inputs: every Var it uses that needs a gradient must be one
// of `inputs` (parameters included). A Var captured from outside that needs a gradient is an
// error in the backward pass (its gradient would be lost). Given that, gradients are bit for bit
// those without remat: the recomputation gives the same values (ops are deterministic), and the
// cotangents reach the inputs resharded exactly as the plain tape would reshard them (an input
// whose cotangent the outer tape keeps raw is kept raw).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "nn/var.h"

namespace tessera::nn {

using BlockFn = std::function<Var(const std::vector<Var>& inputs)>;

// fn(inputs), recorded on the tape as one op "remat:<name>" holding only inputs and result.
Var remat_call(const BlockFn& fn, const std::vector<Var>& inputs, const std::string& name = "block");

// The rematerialised version of fn: remat(fn)({x, w1, w2}).
BlockFn remat(BlockFn fn, std::string name = "block");

}  // namespace tessera::nn
