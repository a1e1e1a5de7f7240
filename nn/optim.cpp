// Optimizer updates: one fused pass over each parameter's local block (Adam reads p, g, mu,
// nu and writes p, mu, nu: the 28 bytes per f32 parameter of the performance model).
#include "nn/optim.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "collectives/collectives.h"
#include "collectives/reshard.h"
#include "core/error.h"
#include "nn/propagation.h"

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

// A gradient in the parameter's spec or in its state's (`state`), on the parameter's Mesh (as the
// ops require: a block of a tensor on another mesh has another size, and the update indexed the
// parameter's block past the end of the gradient's; found on 2026-11-28).
void check_grad(const std::string& path, const ShardedTensor& p, const ShardedTensor& g, const Spec& state) {
  check_same_mesh(p, g, [&] { return "optimizer: the gradient of '" + path + "'"; });
  if (!(g.spec() == p.spec() || g.spec() == state) || g.global_shape() != p.global_shape() || g.dtype() != p.dtype()) {
    throw ShapeError("optimizer: gradient of '" + path + "' is " + g.describe() + ", parameter is " + p.describe() +
                     (state == p.spec() ? "" : " with its state in " + state.to_string()));
  }
}

// The spec of `path`'s state as it lies: the first moment's (the spec it was created or restored
// in), or the parameter's where the state has none. Each moment the state holds must have that
// spec and the parameter's global shape and dtype: the update indexes them alike.
const Spec& checked_state_spec(const std::string& path, const ShardedTensor& p, const OptState& state,
                               const Optimizer& optimizer) {
  const bool needs_nu = optimizer.kind != Optimizer::Kind::sgd;
  const bool needs_mu = needs_nu || optimizer.momentum != 0.0;
  const auto mu = state.mu.find(path), nu = state.nu.find(path);
  // A state made for other parameters, or by another optimizer (SGD's for Adam): named here, where
  // the update's lookup threw std::out_of_range ("map::at").
  if ((needs_mu && mu == state.mu.end()) || (needs_nu && nu == state.nu.end())) {
    throw ShapeError("optimizer: the state has no " + std::string(needs_mu && mu == state.mu.end() ? "first" : "second") +
                     " moment for parameter '" + path +
                     "' (a state made for other parameters, or by another optimizer?)");
  }
  const Spec& spec = mu != state.mu.end() ? mu->second.spec() : p.spec();
  const ShardedTensor* first = mu != state.mu.end() ? &mu->second : nullptr;
  const ShardedTensor* second = nu != state.nu.end() ? &nu->second : nullptr;
  for (const ShardedTensor* m : {first, second}) {
    if (m != nullptr) check_same_mesh(p, *m, [&] { return "optimizer: a moment of '" + path + "'"; });
    if (m != nullptr && (!(m->spec() == spec) || m->global_shape() != p.global_shape() || m->dtype() != p.dtype())) {
      throw ShapeError("optimizer: a moment of '" + path + "' is " + m->describe() + ", parameter is " + p.describe() +
                       " with its state in " + spec.to_string());
    }
  }
  return spec;
}

}  // namespace

Spec sharded_state_spec(const Spec& param, const MeshShape& mesh, const Shape& global, const Axes& over) {
  const Axes used = param.used_axes();
  Axes extra;
  std::int64_t ways = 1;
  for (const std::string& axis : over) {
    if (!mesh.has_axis(axis)) {
      throw SpecError("optimizer state: axis '" + axis + "' to split it over is not an axis of the mesh (" +
                      mesh.to_string() + ")");
    }
    if (std::count(over.begin(), over.end(), axis) > 1) {
      throw SpecError("optimizer state: axis '" + axis + "' to split it over is named twice");
    }
    if (std::find(used.begin(), used.end(), axis) != used.end() || mesh.axis_size(axis) == 1) continue;
    extra.push_back(axis);
    ways *= mesh.axis_size(axis);
  }
  if (extra.empty()) return param;
  Spec spec = param.padded(static_cast<int>(global.size()));
  for (const bool even : {true, false}) {
    for (int d = 0; d < spec.ndim(); ++d) {
      const std::int64_t outer = shard_count(spec, mesh, d), n = global[d];
      if (even ? n % (outer * ways) == 0 : n >= outer * ways && blocks_nest(n, outer, ways)) {
        spec.dims[d].insert(spec.dims[d].end(), extra.begin(), extra.end());
        return spec;
      }
    }
  }
  return param;
}

Spec Optimizer::state_spec(const ShardedTensor& param) const {
  return sharded_state_spec(param.spec(), param.mesh().shape(), param.global_shape(), shard_state_over);
}

OptState Optimizer::init(const ParamTree& params) const {
  // A zero moment of each parameter, in its state's spec.
  const auto zeros = [&] {
    ParamTree out;
    for (const auto& [path, value] : params) {
      out.emplace(path, ShardedTensor::zeros(value.mesh(), state_spec(value), value.global_shape(), value.dtype(), path));
    }
    return out;
  };
  OptState s;
  if (kind == Kind::sgd) {
    if (momentum != 0.0) s.mu = zeros();
  } else {
    s.mu = zeros();
    s.nu = zeros();
  }
  return s;
}

void Optimizer::begin_step(OptState& state) const {
  // An int32 as optax's: the largest count takes no further step (a restored count of 2^31 - 1
  // wrapped to -2^31, and the run saved a checkpoint its restore then refused). The same on every
  // rank, so every rank throws here.
  if (state.count == std::numeric_limits<std::int32_t>::max()) {
    throw UsageError("the optimizer's step count is " + std::to_string(state.count) +
                     ", the largest its int32 holds: no further step can be taken");
  }
  state.count += 1;
}

template <class T>
AdamConstants<T> Optimizer::adam_constants(const OptState& state) const {
  const double t = state.count;
  return {T(b1), T(b2), T(eps), T(learning_rate), T(1.0 / (1.0 - std::pow(b1, t))), T(1.0 / (1.0 - std::pow(b2, t))),
          T(kind == Kind::adamw ? weight_decay : 0.0)};
}

// Elements [begin, begin + count) of parameter `path`'s state and [param_begin, param_begin +
// count) of its local block (param_begin < 0: the same as the state's), updated from `g` (those
// elements of the gradient, in the parameter's dtype).
void Optimizer::update_elements(const std::string& path, ShardedTensor& p, OptState& state, std::int64_t begin,
                                std::int64_t count, const void* g, std::int64_t param_begin) const {
  // Named references, not a structured binding: the dispatch lambda below captures them, which
  // clang before 16 refuses for bindings (the fuzz build compiles with clang 14).
  dispatch_dtype(p.dtype(), [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_floating_point_v<T>) {
      const T* grad = static_cast<const T*>(g);
      T* param = p.local().template data<T>() + (param_begin < 0 ? begin : param_begin);
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
  const Spec& spec = checked_state_spec(path, p, state, *this);
  check_grad(path, p, g, spec);
  if (spec == p.spec()) {
    update_elements(path, p, state, 0, p.local().numel(), g.local().raw());
    return;
  }
  // ZeRO's first stage: this replica's part of the parameter, updated from the same part of the
  // gradient (a slice where the gradient comes in the parameter's spec), then gathered back over
  // the axes the state's spec adds.
  const ShardedTensor g_part = g.spec() == spec ? ShardedTensor() : reshard(g, spec);
  const ShardedTensor& grad = g.spec() == spec ? g : g_part;
  const MeshShape& mesh = p.mesh().shape();
  const Spec have = p.spec().padded(p.ndim()), want = spec.padded(p.ndim());
  // Where the state's spec adds axes to one dimension d (as state_spec does), the state's blocks
  // along d are even (so they tile the parameter's, and every group gathers the same extents), and
  // no dimension before d is longer than 1 in any rank's block, the part is a run of the block: it
  // is updated there and gathered in place. The choice is made from the specs, the mesh and the
  // global shape alone, the same on every rank, as the two paths run different collectives: until
  // the forty-fourth session it read this rank's block, and with uneven blocks some ranks gathered
  // in place while the others resharded (a hang; and a part whose extents summed to the block's
  // without lying in it was written past the block's end).
  int d = -1;
  bool in_place = true;
  for (int k = 0; k < p.ndim() && in_place; ++k) {
    if (have.dims[k] == want.dims[k]) continue;
    const Axes& a = have.dims[k];
    in_place = d < 0 && want.dims[k].size() > a.size() && std::equal(a.begin(), a.end(), want.dims[k].begin());
    d = k;
  }
  in_place = in_place && d >= 0 && p.global_shape()[d] % shard_count(want, mesh, d) == 0;
  for (int k = 0; in_place && k < d; ++k) in_place = block_chunk(p.global_shape()[k], shard_count(have, mesh, k)) <= 1;
  if (in_place) {
    const Tensor& block = p.local();
    const Axes extra(want.dims[d].begin() + static_cast<std::ptrdiff_t>(have.dims[d].size()), want.dims[d].end());
    const std::vector<int> coords = p.mesh().coords();
    const std::vector<std::int64_t> extents =
        group_block_extents(want, mesh, p.global_shape(), d, extra, coords);
    std::int64_t inner = 1;
    for (int k = d + 1; k < p.ndim(); ++k) inner *= block.shape()[k];
    const std::int64_t offset = block_offsets(want, mesh, p.global_shape(), coords)[d] -
                                block_offsets(have, mesh, p.global_shape(), coords)[d];
    update_elements(path, p, state, 0, grad.local().numel(), grad.local().raw(), offset * inner);
    all_gather_in_place(p.mesh(), p.local(), extra, d, extents);
    return;
  }
  // Any other split of the state (one restored or made by hand): a copy of the part, updated,
  // then resharded back.
  ShardedTensor part = reshard(p, spec);
  update_elements(path, part, state, 0, part.local().numel(), grad.local().raw());
  p = reshard(std::move(part), p.spec());
}

bool Optimizer::update_param_rows(const std::string& path, ShardedTensor& p, RowGradient& g, OptState& state) const {
  checked_state_spec(path, p, state, *this);
  const std::int64_t rows = g.rows(), width = g.row_elements();
  if (p.dtype() != DType::f32 || rows * width != p.local().numel() ||
      (p.local().ndim() > 0 && p.local().shape()[0] != rows)) {
    throw ShapeError("optimizer: gradient of '" + path + "' comes in " + std::to_string(rows) + " rows of " +
                     std::to_string(width) + " f32, parameter is " + p.describe());
  }
  if (!state.mu.empty() && !(state.mu.at(path).spec() == p.spec())) {
    // A state split further than its parameter: the rows make the whole block's gradient, which
    // update_param then takes in part.
    Tensor whole = Tensor::empty(p.local().shape(), DType::f32);
    if (rows > 0) g.produce(0, rows, whole.data<float>());
    update_param(path, p, ShardedTensor(p.mesh(), p.spec(), p.global_shape(), std::move(whole), path), state);
    return false;
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
