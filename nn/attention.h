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
//              A d_head split over axes D is gathered first (q, k and v), and partial inputs are
//              reduced first: the op itself needs whole rows of d_head and no partial sums.
//
// The attention is one op (core/kernels.h, causal_attention_forward and _backward): per batch
// row and head, the scores of each block of query rows against the keys it sees, the masked
// softmax and the mix with V, read in place from the [batch, seq, heads, d_head] layout; the
// backward reuses the probabilities the forward kept ([batch, heads, seq_q, seq] per rank).
//
// f32, f64 or bf16. With bf16 (mixed precision) the rotation is computed in double and rounded
// once, and the attention runs in f32 (q, k and v widened on each rank, the scores, softmax and
// mix in f32, the output and the gradients rounded once), so K, V and their collectives stay
// bf16.
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
