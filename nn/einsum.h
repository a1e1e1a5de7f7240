// einsum over named dimensions in the global view, with sharding propagation:
// - a free letter keeps its operand's mesh axes;
// - a contracted letter split on the same axes in both operands gives a result partial on them;
// - where the operands disagree (a letter split differently, or one mesh axis on two letters),
//   the operand whose reshard moves fewer bytes is resharded to agree with the other;
// - a partial operand stays partial when the other operand does not use those axes (einsum is
//   linear in each operand), and is reduced first otherwise.
// No operand is gathered unless the specs force it, except by einsum_toward.
#pragma once

#include <string_view>

#include "core/einsum_local.h"
#include "nn/var.h"

namespace tessera::nn {

ShardedTensor einsum(std::string_view subscripts, const ShardedTensor& a, const ShardedTensor& b);
Var einsum(std::string_view subscripts, const Var& a, const Var& b);

// einsum whose result is wanted in `want` (a cotangent, resharded to its primal's spec). Where a
// contracted letter is split in both operands, einsum's result is partial over its axes and the
// reshard to `want` reduces it (an all-reduce of the result's block, or a reduce-scatter where
// `want` splits it). Moving the operands first instead (each contracted letter whole, each free
// letter split as `want` splits it in the output) gives the result exactly in `want`, with
// nothing to reduce. This takes the moved operands when that costs less: their reshard bytes
// plus the FLOPs every rank then adds (the contraction it no longer splits, less what the
// output's split saves) at kFlopsPerCommByte, against the reduction's bytes. The weight gradient
// x^T g of a small batch is the case: for the tutorial's batch 8, depth 1024 on data=2,model=4
// the gathers send 20 KiB per weight instead of all-reducing its 1 MiB gradient, and each replica
// computes the whole batch's gradient in one product, as one rank does; FSDP's weight, split
// over data, gets its rows from x moved from a batch split to a depth split (an all-to-all) and
// g gathered, where its gradient was reduce-scattered.
ShardedTensor einsum_toward(std::string_view subscripts, const ShardedTensor& a, const ShardedTensor& b,
                            const Spec& want);
// How many FLOPs cost as much as one byte sent by a collective, in einsum_toward's choice: a
// thin product runs at about 100 GFLOP/s per core here, an all-reduce through shared memory
// moves about 3 GB/s of its block per rank.
inline constexpr double kFlopsPerCommByte = 32.0;

}  // namespace tessera::nn
