// Two-operand einsum on dense local tensors ("bd,dh->bh"), lowered to one batched GEMM with
// transposes folded into the GEMM where the operands' layout allows, and a copy otherwise.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace tessera {

// Parsed subscripts. Every letter of an operand appears in the other operand or in the output;
// every output letter appears in an operand; no letter repeats within one operand.
struct EinsumSubscripts {
  std::string a, b, out;
  static EinsumSubscripts parse(std::string_view text);
  std::string to_string() const { return a + "," + b + "->" + out; }
};

// out = einsum(a, b); the extents of a shared letter must agree (ShapeError names the letter).
Tensor einsum_local(const EinsumSubscripts& subscripts, const Tensor& a, const Tensor& b);

}  // namespace tessera
