// Global-view einsum: align the operands' specs, multiply the local blocks, name the result's
// spec (partial over the contracted axes), and its backward as two more einsums.
#include "nn/einsum.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

#include "collectives/reshard.h"
#include "core/error.h"
#include "core/kernels.h"
#include "nn/propagation.h"

namespace tessera::nn {

namespace {

bool has(const std::string& s, char c) { return s.find(c) != std::string::npos; }

std::set<std::string> dim_axes(const Spec& s) {
  std::set<std::string> out;
  for (const auto& d : s.dims)
    for (const auto& a : d) out.insert(a);
  return out;
}

// True when the two operands' specs are consistent: shared letters split alike, no mesh axis on
// two different letters, and no partial axis of one operand used by the other.
bool consistent(const EinsumSubscripts& sub, const Spec& sa, const Spec& sb) {
  std::map<std::string, char> owner;  // mesh axis -> letter
  auto claim = [&](const std::string& letters, const Spec& s) {
    for (std::size_t i = 0; i < letters.size(); ++i) {
      for (const auto& axis : s.axes(static_cast<int>(i))) {
        auto [it, fresh] = owner.emplace(axis, letters[i]);
        if (!fresh && it->second != letters[i]) return false;
      }
    }
    return true;
  };
  if (!claim(sub.a, sa) || !claim(sub.b, sb)) return false;
  for (std::size_t i = 0; i < sub.a.size(); ++i) {
    auto j = sub.b.find(sub.a[i]);
    if (j != std::string::npos && sa.axes(static_cast<int>(i)) != sb.axes(static_cast<int>(j))) return false;
  }
  for (const auto& p : sa.partial) {
    if (owner.count(p) || sb.is_partial_on(p)) return false;
  }
  for (const auto& p : sb.partial) {
    if (owner.count(p)) return false;
  }
  return true;
}

// The spec `to` (subscripts to_letters) takes to agree with `from`: shared letters copy from's
// axes, other letters keep theirs minus any axis `from` uses.
Spec adopt(const std::string& to_letters, const Spec& to, const std::string& from_letters, const Spec& from) {
  std::set<std::string> used = dim_axes(from);
  for (const auto& p : from.partial) used.insert(p);
  Spec out = Spec::replicated(static_cast<int>(to_letters.size()));
  for (std::size_t i = 0; i < to_letters.size(); ++i) {
    auto j = from_letters.find(to_letters[i]);
    if (j != std::string::npos) {
      out.dims[i] = from.axes(static_cast<int>(j));
    } else {
      for (const auto& a : to.axes(static_cast<int>(i))) {
        if (!used.count(a)) out.dims[i].push_back(a);
      }
    }
  }
  for (const auto& p : to.partial) {
    if (!used.count(p)) out.partial.push_back(p);
  }
  return out;
}

// Operands after alignment: pointers to the originals or to resharded copies held here. Not
// copyable or movable, since it points into itself.
struct Aligned {
  Aligned() = default;
  Aligned(const Aligned&) = delete;
  Aligned& operator=(const Aligned&) = delete;
  ShardedTensor a_store, b_store;
  const ShardedTensor* a = nullptr;
  const ShardedTensor* b = nullptr;
};

// The reshards plan_contraction runs, in order (operand 0 is a, 1 is b; each to a target spec),
// and the product's spec and shape: what it decides for one set of arguments (contraction_key).
struct ContractionSteps {
  std::vector<std::pair<int, Spec>> reshards;
  Spec spec;
  Shape shape;
};

// Reshards at most what the rules require so the operands' specs are consistent.
void align(const EinsumSubscripts& sub, const ShardedTensor& a, const ShardedTensor& b, Aligned& out,
           ContractionSteps& steps) {
  out.a = &a;
  out.b = &b;
  // Partial axes the other operand uses cannot stay partial: reduce them first.
  auto conflicts_partial = [](const Spec& x, const Spec& other) {
    std::set<std::string> used = dim_axes(other);
    for (const auto& p : other.partial) used.insert(p);
    return std::any_of(x.partial.begin(), x.partial.end(), [&](const std::string& p) { return used.count(p) > 0; });
  };
  if (conflicts_partial(a.spec(), b.spec())) {
    steps.reshards.emplace_back(0, a.spec().without_partial());
    out.a_store = resolve_partial(a);
    out.a = &out.a_store;
  }
  if (conflicts_partial(out.b->spec(), out.a->spec())) {
    steps.reshards.emplace_back(1, b.spec().without_partial());
    out.b_store = resolve_partial(b);
    out.b = &out.b_store;
  }
  if (consistent(sub, out.a->spec(), out.b->spec())) return;
  Spec b_target = adopt(sub.b, out.b->spec(), sub.a, out.a->spec());
  Spec a_target = adopt(sub.a, out.a->spec(), sub.b, out.b->spec());
  const std::int64_t cost_b = reshard_bytes(*out.b, b_target);
  const std::int64_t cost_a = reshard_bytes(*out.a, a_target);
  // Ties reshard the second operand (in a layer, the weight) and keep the activation in place.
  if (cost_a < cost_b) {
    out.a_store = reshard(*out.a, a_target);
    out.a = &out.a_store;
    steps.reshards.emplace_back(0, std::move(a_target));
  } else {
    out.b_store = reshard(*out.b, b_target);
    out.b = &out.b_store;
    steps.reshards.emplace_back(1, std::move(b_target));
  }
}

Spec result_spec(const EinsumSubscripts& sub, const Spec& sa, const Spec& sb) {
  Spec out = Spec::replicated(static_cast<int>(sub.out.size()));
  for (std::size_t i = 0; i < sub.out.size(); ++i) {
    auto j = sub.a.find(sub.out[i]);
    out.dims[i] = j != std::string::npos ? sa.axes(static_cast<int>(j))
                                          : sb.axes(static_cast<int>(sub.b.find(sub.out[i])));
  }
  for (std::size_t i = 0; i < sub.a.size(); ++i) {
    if (!has(sub.out, sub.a[i])) {
      for (const auto& axis : sa.axes(static_cast<int>(i))) out.partial.push_back(axis);
    }
  }
  for (const auto& p : sa.partial) out.partial.push_back(p);
  for (const auto& p : sb.partial) out.partial.push_back(p);
  return out;
}

Shape result_shape(const EinsumSubscripts& sub, const ShardedTensor& a, const ShardedTensor& b) {
  std::map<char, std::int64_t> extent;
  for (std::size_t i = 0; i < sub.a.size(); ++i) extent[sub.a[i]] = a.global_shape()[i];
  for (std::size_t i = 0; i < sub.b.size(); ++i) {
    auto it = extent.find(sub.b[i]);
    if (it != extent.end() && it->second != b.global_shape()[i]) {
      throw ShapeError("einsum '" + sub.to_string() + "': letter '" + std::string(1, sub.b[i]) + "' is " +
                       std::to_string(it->second) + " in '" + a.name() + "' " + shape_to_string(a.global_shape()) +
                       " but " + std::to_string(b.global_shape()[i]) + " in '" + b.name() + "' " +
                       shape_to_string(b.global_shape()));
    }
    extent[sub.b[i]] = b.global_shape()[i];
  }
  Shape out;
  for (char c : sub.out) out.push_back(extent[c]);
  return out;
}

void check_operands(const EinsumSubscripts& sub, const ShardedTensor& a, const ShardedTensor& b) {
  check_same_mesh(a, b, [&] { return "einsum '" + sub.to_string() + "'"; });
  if (a.ndim() != static_cast<int>(sub.a.size()) || b.ndim() != static_cast<int>(sub.b.size())) {
    throw ShapeError("einsum '" + sub.to_string() + "': operands of shapes " + shape_to_string(a.global_shape()) +
                     " and " + shape_to_string(b.global_shape()) + " do not match the subscripts");
  }
  if (a.dtype() != b.dtype()) {
    throw DTypeError("einsum '" + sub.to_string() + "': dtypes " + std::string(dtype_name(a.dtype())) + " and " +
                     std::string(dtype_name(b.dtype())) + " differ");
  }
}

// Matrix FLOPs of the local product of blocks of these specs: 2 x the product of every letter's
// largest block extent.
double local_flops(const EinsumSubscripts& sub, const MeshShape& mesh, const Spec& sa, const Shape& a_shape,
                   const Spec& sb, const Shape& b_shape) {
  std::map<char, std::int64_t> extent;
  const Shape a_block = max_local_shape(sa, mesh, a_shape);
  const Shape b_block = max_local_shape(sb, mesh, b_shape);
  for (std::size_t i = 0; i < sub.a.size(); ++i) extent[sub.a[i]] = a_block[i];
  for (std::size_t i = 0; i < sub.b.size(); ++i) extent[sub.b[i]] = b_block[i];
  double flops = 2;
  for (const auto& [letter, n] : extent) flops *= static_cast<double>(n);
  return flops;
}

// The spec an operand (subscripts `letters`, spec `s`) takes so that the product lands in
// `want` with nothing to reduce: its contracted letters whole, each free letter split as `want`
// splits that letter of the output; its partial axes stay.
Spec toward(const std::string& letters, const Spec& s, const std::string& out, const Spec& want) {
  Spec target = Spec::replicated(static_cast<int>(letters.size()));
  for (std::size_t i = 0; i < letters.size(); ++i) {
    const auto j = out.find(letters[i]);
    if (j != std::string::npos) target.dims[i] = want.axes(static_cast<int>(j));
  }
  target.partial = s.partial;
  return target;
}

// What contract() multiplies and the spec of the product: the operands as given, or as align()
// resharded them, or as einsum_toward's choice moved them. Not copyable or movable, since it
// points into itself.
struct Contraction {
  Contraction() = default;
  Contraction(const Contraction&) = delete;
  Contraction& operator=(const Contraction&) = delete;
  Aligned aligned;
  ShardedTensor a_moved, b_moved;
  const ShardedTensor* a = nullptr;
  const ShardedTensor* b = nullptr;
  Spec spec;
  Shape shape;
};

// The arguments plan_contraction's decisions follow from (a PlanKey): the subscripts, the mesh's
// shape, the operands' specs as written, global shapes and dtype, and `want`.
std::string contraction_key(const EinsumSubscripts& sub, const ShardedTensor& a, const ShardedTensor& b,
                            const Spec* want) {
  PlanKey key;
  key.add(sub.a).add(sub.b).add(sub.out).add(a.mesh().shape());
  for (const ShardedTensor* x : {&a, &b}) {
    key.add(x->spec()).add(x->global_shape()).add(static_cast<std::int64_t>(x->dtype()));
  }
  key.add(static_cast<std::int64_t>(want != nullptr));
  if (want != nullptr) key.add(*want);
  return key.take();
}

// The operands of einsum (want == nullptr) or einsum_toward, with their collectives run, as the
// rules below decide them; `steps` records the decisions.
void decide_contraction(const EinsumSubscripts& sub, const ShardedTensor& a, const ShardedTensor& b, const Spec* want,
                        Contraction& out, ContractionSteps& steps) {
  out.shape = result_shape(sub, a, b);
  align(sub, a, b, out.aligned, steps);
  out.a = out.aligned.a;
  out.b = out.aligned.b;
  out.spec = result_spec(sub, out.a->spec(), out.b->spec());
  if (want != nullptr) {
    const MeshShape& mesh = a.mesh().shape();
    const Spec target = want->padded(static_cast<int>(out.shape.size()));
    const Spec a_to = toward(sub.a, out.a->spec(), sub.out, target);
    const Spec b_to = toward(sub.b, out.b->spec(), sub.out, target);
    // The product of the moved factors is exactly the wanted block: no rank computes a block it
    // then drops, and nothing is left to reshard.
    if (!(out.spec == target) && consistent(sub, a_to, b_to) && result_spec(sub, a_to, b_to) == target) {
      const double reduce_cost =
          static_cast<double>(cached_reshard_plan(mesh, out.spec, target, out.shape, a.dtype())->bytes_per_rank());
      const double extra_flops =
          local_flops(sub, mesh, a_to, a.global_shape(), b_to, b.global_shape()) -
          local_flops(sub, mesh, out.a->spec(), a.global_shape(), out.b->spec(), b.global_shape());
      const double move_cost = static_cast<double>(reshard_bytes(*out.a, a_to) + reshard_bytes(*out.b, b_to)) +
                               extra_flops / kFlopsPerCommByte;
      if (move_cost < reduce_cost) {
        if (!(out.a->spec() == a_to)) steps.reshards.emplace_back(0, a_to);
        if (!(out.b->spec() == b_to)) steps.reshards.emplace_back(1, b_to);
        out.a = &on_spec(*out.a, a_to, out.a_moved);
        out.b = &on_spec(*out.b, b_to, out.b_moved);
        out.spec = target;
      }
    }
  }
  steps.spec = out.spec;
  steps.shape = out.shape;
}

// The operands of einsum (want == nullptr) or einsum_toward, with their collectives run. A
// program contracts the same arguments every step: their decisions (the specs compared, the
// candidates' costs weighed) are made once and cached per process, as reshard plans are
// (collectives/reshard_plan.h), so the same on every rank; later calls run the recorded reshards
// in the recorded order. The cache is emptied when it grows large.
void plan_contraction(const EinsumSubscripts& sub, const ShardedTensor& a, const ShardedTensor& b, const Spec* want,
                      Contraction& out) {
  check_operands(sub, a, b);
  static std::unordered_map<std::string, ContractionSteps> cache;
  std::string key = contraction_key(sub, a, b, want);
  const auto found = cache.find(key);
  if (found == cache.end()) {
    ContractionSteps steps;
    decide_contraction(sub, a, b, want, out, steps);
    if (cache.size() >= 4096) cache.clear();
    cache.emplace(std::move(key), std::move(steps));
    return;
  }
  const ContractionSteps& steps = found->second;
  out.a = &a;
  out.b = &b;
  for (const auto& [operand, target] : steps.reshards) {
    const ShardedTensor*& x = operand == 0 ? out.a : out.b;
    ShardedTensor& store = operand == 0 ? out.a_moved : out.b_moved;
    store = reshard(*x, target);  // *x may be `store` itself: read before it is assigned
    x = &store;
  }
  out.spec = steps.spec;
  out.shape = steps.shape;
}

// The planned product.
ShardedTensor multiply(const EinsumSubscripts& sub, Contraction& c) {
  Tensor local = einsum_local(sub, c.a->local(), c.b->local());
  return ShardedTensor(c.a->mesh(), c.spec, std::move(c.shape), std::move(local));
}

// einsum, or einsum_toward when `want` is given.
ShardedTensor contract(std::string_view subscripts, const ShardedTensor& a, const ShardedTensor& b,
                       const Spec* want) {
  const auto sub = EinsumSubscripts::parse(subscripts);
  Contraction c;
  plan_contraction(sub, a, b, want, c);
  return multiply(sub, c);
}

// The weight gradient of y = einsum("Xk,kn->Xn", x, w) a panel of w's local rows at a time, and
// with it the input gradient's columns for those rows, from the rows of w before the update
// (see RowGradient): dx[:, rows] = g_dx w[rows, :]^T, dw[rows, :] = x_dw[:, rows]^T g_dw, each
// by the thin kernels batched_gemm takes for the whole products (the same bits).
class EinsumRows : public RowGradient {
 public:
  EinsumRows(const Tensor& w, const Tensor& x_dw, const Tensor& g_dw, const Tensor* g_dx, Tensor* dx)
      : w_(w.data<float>()), x_dw_(x_dw.data<float>()), g_dw_(g_dw.data<float>()),
        g_dx_(g_dx != nullptr ? g_dx->data<float>() : nullptr), dx_(dx != nullptr ? dx->data<float>() : nullptr),
        k_(w.shape()[0]), n_(w.shape()[1]), m_dw_(leading(x_dw)), m_dx_(g_dx != nullptr ? leading(*g_dx) : 0) {}

  // The rows of an operand [X..., last]: the product of the X extents (zero-sized blocks too).
  static std::int64_t leading(const Tensor& t) {
    std::int64_t rows = 1;
    for (int d = 0; d + 1 < t.ndim(); ++d) rows *= t.shape()[d];
    return rows;
  }

  std::int64_t rows() const override { return k_; }
  std::int64_t row_elements() const override { return n_; }
  std::int64_t produced() const { return next_; }
  double input_grad_flops() const override {
    return dx_ != nullptr ? 2.0 * static_cast<double>(m_dx_) * static_cast<double>(k_) * static_cast<double>(n_) : 0.0;
  }
  double weight_grad_flops() const override {
    return 2.0 * static_cast<double>(m_dw_) * static_cast<double>(k_) * static_cast<double>(n_);
  }

  void produce(std::int64_t begin, std::int64_t end, float* out) override {
    take(begin, end);
    const std::int64_t r = end - begin;
    if (dx_ != nullptr) {
      columns_.resize(static_cast<std::size_t>(m_dx_ * r));
      thin_gemm(g_dx_, w_ + begin * n_, columns_.data(), m_dx_, r, n_, false, true);
      for (std::int64_t i = 0; i < m_dx_; ++i) {
        std::copy_n(columns_.data() + i * r, r, dx_ + i * k_ + begin);
      }
    }
    rows_of_x_.resize(static_cast<std::size_t>(m_dw_ * r));
    for (std::int64_t i = 0; i < m_dw_; ++i) std::copy_n(x_dw_ + i * k_ + begin, r, rows_of_x_.data() + i * r);
    thin_gemm(rows_of_x_.data(), g_dw_, out, r, n_, m_dw_, true, false);
  }

  // Both products and the update a strip of each row at a time (thin_rows_adam), where the
  // kernel takes these batches: the gradient is never stored, and each row of w, mu and nu is
  // read and written once, its products computed while the next strips stream in.
  bool produce_adam(std::int64_t begin, std::int64_t end, float* value, float* mu, float* nu,
                    const AdamConstants<float>& c) override {
    if (!thin_rows_adam_shape(m_dx_, m_dw_)) return false;
    if (value != w_) throw Error("einsum: the rows to update are not the weight the gradient is taken from");
    take(begin, end);
    thin_rows_adam({value, mu, nu, k_, n_, x_dw_, m_dw_, g_dw_, g_dx_, m_dx_, dx_}, begin, end, c);
    return true;
  }

 private:
  // Rows [begin, end) asked for: the next ones, each once.
  void take(std::int64_t begin, std::int64_t end) {
    if (begin != next_ || end <= begin || end > k_) {
      throw Error("einsum: weight gradient rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                  ") asked for after " + std::to_string(next_) + " of " + std::to_string(k_));
    }
    next_ = end;
  }

  const float* w_;
  const float* x_dw_;
  const float* g_dw_;
  const float* g_dx_;
  float* dx_;
  std::int64_t k_, n_, m_dw_, m_dx_;
  std::int64_t next_ = 0;
  std::vector<float> columns_, rows_of_x_;
};

// The product of a letter string's extents in the largest block of `t` (the rows a thin
// product takes, the same on every rank).
std::int64_t max_rows(const ShardedTensor& t, std::size_t letters) {
  const Shape block = max_local_shape(t.spec(), t.mesh().shape(), t.global_shape());
  std::int64_t rows = 1;
  for (std::size_t i = 0; i < letters; ++i) rows *= block[i];
  return rows;
}

// einsum's backward where its second operand is a weight w ("kn") the sink takes in rows
// (GradSink::takes_rows) and both gradients are thin products on w's block as it is: the weight
// is updated a panel of rows at a time as the panels of its gradient and of the input gradient
// are computed, and w is read once; the input gradient then goes to the sink as einsum_toward
// would give it. False, having done nothing, where the subscripts, dtypes or rows rule it out
// before any plan; where the planned operands turn out not to allow it, both gradients are taken
// whole from them (true). Every condition follows from subscripts, specs and global shapes, so
// every rank answers alike.
bool backward_in_rows(const EinsumSubscripts& sub, const Var& a, const Var& b, const ShardedTensor& g,
                      GradSink& sink) {
  // x: X + k, w: k + n, y: X + n, with X at least one letter.
  if (sub.b.size() != 2 || sub.a.size() < 2 || !sink.takes_rows(1)) return false;
  const char k = sub.b[0], n = sub.b[1];
  const std::string x_letters = sub.a.substr(0, sub.a.size() - 1);
  if (sub.a.back() != k || has(x_letters, k) || has(x_letters, n) || sub.out != x_letters + n) return false;
  const ShardedTensor& w = b.value();
  if (a.value().dtype() != DType::f32 || g.dtype() != DType::f32) return false;
  // Rows that no move can make thin (moving a letter only gathers it): the plain backward.
  const std::size_t x_rank = x_letters.size();
  if (max_rows(a.value(), x_rank) > kThinGemmRows || max_rows(g, x_rank) > kThinGemmRows) return false;
  // The weight gradient's operands, moved so that its product is w's block exactly.
  const auto sub_w = EinsumSubscripts::parse(sub.a + "," + sub.out + "->" + sub.b);
  const Spec want_w = w.spec().without_partial();
  auto dw = std::make_unique<Contraction>();
  plan_contraction(sub_w, a.value(), g, &want_w, *dw);
  // Partial only over axes of one rank (data=1), the product is already the block: what its
  // reduction would leave.
  Spec dw_spec = dw->spec;
  const MeshShape& mesh = w.mesh().shape();
  std::erase_if(dw_spec.partial, [&](const std::string& axis) { return mesh.axes_size({axis}) == 1; });
  // w's largest block (not this rank's): the same answer on every rank; a smaller block's
  // products are thin when the largest one's are.
  const Shape w_block = max_local_shape(w.spec(), mesh, w.global_shape());
  const bool thin_dw =
      dw_spec == w.spec() && thin_gemm_shape(w_block[0], w_block[1], max_rows(*dw->a, x_rank), true, false);
  // The input gradient's operands: w must be read where it is.
  const auto sub_x = EinsumSubscripts::parse(sub.out + "," + sub.b + "->" + sub.a);
  std::unique_ptr<Contraction> dx;
  if (sink.wants(0)) {
    const Spec want_x = a.value().spec().without_partial();
    dx = std::make_unique<Contraction>();
    plan_contraction(sub_x, g, w, &want_x, *dx);
  }
  const bool thin_dx =
      !dx || (dx->b == &w && thin_gemm_shape(max_rows(*dx->a, x_rank), w_block[0], w_block[1], false, true));
  if (!thin_dw || !thin_dx) {
    // The products whole, from the operands already moved.
    if (dx) sink.add(0, multiply(sub_x, *dx));
    sink.add(1, multiply(sub_w, *dw));
    return true;
  }
  std::optional<Tensor> dx_local;
  if (dx) {
    Shape block = dx->a->local().shape();
    block.back() = w.local().shape()[0];
    dx_local = Tensor::empty(block, DType::f32);  // every element is written, panel by panel
  }
  EinsumRows rows(w.local(), dw->a->local(), dw->b->local(), dx ? &dx->a->local() : nullptr,
                  dx_local ? &*dx_local : nullptr);
  sink.take_rows(1, rows);
  if (rows.produced() != rows.rows()) {
    throw Error("einsum: the weight gradient's consumer took " + std::to_string(rows.produced()) + " of " +
                std::to_string(rows.rows()) + " rows");
  }
  if (dx) sink.add(0, ShardedTensor(a.value().mesh(), dx->spec, std::move(dx->shape), std::move(*dx_local)));
  return true;
}

}  // namespace

ShardedTensor einsum(std::string_view subscripts, const ShardedTensor& a, const ShardedTensor& b) {
  return contract(subscripts, a, b, nullptr);
}

ShardedTensor einsum_toward(std::string_view subscripts, const ShardedTensor& a, const ShardedTensor& b,
                            const Spec& want) {
  return contract(subscripts, a, b, &want);
}

Var einsum(std::string_view subscripts, const Var& a, const Var& b) {
  const auto sub = EinsumSubscripts::parse(subscripts);
  ShardedTensor out = einsum(subscripts, a.value(), b.value());
  return make_result("einsum", std::move(out), {a, b}, [sub, a, b](const ShardedTensor& g, GradSink& sink) {
    if (backward_in_rows(sub, a, b, g, sink)) return;
    // d/da = einsum(out,b->a)(g, b); d/db = einsum(a,out->b)(a, g), each computed toward the
    // spec its cotangent is resharded to (its primal's, without partial axes).
    if (sink.wants(0)) {
      sink.add(0, einsum_toward(sub.out + "," + sub.b + "->" + sub.a, g, b.value(), a.value().spec().without_partial()));
    }
    if (sink.wants(1)) {
      sink.add(1, einsum_toward(sub.a + "," + sub.out + "->" + sub.b, a.value(), g, b.value().spec().without_partial()));
    }
  });
}

}  // namespace tessera::nn
