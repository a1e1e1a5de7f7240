// remat: forward without a tape, backward by recomputation (see remat.h).
#include "nn/remat.h"

#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"

namespace tessera::nn {

namespace {

// Lends the values of the block's input nodes to fresh leaves for the recomputation (no copy)
// and gives them back when it is done, also when it throws.
class LentInputs {
 public:
  explicit LentInputs(const std::vector<Var>& inputs) {
    std::unordered_map<Node*, std::size_t> seen;
    for (const Var& in : inputs) {
      Node* node = in.node().get();
      auto [it, fresh] = seen.emplace(node, owners_.size());
      if (fresh) {
        owners_.push_back(in.node());
        leaves_.push_back(Var(std::move(node->value), node->requires_grad));
      }
      args_.push_back(leaves_[it->second]);
      slot_.push_back(it->second);
    }
  }
  ~LentInputs() {
    for (std::size_t i = 0; i < owners_.size(); ++i) owners_[i]->value = std::move(leaves_[i].node()->value);
  }
  LentInputs(const LentInputs&) = delete;
  LentInputs& operator=(const LentInputs&) = delete;

  const std::vector<Var>& args() const { return args_; }  // one per input, duplicates shared
  const std::vector<Var>& leaves() const { return leaves_; }  // one per distinct input node
  std::size_t slot(std::size_t input) const { return slot_[input]; }
  // Whether `node` is one of the leaves.
  bool is_leaf(const Node* node) const {
    for (const Var& l : leaves_)
      if (l.node().get() == node) return true;
    return false;
  }

 private:
  std::vector<std::shared_ptr<Node>> owners_;
  std::vector<Var> leaves_;
  std::vector<Var> args_;
  std::vector<std::size_t> slot_;
};

// Throws UsageError when the recomputed tape reaches a variable that is not one of the block's
// inputs (a Var captured by fn that needs a gradient).
void check_closed(const Var& out, const LentInputs& lent, const std::string& name) {
  std::vector<const Node*> stack = {out.node().get()};
  std::unordered_set<const Node*> visited = {out.node().get()};
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    if (lent.is_leaf(node)) continue;
    if (node->requires_grad && node->inputs.empty()) {
      throw UsageError("remat '" + name +
                       "': the block uses a Var that needs a gradient and is not one of its inputs (op '" + node->op +
                       "'); pass it as an input");
    }
    for (const Var& in : node->inputs) {
      if (in.requires_grad() && visited.insert(in.node().get()).second) stack.push_back(in.node().get());
    }
  }
}

}  // namespace

Var remat_call(const BlockFn& fn, const std::vector<Var>& inputs, const std::string& name) {
  for (const Var& in : inputs) {
    if (!in.defined()) throw Error("remat '" + name + "': an input is an undefined Var");
  }
  Var out;
  {
    NoTape off;
    out = fn(inputs);
  }
  if (!out.defined()) throw Error("remat '" + name + "': the block returned an undefined Var");
  // The block's result value; moved when nothing else holds its node (copied when fn returned
  // an input or a captured Var).
  ShardedTensor value = out.node().use_count() == 1 ? std::move(out.node()->value) : out.value();
  out = Var();
  return make_result(
      "remat:" + name, std::move(value), inputs, [fn, name, inputs](const ShardedTensor& g, GradSink& sink) {
        // One cotangent per distinct input node, handed to the sink at that node's first input.
        std::vector<std::optional<ShardedTensor>> grads;
        std::vector<int> first_input;  // per distinct node: the input index that receives its cotangent
        {
          LentInputs lent(inputs);
          Var recomputed = fn(lent.args());
          if (!recomputed.defined() || recomputed.shape() != g.global_shape()) {
            throw Error("remat '" + name + "': the recomputation gave another result");
          }
          check_closed(recomputed, lent, name);
          first_input.assign(lent.leaves().size(), -1);
          for (std::size_t i = 0; i < inputs.size(); ++i) {
            if (first_input[lent.slot(i)] < 0 && sink.wants(static_cast<int>(i))) {
              first_input[lent.slot(i)] = static_cast<int>(i);
            }
          }
          std::vector<Var> wrt;
          GradOptions options;  // each input's cotangent kept raw where the outer tape keeps it raw
          std::vector<int> receiver;
          for (std::size_t s = 0; s < first_input.size(); ++s) {
            if (first_input[s] < 0) continue;
            wrt.push_back(lent.leaves()[s]);
            options.keep_raw.push_back(sink.keeps_raw(first_input[s]));
            receiver.push_back(first_input[s]);
          }
          if (!wrt.empty()) grads = gradients(recomputed, g, wrt, options);
          first_input = std::move(receiver);
        }  // the inputs' values are back in their nodes before the sink reads them
        for (std::size_t j = 0; j < grads.size(); ++j) {
          if (grads[j]) sink.add(first_input[j], std::move(*grads[j]));
        }
      });
}

BlockFn remat(BlockFn fn, std::string name) {
  return [fn = std::move(fn), name = std::move(name)](const std::vector<Var>& inputs) {
    return remat_call(fn, inputs, name);
  };
}

}  // namespace tessera::nn
