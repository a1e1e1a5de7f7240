// The backward pass: topological order of the tape from the output, cotangents accumulated per
// node and resharded to the node's spec (partial axes dropped), each op's backward called once.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <memory_resource>
#include <unordered_map>
#include <unordered_set>

#include "collectives/reshard.h"
#include "core/error.h"
#include "core/kernels.h"
#include "mesh/fail_together.h"
#include "nn/propagation.h"
#include "nn/var.h"

namespace tessera::nn {

Var::Var(ShardedTensor value, bool requires_grad) : node_(std::make_shared<Node>()) {
  node_->value = std::move(value);
  node_->requires_grad = requires_grad;
  node_->op = "leaf";
}

const ShardedTensor& Var::value() const {
  if (!node_) throw Error("use of an undefined Var");
  return node_->value;
}

bool Var::requires_grad() const { return node_ && node_->requires_grad; }

namespace {
thread_local bool no_tape = false;
}  // namespace

NoTape::NoTape(bool off) : saved_(no_tape) { no_tape = off; }
NoTape::~NoTape() { no_tape = saved_; }
bool NoTape::active() { return no_tape; }

Var make_result(std::string op, ShardedTensor value, std::vector<Var> inputs, Backward backward) {
  Var out;
  out.node_ = std::make_shared<Node>();
  out.node_->value = std::move(value);
  out.node_->op = std::move(op);
  bool any = !no_tape && std::any_of(inputs.begin(), inputs.end(), [](const Var& v) { return v.requires_grad(); });
  out.node_->requires_grad = any;
  if (any) {
    out.node_->inputs = std::move(inputs);
    out.node_->backward = std::move(backward);
  }
  return out;
}

namespace {

// The spec a cotangent of `primal` is kept in: the primal's, without partial axes.
Spec cotangent_spec(const ShardedTensor& primal) { return primal.spec().without_partial(); }

void accumulate(std::optional<ShardedTensor>& slot, ShardedTensor grad, const Spec& target) {
  if (!slot) {
    slot = grad.spec() == target ? std::move(grad) : reshard(std::move(grad), target);
    return;
  }
  if (!(grad.spec() == slot->spec())) grad = reshard(std::move(grad), slot->spec());
  add_inplace(slot->local(), grad.local());
}

// Cotangents of stacked variables that add_slab has begun but not filled: for each, the local
// indices of dimension 0 whose slab is not written yet (its memory is uninitialised). The first
// slab written at an index is copied in, not added to zeros: a scanned layer's weight gradient
// is written once, and zeroing the stacked cotangent and adding into it read and wrote it twice
// more. complete() zeroes what is still unwritten before anything else reads the cotangent.
using Unwritten = std::pmr::unordered_map<const Node*, std::vector<bool>>;

void complete(Unwritten& unwritten, const Node* node, ShardedTensor& slot) {
  const auto found = unwritten.find(node);
  if (found == unwritten.end()) return;
  Tensor& local = slot.local();
  const std::size_t slab_bytes = local.shape()[0] == 0 ? 0 : local.nbytes() / local.shape()[0];
  for (std::size_t i = 0; i < found->second.size(); ++i) {
    if (found->second[i]) std::memset(static_cast<std::byte*>(local.raw()) + i * slab_bytes, 0, slab_bytes);
  }
  unwritten.erase(found);
}

// What GradSink::takes_rows asks of the backward pass (see there): the options, the requested
// variables' positions in wrt, and how many ops of the tape take each node as an input.
struct RowHandover {
  const GradOptions& options;
  const std::pmr::unordered_map<Node*, std::size_t>& position;
  const std::pmr::unordered_map<const Node*, int>& uses;
};

class Accumulator : public GradSink {
 public:
  Accumulator(std::pmr::unordered_map<Node*, std::optional<ShardedTensor>>& grads, Unwritten& unwritten,
              const Node& node, const std::pmr::unordered_set<Node*>& keep_raw, const RowHandover& handover)
      : grads_(grads), unwritten_(unwritten), node_(node), keep_raw_(keep_raw), handover_(handover) {}

  void add(int input, ShardedTensor grad) override {
    Node* in = node_.inputs.at(input).node().get();
    if (!in->requires_grad) return;
    if (grad.global_shape() != in->value.global_shape()) {
      throw ShapeError("autodiff: op '" + node_.op + "' gave a cotangent of shape " +
                       shape_to_string(grad.global_shape()) + " for an input of shape " +
                       shape_to_string(in->value.global_shape()));
    }
    auto& slot = grads_[in];
    if (slot) complete(unwritten_, in, *slot);
    // Computed before `grad` is moved into the call (argument order is unspecified).
    const Spec target =
        keep_raw_.count(in) || in->passes_cotangent ? (slot ? slot->spec() : grad.spec()) : cotangent_spec(in->value);
    accumulate(slot, std::move(grad), target);
  }

  void add_slab(int input, std::int64_t index, const ShardedTensor& cotangent) override {
    Node* in = node_.inputs.at(input).node().get();
    if (!in->requires_grad) return;
    const ShardedTensor& primal = in->value;
    Spec full = cotangent_spec(primal);
    Spec slab_spec(std::vector<Axes>(full.dims.begin() + 1, full.dims.end()));
    // Read where it is unless it must be resharded first (a stacked layer's cotangent is a
    // weight's: copying it took 4 MiB a layer of the tutorial's scan, twice).
    std::optional<ShardedTensor> resharded;
    if (!(cotangent.spec() == slab_spec)) resharded = reshard(cotangent, slab_spec);
    const ShardedTensor& grad = resharded ? *resharded : cotangent;
    auto& slot = grads_[in];
    if (slot && !(slot->spec() == full)) {
      // A slot add() made in a raw cotangent's spec (kept raw: value_and_grad, train_step), which
      // may be partial or split otherwise: the slab below adds to blocks laid out as `full`. Until
      // the forty-fourth session it added the whole slab to each rank's partial share (counted
      // once per rank by the reduction after), or refused a block split the other way.
      complete(unwritten_, in, *slot);
      slot = reshard(std::move(*slot), full);
    }
    if (!slot) {
      const Shape local = local_shape(full, primal.mesh().shape(), primal.global_shape(), primal.mesh().coords());
      slot = ShardedTensor(primal.mesh(), full, primal.global_shape(), Tensor::empty(local, primal.dtype()));
      unwritten_[in].assign(static_cast<std::size_t>(local.empty() ? 0 : local[0]), true);
    }
    // Dimension 0 may be split: only the ranks whose block holds `index` add the slab.
    const std::int64_t begin = slot->block_offsets()[0];
    const std::int64_t extent = slot->local().shape()[0];
    if (index < begin || index >= begin + extent) return;
    const auto found = unwritten_.find(in);
    if (found != unwritten_.end() && found->second[index - begin]) {
      copy_to_slab(slot->local(), index - begin, grad.local());
      found->second[index - begin] = false;
      if (std::none_of(found->second.begin(), found->second.end(), [](bool u) { return u; })) unwritten_.erase(found);
    } else {
      add_to_slab(slot->local(), index - begin, grad.local());
    }
  }

  bool wants(int input) const override { return node_.inputs.at(input).requires_grad(); }
  bool keeps_raw(int input) const override {
    const Node* in = node_.inputs.at(input).node().get();
    return in->passes_cotangent || keep_raw_.count(const_cast<Node*>(in)) > 0;
  }

  // A variable of wrt with no op of its own (a leaf), taken by this op alone and once, in f32
  // with no partial axes: its gradient is final once this op's backward has given it. (The op
  // hands over rows of the variable's own block, nothing left to reduce, so whether the caller
  // keeps cotangents raw does not matter.)
  bool takes_rows(int input) const override {
    if (!handover_.options.ready || !handover_.options.ready_rows) return false;
    Node* in = node_.inputs.at(input).node().get();
    if (!in->requires_grad || in->backward || in->passes_cotangent) return false;
    const auto slot = grads_.find(in);
    if (handover_.position.count(in) == 0 || (slot != grads_.end() && slot->second)) return false;
    const auto used = handover_.uses.find(in);
    if (used == handover_.uses.end() || used->second != 1) return false;
    return in->value.dtype() == DType::f32 && in->value.spec().partial.empty();
  }

  void take_rows(int input, RowGradient& grad) override {
    if (!takes_rows(input)) GradSink::take_rows(input, grad);
    Node* in = node_.inputs.at(input).node().get();
    const Tensor& local = in->value.local();
    const std::int64_t rows = local.ndim() == 0 ? 1 : local.shape()[0];
    if (grad.rows() != rows || grad.rows() * grad.row_elements() != local.numel()) {
      throw Error("autodiff: op '" + node_.op + "' offered " + std::to_string(grad.rows()) + " rows of " +
                  std::to_string(grad.row_elements()) + " for a block of shape " + shape_to_string(local.shape()));
    }
    handover_.options.ready_rows(handover_.position.at(in), grad);
  }

 private:
  std::pmr::unordered_map<Node*, std::optional<ShardedTensor>>& grads_;
  Unwritten& unwritten_;
  const Node& node_;
  const std::pmr::unordered_set<Node*>& keep_raw_;
  const RowHandover& handover_;
};

// A requested variable's cotangent as gradients() hands it back: in its spec without partial
// axes, or as accumulated where the caller keeps it raw. A reshard's result asked for by the
// caller had its cotangent kept as it arrived, and is resharded here.
ShardedTensor returned_cotangent(const Node& node, ShardedTensor g, const std::pmr::unordered_set<Node*>& keep_raw) {
  if (node.passes_cotangent && !keep_raw.count(const_cast<Node*>(&node)) && !(g.spec() == cotangent_spec(node.value))) {
    return reshard(std::move(g), cotangent_spec(node.value));
  }
  return g;
}

// gradients() past its checks.
std::vector<std::optional<ShardedTensor>> backward_pass(const Var& y, const ShardedTensor& seed,
                                                        const std::vector<Var>& wrt, const GradOptions& options) {
  std::vector<std::optional<ShardedTensor>> out(wrt.size());
  // The pass's own bookkeeping (the sets and maps of nodes below, a few entries per node of the
  // tape) is allocated from one arena, released whole when the pass ends, instead of one heap
  // allocation and release per entry: in a step of the tutorial's MLP at depth 64 the allocator
  // took a fifth of the samples, these maps among its largest callers. Larger tapes go on to the
  // heap.
  std::array<std::byte, 32 << 10> arena_bytes;
  std::pmr::monotonic_buffer_resource arena(arena_bytes.data(), arena_bytes.size());
  // Topological order by iterative depth-first search (tapes of deep models overflow recursion).
  std::pmr::vector<Node*> order(&arena);
  std::pmr::unordered_set<Node*> visited(&arena);
  std::pmr::vector<std::pair<Node*, std::size_t>> stack(&arena);
  stack.push_back({y.node().get(), 0});
  visited.insert(y.node().get());
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->inputs.size()) {
      Node* in = node->inputs[next++].node().get();
      if (in->requires_grad && visited.insert(in).second) stack.push_back({in, 0});
    } else {
      order.push_back(node);
      stack.pop_back();
    }
  }
  std::pmr::unordered_set<Node*> keep_raw(&arena);
  if (!options.keep_raw.empty() && options.keep_raw.size() != wrt.size()) {
    throw Error("gradients: GradOptions::keep_raw has " + std::to_string(options.keep_raw.size()) + " entries for " +
                std::to_string(wrt.size()) + " variables");
  }
  for (std::size_t i = 0; i < wrt.size(); ++i) {
    if (options.keep_raw.empty() ? !options.reduce_to_spec : options.keep_raw[i]) keep_raw.insert(wrt[i].node().get());
  }
  std::pmr::unordered_map<Node*, std::optional<ShardedTensor>> grads(&arena);
  Unwritten unwritten(&arena);
  accumulate(grads[y.node().get()], seed, keep_raw.count(y.node().get()) ? seed.spec() : cotangent_spec(y.value()));
  // The requested variables and their (first) positions in wrt.
  std::pmr::unordered_map<Node*, std::size_t> position(&arena);
  for (std::size_t i = 0; i < wrt.size(); ++i) position.emplace(wrt[i].node().get(), i);
  // How many ops of the tape take each node as an input (an op taking it twice counts twice).
  std::pmr::unordered_map<const Node*, int> uses(&arena);
  if (options.ready_rows) {
    for (const Node* node : order) {
      for (const Var& in : node->inputs) {
        if (in.requires_grad()) ++uses[in.node().get()];
      }
    }
  }
  const RowHandover handover{options, position, uses};
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* node = *it;
    auto found = grads.find(node);
    if (found == grads.end() || !found->second) continue;
    complete(unwritten, node, *found->second);
    const auto at = position.find(node);
    const bool requested = at != position.end();
    if (requested && options.ready) {
      // Every op that takes this node as an input is behind us: its cotangent is final.
      ShardedTensor g = std::move(*found->second);
      grads.erase(found);
      if (node->backward) {
        Accumulator sink(grads, unwritten, *node, keep_raw, handover);
        ShardedTensor lent = g;  // the backward may take its cotangent; the caller gets g below
        node->backward(lent, sink);
      }
      options.ready(at->second, returned_cotangent(*node, std::move(g), keep_raw));
      continue;
    }
    if (!node->backward) continue;
    ShardedTensor g = std::move(*found->second);
    if (requested) found->second = g;  // keep a copy for the caller
    else grads.erase(found);
    Accumulator sink(grads, unwritten, *node, keep_raw, handover);
    node->backward(g, sink);
  }
  // A variable listed more than once gets its gradient at every place (copies; the last place
  // takes the cotangent itself; the first place alone was filled, the others left empty).
  std::pmr::unordered_map<const Node*, std::size_t> last_place(&arena);
  for (std::size_t i = 0; i < wrt.size(); ++i) last_place[wrt[i].node().get()] = i;
  for (std::size_t i = 0; i < wrt.size(); ++i) {
    Node* node = wrt[i].node().get();
    auto found = grads.find(node);
    if (found == grads.end() || !found->second) continue;
    complete(unwritten, node, *found->second);
    out[i] = returned_cotangent(*node, last_place[node] == i ? std::move(*found->second) : ShardedTensor(*found->second),
                                keep_raw);
  }
  return out;
}

}  // namespace

std::vector<std::optional<ShardedTensor>> gradients(const Var& y, const ShardedTensor& seed, const std::vector<Var>& wrt,
                                                    const GradOptions& options) {
  if (seed.global_shape() != y.shape()) {
    throw ShapeError("gradients: seed of shape " + shape_to_string(seed.global_shape()) + " for an output of shape " +
                     shape_to_string(y.shape()));
  }
  if (y.defined()) check_same_mesh(y.value(), seed, "gradients");
  if (seed.dtype() != y.dtype()) {
    throw DTypeError("gradients: seed of dtype " + std::string(dtype_name(seed.dtype())) + " for an output of dtype " +
                     std::string(dtype_name(y.dtype())));
  }
  if (!y.requires_grad()) return std::vector<std::optional<ShardedTensor>>(wrt.size());
  // An op's backward is code of its own (a user's op made with make_result, or the library's): one
  // that throws on some ranks only ends the job with its message instead of leaving the other
  // ranks in a collective (mesh/fail_together.h); one that throws on every rank stands on each.
  return tessera::detail::fail_together("gradients: the backward pass",
                               "they wait in a collective of the backward pass or one after it, or still run it",
                               tessera::detail::failure_mesh(y.mesh()), [&] { return backward_pass(y, seed, wrt, options); });
}

std::vector<std::optional<ShardedTensor>> gradients(const Var& y, const std::vector<Var>& wrt,
                                                    const GradOptions& options) {
  // As JAX's grad: the gradient of a scalar. Another output needs its seed (the other overload);
  // a seed of ones here summed the output in silence.
  if (y.defined() && y.ndim() != 0) {
    throw ShapeError("gradients: the output has shape " + shape_to_string(y.shape()) +
                     ", not a scalar's []; pass a seed of its shape for a vector-Jacobian product");
  }
  Spec replicated = y.spec().without_partial();
  auto seed = ShardedTensor::from_fn(
      y.mesh(), replicated, y.shape(), y.dtype(), [](std::int64_t) { return 1.0; }, "seed");
  return gradients(y, seed, wrt, options);
}

}  // namespace tessera::nn
