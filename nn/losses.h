// Losses: sum, mean squared error, softmax cross-entropy with one-hot labels, and the
// language-model loss with the vocabulary split over mesh axes (Megatron's vocab-parallel
// cross-entropy), computed without gathering the logits. What moves, for logits [rows..., V]
// whose V is split over axes A (A empty: nothing moves):
//
//   forward    per row, the local max over this rank's vocabulary slice, then one all-reduce
//              (max) of the [rows] maxima over A; the local sum of exp(logit - max) and the
//              label's logit (0 on the ranks whose slice does not hold it), then one all-reduce
//              (sum) of those [rows, 2] values over A. Nothing else: the labels take the logits'
//              spec on the row dimensions (a local slice when they are replicated). The loss is
//              partial over the row dimensions' axes until read.
//   backward   none: softmax - onehot is computed on each rank's block from the saved max and
//              sum of exponentials.
//
// Label ids must lie in [0, V): a rank holding one outside throws ShapeError.
#pragma once

#include "nn/var.h"

namespace tessera::nn {

// Losses are scalars, possibly partial until read.
Var sum_loss(const Var& y);
Var mse_loss(const Var& prediction, const Var& target);
// Mean over the leading (batch) dimension of -sum(labels * log_softmax(logits)) (optax's
// softmax_cross_entropy with one-hot or soft labels).
Var softmax_cross_entropy(const Var& logits, const Var& labels);

// mean over rows of -log_softmax(logits)[row, labels[row]]; logits [rows..., V] (f32 or f64),
// labels [rows...] (i32). optax.softmax_cross_entropy_with_integer_labels, then the mean.
Var softmax_cross_entropy_with_integer_labels(const Var& logits, const ShardedTensor& labels);

}  // namespace tessera::nn
