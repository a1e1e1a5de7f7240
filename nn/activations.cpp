// Activations: one local kernel per function and its derivative, applied to each rank's block.
#include "nn/activations.h"

#include <cmath>
#include <numbers>

#include "core/bfloat16.h"
#include "core/error.h"
#include "core/kernels.h"
#include "nn/ops.h"
#include "nn/propagation.h"

namespace tessera::nn {

namespace {

// fn applied to every element of x's block (partial axes reduced first: fn is nonlinear).
template <class Fn>
ShardedTensor map_elements(const ShardedTensor& x, const char* op, Fn fn) {
  ShardedTensor in = resolve_partial(x);
  Tensor out(in.local().shape(), in.dtype());
  auto apply = [&](auto tag) {
    using T = decltype(tag);
    const T* src = in.local().data<T>();
    T* dst = out.data<T>();
    for (std::int64_t i = 0; i < out.numel(); ++i) dst[i] = static_cast<T>(fn(static_cast<double>(src[i])));
  };
  switch (in.dtype()) {
    case DType::f32:
      apply(float{});
      break;
    case DType::f64:
      apply(double{});
      break;
    case DType::bf16:  // computed in double, rounded once
      apply(bfloat16{});
      break;
    default:
      throw DTypeError(std::string(op) + ": '" + x.name() + "' has dtype " + std::string(dtype_name(x.dtype())) +
                       ", not a floating-point one");
  }
  return ShardedTensor(in.mesh(), in.spec(), in.global_shape(), std::move(out));
}

// An elementwise op: y = f(x), dx = g * f'(x).
template <class F, class DF>
Var elementwise(const Var& x, const char* op, F f, DF df) {
  return make_result(op, map_elements(x.value(), op, f), {x}, [x, op, df](const ShardedTensor& g, GradSink& sink) {
    sink.add(0, binary(BinaryOp::mul, g, map_elements(x.value(), op, df)));
  });
}

// sigmoid without overflow: exp of a non-positive number only.
double sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

constexpr double inv_sqrt2 = 0.70710678118654752440;
constexpr double inv_sqrt_2pi = 0.39894228040143267794;

}  // namespace

Var gelu(const Var& x) {
  return elementwise(
      x, "gelu", [](double v) { return 0.5 * v * std::erfc(-v * inv_sqrt2); },
      // Phi(x) + x * phi(x)
      [](double v) { return 0.5 * std::erfc(-v * inv_sqrt2) + v * inv_sqrt_2pi * std::exp(-0.5 * v * v); });
}

Var gelu_tanh(const Var& x) {
  // The vectorized kernels of core/kernels.h (in x's dtype) rather than a scalar function in
  // double: the tanh form is the one a transformer's MLP runs every step.
  // A partial x is reduced first (the function is nonlinear); otherwise its block is read in
  // place, and the backward pass reads x again rather than keeping a copy.
  const auto apply = [](const ShardedTensor& v, Tensor (*kernel)(const Tensor&)) {
    if (v.spec().is_partial()) {
      const ShardedTensor whole = resolve_partial(v);
      return ShardedTensor(whole.mesh(), whole.spec(), whole.global_shape(), kernel(whole.local()));
    }
    return ShardedTensor(v.mesh(), v.spec(), v.global_shape(), kernel(v.local()));
  };
  // The backward pass multiplies g by the derivative in the same pass where g lies on x's
  // blocks (the MLP's: both [batch, seq, d_ff / model]); otherwise binary aligns the two.
  return make_result("gelu_tanh", apply(x.value(), tessera::gelu_tanh), {x},
                     [x, apply](const ShardedTensor& g, GradSink& sink) {
                       const ShardedTensor& v = x.value();
                       if (!v.spec().is_partial() && g.spec() == v.spec() && g.global_shape() == v.global_shape() &&
                           g.dtype() == v.dtype()) {
                         sink.add(0, ShardedTensor(v.mesh(), v.spec(), v.global_shape(),
                                                   tessera::gelu_tanh_backward(v.local(), g.local())));
                         return;
                       }
                       sink.add(0, binary(BinaryOp::mul, g, apply(v, tessera::gelu_tanh_grad)));
                     });
}

Var silu(const Var& x) {
  return elementwise(
      x, "silu", [](double v) { return v * sigmoid(v); },
      [](double v) {
        const double s = sigmoid(v);
        return s * (1.0 + v * (1.0 - s));
      });
}

Var rsqrt(const Var& x, double eps) {
  return elementwise(
      x, "rsqrt", [eps](double v) { return 1.0 / std::sqrt(v + eps); },
      [eps](double v) { return -0.5 / ((v + eps) * std::sqrt(v + eps)); });
}

Var softmax(const Var& x) {
  const int last = x.ndim() - 1;
  if (last < 0) throw ShapeError("softmax: needs at least one dimension");
  // One fused kernel each way (core/kernels.h): the normalisation needs the whole last
  // dimension on each rank, and the backward pass needs only the saved output.
  ShardedTensor moved;
  const ShardedTensor& in = whole_along(x.value(), last, moved);
  ShardedTensor y(in.mesh(), in.spec(), in.global_shape(), tessera::softmax_last(in.local()));
  ShardedTensor saved = y;
  return make_result("softmax", std::move(y), {x}, [saved = std::move(saved)](const ShardedTensor& g, GradSink& sink) {
    ShardedTensor moved;
    const ShardedTensor& gl = on_spec(g, saved.spec(), moved);
    sink.add(0, ShardedTensor(saved.mesh(), saved.spec(), saved.global_shape(),
                              tessera::softmax_last_grad(saved.local(), gl.local())));
  });
}

}  // namespace tessera::nn
