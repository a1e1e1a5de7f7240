// The byte-level transformer: its declaration table and its global-view forward pass.
#include "models/transformer.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "collectives/reshard.h"
#include "core/error.h"
#include "core/shape_scope.h"
#include "models/stacking.h"
#include "nn/activations.h"
#include "nn/attention.h"
#include "nn/einsum.h"
#include "nn/embedding.h"
#include "nn/losses.h"
#include "nn/normalization.h"
#include "nn/ops.h"
#include "nn/precision.h"
#include "nn/remat.h"

namespace tessera::models {

using namespace tessera::nn;

namespace {

constexpr const char* kLoopPrefix = "block_";
constexpr const char* kStackPrefix = "blocks";

bool has_axis(const MeshShape& mesh, const std::string& axis) {
  const auto& names = mesh.names();
  return std::find(names.begin(), names.end(), axis) != names.end();
}

// A weight's dimensions as declared: its shape string's, less the leading `layers` unless the
// blocks are stacked (scan).
std::vector<DimSpec> declared_dims(const WeightDecl& weight, bool scan) {
  std::vector<DimSpec> dims = parse_shape_string(weight.shape).dims;
  if (!scan && !dims.empty() && dims[0].name == "layers") dims.erase(dims.begin());
  return dims;
}

// `spec` without the axes `keep` refuses.
template <class Keep>
Spec filter_axes(const Spec& spec, Keep keep) {
  Spec out = spec;
  for (auto& dim : out.dims) std::erase_if(dim, [&](const std::string& a) { return !keep(a); });
  std::erase_if(out.partial, [&](const std::string& a) { return !keep(a); });
  return out;
}

// Spec over the model's axes in `axes` order (one per dimension, empty for none) that the mesh has.
Spec spec_on(const MeshShape& mesh, const std::vector<const char*>& axes) {
  Spec s = Spec::replicated(static_cast<int>(axes.size()));
  for (std::size_t d = 0; d < axes.size(); ++d) {
    if (axes[d] != nullptr && has_axis(mesh, axes[d])) s.dims[d].push_back(axes[d]);
  }
  return s;
}

}  // namespace

std::vector<WeightDecl> weight_table(const TransformerConfig& c) {
  // Initial scales: unit-variance embeddings (the blocks see them through rmsnorm); projections
  // with variance 1 / fan_in; the projections that write into the residual stream (w_o, w_down)
  // scaled down by sqrt(2 layers), as GPT-2 does; norm weights 1.
  const double in_d = 1.0 / std::sqrt(static_cast<double>(c.d_model));
  const double in_ff = 1.0 / std::sqrt(static_cast<double>(c.d_ff));
  const double residual = 1.0 / std::sqrt(2.0 * std::max(1, c.layers));
  using initializers::normal;
  using initializers::ones;
  // name        shape string (sizes from the config; /data with fsdp only)   per layer  init
  return {
      {"embed",     "vocab/model d_model/data",                                false, normal(1.0)},
      {"attn_norm", "layers d_model",                                          true,  ones()},
      {"w_q",       "layers d_model/data heads/model d_head",                  true,  normal(in_d)},
      {"w_k",       "layers d_model/data heads/model d_head",                  true,  normal(in_d)},
      {"w_v",       "layers d_model/data heads/model d_head",                  true,  normal(in_d)},
      {"w_o",       "layers heads/model d_head d_model/data",                  true,  normal(in_d * residual)},
      {"mlp_norm",  "layers d_model",                                          true,  ones()},
      {"w_up",      "layers d_model/data d_ff/model",                          true,  normal(in_d)},
      {"w_down",    "layers d_ff/model d_model/data",                          true,  normal(in_ff * residual)},
      {"final_norm", "d_model",                                                false, ones()},
      {"unembed",   "d_model/data vocab/model",                                false, normal(in_d)},
  };
}

Shape Transformer::weight_shape(const WeightDecl& weight) const {
  const std::map<std::string, std::int64_t> sizes = {
      {"vocab", config.vocab}, {"d_model", config.d_model}, {"heads", config.heads},
      {"d_head", config.d_head()}, {"d_ff", config.d_ff}, {"layers", config.layers}};
  Shape shape;
  for (const auto& dim : declared_dims(weight, config.scan)) shape.push_back(dim.size ? *dim.size : sizes.at(dim.name));
  return shape;
}

Spec Transformer::weight_spec(const WeightDecl& weight, const MeshShape& mesh) const {
  Spec spec;
  for (const auto& dim : declared_dims(weight, config.scan)) spec.dims.push_back(dim.axes);
  return filter_axes(spec, [&](const std::string& axis) {
    return has_axis(mesh, axis) && (config.fsdp || axis != kDataAxis);
  });
}

Spec Transformer::token_spec(const MeshShape& mesh) { return spec_on(mesh, {kDataAxis, kSeqAxis}); }

Axes Transformer::batch_axes(const MeshShape& mesh) { return token_spec(mesh).used_axes(); }

Spec Transformer::activation_spec(const MeshShape& mesh) { return spec_on(mesh, {kDataAxis, kSeqAxis, nullptr}); }

void Transformer::validate(const MeshShape& mesh, const Shape& tokens) const {
  for (const auto& name : mesh.names()) {
    if (name != kDataAxis && name != kSeqAxis && name != kModelAxis) {
      throw MeshError("mesh axis '" + name + "' is not one of the transformer's axes data, seq, model");
    }
  }
  const TransformerConfig& c = config;
  if (c.vocab < 1 || c.d_model < 1 || c.heads < 1 || c.d_ff < 1 || c.layers < 1) {
    throw UsageError("the transformer's vocab, d_model, heads, d_ff and layers must be >= 1");
  }
  if (c.d_model % c.heads != 0) {
    throw UsageError("d_model " + std::to_string(c.d_model) + " does not divide into " + std::to_string(c.heads) +
                     " heads");
  }
  if (c.d_head() % 2 != 0) {
    throw UsageError("d_head = d_model / heads = " + std::to_string(c.d_head()) +
                     " must be even (rotary embeddings rotate pairs)");
  }
  if (c.dtype != DType::f32 && c.dtype != DType::f64) throw UsageError("the transformer runs in f32 or f64");
  if (c.bf16 && c.dtype != DType::f32) throw UsageError("bf16 compute needs f32 parameters");
  if (tokens.size() != 2 || tokens[0] < 1 || tokens[1] < 1) {
    throw ShapeError("the transformer's tokens are [batch, seq] with both >= 1, got " + shape_to_string(tokens));
  }
  // Tokens, heads, d_model and d_ff split evenly (attention's sequence blocks and the heads
  // are cut by those sizes); the vocabulary may be uneven (the block rule of core/spec.h).
  validate_spec(token_spec(mesh), mesh, tokens, "tokens");
  require_even_split(token_spec(mesh), mesh, tokens, "tokens");
  for (const auto& weight : weight_table(c)) {
    const Spec spec = weight_spec(weight, mesh);
    const Shape shape = weight_shape(weight);
    validate_spec(spec, mesh, shape, weight.name);
    Spec even = spec;  // every dimension but the vocabulary
    const std::vector<DimSpec> dims = declared_dims(weight, c.scan);
    for (std::size_t d = 0; d < dims.size(); ++d) {
      if (dims[d].name == "vocab") even.dims[d].clear();
    }
    require_even_split(even, mesh, shape, weight.name);
  }
}

void Transformer::declare(const ParamDecl& decl, const Shape& tokens) const {
  validate(decl.mesh(), tokens);
  // The shape strings' names bound to the configuration's sizes: a table entry whose dimensions
  // disagree with the configuration fails here.
  ShapeScope scope(ShapeScope::Visibility::isolated);
  bind("vocab", config.vocab);
  bind("d_model", config.d_model);
  bind("heads", config.heads);
  bind("d_head", config.d_head());
  bind("d_ff", config.d_ff);
  bind("layers", config.layers);
  for (const auto& weight : weight_table(config)) {
    const Shape shape = weight_shape(weight);
    const Spec spec = weight_spec(weight, decl.mesh());
    if (config.scan || !weight.per_layer) check_global(parse_shape_string(weight.shape), shape, weight.name);
    if (!weight.per_layer) {
      decl.param(weight.name, shape, weight.init, Partitioning::with_partitioning(spec), config.dtype);
    } else if (config.scan) {
      // Each layer of the stack has the fans of a single layer's weight (flax's nn.scan).
      decl.child(kStackPrefix).param(weight.name, shape, weight.init.with_batch_axes(1),
                                     Partitioning::with_partitioning(spec), config.dtype);
    } else {
      for (int i = 0; i < config.layers; ++i) {
        decl.child(kLoopPrefix + std::to_string(i))
            .param(weight.name, shape, weight.init, Partitioning::with_partitioning(spec), config.dtype);
      }
    }
  }
}

namespace {

// w with its FSDP split over data gathered (the gradient is reduce-scattered back by the tape).
Var gather_over_data(const Var& w) {
  const Spec gathered = filter_axes(w.spec(), [](const std::string& axis) { return axis != kDataAxis; });
  return gathered == w.spec() ? w : reshard(w, gathered);
}

}  // namespace

Var Transformer::use_weight(const Var& w) const {
  const Var c = cast(w, config.compute_dtype());
  return config.fsdp ? gather_over_data(c) : c;
}

BlockWeights Transformer::block_weights(const ParamView& params, int i) const {
  const auto get = [&](const char* name) -> Var {
    if (config.scan) return use_weight(take_layer(params.child(kStackPrefix).get(name), i));
    return use_weight(params.child(kLoopPrefix + std::to_string(i)).get(name));
  };
  return {get("attn_norm"), get("w_q"), get("w_k"), get("w_v"), get("w_o"), get("mlp_norm"), get("w_up"), get("w_down")};
}

Spec Transformer::residual_spec(const MeshShape& mesh) const {
  Spec spec = activation_spec(mesh);
  if (config.sequence_parallel && has_axis(mesh, kModelAxis)) spec.dims[1].push_back(kModelAxis);
  return spec;
}

Var Transformer::block(const Var& h, const BlockWeights& w) const {
  const Spec residual = residual_spec(h.mesh().shape());
  // What the products read: the normalized stream, gathered over model under sequence_parallel
  // (a no-op without it). Partial products over model go back to the residual's spec: an
  // all-reduce, or a reduce-scatter onto the split positions.
  const Spec read = activation_spec(h.mesh().shape());
  const Var a = with_sharding_constraint(rmsnorm(h, w.attn_norm, config.norm_eps), read);
  const Var q = rotary(einsum("bsd,dhk->bshk", a, w.w_q), config.rope_base);
  const Var k = rotary(einsum("bsd,dhk->bshk", a, w.w_k), config.rope_base);
  const Var v = einsum("bsd,dhk->bshk", a, w.w_v);
  const Var o = causal_attention(q, k, v);
  // Partial over model (the heads' contributions): the Megatron all-reduce.
  const Var attn = with_sharding_constraint(einsum("bshk,hkd->bsd", o, w.w_o), residual);
  const Var h1 = add(h, attn);
  const Var m = with_sharding_constraint(rmsnorm(h1, w.mlp_norm, config.norm_eps), read);
  const Var up = gelu_tanh(einsum("bsd,df->bsf", m, w.w_up));
  const Var mlp = with_sharding_constraint(einsum("bsf,fd->bsd", up, w.w_down), residual);
  return add(h1, mlp);
}

Var Transformer::logits(const ParamView& params, const ShardedTensor& tokens) const {
  const MeshShape& mesh = tokens.mesh().shape();
  const ShardedTensor ids = tokens.spec() == token_spec(mesh) ? tokens : tessera::reshard(tokens, token_spec(mesh));
  // The lookup (and its scatter-add of gradients) in the parameters' dtype; its partial sum over
  // the vocabulary's axes is resolved in the compute dtype.
  const Var table = config.fsdp ? gather_over_data(params.get("embed")) : params.get("embed");
  Var h = with_sharding_constraint(cast(embed(table, ids), config.compute_dtype()), residual_spec(mesh));
  for (int i = 0; i < config.layers; ++i) {
    const BlockWeights w = block_weights(params, i);
    if (!config.remat) {
      h = block(h, w);
      continue;
    }
    h = remat_call([this](const std::vector<Var>& in) {
          return block(in[0], BlockWeights{in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8]});
        },
        {h, w.attn_norm, w.w_q, w.w_k, w.w_v, w.w_o, w.mlp_norm, w.w_up, w.w_down}, "block_" + std::to_string(i));
  }
  h = with_sharding_constraint(rmsnorm(h, use_weight(params.get("final_norm")), config.norm_eps),
                               activation_spec(mesh));
  return einsum("bsd,dv->bsv", h, use_weight(params.get("unembed")));
}

Var Transformer::loss(const ParamView& params, const ShardedTensor& tokens, const ShardedTensor& labels) const {
  return softmax_cross_entropy_with_integer_labels(cast(logits(params, tokens), config.dtype), labels);
}

ParamTree stack_transformer_params(const ParamTree& loop, int layers, const Mesh& mesh) {
  return stack_layers(loop, kLoopPrefix, std::string(kStackPrefix) + "/", layers, mesh);
}

}  // namespace tessera::models
