// The model of the Flax sharding tutorial, written against global shapes with nn's ops:
//   Dense        kernel (in, features)
//   DotReluDot   y = relu(x @ W1) constrained (data, model); z = y @ W2 constrained (data, None)
//                W1 "Dense_0/kernel" (None, model), W2 "W2" (model, None)
//   MLP          num_layers DotReluDots as a loop ("DotReluDot_<i>/...") or stacked with a
//                leading layer dimension run by a scan ("ScanDotReluDot_0/...", spec (None, ...))
// With `logical`, the same layers carry logical names (embed, hidden; batch for activations;
// layer for the stack dimension) and resolve them with the rules given at declaration and apply.
#pragma once

#include <string>

#include "core/init.h"
#include "core/rules.h"
#include "nn/params.h"

namespace tessera::models {

// What a module's apply needs besides the parameters.
struct ApplyContext {
  Rules rules;  // used by logical constraints
  // Rematerialise each layer of an MLP (nn/remat.h): the tape keeps a layer's input and output
  // only, and the backward pass recomputes its forward.
  bool remat = false;
};

struct Dense {
  std::int64_t features = 0;
  bool use_bias = false;
  Initializer kernel_init = initializers::lecun_normal();
  nn::Partitioning kernel_partitioning;
  DType dtype = DType::f32;
  void declare(const nn::ParamDecl& decl, const Shape& input) const;
  nn::Var apply(const nn::ParamView& params, const nn::Var& x) const;
};

struct DotReluDot {
  std::int64_t depth = 0;
  Initializer init = initializers::xavier_normal();
  bool logical = false;
  // The physical specs of the tutorial; other choices (FSDP: W1 P(data, model)) change only
  // where the data lives, never the numbers.
  Spec w1_spec = parse_spec("P(None, model)");
  Spec w2_spec = parse_spec("P(model, None)");
  DType dtype = DType::f32;
  void declare(const nn::ParamDecl& decl, const Shape& input) const;
  nn::Var apply(const nn::ParamView& params, const ApplyContext& ctx, const nn::Var& x) const;
  // One layer given its weights (shared by the loop and the scan).
  nn::Var apply_weights(const ApplyContext& ctx, const nn::Var& x, const nn::Var& w1, const nn::Var& w2) const;
};

struct MLP {
  int num_layers = 4;
  std::int64_t depth = 1024;
  bool scan = false;
  bool logical = false;
  Initializer init = initializers::xavier_normal();
  Spec w1_spec = parse_spec("P(None, model)");
  Spec w2_spec = parse_spec("P(model, None)");
  DType dtype = DType::f32;
  void declare(const nn::ParamDecl& decl, const Shape& input) const;
  nn::Var apply(const nn::ParamView& params, const ApplyContext& ctx, const nn::Var& x) const;
  DotReluDot layer() const { return DotReluDot{depth, init, logical, w1_spec, w2_spec, dtype}; }
};

// The tutorial's rules: batch -> data, hidden -> model.
Rules tutorial_rules();

// The stacked parameters of an MLP with scan, built from the loop MLP's parameters (layer i of
// the stack is DotReluDot_i's), for comparing the two forms.
nn::ParamTree stack_loop_params(const nn::ParamTree& loop, int num_layers, const Mesh& mesh);

}  // namespace tessera::models
