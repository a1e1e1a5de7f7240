// rmsnorm: one fused op when each rank holds whole rows, else (and layernorm always) composed
// from global-view ops, so that their sharding and autodiff are those of mean, mul and rsqrt
// (the centred form keeps layernorm's variance accurate).
#include "nn/normalization.h"

#include <memory>

#include "core/error.h"
#include "core/kernels.h"
#include "nn/activations.h"
#include "nn/ops.h"
#include "nn/propagation.h"

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
  const Spec x_spec = x.spec().padded(x.ndim()).without_partial();
  if (!x_spec.axes(last).empty() || x.dtype() != weight.dtype()) {
    // The features split over axes: composed, so that each rank sums its slice and only the
    // rows' statistics are all-reduced.
    Var inv = rsqrt(mean(square(x), {last}, true), eps);
    return mul(mul(x, inv), weight);
  }
  // Whole rows on each rank: one fused kernel each way (core/kernels.h, rmsnorm_forward and
  // _backward), the statistics kept for the backward pass. x without partial axes, the weight
  // replicated; each reshard is differentiable, so the tape takes the cotangents back.
  const Var xw = x.spec() == x_spec ? x : reshard(x, x_spec);
  const Spec w_spec = Spec::replicated(1);
  const Var ww = weight.spec() == w_spec ? weight : reshard(weight, w_spec);
  Tensor y;
  auto inv = std::make_shared<Tensor>();
  rmsnorm_forward(xw.value().local(), ww.value().local(), eps, y, *inv);
  ShardedTensor out(x.mesh(), x_spec, x.shape(), std::move(y));
  return make_result("rmsnorm", std::move(out), {xw, ww}, [xw, ww, inv, x_spec](const ShardedTensor& g, GradSink& sink) {
    ShardedTensor moved;
    const ShardedTensor& gl = on_spec(g, x_spec, moved);
    Tensor dx, dw;
    rmsnorm_backward(xw.value().local(), ww.value().local(), *inv, gl.local(), dx, dw);
    if (sink.wants(0)) sink.add(0, ShardedTensor(g.mesh(), x_spec, g.global_shape(), std::move(dx)));
    // Each rank sums over its rows: partial over the axes that split them.
    if (sink.wants(1)) {
      sink.add(1, ShardedTensor(g.mesh(), Spec(std::vector<Axes>(1), x_spec.used_axes()), ww.shape(), std::move(dw)));
    }
  });
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
