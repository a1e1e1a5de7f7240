// The ops under test, each as a function of its inputs to a scalar, with the inputs' shapes.
// Shared by the finite-difference check (one rank, f64) and the every-mesh comparison.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "nn/activations.h"
#include "nn/attention.h"
#include "nn/einsum.h"
#include "nn/embedding.h"
#include "nn/losses.h"
#include "nn/normalization.h"
#include "nn/shape_ops.h"
#include "nn/ops.h"

namespace tessera::nn::testing_ops {

struct OpCase {
  std::string name;
  std::vector<Shape> shapes;
  std::function<Var(const std::vector<Var>&)> fn;  // returns a scalar
  bool positive_inputs = false;                    // for log and div
};

// A fixed weighting so that every output element matters to the scalar: sum(y * w).
inline Var weigh(const Var& y) {
  const Shape& s = y.shape();
  ShardedTensor w = ShardedTensor::from_fn(
      y.mesh(), y.spec().without_partial(), s, y.dtype(),
      [](std::int64_t i) { return 0.5 + 0.25 * static_cast<double>((i * 37) % 11); }, "weights");
  return sum(mul(y, Var(w)));
}

// reshape, or (where x's spec splits a dimension reshape cannot carry, a ShapeError thrown
// alike on every rank) reshape after an explicit reshard to replicated; lm_ops_test pins which
// specs reshape carries without moving anything.
inline Var reshape_or_gather(const Var& x, const Shape& shape) {
  try {
    return reshape(x, shape);
  } catch (const ShapeError&) {
    return reshape(reshard(x, Spec::replicated(x.ndim())), shape);
  }
}

// Integer ids in [0, vocabulary) for a tensor of `shape`, dimension 0 split over the mesh's
// first axis where it divides (so that lookups and labels meet split rows).
inline ShardedTensor token_ids(const Mesh& mesh, const Shape& shape, std::int64_t vocabulary) {
  Spec spec = Spec::replicated(static_cast<int>(shape.size()));
  const std::string& first = mesh.shape().names().front();
  if (shape[0] % mesh.axis_size(first) == 0) spec.dims[0] = {first};
  return ShardedTensor::from_fn(
      mesh, spec, shape, DType::i32, [vocabulary](std::int64_t i) { return static_cast<double>((i * 5 + 3) % vocabulary); },
      "tokens");
}

inline std::vector<OpCase> op_cases() {
  return {
      {"einsum_matmul", {{4, 6}, {6, 8}}, [](auto& v) { return weigh(einsum("bd,dh->bh", v[0], v[1])); }},
      {"einsum_transposed", {{6, 4}, {8, 6}}, [](auto& v) { return weigh(einsum("db,hd->bh", v[0], v[1])); }},
      {"einsum_batched", {{2, 4, 6}, {2, 6, 4}}, [](auto& v) { return weigh(einsum("lbd,ldh->lhb", v[0], v[1])); }},
      {"einsum_outer", {{4}, {8}}, [](auto& v) { return weigh(einsum("a,b->ab", v[0], v[1])); }},
      {"add", {{4, 8}, {4, 8}}, [](auto& v) { return weigh(add(v[0], v[1])); }},
      {"add_broadcast", {{4, 8}, {8}}, [](auto& v) { return weigh(add(v[0], v[1])); }},
      {"sub", {{4, 8}, {4, 8}}, [](auto& v) { return weigh(sub(v[0], v[1])); }},
      {"mul", {{4, 8}, {4, 8}}, [](auto& v) { return weigh(mul(v[0], v[1])); }},
      {"mul_broadcast", {{4, 8}, {4, 1}}, [](auto& v) { return weigh(mul(v[0], v[1])); }},
      {"div", {{4, 8}, {4, 8}}, [](auto& v) { return weigh(div(v[0], v[1])); }, true},
      {"relu", {{4, 8}}, [](auto& v) { return weigh(relu(v[0])); }},
      {"neg", {{4, 8}}, [](auto& v) { return weigh(neg(v[0])); }},
      {"exp", {{4, 8}}, [](auto& v) { return weigh(exp(v[0])); }},
      {"log", {{4, 8}}, [](auto& v) { return weigh(log(v[0])); }, true},
      {"square", {{4, 8}}, [](auto& v) { return weigh(square(v[0])); }},
      {"tanh", {{4, 8}}, [](auto& v) { return weigh(tanh(v[0])); }},
      {"scale", {{4, 8}}, [](auto& v) { return weigh(scale(v[0], -1.5)); }},
      {"sum_dim0", {{4, 8}}, [](auto& v) { return weigh(sum(v[0], {0})); }},
      {"sum_dim1_keepdims", {{4, 8}}, [](auto& v) { return weigh(sum(v[0], {1}, true)); }},
      {"mean_all", {{4, 8}}, [](auto& v) { return mean(square(v[0])); }},
      {"log_softmax", {{4, 8}}, [](auto& v) { return weigh(log_softmax(v[0])); }},
      {"gelu", {{4, 8}}, [](auto& v) { return weigh(gelu(v[0])); }},
      {"gelu_tanh", {{4, 8}}, [](auto& v) { return weigh(gelu_tanh(v[0])); }},
      {"silu", {{4, 8}}, [](auto& v) { return weigh(silu(v[0])); }},
      {"rsqrt", {{4, 8}}, [](auto& v) { return weigh(rsqrt(v[0], 0.5)); }, true},
      {"softmax", {{4, 8}}, [](auto& v) { return weigh(softmax(v[0])); }},
      {"rmsnorm", {{4, 8}, {8}}, [](auto& v) { return weigh(rmsnorm(v[0], v[1])); }},
      {"layernorm", {{4, 8}, {8}, {8}}, [](auto& v) { return weigh(layernorm(v[0], v[1], v[2])); }},
      {"reshape_merge", {{4, 2, 4}}, [](auto& v) { return weigh(square(reshape_or_gather(v[0], {4, 8}))); }},
      {"reshape_split", {{8, 4}}, [](auto& v) { return weigh(square(reshape_or_gather(v[0], {2, 4, 4}))); }},
      {"permute", {{2, 4, 3}}, [](auto& v) { return weigh(square(permute(v[0], {2, 0, 1}))); }},
      {"transpose", {{4, 8}}, [](auto& v) { return weigh(mul(transpose(v[0], 0, 1), transpose(v[0], -1, -2))); }},
      {"concat_last", {{4, 8}, {4, 4}}, [](auto& v) { return weigh(square(concat({v[0], v[1]}, 1))); }},
      {"concat_first", {{4, 8}, {2, 8}}, [](auto& v) { return weigh(square(concat({v[0], v[1]}, 0))); }},
      {"split", {{4, 8}}, [](auto& v) {
         auto parts = split(v[0], {3, 5}, 1);
         return add(weigh(parts[0]), weigh(square(parts[1])));
       }},
      {"embed", {{8, 4}}, [](auto& v) { return weigh(square(embed(v[0], token_ids(v[0].mesh(), {4, 3}, 8)))); }},
      {"cross_entropy_integer_labels", {{4, 2, 8}}, [](auto& v) {
         return softmax_cross_entropy_with_integer_labels(v[0], token_ids(v[0].mesh(), {4, 2}, 8));
       }},
      {"rotary", {{2, 4, 2, 4}}, [](auto& v) { return weigh(square(rotary(v[0], 100.0, 1))); }},
      {"causal_attention", {{2, 4, 2, 4}, {2, 4, 2, 4}, {2, 4, 2, 4}}, [](auto& v) {
         return weigh(causal_attention(v[0], v[1], v[2]));
       }},
      {"take_layer", {{4, 4, 8}}, [](auto& v) { return weigh(mul(take_layer(v[0], 1), take_layer(v[0], 3))); }},
      {"sum_loss", {{4, 8}}, [](auto& v) { return sum_loss(mul(v[0], v[0])); }},
      {"mse_loss", {{4, 8}, {4, 8}}, [](auto& v) { return mse_loss(v[0], v[1]); }},
      {"softmax_cross_entropy", {{4, 8}, {4, 8}}, [](auto& v) { return softmax_cross_entropy(v[0], exp(v[1])); }},
      {"reshard_roundtrip", {{4, 8}}, [](auto& v) {
         return weigh(square(reshard(reshard(v[0], parse_spec("P()")), v[0].spec().without_partial())));
       }},
  };
}

}  // namespace tessera::nn::testing_ops
