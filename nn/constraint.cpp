// Sharding constraints and resharding of Vars.
#include "collectives/reshard.h"
#include "core/error.h"
#include "nn/ops.h"
#include "nn/propagation.h"

namespace tessera::nn {

Var reshard(const Var& x, const Spec& target) {
  // Checked here, before to_spec's shortcut: a target with more dimensions than x (None past its
  // last) compared equal to x's spec padded, and went through where a reshard refuses it.
  validate_spec(target, x.value().mesh().shape(), x.value().global_shape(), x.value().name());
  ShardedTensor y = to_spec(x.value(), target);
  // The cotangent is resharded to x's spec by the tape when it is accumulated.
  Var out = make_result("reshard", std::move(y), {x}, [](ShardedTensor& g, GradSink& sink) { sink.add(0, std::move(g)); });
  out.node()->passes_cotangent = true;
  return out;
}

Var with_sharding_constraint(const Var& x, const Spec& spec) {
  validate_spec(spec, x.value().mesh().shape(), x.value().global_shape(), x.value().name());
  if (x.spec() == spec) return x;
  return reshard(x, spec);
}

Var with_logical_constraint(const Var& x, const std::vector<std::string>& names, const Rules& rules,
                            RulesFallback fallback) {
  if (static_cast<int>(names.size()) != x.ndim()) {
    throw SpecError("with_logical_constraint: " + std::to_string(names.size()) + " logical names for '" +
                    x.value().name() + "' " + shape_to_string(x.value().global_shape()) + ", which has " +
                    std::to_string(x.ndim()) + " dimensions");
  }
  auto spec = logical_to_spec(names, rules, fallback, x.value().name());
  if (!spec) return x;
  return with_sharding_constraint(x, *spec);
}

}  // namespace tessera::nn
