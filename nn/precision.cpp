// cast and the mixed-precision policy (see precision.h).
#include "nn/precision.h"

#include "core/error.h"

namespace tessera::nn {

namespace {

void require_floating(DType from, DType to, const std::string& name) {
  if (!is_floating(from) || !is_floating(to)) {
    throw DTypeError("cast: '" + name + "' from " + std::string(dtype_name(from)) + " to " +
                     std::string(dtype_name(to)) + ": only f32, f64 and bf16 convert");
  }
}

}  // namespace

ShardedTensor cast(const ShardedTensor& x, DType dtype) {
  require_floating(x.dtype(), dtype, x.name());
  if (x.dtype() == dtype) return x;
  return ShardedTensor(x.mesh(), x.spec(), x.global_shape(), x.local().astype(dtype), x.name());
}

Var cast(const Var& x, DType dtype) {
  require_floating(x.dtype(), dtype, x.value().name());
  if (x.dtype() == dtype) return x;
  const DType from = x.dtype();
  return make_result("cast", cast(x.value(), dtype), {x},
                     [from](const ShardedTensor& g, GradSink& sink) { sink.add(0, cast(g, from)); });
}

Precision Precision::parse(std::string_view name) {
  if (name == "f32") return Precision{DType::f32, DType::f32};
  if (name == "bf16") return Precision{DType::f32, DType::bf16};
  throw UsageError("unknown precision '" + std::string(name) + "' (expected f32 or bf16)");
}

VarTree Precision::cast_params(const VarTree& params) const {
  if (!mixed()) return params;
  VarTree out;
  for (const auto& [path, var] : params) out.emplace(path, cast(var, compute));
  return out;
}

}  // namespace tessera::nn
