// Element types in the global view: the cast op and the mixed-precision policy.
//
// cast(x, dtype) converts every element (f32 -> bf16 rounds to nearest even; bf16 -> f32 is
// exact) and keeps x's spec, partial axes included (a partial bf16 value is the sum of its
// rounded blocks). Its backward casts the cotangent back to x's dtype, so a parameter's gradient
// has the parameter's dtype whatever the compute dtype.
//
// Precision is the policy of mixed-precision training (as jmp's Policy): parameters, their
// gradients as the optimizer sees them and the optimizer's moments in `param` (f32); the layers
// see the parameters and the input cast to `compute` (bf16), so activations, their collectives and
// the reductions of the gradients (reshards of the cast's cotangent) are in `compute`, at half the
// bytes; the model's output is cast back to `param` before the loss. Kernels compute bf16 in f32
// and round once (core/kernels.h); collectives sum bf16 in f32 and round once.
#pragma once

#include <string_view>

#include "nn/params.h"
#include "nn/var.h"

namespace tessera::nn {

ShardedTensor cast(const ShardedTensor& x, DType dtype);
// Taped; x itself when it already has `dtype`. Integer dtypes are refused (DTypeError).
Var cast(const Var& x, DType dtype);

struct Precision {
  DType param = DType::f32;
  DType compute = DType::f32;

  // "f32" -> {f32, f32}; "bf16" -> {f32, bf16}. UsageError otherwise.
  static Precision parse(std::string_view name);
  bool mixed() const { return param != compute; }

  // The parameters as the layers see them (taped casts to `compute`).
  VarTree cast_params(const VarTree& params) const;
  Var cast_input(const Var& x) const { return cast(x, compute); }
  Var cast_output(const Var& y) const { return cast(y, param); }
};

}  // namespace tessera::nn
