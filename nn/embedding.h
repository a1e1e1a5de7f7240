// Token embedding with the vocabulary split over mesh axes (Megatron's VocabParallelEmbedding),
// without gathering the table. What moves:
//
//   forward    each rank looks up the tokens of its block that fall in its vocabulary rows
//              (zeros for the others) and the [tokens..., d] block is summed over the vocabulary
//              axes: exactly one all-reduce (psum) of the result's block, nothing else when the
//              tokens do not use the vocabulary axes and the table's d dimension does not use the
//              tokens' axes. Otherwise: tokens split over a vocabulary axis are resharded off it
//              (small integers), and a table whose d dimension is split over an axis the tokens
//              use is gathered along d (FSDP's weight all-gather).
//   backward   each rank scatter-adds its tokens' cotangent rows into its vocabulary rows: a
//              table cotangent partial over the tokens' axes, which the tape reduces to the
//              table's spec (a reduce-scatter or all-reduce over data / seq, as for any weight).
//
// Token ids must lie in [0, vocabulary): one outside is a ShapeError on every rank, agreed on in
// one small all-reduce (only the ranks holding it see it; until 2026-11-28 those threw alone and
// the others waited in the result's all-reduce).
#pragma once

#include "nn/var.h"

namespace tessera::nn {

// table [vocabulary, d] (f32 or f64), tokens of any shape (i32) -> [tokens..., d].
Var embed(const Var& table, const ShardedTensor& tokens);

}  // namespace tessera::nn
