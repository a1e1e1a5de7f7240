// einsum over named dimensions in the global view, with sharding propagation:
// - a free letter keeps its operand's mesh axes;
// - a contracted letter split on the same axes in both operands gives a result partial on them;
// - where the operands disagree (a letter split differently, or one mesh axis on two letters),
//   the operand whose reshard moves fewer bytes is resharded to agree with the other;
// - a partial operand stays partial when the other operand does not use those axes (einsum is
//   linear in each operand), and is reduced first otherwise.
// No operand is gathered unless the specs force it.
#pragma once

#include <string_view>

#include "core/einsum_local.h"
#include "nn/var.h"

namespace tessera::nn {

ShardedTensor einsum(std::string_view subscripts, const ShardedTensor& a, const ShardedTensor& b);
Var einsum(std::string_view subscripts, const Var& a, const Var& b);

}  // namespace tessera::nn
