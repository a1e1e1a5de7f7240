// rmsnorm and layernorm composed from global-view ops, so that their sharding and autodiff are
// those of mean, mul and rsqrt (the centred form keeps layernorm's variance accurate).
#include "nn/normalization.h"

#include "core/error.h"
#include "nn/activations.h"
#include "nn/ops.h"

namespace tessera::nn {

namespace {

void check_feature_vector(const char* op, const char* role, const Var& x, const Var& v) {
  if (x.ndim() < 1) throw ShapeError(std::string(op) + ": '" + x.value().name() + "' needs at least one dimension");
  const std::int64_t d = x.shape().back();
  if (v.ndim() != 1 || v.shape()[0] != d) {
    throw ShapeError(std::string(op) + ": " + role + " '" + v.value().name() + "' " + shape_to_string(v.shape()) +
                     " does not match the last dimension of '" + x.value().name() + "' " + shape_to_string(x.shape()));
  }
}

}  // namespace

Var rmsnorm(const Var& x, const Var& weight, double eps) {
  check_feature_vector("rmsnorm", "weight", x, weight);
  const int last = x.ndim() - 1;
  Var inv = rsqrt(mean(square(x), {last}, true), eps);
  return mul(mul(x, inv), weight);
}

Var layernorm(const Var& x, const Var& weight, const Var& bias, double eps) {
  check_feature_vector("layernorm", "weight", x, weight);
  check_feature_vector("layernorm", "bias", x, bias);
  const int last = x.ndim() - 1;
  Var centred = sub(x, mean(x, {last}, true));
  Var inv = rsqrt(mean(square(centred), {last}, true), eps);
  return add(mul(mul(centred, inv), weight), bias);
}

}  // namespace tessera::nn
