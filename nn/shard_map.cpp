// shard_map: one taped op whose forward runs the body on local blocks and whose backward runs
// the body's tape. The replication analysis reads the body's tape (see spmd_frame.h).
#include "nn/shard_map.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "collectives/collective_check.h"
#include "collectives/collectives.h"
#include "collectives/reshard.h"
#include "core/env_settings.h"
#include "core/error.h"
#include "core/shape_scope.h"
#include "mesh/agree.h"
#include "mesh/mpi_check.h"
#include "nn/ops.h"
#include "nn/spmd_frame.h"

namespace tessera::nn {

namespace {

using detail::SpmdFrame;

// What the backward of every result needs: the body's tape and the boundary's specs.
struct Boundary {
  Mesh mesh, local;
  std::vector<Spec> in_specs, out_specs;  // padded to the tensors' ranks
  std::vector<Shape> in_shapes;           // global
  std::vector<Var> leaves, results;       // the body's inputs and outputs (local)
};

Axes axes_of(const MeshShape& mesh, std::uint64_t mask) {
  Axes out;
  for (int i = 0; i < mesh.ndim(); ++i) {
    if (mask >> i & 1) out.push_back(mesh.names()[i]);
  }
  return out;
}

// Mesh axes of size > 1 that `spec` does not mention.
std::uint64_t unmentioned(const Spec& spec, const MeshShape& mesh) {
  std::uint64_t mask = 0;
  const Axes used = spec.used_axes();
  for (int i = 0; i < mesh.ndim(); ++i) {
    if (mesh.sizes()[i] > 1 && std::find(used.begin(), used.end(), mesh.names()[i]) == used.end()) {
      mask |= std::uint64_t{1} << i;
    }
  }
  return mask;
}

// The varying axes of every node the results depend on, and which inputs each depends on.
struct Vary {
  std::uint64_t axes = 0;
  std::uint64_t inputs = 0;  // bit i: depends on the body's input i
  // The axes the node's operands are taken to vary over: the union of the inputs' axes, plus
  // the axes of the collective that made it (a collective takes its operand as varying there).
  std::uint64_t operands = 0;
};

class VaryAnalysis {
 public:
  explicit VaryAnalysis(const SpmdFrame& frame) : frame_(frame) {}
  Vary visit(const Node* node) {
    if (auto it = memo_.find(node); it != memo_.end()) return it->second;
    Vary v;
    auto rule = frame_.rules.find(node);
    if (rule != frame_.rules.end() && rule->second.input >= 0) {
      v.axes = rule->second.adds;
      v.inputs = std::uint64_t{1} << rule->second.input;
    } else {
      for (const auto& in : node->inputs) {
        Vary c = visit(in.node().get());
        v.axes |= c.axes;
        v.inputs |= c.inputs;
      }
      v.operands = v.axes;
      if (rule != frame_.rules.end()) {
        v.operands |= rule->second.adds | rule->second.removes;
        v.axes = (v.axes & ~rule->second.removes) | rule->second.adds;
      }
    }
    memo_[node] = v;
    return v;
  }
  const std::unordered_map<const Node*, Vary>& memo() const { return memo_; }

 private:
  const SpmdFrame& frame_;
  std::unordered_map<const Node*, Vary> memo_;
};

// JAX's implicit pbroadcast (pvary): where an operand invariant over some axes meets operands
// that vary over them, its cotangent (which varies there) must be summed over those axes. The
// sink wraps an op's backward and all-reduces the cotangent of each such operand.
class PvarySink : public GradSink {
 public:
  PvarySink(GradSink& inner, const Mesh& mesh, const std::vector<Axes>& sum_over)
      : inner_(inner), mesh_(mesh), sum_over_(sum_over) {}
  void add(int input, ShardedTensor grad) override { inner_.add(input, summed(input, std::move(grad))); }
  void add_slab(int input, std::int64_t index, const ShardedTensor& grad) override {
    // Handed on where it is when there is nothing to sum (summed() would take a copy).
    if (!sums(input)) return inner_.add_slab(input, index, grad);
    inner_.add_slab(input, index, summed(input, grad));
  }
  bool wants(int input) const override { return inner_.wants(input); }

 private:
  // Whether inputs[input]'s cotangent is summed over axes before it is handed on.
  bool sums(int input) const { return !sum_over_.at(input).empty() && inner_.wants(input); }
  ShardedTensor summed(int input, ShardedTensor grad) const {
    if (!sums(input)) return grad;
    Tensor total = tessera::all_reduce(mesh_, std::move(grad.local()), sum_over_.at(input), ReduceOp::sum);
    return ShardedTensor(grad.mesh(), grad.spec(), grad.global_shape(), std::move(total));
  }
  GradSink& inner_;
  const Mesh& mesh_;
  const std::vector<Axes>& sum_over_;
};

// Wraps the backward of every node of the body whose operands' varying axes differ.
void insert_pvary_transposes(const VaryAnalysis& analysis, const Mesh& mesh) {
  std::uint64_t live = 0;  // axes of size > 1: the others need no sum
  for (int i = 0; i < mesh.shape().ndim(); ++i) {
    if (mesh.shape().sizes()[i] > 1) live |= std::uint64_t{1} << i;
  }
  for (const auto& [const_node, v] : analysis.memo()) {
    Node* node = const_cast<Node*>(const_node);  // nodes of this body only (they depend on its inputs)
    if (v.inputs == 0 || node->inputs.empty() || !node->backward) continue;
    std::vector<Axes> sum_over(node->inputs.size());
    bool any = false;
    for (std::size_t j = 0; j < node->inputs.size(); ++j) {
      const std::uint64_t missing = v.operands & ~analysis.memo().at(node->inputs[j].node().get()).axes & live;
      sum_over[j] = axes_of(mesh.shape(), missing);
      any = any || missing != 0;
    }
    if (!any) continue;
    node->backward = [backward = std::move(node->backward), mesh, sum_over](ShardedTensor& g, GradSink& sink) {
      PvarySink pvary(sink, mesh, sum_over);
      backward(g, pvary);
    };
  }
}

// The tape the body would have had with its leaves' real requires_grad: a node that depends on
// no input that needs a gradient keeps neither inputs nor backward.
void prune_tape(const VaryAnalysis& analysis, std::uint64_t wanted) {
  // Dropped edges are kept until the loop ends: they may own nodes the loop has yet to visit.
  std::vector<std::vector<Var>> dropped;
  for (const auto& [const_node, v] : analysis.memo()) {
    if ((v.inputs & wanted) != 0) continue;
    Node* node = const_cast<Node*>(const_node);
    node->requires_grad = false;
    dropped.push_back(std::move(node->inputs));
    node->inputs.clear();
    node->backward = nullptr;
  }
}

std::string result_label(const Signature* sig, std::size_t k) {
  // Results the signature leaves unnamed are called "result <k>" already.
  if (!sig || sig->outputs[k].name.rfind("result ", 0) == 0) return "result " + std::to_string(k);
  return "result '" + sig->outputs[k].name + "'";
}

bool check_replication_requested(const ShardMapOptions& options) {
  if (options.check_replication) return true;
  // TESSERA_SHARD_MAP_CHECK (core/env_settings.h): 0 (also when unset) or 1; another value
  // throws, and Mesh::create has refused a mesh whose ranks differ.
  return checked_env_choice(env_setting("TESSERA_SHARD_MAP_CHECK")) == 1;
}

// Debug mode: the blocks of a result must be equal along `axis` (two max all-reduces, then one
// all-reduce over the mesh so that every rank throws).
void check_same_along(const Mesh& mesh, const Tensor& block, const std::string& axis, const std::string& label,
                      const Spec& spec) {
  Tensor hi = tessera::all_reduce(mesh, block, {axis}, ReduceOp::max);
  Tensor neg = unary(UnaryOp::neg, block);
  Tensor lo = tessera::all_reduce(mesh, neg, {axis}, ReduceOp::max);
  double diff = 0;
  for (std::int64_t i = 0; i < hi.numel(); ++i) diff = std::max(diff, std::abs(hi.at(i) + lo.at(i)));
  Tensor flag = Tensor::full({1}, diff, DType::f64);
  flag = tessera::all_reduce(mesh, flag, mesh.axis_names(), ReduceOp::max);
  if (flag.at(0) > 0) {
    throw ShapeError("shard_map: " + label + " is not the same along mesh axis '" + axis + "', which its out_spec " +
                     spec.to_string() + " does not mention (blocks differ by up to " + std::to_string(flag.at(0)) + ")");
  }
}

// Every rank's body returned as many results, each with one dtype and one block shape. Each rank
// infers a result's global shape from its own block, so ranks that disagree would go on to
// collectives of different sizes (a hang, or another rank's bytes), or one rank would throw
// alone (a count or a signature's local shape). And a body that threw a tessera::Error on some
// ranks only (a check of its own, or an op's on this rank's block: embed's token ids inside a body
// agree over the body's one-rank mesh) left the others waiting here. Checked on every call,
// before anything else reads the results: one all-reduce of a 64-bit hash of each rank's
// description (its maximum and the maximum of its complement, so every rank sees whether all are
// equal) and of flags for a body that threw and one that returned. Where every rank's body threw,
// each rank's own error stands; only when they differ does more go over the wire:
// the first failing rank's error (its message and its type) to every rank, or rank 0's
// description, the first differing rank naming both. The agreement runs on the mesh's control
// communicator, so that it never matches a collective of the body: a body that throws on some
// ranks while the others are inside one of its collectives (which the throwing ranks left) ends
// the job with the error after failed_rank_wait_seconds() (mesh/agree.h), as nothing can take the
// others out of it.
std::string describe_results(const std::vector<Var>& results, const Mesh& local, const Signature* sig) {
  std::string text = std::to_string(results.size()) + (results.size() == 1 ? " result" : " results");
  for (std::size_t k = 0; k < results.size(); ++k) {
    const Var& r = results[k];
    text += k == 0 ? ": " : ", ";
    text += (sig && k < sig->outputs.size() ? result_label(sig, k) : "result " + std::to_string(k)) + " ";
    if (!r.defined() || !(r.mesh() == local)) {
      text += "not a local block";
    } else {
      text += std::string(dtype_name(r.dtype())) + shape_to_string(r.value().local().shape());
    }
  }
  return text;
}

// What the body did on this rank: its results, or the error it threw.
struct BodyOutcome {
  std::vector<Var> results;
  std::exception_ptr thrown;  // a tessera::Error
};

// The rank whose body threw, when the others did not arrive in time: most likely they wait in one
// of the body's collectives, which this rank left. Nothing can take them out of it, so the job
// ends with this rank's message (exit code 2, 3 for an IntegrityError, as the programs' table).
[[noreturn]] void abort_for_body_error(const Mesh& mesh, const std::exception_ptr& thrown) {
  abort_with_error(mesh.comm(),
                   "shard_map: the body threw on this rank and the other ranks did not reach the agreement on its "
                   "results within " +
                       std::to_string(failed_rank_wait_seconds()) +
                       " s (they wait in one of the body's collectives, or still run it); ending the job: ",
                   thrown);
}

void agree_on_results(const Mesh& mesh, const Mesh& local, const BodyOutcome& outcome, const Signature* sig) {
  // The mesh's control communicator: a rank whose body threw comes here while the others may be
  // inside one of the body's collectives on the mesh's communicators, which this must not match.
  const Communicator& comm = mesh.control_comm();
  const bool threw = outcome.thrown != nullptr;
  const std::string mine = threw ? std::string() : describe_results(outcome.results, local, sig);
  const std::uint64_t hash = std::hash<std::string>{}(mine);
  std::uint64_t most[4] = {hash, ~hash, threw ? 1u : 0u, threw ? 0u : 1u};
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, most, 4, MPI_UINT64_T, MPI_MAX, comm.handle(), &request), "MPI_Iallreduce");
  if (!threw) {
    check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait");
  } else if (!wait_until_done(request)) {
    // Polled, with a deadline (a rank that returned waits as long as the others take). The
    // others run the same body on a block of the same shape, so they arrive within moments of
    // each other; those that do not are in one of the body's collectives.
    abort_for_body_error(mesh, outcome.thrown);
  }
  // Every rank's body threw (a check on replicated facts): each rank's own error stands, as it was.
  if (most[3] == 0) std::rethrow_exception(outcome.thrown);
  if (most[2] != 0) rethrow_first_error(comm, outcome.thrown);  // some threw: it throws
  if (most[0] == ~most[1]) return;  // the largest hash is the smallest: all alike
  const std::string first = broadcast_string(comm, mine, 0);
  std::optional<std::string> error;
  if (mine != first) {
    error = "shard_map: the body's results differ from rank 0's (" + mine + " here, " + first +
            " on rank 0); a result's block must have one dtype and shape on every rank";
  }
  agree_or_throw<ShapeError>(comm, error);
}

std::vector<Var> shard_map_impl(const Mesh& mesh, const ShardMapBody& body, const std::vector<Spec>& in_specs,
                                const std::vector<Spec>& out_specs, const std::vector<Var>& args,
                                const ShardMapOptions& options, const Signature* sig) {
  // TESSERA_COLLECTIVE_CHECK: every rank is at this shard_map, with the same specs, before the
  // checks below (each rank's own) and the agreement on the body's results (MPI's own call); the
  // body's collectives are checked one by one.
  tessera::detail::check_entry(mesh, [&] {
    const auto specs = [](const std::vector<Spec>& list) {
      std::string text;
      for (const Spec& spec : list) text += (text.empty() ? "" : ", ") + spec.to_string();
      return "(" + text + ")";
    };
    return "shard_map with in_specs " + specs(in_specs) + " and out_specs " + specs(out_specs);
  });
  const MeshShape& shape = mesh.shape();
  if (args.size() != in_specs.size()) {
    throw Error("shard_map: " + std::to_string(args.size()) + " arguments for " + std::to_string(in_specs.size()) +
                " in_specs");
  }
  if (args.size() > 64) throw Error("shard_map: more than 64 arguments");
  if (shape.ndim() > 64) throw Error("shard_map: a mesh of more than 64 axes");
  auto b = std::make_shared<Boundary>();
  b->mesh = mesh;
  b->local = local_mesh(mesh);
  std::vector<Var> inputs;  // the arguments in their in_specs (the outer op's inputs)
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string label = sig ? "argument '" + sig->inputs[i].name + "'" : "argument " + std::to_string(i);
    if (!(args[i].mesh() == mesh)) {
      throw MeshError("shard_map: " + label + " lives on " + args[i].mesh().to_string() + ", not on " + mesh.to_string());
    }
    Spec spec = in_specs[i].padded(args[i].ndim());
    validate_spec(spec, shape, args[i].shape(), label);
    // The body sees one block shape on every rank (as in JAX's shard_map): uneven splits of an
    // argument are refused here, before any communication.
    try {
      require_even_split(spec, shape, args[i].shape(), label);
    } catch (const SpecError& e) {
      throw SpecError(std::string("shard_map: ") + e.what() + "; shard_map's blocks must all have one shape");
    }
    inputs.push_back(args[i].spec() == spec ? args[i] : nn::reshard(args[i], spec));
    b->in_specs.push_back(spec);
    b->in_shapes.push_back(args[i].shape());
  }
  SpmdFrame frame{mesh, b->local, {}};
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& block = inputs[i].value().local();
    // Every leaf starts as a variable so that the tape records the whole body (its types need
    // every edge); prune_tape drops what no gradient needs once the body has run.
    Var leaf(ShardedTensor(b->local, Spec::replicated(block.ndim()), block.shape(), block), true);
    frame.rules[leaf.node().get()] = {detail::axis_mask(shape, b->in_specs[i].used_axes()), 0, static_cast<int>(i)};
    b->leaves.push_back(leaf);
  }
  // Made (collectively, on first use) before the body runs, while every rank is here.
  (void)mesh.control_comm();
  BodyOutcome outcome;
  {
    detail::FrameGuard guard(frame);
    NoTape record(false);  // the body's tape types its results, also inside remat's forward
    try {
      outcome.results = body(b->leaves);
    } catch (const Error&) {
      outcome.thrown = std::current_exception();
    }
  }
  agree_on_results(mesh, b->local, outcome, sig);
  b->results = std::move(outcome.results);
  if (b->results.size() != out_specs.size()) {
    throw Error("shard_map: the body returned " + std::to_string(b->results.size()) + " results for " +
                std::to_string(out_specs.size()) + " out_specs");
  }
  VaryAnalysis analysis(frame);
  std::vector<ShardedTensor> values;
  for (std::size_t k = 0; k < b->results.size(); ++k) {
    const Var& r = b->results[k];
    const std::string label = result_label(sig, k);
    if (!r.defined() || !(r.mesh() == b->local)) {
      throw MeshError("shard_map: " + label + " is not a local block (return Vars computed from the body's inputs)");
    }
    const Tensor& block = r.value().local();
    if (sig) {
      const ArgSignature& want = sig->outputs[k];
      if (r.dtype() != want.dtype) {
        throw DTypeError("shard_map: " + label + " has dtype " + std::string(dtype_name(r.dtype())) +
                         ", the signature says " + std::string(dtype_name(want.dtype)));
      }
      check_local(want.shape, block.shape(), shape, want.name);
    }
    Spec spec = out_specs[k].padded(block.ndim());
    Shape global = block.shape();
    for (const auto& axis : spec.used_axes()) {
      if (!shape.has_axis(axis)) {
        throw SpecError("shard_map: the out_spec " + spec.to_string() + " of " + label + " names mesh axis '" + axis +
                        "', which is not in " + mesh.to_string());
      }
    }
    for (int d = 0; d < block.ndim(); ++d) global[d] *= shard_count(spec, shape, d);
    validate_spec(spec, shape, global, label);
    const std::uint64_t varies = analysis.visit(r.node().get()).axes & unmentioned(spec, shape);
    if (varies != 0) {
      throw SpecError("shard_map: " + label + " varies over mesh axis '" + axes_of(shape, varies)[0] +
                      "' but its out_spec " + spec.to_string() +
                      " does not mention it (reduce it with psum or pmax, or name the axis in the spec)");
    }
    if (check_replication_requested(options)) {
      for (const auto& axis : axes_of(shape, unmentioned(spec, shape))) check_same_along(mesh, block, axis, label, spec);
    }
    values.emplace_back(mesh, spec, global, block);
    b->out_specs.push_back(spec);
  }
  insert_pvary_transposes(analysis, mesh);
  std::uint64_t wanted = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].requires_grad() && !NoTape::active()) wanted |= std::uint64_t{1} << i;
  }
  prune_tape(analysis, wanted);

  std::vector<Var> out;
  for (std::size_t k = 0; k < values.size(); ++k) {
    out.push_back(make_result("shard_map", std::move(values[k]), inputs, [b, k](const ShardedTensor& g, GradSink& sink) {
      const Spec target = b->out_specs[k].without_partial();
      ShardedTensor gk = g.spec() == target ? g : tessera::reshard(g, target);
      const Tensor& block = gk.local();
      ShardedTensor seed(b->local, Spec::replicated(block.ndim()), block.shape(), block);
      std::vector<Var> wrt;
      std::vector<std::size_t> index;
      for (std::size_t i = 0; i < b->leaves.size(); ++i) {
        if (sink.wants(static_cast<int>(i)) && b->leaves[i].requires_grad()) {
          wrt.push_back(b->leaves[i]);
          index.push_back(i);
        }
      }
      if (wrt.empty()) return;
      auto grads = gradients(b->results[k], seed, wrt);
      for (std::size_t j = 0; j < wrt.size(); ++j) {
        if (!grads[j]) continue;
        const std::size_t i = index[j];
        // Invariant over the axes in_spec leaves out: the pvary transposes summed it where needed.
        sink.add(static_cast<int>(i), ShardedTensor(b->mesh, Spec(b->in_specs[i].dims), b->in_shapes[i],
                                                    std::move(grads[j]->local())));
      }
    }));
  }
  return out;
}

}  // namespace

const Mesh& local_mesh(const Mesh& mesh) {
  // Keyed by axis names: the local mesh depends on nothing else. Communicators left at exit are
  // not freed after MPI_Finalize (see Communicator).
  static std::map<std::vector<std::string>, Mesh> cache;
  auto it = cache.find(mesh.axis_names());
  if (it == cache.end()) {
    std::vector<int> ones(mesh.axis_names().size(), 1);
    it = cache.emplace(mesh.axis_names(), Mesh(MeshShape(mesh.axis_names(), ones), Communicator(MPI_COMM_SELF, false)))
             .first;
  }
  return it->second;
}

std::vector<Var> shard_map(const Mesh& mesh, const ShardMapBody& body, const std::vector<Spec>& in_specs,
                           const std::vector<Spec>& out_specs, const std::vector<Var>& args,
                           const ShardMapOptions& options) {
  return shard_map_impl(mesh, body, in_specs, out_specs, args, options, nullptr);
}

std::vector<Var> shard_map(const Mesh& mesh, const Signature& signature, const ShardMapBody& body,
                           const std::vector<Var>& args, const ShardMapOptions& options) {
  if (args.size() != signature.inputs.size()) {
    throw Error("shard_map: " + std::to_string(args.size()) + " arguments for the signature " + signature.to_string());
  }
  ShapeScope scope(ShapeScope::Visibility::isolated);
  for (std::size_t i = 0; i < args.size(); ++i) {
    const ArgSignature& want = signature.inputs[i];
    if (args[i].dtype() != want.dtype) {
      throw DTypeError("shard_map: argument '" + want.name + "' has dtype " + std::string(dtype_name(args[i].dtype())) +
                       ", the signature says " + std::string(dtype_name(want.dtype)));
    }
    try {
      check_global(want.shape, args[i].shape(), mesh.shape(), want.name);
    } catch (const ShapeError& e) {
      throw ShapeError(std::string("shard_map: argument ") + e.what());
    } catch (const SpecError& e) {
      throw SpecError(std::string("shard_map: argument ") + e.what());
    }
  }
  return shard_map_impl(mesh, body, signature.in_specs(), signature.out_specs(), args, options, &signature);
}

std::vector<Var> shard_map(const Mesh& mesh, std::string_view signature, const ShardMapBody& body,
                           const std::vector<Var>& args, const ShardMapOptions& options) {
  return shard_map(mesh, parse_signature(signature), body, args, options);
}

}  // namespace tessera::nn
