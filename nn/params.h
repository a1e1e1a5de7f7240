// Parameters with their partitioning metadata, in a tree addressed by paths
// ("DotReluDot_0/Dense_0/kernel"), as flax's with_partitioning / with_logical_partitioning
// give them. Abstract init records shapes and specs without allocating (eval_shape +
// get_sharding); init allocates only each rank's blocks, from the sharding-invariant RNG.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/init.h"
#include "core/rules.h"
#include "nn/var.h"

namespace tessera::nn {

// A parameter's partitioning: physical mesh axes per dimension, or logical names per dimension
// (resolved by rules). Exactly one of the two is set.
struct Partitioning {
  std::optional<Spec> physical;
  std::optional<std::vector<std::string>> logical;
  static Partitioning with_partitioning(Spec spec) { return {std::move(spec), std::nullopt}; }
  static Partitioning with_logical_partitioning(std::vector<std::string> names) { return {std::nullopt, std::move(names)}; }
};

struct ParamInfo {
  std::string path;
  Shape shape;
  DType dtype = DType::f32;
  Initializer init;
  Partitioning partitioning;
  Spec spec;  // resolved on the mesh
  std::vector<std::string> logical_names() const;
};

// An ordered (by path) list of parameter declarations: what abstract init returns.
using ParamInfos = std::vector<ParamInfo>;
// Parameter values by path.
using ParamTree = std::map<std::string, ShardedTensor>;
// Parameters as autodiff variables by path.
using VarTree = std::map<std::string, Var>;

// Collects declarations under a path prefix. Logical names are resolved with `rules`
// (unassigned names become unsplit, as flax's logical_to_mesh_axes does).
class ParamDecl {
 public:
  ParamDecl(MeshShape mesh, Rules rules) : state_(std::make_shared<State>(State{std::move(mesh), std::move(rules), {}})) {}
  ParamDecl child(const std::string& name) const;
  void param(const std::string& name, Shape shape, Initializer init, Partitioning partitioning,
             DType dtype = DType::f32) const;
  const ParamInfos& infos() const { return state_->infos; }
  const MeshShape& mesh() const { return state_->mesh; }
  const Rules& rules() const { return state_->rules; }
  const std::string& prefix() const { return prefix_; }

 private:
  struct State {
    MeshShape mesh;
    Rules rules;
    ParamInfos infos;
  };
  std::shared_ptr<State> state_;
  std::string prefix_;
};

// Read access to a VarTree under a path prefix, for a module's apply.
class ParamView {
 public:
  explicit ParamView(const VarTree& tree, std::string prefix = {}) : tree_(&tree), prefix_(std::move(prefix)) {}
  ParamView child(const std::string& name) const { return ParamView(*tree_, join(name)); }
  // Throws Error naming the path when the tree has no such parameter.
  const Var& get(const std::string& name) const;

 private:
  std::string join(const std::string& name) const { return prefix_.empty() ? name : prefix_ + "/" + name; }
  const VarTree* tree_;
  std::string prefix_;
};

// Allocates every parameter's block on this rank: init keyed by (seed, path).
ParamTree init_params(const ParamInfos& infos, const Mesh& mesh, std::uint64_t seed);
// Zeros of the parameters' shapes and specs (optimizer moments, gradient accumulators).
ParamTree zeros_like(const ParamTree& tree);
VarTree as_vars(const ParamTree& tree, bool requires_grad);

// flax.linen.get_partition_spec: per path, the physical spec, or for logically annotated
// parameters a spec whose "axes" are the logical names.
std::map<std::string, Spec> get_partition_spec(const ParamInfos& infos);
// flax.linen.logical_to_mesh_sharding: logical names in those specs to mesh axes by the rules.
std::map<std::string, Spec> logical_to_mesh_sharding(const std::map<std::string, Spec>& specs, const MeshShape& mesh,
                                                     const Rules& rules);
// The resolved spec of every parameter.
std::map<std::string, Spec> param_specs(const ParamInfos& infos);

// flax's eval_shape of init: a module's declarations (anything with
// declare(const ParamDecl&, const Shape& input), as the models of models/ have) on inputs of
// `input` shape: paths, shapes and specs, nothing allocated.
template <class Module>
ParamInfos abstract_init(const Module& module, const MeshShape& mesh, const Rules& rules, const Shape& input) {
  ParamDecl decl(mesh, rules);
  module.declare(decl, input);
  return decl.infos();
}

}  // namespace tessera::nn
