// Rotary position embeddings and causal scaled dot-product attention on [batch, seq, heads,
// d_head] tensors. What moves:
//
//   rotary     nothing: each rank rotates its block by the global positions of its sequence
//              slice. d_head must be unsplit (a split d_head is gathered first); partial axes kept.
//   attention  heads (or batch) split over any axes: nothing. A sequence dimension split over
//              axes S (context parallelism): K and V are all-gathered over S (their sequence made
//              whole, the rest of their spec made q's), so that every rank scores its query rows
//              against all keys; the result keeps q's spec, exact. Backward: the cotangents of K
//              and V come back partial over S and are reduce-scattered to their specs by the tape.
//              A d_head split over axes D gives partial scores, all-reduced over D before the
//              softmax (avoid it: keep d_head unsplit).
//
// f32, f64 or bf16. With bf16 (mixed precision) the rotation is computed in double and rounded
// once, and the attention's softmax runs in f32: the scores are cast up, the probabilities cast
// back to bf16 for the mixing matmul, so K, V and their collectives stay bf16.
#pragma once

#include "nn/var.h"

namespace tessera::nn {

// x [batch, seq, heads, d_head] (d_head even) rotated by position p = the index along dimension 1
// plus `offset`: the pairs (x[i], x[i + d_head/2]) by p * base^(-2i/d_head) (GPT-NeoX / LLaMA's
// half-split layout).
Var rotary(const Var& x, double base = 10000.0, std::int64_t offset = 0);

// softmax(q k^T / sqrt(d_head) + causal mask) v per batch and head: q, k, v [batch, seq, heads,
// d_head] -> [batch, seq, heads, d_head]; query i attends to keys 0..i.
Var causal_attention(const Var& q, const Var& k, const Var& v);

}  // namespace tessera::nn
