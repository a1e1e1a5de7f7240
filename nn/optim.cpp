// Optimizer updates: one fused pass over each parameter's local block (Adam reads p, g, mu,
// nu and writes p, mu, nu: the 28 bytes per f32 parameter of the performance model).
#include "nn/optim.h"

#include <cmath>
#include <sstream>

#include "core/error.h"

namespace tessera::nn {

namespace {

template <class T>
void sgd_block(T* p, const T* g, T* trace, std::int64_t n, T lr, T momentum, bool nesterov) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T t = g[i] + momentum * (trace ? trace[i] : T(0));
    if (trace) trace[i] = t;
    p[i] -= lr * (nesterov ? g[i] + momentum * t : t);
  }
}

void check_grad(const std::string& path, const ShardedTensor& p, const ShardedTensor& g) {
  if (!(g.spec() == p.spec()) || g.global_shape() != p.global_shape() || g.dtype() != p.dtype()) {
    throw ShapeError("optimizer: gradient of '" + path + "' is " + g.describe() + ", parameter is " + p.describe());
  }
}

}  // namespace

OptState Optimizer::init(const ParamTree& params) const {
  OptState s;
  if (kind == Kind::sgd) {
    if (momentum != 0.0) s.mu = zeros_like(params);
  } else {
    s.mu = zeros_like(params);
    s.nu = zeros_like(params);
  }
  return s;
}

void Optimizer::begin_step(OptState& state) const { state.count += 1; }

template <class T>
AdamConstants<T> Optimizer::adam_constants(const OptState& state) const {
  const double t = state.count;
  return {T(b1), T(b2), T(eps), T(learning_rate), T(1.0 / (1.0 - std::pow(b1, t))), T(1.0 / (1.0 - std::pow(b2, t))),
          T(kind == Kind::adamw ? weight_decay : 0.0)};
}

// Elements [begin, begin + count) of parameter `path`'s local block and of its state, updated
// from `g` (those elements of the gradient, in the parameter's dtype).
void Optimizer::update_elements(const std::string& path, ShardedTensor& p, OptState& state, std::int64_t begin,
                                std::int64_t count, const void* g) const {
  // Named references, not a structured binding: the dispatch lambda below captures them, which
  // clang before 16 refuses for bindings (the fuzz build compiles with clang 14).
  dispatch_dtype(p.dtype(), [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_floating_point_v<T>) {
      const T* grad = static_cast<const T*>(g);
      T* param = p.local().template data<T>() + begin;
      if (kind == Kind::sgd) {
        T* trace = momentum != 0.0 ? state.mu.at(path).local().template data<T>() + begin : nullptr;
        sgd_block<T>(param, grad, trace, count, T(learning_rate), T(momentum), nesterov);
      } else {
        adam_update(param, grad, state.mu.at(path).local().template data<T>() + begin,
                    state.nu.at(path).local().template data<T>() + begin, count, adam_constants<T>(state));
      }
    } else {
      throw Error("optimizer: parameter '" + path + "' is not floating point");
    }
  });
}

void Optimizer::update_param(const std::string& path, ShardedTensor& p, const ShardedTensor& g,
                             OptState& state) const {
  check_grad(path, p, g);
  update_elements(path, p, state, 0, p.local().numel(), g.local().raw());
}

bool Optimizer::update_param_rows(const std::string& path, ShardedTensor& p, RowGradient& g, OptState& state) const {
  const std::int64_t rows = g.rows(), width = g.row_elements();
  if (p.dtype() != DType::f32 || rows * width != p.local().numel() ||
      (p.local().ndim() > 0 && p.local().shape()[0] != rows)) {
    throw ShapeError("optimizer: gradient of '" + path + "' comes in " + std::to_string(rows) + " rows of " +
                     std::to_string(width) + " f32, parameter is " + p.describe());
  }
  if (kind != Kind::sgd && rows > 0 &&
      g.produce_adam(0, rows, p.local().data<float>(), state.mu.at(path).local().data<float>(),
                     state.nu.at(path).local().data<float>(), adam_constants<float>(state))) {
    return true;
  }
  const std::int64_t row_bytes = std::max<std::int64_t>(width, 1) * static_cast<std::int64_t>(sizeof(float));
  const std::int64_t panel = std::max<std::int64_t>(1, kRowPanelBytes / row_bytes);
  Tensor buffer = Tensor::empty({std::min(panel, rows) * width}, DType::f32);
  for (std::int64_t begin = 0; begin < rows; begin += panel) {
    const std::int64_t end = std::min(rows, begin + panel);
    g.produce(begin, end, buffer.data<float>());
    update_elements(path, p, state, begin * width, (end - begin) * width, buffer.data<float>());
  }
  return false;
}

void Optimizer::update(ParamTree& params, const ParamTree& grads, OptState& state) const {
  begin_step(state);
  for (auto& entry : params) {
    auto git = grads.find(entry.first);
    if (git == grads.end()) throw Error("optimizer: no gradient for parameter '" + entry.first + "'");
    update_param(entry.first, entry.second, git->second, state);
  }
}

std::string Optimizer::to_string() const {
  std::ostringstream out;
  switch (kind) {
    case Kind::adam:
      out << "adam(lr=" << learning_rate << ", b1=" << b1 << ", b2=" << b2 << ", eps=" << eps << ")";
      break;
    case Kind::adamw:
      out << "adamw(lr=" << learning_rate << ", weight_decay=" << weight_decay << ", b1=" << b1 << ", b2=" << b2
          << ", eps=" << eps << ")";
      break;
    case Kind::sgd:
      out << "sgd(lr=" << learning_rate << ", momentum=" << momentum << (nesterov ? ", nesterov" : "") << ")";
      break;
  }
  return out.str();
}

Optimizer adam(double learning_rate, double b1, double b2, double eps) {
  Optimizer o;
  o.kind = Optimizer::Kind::adam;
  o.learning_rate = learning_rate;
  o.b1 = b1;
  o.b2 = b2;
  o.eps = eps;
  return o;
}

Optimizer adamw(double learning_rate, double weight_decay, double b1, double b2, double eps) {
  Optimizer o = adam(learning_rate, b1, b2, eps);
  o.kind = Optimizer::Kind::adamw;
  o.weight_decay = weight_decay;
  return o;
}

Optimizer sgd(double learning_rate, double momentum, bool nesterov) {
  Optimizer o;
  o.kind = Optimizer::Kind::sgd;
  o.learning_rate = learning_rate;
  o.momentum = momentum;
  o.nesterov = nesterov;
  return o;
}

}  // namespace tessera::nn
