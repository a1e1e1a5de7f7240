// Parameter declaration, resolution of logical names, and sharded allocation.
#include "nn/params.h"

#include <algorithm>

#include "core/error.h"

namespace tessera::nn {

std::vector<std::string> ParamInfo::logical_names() const {
  return partitioning.logical ? *partitioning.logical : std::vector<std::string>{};
}

ParamDecl ParamDecl::child(const std::string& name) const {
  ParamDecl out = *this;
  out.prefix_ = prefix_.empty() ? name : prefix_ + "/" + name;
  return out;
}

void ParamDecl::param(const std::string& name, Shape shape, Initializer init, Partitioning partitioning,
                      DType dtype) const {
  ParamInfo info;
  info.path = prefix_.empty() ? name : prefix_ + "/" + name;
  for (const auto& existing : state_->infos) {
    if (existing.path == info.path) throw SpecError("parameter '" + info.path + "' is declared twice");
  }
  if (partitioning.logical) {
    if (partitioning.logical->size() != shape.size()) {
      throw SpecError("parameter '" + info.path + "': " + std::to_string(partitioning.logical->size()) +
                      " logical names for shape " + shape_to_string(shape));
    }
    info.spec = logical_to_mesh_axes(*partitioning.logical, state_->rules, info.path);
  } else if (partitioning.physical) {
    info.spec = partitioning.physical->padded(static_cast<int>(shape.size()));
  } else {
    info.spec = Spec::replicated(static_cast<int>(shape.size()));
  }
  validate_spec(info.spec, state_->mesh, shape, info.path);
  info.shape = std::move(shape);
  info.dtype = dtype;
  info.init = init;
  info.partitioning = std::move(partitioning);
  state_->infos.push_back(std::move(info));
}

const Var& ParamView::get(const std::string& name) const {
  auto it = tree_->find(join(name));
  if (it == tree_->end()) throw Error("no parameter '" + join(name) + "'");
  return it->second;
}

ParamTree init_params(const ParamInfos& infos, const Mesh& mesh, std::uint64_t seed) {
  ParamTree tree;
  for (const auto& info : infos) {
    const RngKey key = rng_key(seed, info.path);
    tree.emplace(info.path, ShardedTensor::from_block_fn(
                                mesh, info.spec, info.shape,
                                [&](const std::vector<std::int64_t>& offsets, const Shape& block) {
                                  return init_block(info.init, key, info.shape, offsets, block, info.dtype);
                                },
                                info.path));
  }
  return tree;
}

ParamTree zeros_like(const ParamTree& tree) {
  ParamTree out;
  for (const auto& [path, value] : tree) {
    out.emplace(path, ShardedTensor::zeros(value.mesh(), value.spec(), value.global_shape(), value.dtype(), path));
  }
  return out;
}

VarTree as_vars(const ParamTree& tree, bool requires_grad) {
  VarTree out;
  for (const auto& [path, value] : tree) out.emplace(path, Var(value, requires_grad));
  return out;
}

std::map<std::string, Spec> get_partition_spec(const ParamInfos& infos) {
  std::map<std::string, Spec> out;
  for (const auto& info : infos) {
    if (info.partitioning.logical) {
      Spec s = Spec::replicated(0);
      for (const auto& name : *info.partitioning.logical) s.dims.push_back(name.empty() ? Axes{} : Axes{name});
      out.emplace(info.path, std::move(s));
    } else {
      out.emplace(info.path, info.spec);
    }
  }
  return out;
}

std::map<std::string, Spec> logical_to_mesh_sharding(const std::map<std::string, Spec>& specs, const MeshShape& mesh,
                                                     const Rules& rules) {
  validate_rules(rules, mesh);
  std::map<std::string, Spec> out;
  for (const auto& [path, spec] : specs) {
    std::vector<std::string> names;
    for (const auto& d : spec.dims) {
      if (d.size() > 1) throw RuleError("parameter '" + path + "': a logical dimension names several axes");
      names.push_back(d.empty() ? std::string() : d[0]);
    }
    out.emplace(path, logical_to_mesh_axes(names, rules, path));
  }
  return out;
}

std::map<std::string, Spec> param_specs(const ParamInfos& infos) {
  std::map<std::string, Spec> out;
  for (const auto& info : infos) out.emplace(info.path, info.spec);
  return out;
}

}  // namespace tessera::nn
