// The tutorial's MLP: declarations (paths, shapes, partitioning) and global-view forwards.
#include "models/mlp.h"

#include "core/error.h"
#include "models/stacking.h"
#include "nn/einsum.h"
#include "nn/ops.h"
#include "nn/remat.h"

namespace tessera::models {

using namespace tessera::nn;

namespace {

Spec parse(const char* text) { return parse_spec(text); }

// A layer's spec with the unsplit leading layer dimension of the stack.
Spec stacked(const Spec& layer) {
  Spec s = layer.padded(2);
  s.dims.insert(s.dims.begin(), Axes{});
  return s;
}

std::int64_t last_dim(const Shape& input, const char* layer) {
  if (input.size() != 2) throw ShapeError(std::string(layer) + ": expects a [batch, features] input, got " + shape_to_string(input));
  return input[1];
}

// A size the caller gives a layer: a negative or zero one made a model without parameters (an
// MLP of -1 layers had none, and its apply returned its input) or a shape refused deep inside.
void require_positive(std::int64_t value, const char* layer, const char* what) {
  if (value < 1) {
    throw UsageError(std::string(layer) + ": " + what + " must be >= 1, got " + std::to_string(value));
  }
}

}  // namespace

Rules tutorial_rules() { return {{"batch", {"data"}}, {"hidden", {"model"}}}; }

void Dense::declare(const ParamDecl& decl, const Shape& input) const {
  const std::int64_t in = last_dim(input, "Dense");
  require_positive(features, "Dense", "features");
  decl.param("kernel", {in, features}, kernel_init, kernel_partitioning, dtype);
  if (use_bias) decl.param("bias", {features}, initializers::zeros(), Partitioning{}, dtype);
}

Var Dense::apply(const ParamView& params, const Var& x) const {
  Var y = einsum("bd,dh->bh", x, params.get("kernel"));
  if (use_bias) y = add(y, params.get("bias"));
  return y;
}

void DotReluDot::declare(const ParamDecl& decl, const Shape& input) const {
  const std::int64_t in = last_dim(input, "DotReluDot");
  require_positive(depth, "DotReluDot", "depth");
  Dense dense{depth, false, init,
              logical ? Partitioning::with_logical_partitioning({"embed", "hidden"})
                      : Partitioning::with_partitioning(w1_spec),
              dtype};
  dense.declare(decl.child("Dense_0"), input);
  decl.param("W2", {depth, in}, init,
             logical ? Partitioning::with_logical_partitioning({"hidden", "embed"})
                     : Partitioning::with_partitioning(w2_spec),
             dtype);
}

Var DotReluDot::apply_weights(const ApplyContext& ctx, const Var& x, const Var& w1, const Var& w2) const {
  // Parsed once, not at every forward.
  static const Spec hidden_spec = parse("P(data, model)");
  static const Spec embed_spec = parse("P(data, None)");
  Var y = relu(einsum("bd,dh->bh", x, w1));
  y = logical ? with_logical_constraint(y, {"batch", "hidden"}, ctx.rules) : with_sharding_constraint(y, hidden_spec);
  Var z = einsum("bh,hd->bd", y, w2);
  z = logical ? with_logical_constraint(z, {"batch", "embed"}, ctx.rules) : with_sharding_constraint(z, embed_spec);
  return z;
}

Var DotReluDot::apply(const ParamView& params, const ApplyContext& ctx, const Var& x) const {
  return apply_weights(ctx, x, params.child("Dense_0").get("kernel"), params.get("W2"));
}

void MLP::declare(const ParamDecl& decl, const Shape& input) const {
  const std::int64_t in = last_dim(input, "MLP");
  require_positive(num_layers, "MLP", "num_layers");
  require_positive(depth, "MLP", "depth");
  if (!scan) {
    for (int i = 0; i < num_layers; ++i) layer().declare(decl.child("DotReluDot_" + std::to_string(i)), input);
    return;
  }
  // nn.scan with variable_axes {params: 0}: every parameter gains a leading layer dimension,
  // unsplit (metadata_params {PARTITION_NAME: None}; "layer" for logical names). Fans are
  // per layer, as each layer of flax's scan is initialised on its own.
  const ParamDecl scan_decl = decl.child("ScanDotReluDot_0");
  const Initializer per_layer = init.with_batch_axes(1);
  const std::int64_t L = num_layers;
  scan_decl.child("Dense_0").param("kernel", {L, in, depth}, per_layer,
                                   logical ? Partitioning::with_logical_partitioning({"layer", "embed", "hidden"})
                                           : Partitioning::with_partitioning(stacked(w1_spec)),
                                   dtype);
  scan_decl.param("W2", {L, depth, in}, per_layer,
                  logical ? Partitioning::with_logical_partitioning({"layer", "hidden", "embed"})
                          : Partitioning::with_partitioning(stacked(w2_spec)),
                  dtype);
}

Var MLP::apply(const ParamView& params, const ApplyContext& ctx, const Var& x) const {
  require_positive(num_layers, "MLP", "num_layers");
  // One layer, rematerialised when ctx.remat (the block owns copies of what it needs: it runs
  // again in the backward pass).
  auto run_layer = [&](int i, const Var& h, const Var& w1, const Var& w2) {
    if (!ctx.remat) return layer().apply_weights(ctx, h, w1, w2);
    BlockFn block = [one = layer(), ctx](const std::vector<Var>& a) { return one.apply_weights(ctx, a[0], a[1], a[2]); };
    return remat_call(block, {h, w1, w2}, (scan ? "ScanDotReluDot_0/layer_" : "DotReluDot_") + std::to_string(i));
  };
  Var h = x;
  if (!scan) {
    for (int i = 0; i < num_layers; ++i) {
      const ParamView p = params.child("DotReluDot_" + std::to_string(i));
      h = run_layer(i, h, p.child("Dense_0").get("kernel"), p.get("W2"));
    }
    return h;
  }
  const ParamView p = params.child("ScanDotReluDot_0");
  const Var& w1 = p.child("Dense_0").get("kernel");
  const Var& w2 = p.get("W2");
  for (int i = 0; i < num_layers; ++i) h = run_layer(i, h, take_layer(w1, i), take_layer(w2, i));
  return h;
}

ParamTree stack_loop_params(const ParamTree& loop, int num_layers, const Mesh& mesh) {
  return stack_layers(loop, "DotReluDot_", "ScanDotReluDot_0/", num_layers, mesh);
}

}  // namespace tessera::models
