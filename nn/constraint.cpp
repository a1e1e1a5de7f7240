// Sharding constraints and resharding of Vars, and the losses built from the other ops.
#include "collectives/reshard.h"
#include "core/error.h"
#include "nn/ops.h"
#include "nn/propagation.h"

namespace tessera::nn {

Var reshard(const Var& x, const Spec& target) {
  ShardedTensor y = to_spec(x.value(), target);
  // The cotangent is resharded to x's spec by the tape when it is accumulated.
  return make_result("reshard", std::move(y), {x}, [](const ShardedTensor& g, GradSink& sink) { sink.add(0, g); });
}

Var with_sharding_constraint(const Var& x, const Spec& spec) {
  if (x.spec() == spec) return x;
  return reshard(x, spec);
}

Var with_logical_constraint(const Var& x, const std::vector<std::string>& names, const Rules& rules,
                            RulesFallback fallback) {
  auto spec = logical_to_spec(names, rules, fallback, x.value().name());
  if (!spec) return x;
  return with_sharding_constraint(x, *spec);
}

Var sum_loss(const Var& y) { return sum(y); }

Var mse_loss(const Var& prediction, const Var& target) {
  if (prediction.shape() != target.shape()) {
    throw ShapeError("mse_loss: prediction " + shape_to_string(prediction.shape()) + " and target " +
                     shape_to_string(target.shape()) + " differ");
  }
  return mean(square(sub(prediction, target)));
}

Var softmax_cross_entropy(const Var& logits, const Var& labels) {
  if (logits.shape() != labels.shape() || logits.rank() < 1) {
    throw ShapeError("softmax_cross_entropy: logits " + shape_to_string(logits.shape()) + " and labels " +
                     shape_to_string(labels.shape()) + " differ");
  }
  Var per_example = neg(sum(mul(labels, log_softmax(logits)), {logits.rank() - 1}));
  return mean(per_example);
}

}  // namespace tessera::nn
