// Sharding constraints and resharding of Vars.
#include "collectives/reshard.h"
#include "core/error.h"
#include "nn/ops.h"
#include "nn/propagation.h"

namespace tessera::nn {

Var reshard(const Var& x, const Spec& target) {
  ShardedTensor y = to_spec(x.value(), target);
  // The cotangent is resharded to x's spec by the tape when it is accumulated.
  Var out = make_result("reshard", std::move(y), {x}, [](ShardedTensor& g, GradSink& sink) { sink.add(0, std::move(g)); });
  out.node()->passes_cotangent = true;
  return out;
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

}  // namespace tessera::nn
