// Elementwise ops with broadcasting: spec alignment, partial rules, local kernels, and VJPs.
#include <algorithm>
#include <cmath>
#include <set>

#include "collectives/collectives.h"
#include "collectives/reshard.h"
#include "core/error.h"
#include "nn/ops.h"
#include "nn/propagation.h"

namespace tessera::nn {

namespace {

const char* op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add:
      return "add";
    case BinaryOp::sub:
      return "sub";
    case BinaryOp::mul:
      return "mul";
    case BinaryOp::div:
      return "div";
    case BinaryOp::max:
      return "max";
    case BinaryOp::min:
      return "min";
  }
  return "?";
}

// Axes of each output dimension as `x` splits it; nullopt where x broadcasts (size 1 there or
// absent).
std::vector<std::optional<Axes>> mapped(const ShardedTensor& x, const Shape& out) {
  const int r = static_cast<int>(out.size());
  const int offset = r - x.ndim();
  std::vector<std::optional<Axes>> m(r);
  for (int d = 0; d < x.ndim(); ++d) {
    if (x.global_shape()[d] == out[d + offset]) m[d + offset] = x.spec().axes(d);
  }
  return m;
}

std::set<std::string> used_axes(const std::vector<std::optional<Axes>>& m) {
  std::set<std::string> out;
  for (const auto& d : m)
    if (d)
      for (const auto& a : *d) out.insert(a);
  return out;
}

bool dims_consistent(const std::vector<std::optional<Axes>>& ma, const std::vector<std::optional<Axes>>& mb) {
  std::set<std::string> seen_a = used_axes(ma);
  for (std::size_t d = 0; d < ma.size(); ++d) {
    if (ma[d] && mb[d] && *ma[d] != *mb[d]) return false;
    if (!ma[d] && mb[d]) {
      for (const auto& axis : *mb[d])
        if (seen_a.count(axis)) return false;
    }
  }
  // An axis of b on a dimension where a is absent must not be used by a elsewhere (checked
  // above); an axis of b used by a on another dimension is caught by the per-dimension check.
  return true;
}

// The spec `x` takes to agree with `other` on every dimension both have.
Spec adopt(const ShardedTensor& x, const std::vector<std::optional<Axes>>& other, const Shape& out) {
  const int offset = static_cast<int>(out.size()) - x.ndim();
  std::set<std::string> used = used_axes(other);
  Spec s = Spec::replicated(x.ndim());
  s.partial = x.spec().partial;
  for (int d = 0; d < x.ndim(); ++d) {
    bool full = x.global_shape()[d] == out[d + offset];
    if (!full) continue;
    if (other[d + offset]) {
      s.dims[d] = *other[d + offset];
    } else {
      for (const auto& a : x.spec().axes(d))
        if (!used.count(a)) s.dims[d].push_back(a);
    }
  }
  return s;
}

bool uses(const Spec& s, const std::string& axis) { return s.dim_of(axis) >= 0 || s.is_partial_on(axis); }

struct Pair {
  ShardedTensor a_store, b_store;
  const ShardedTensor* a;
  const ShardedTensor* b;
  void set_a(ShardedTensor x) {
    a_store = std::move(x);
    a = &a_store;
  }
  void set_b(ShardedTensor x) {
    b_store = std::move(x);
    b = &b_store;
  }
};

// What makes a product or quotient of a partial operand differ from that of its sum: a factor
// that is infinite (0 x inf is nan in a part whose sum is not 0), a divisor that is 0 (parts 2
// and -1 divided by 0 give inf - inf = nan where the sum gives inf).
enum class Hazard { infinite, zero };

// Whether any rank's block of `x` holds an element of `hazard`: each rank looks at its own block,
// and one all-reduce (max) over every mesh axis gives every rank the same answer, so that all of
// them resolve the partial operand or none does.
bool held_on_any_rank(const ShardedTensor& x, Hazard hazard) {
  if (!is_floating(x.dtype())) return false;  // alike on every rank; the kernels refuse i32 after this
  const Tensor block = x.local().dtype() == DType::bf16 ? x.local().astype(DType::f32) : x.local();
  auto scan = [&](const auto* values) {
    const std::int64_t n = block.numel();
    for (std::int64_t i = 0; i < n; ++i) {
      if (hazard == Hazard::zero ? values[i] == 0 : std::isinf(values[i])) return true;
    }
    return false;
  };
  const bool here = block.dtype() == DType::f64 ? scan(block.data<double>()) : scan(block.data<float>());
  const Tensor flag = Tensor::full({1}, here ? 1.0 : 0.0);
  return all_reduce(x.mesh(), flag, x.mesh().axis_names(), ReduceOp::max).data<float>()[0] != 0.0f;
}

// Partial rules: add/sub need equal partial sets (a replicated operand becomes partial for
// free); mul/div are linear in a (and mul in b) when the other operand does not use the axis,
// and the other operand holds no infinite factor (mul) or zero divisor (div) on any rank.
void align_partial(BinaryOp op, Pair& p) {
  const Spec& sa = p.a->spec();
  const Spec& sb = p.b->spec();
  if (!sa.is_partial() && !sb.is_partial()) return;
  if (op == BinaryOp::add || op == BinaryOp::sub) {
    if (std::set<std::string>(sa.partial.begin(), sa.partial.end()) ==
        std::set<std::string>(sb.partial.begin(), sb.partial.end()))
      return;
    // Make the non-partial side partial on the other's axes when it does not use them.
    auto lift = [](const ShardedTensor& x, const Spec& other) -> std::optional<Spec> {
      if (x.spec().is_partial()) return std::nullopt;
      Spec t = x.spec();
      for (const auto& axis : other.partial) {
        if (t.dim_of(axis) >= 0) return std::nullopt;
        t.partial.push_back(axis);
      }
      return t;
    };
    if (auto t = lift(*p.b, sa)) {
      p.set_b(reshard(*p.b, *t));
      return;
    }
    if (auto t = lift(*p.a, sb)) {
      p.set_a(reshard(*p.a, *t));
      return;
    }
    if (sa.is_partial()) p.set_a(resolve_partial(*p.a));
    if (p.b->spec().is_partial()) p.set_b(resolve_partial(*p.b));
    return;
  }
  const bool linear_in_b = op == BinaryOp::mul;
  const bool linear_in_a = op == BinaryOp::mul || op == BinaryOp::div;
  if (sb.is_partial()) {
    bool ok = linear_in_b && std::none_of(sb.partial.begin(), sb.partial.end(),
                                          [&](const std::string& axis) { return uses(sa, axis); });
    if (ok && !sa.is_partial()) ok = !held_on_any_rank(*p.a, Hazard::infinite);
    if (!ok) p.set_b(resolve_partial(*p.b));
  }
  const Spec& sb2 = p.b->spec();
  if (sa.is_partial()) {
    bool ok = linear_in_a && std::none_of(sa.partial.begin(), sa.partial.end(),
                                          [&](const std::string& axis) { return uses(sb2, axis); });
    if (ok && !sb2.is_partial()) ok = !held_on_any_rank(*p.b, op == BinaryOp::mul ? Hazard::infinite : Hazard::zero);
    if (!ok) p.set_a(resolve_partial(*p.a));
  }
}

}  // namespace

ShardedTensor binary(BinaryOp op, const ShardedTensor& a, const ShardedTensor& b) {
  check_same_mesh(a, b, op_name(op));
  if (a.dtype() != b.dtype()) {
    throw DTypeError(std::string(op_name(op)) + ": dtypes " + std::string(dtype_name(a.dtype())) + " and " +
                     std::string(dtype_name(b.dtype())) + " differ");
  }
  Shape out;
  try {
    out = broadcast_shapes(a.global_shape(), b.global_shape());
  } catch (const ShapeError&) {
    throw ShapeError(std::string(op_name(op)) + ": shapes " + shape_to_string(a.global_shape()) + " of '" + a.name() +
                     "' and " + shape_to_string(b.global_shape()) + " of '" + b.name() + "' do not broadcast");
  }
  Pair p{{}, {}, &a, &b};
  // A dimension an operand broadcasts (extent 1 against more) must be whole on every rank: under
  // the block rule a split size-1 dimension leaves the trailing ranks an empty block.
  auto unsplit_broadcast = [&](const ShardedTensor& x) -> std::optional<Spec> {
    const int offset = static_cast<int>(out.size()) - x.ndim();
    Spec t = x.spec();
    bool changed = false;
    for (int d = 0; d < x.ndim(); ++d) {
      if (x.global_shape()[d] != out[d + offset] && !t.dims[d].empty()) {
        t.dims[d].clear();
        changed = true;
      }
    }
    return changed ? std::optional<Spec>(t) : std::nullopt;
  };
  if (auto t = unsplit_broadcast(a)) p.set_a(reshard(a, *t));
  if (auto t = unsplit_broadcast(b)) p.set_b(reshard(b, *t));
  align_partial(op, p);
  auto ma = mapped(*p.a, out);
  auto mb = mapped(*p.b, out);
  if (!dims_consistent(ma, mb) || !dims_consistent(mb, ma)) {
    Spec b_target = adopt(*p.b, ma, out);
    Spec a_target = adopt(*p.a, mb, out);
    if (reshard_bytes(*p.a, a_target) < reshard_bytes(*p.b, b_target)) {
      p.set_a(reshard(*p.a, a_target));
    } else {
      p.set_b(reshard(*p.b, b_target));
    }
    ma = mapped(*p.a, out);
    mb = mapped(*p.b, out);
  }
  Spec spec = Spec::replicated(static_cast<int>(out.size()));
  for (std::size_t d = 0; d < out.size(); ++d) {
    if (ma[d]) spec.dims[d] = *ma[d];
    else if (mb[d]) spec.dims[d] = *mb[d];
  }
  std::set<std::string> partial(p.a->spec().partial.begin(), p.a->spec().partial.end());
  partial.insert(p.b->spec().partial.begin(), p.b->spec().partial.end());
  spec.partial.assign(partial.begin(), partial.end());
  Tensor local = tessera::binary(op, p.a->local(), p.b->local());
  return ShardedTensor(a.mesh(), std::move(spec), std::move(out), std::move(local));
}

ShardedTensor unary(UnaryOp op, const ShardedTensor& x) {
  const bool linear = op == UnaryOp::neg;
  if (!linear && x.spec().is_partial()) return unary(op, resolve_partial(x));
  return ShardedTensor(x.mesh(), x.spec(), x.global_shape(), tessera::unary(op, x.local()));
}

ShardedTensor scale(const ShardedTensor& x, double factor) {
  // An infinite or nan factor times a part is not that factor times the sum (0 x inf is nan).
  if (!std::isfinite(factor) && x.spec().is_partial()) return scale(resolve_partial(x), factor);
  return ShardedTensor(x.mesh(), x.spec(), x.global_shape(), affine(x.local(), factor));
}

Var add(const Var& a, const Var& b) {
  return make_result("add", binary(BinaryOp::add, a.value(), b.value()), {a, b},
                     [sa = a.shape(), sb = b.shape()](ShardedTensor& g, GradSink& sink) {
                       // The cotangent itself goes to the last input that wants it (a residual's
                       // add passes it on whole, no copy); the other gets a copy.
                       const bool second = sink.wants(1);
                       if (sink.wants(0)) sink.add(0, second ? sum_to_shape(g, sa) : sum_to_shape(std::move(g), sa));
                       if (second) sink.add(1, sum_to_shape(std::move(g), sb));
                     });
}

Var sub(const Var& a, const Var& b) {
  return make_result("sub", binary(BinaryOp::sub, a.value(), b.value()), {a, b},
                     [sa = a.shape(), sb = b.shape()](const ShardedTensor& g, GradSink& sink) {
                       if (sink.wants(0)) sink.add(0, sum_to_shape(g, sa));
                       if (sink.wants(1)) sink.add(1, scale(sum_to_shape(g, sb), -1.0));
                     });
}

Var mul(const Var& a, const Var& b) {
  return make_result("mul", binary(BinaryOp::mul, a.value(), b.value()), {a, b},
                     [a, b](const ShardedTensor& g, GradSink& sink) {
                       if (sink.wants(0)) sink.add(0, sum_to_shape(binary(BinaryOp::mul, g, b.value()), a.shape()));
                       if (sink.wants(1)) sink.add(1, sum_to_shape(binary(BinaryOp::mul, g, a.value()), b.shape()));
                     });
}

Var div(const Var& a, const Var& b) {
  return make_result("div", binary(BinaryOp::div, a.value(), b.value()), {a, b},
                     [a, b](const ShardedTensor& g, GradSink& sink) {
                       if (sink.wants(0)) sink.add(0, sum_to_shape(binary(BinaryOp::div, g, b.value()), a.shape()));
                       if (sink.wants(1)) {
                         // d(a/b)/db = -a / b^2
                         auto q = binary(BinaryOp::div, binary(BinaryOp::mul, g, a.value()),
                                         unary(UnaryOp::square, b.value()));
                         sink.add(1, scale(sum_to_shape(q, b.shape()), -1.0));
                       }
                     });
}

Var relu(const Var& x) {
  return make_result("relu", unary(UnaryOp::relu, x.value()), {x}, [x](const ShardedTensor& g, GradSink& sink) {
    sink.add(0, binary(BinaryOp::mul, g, unary(UnaryOp::relu_mask, x.value())));
  });
}

Var neg(const Var& x) {
  return make_result("neg", unary(UnaryOp::neg, x.value()), {x},
                     [](const ShardedTensor& g, GradSink& sink) { sink.add(0, scale(g, -1.0)); });
}

Var exp(const Var& x) {
  ShardedTensor y = unary(UnaryOp::exp, x.value());
  ShardedTensor saved = y;
  return make_result("exp", std::move(y), {x}, [saved](const ShardedTensor& g, GradSink& sink) {
    sink.add(0, binary(BinaryOp::mul, g, saved));
  });
}

Var log(const Var& x) {
  return make_result("log", unary(UnaryOp::log, x.value()), {x}, [x](const ShardedTensor& g, GradSink& sink) {
    sink.add(0, binary(BinaryOp::div, g, x.value()));
  });
}

Var square(const Var& x) {
  return make_result("square", unary(UnaryOp::square, x.value()), {x}, [x](const ShardedTensor& g, GradSink& sink) {
    sink.add(0, scale(binary(BinaryOp::mul, g, x.value()), 2.0));
  });
}

Var tanh(const Var& x) {
  ShardedTensor y = unary(UnaryOp::tanh, x.value());
  ShardedTensor saved = y;
  return make_result("tanh", std::move(y), {x}, [saved](const ShardedTensor& g, GradSink& sink) {
    // 1 - tanh^2
    auto d = scale(unary(UnaryOp::square, saved), -1.0);
    d.local() = affine(d.local(), 1.0, 1.0);
    sink.add(0, binary(BinaryOp::mul, g, d));
  });
}

Var scale(const Var& x, double factor) {
  return make_result("scale", scale(x.value(), factor), {x},
                     [factor](const ShardedTensor& g, GradSink& sink) { sink.add(0, scale(g, factor)); });
}

}  // namespace tessera::nn
