// A byte-level decoder-only transformer (vocabulary 256), written against global shapes with nn's
// ops and trained SPMD on meshes with up to three axes:
//   data    the batch (and, with fsdp, every weight's d_model dimension: FSDP)
//   seq     the sequence dimension (context parallelism)
//   model   attention heads, d_ff and the vocabulary (Megatron tensor parallelism)
// A mesh may leave any of them out (data=8, model=2, ...); an axis the mesh lacks is dropped from
// every spec below, so the same declarations serve every mesh.
//
//   tokens [batch, seq] (i32, P(data, seq))
//   h = embed(embed, tokens)                                  vocabulary-parallel lookup, one psum
//   L blocks, pre-norm:
//     a = rmsnorm(h, attn_norm)                               (then gathered over model, sp)
//     q, k, v = a @ w_q, w_k, w_v                             [batch, seq, heads, d_head]
//     o = causal_attention(rotary(q), rotary(k), v)
//     h = h + o @ w_o                                         (one all-reduce over model; sp:
//                                                              one reduce-scatter)
//     m = rmsnorm(h, mlp_norm)                                (then gathered over model, sp)
//     h = h + gelu(m @ w_up) @ w_down                         (the same)
//   logits = rmsnorm(h, final_norm) @ unembed                 [batch, seq, vocab/model]
//   loss = softmax_cross_entropy_with_integer_labels(logits, labels)   vocabulary-parallel
//
// The weights and their shardings are declared in one table (weight_table), seqax style: each
// weight's shape string names its dimensions and the mesh axes that split them, e.g.
//   w_q   layers d_model/data heads/model d_head
// The sizes come from the configuration; `layers` exists in the stacked form only (the loop form
// declares the same weights per block, without it); `/data` on a weight applies with fsdp only.
//
// What moves, per block and step (beyond the two all-reduces over model of the Megatron pattern
// and the gradients' reductions over data and seq, which the tape derives from the specs):
//   seq    causal_attention all-gathers K and V over seq (each rank's queries see every earlier
//          key; exact), and their cotangents are reduce-scattered back in the backward pass.
//          Everything else in a block is per position: no other traffic over seq.
//   fsdp   each weight is all-gathered over data just before its use (use_weight), and its
//          gradient reduce-scattered over data, instead of all-reduced.
//   sp     sequence_parallel (Megatron-LM's sequence parallelism; on by default): between the
//          tensor-parallel products the residual stream's positions are split over model too,
//          P(data, (seq, model), None) (residual_spec), so each of the model group's ranks
//          normalizes and adds its share of the positions instead of all of them. Each block
//          output's all-reduce over model becomes a reduce-scatter onto that split, and each
//          norm's output is all-gathered over model before the products that read it: the same
//          bytes, and on one node the same bits (both sums take the ranks in order).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/init.h"
#include "nn/params.h"

namespace tessera::models {

struct TransformerConfig {
  std::int64_t vocab = 256;  // byte-level
  std::int64_t d_model = 256;
  std::int64_t heads = 8;
  std::int64_t d_ff = 1024;
  int layers = 4;
  bool scan = false;  // stacked weights with a leading `layers` dimension (nn.scan's layout)
  bool fsdp = false;  // every weight's d_model dimension split over data
  // The parameters' dtype and the activations' (f32 or f64).
  DType dtype = DType::f32;
  // Mixed precision (nn::Precision's bf16 policy; dtype must be f32): the parameters and Adam stay
  // f32; each weight is cast to bf16 where it is used (before an FSDP gather), so matmuls,
  // activations, the reductions and gathers over model, the sequence all-gathers of K and V and
  // the gradients' reductions move bf16. The embedding lookup, the attention softmax and the loss
  // compute in f32.
  bool bf16 = false;
  // Rematerialise each block (nn::remat): the tape keeps a block's input and output only, and the
  // backward pass recomputes the block's forward (its collectives included). Gradients are bit
  // for bit those without.
  bool remat = false;
  // Megatron-LM's sequence parallelism (see the top of this file): the residual stream's positions
  // split over model between the tensor-parallel products. The same values; a mesh without a
  // model axis is unaffected.
  bool sequence_parallel = true;
  double rope_base = 10000.0;
  double norm_eps = 1e-6;
  std::int64_t d_head() const { return heads > 0 ? d_model / heads : 0; }
  DType compute_dtype() const { return bf16 ? DType::bf16 : dtype; }
};

// The mesh axes the model knows, in the order a mesh would list them.
inline constexpr const char* kDataAxis = "data";
inline constexpr const char* kSeqAxis = "seq";
inline constexpr const char* kModelAxis = "model";

// One row of the declaration table.
struct WeightDecl {
  std::string name;    // "w_q"; a block's weights live under "block_<i>/" (loop) or "blocks/" (scan)
  std::string shape;   // seqax shape string with the FSDP axes, e.g. "layers d_model/data heads/model d_head"
  bool per_layer = false;
  Initializer init;
};

// The table, in declaration order: embed, the block's weights, final_norm, unembed.
std::vector<WeightDecl> weight_table(const TransformerConfig& config);

// The weights of one block as the forward pass uses them (taken from the loop's or the stack's).
struct BlockWeights {
  nn::Var attn_norm, w_q, w_k, w_v, w_o, mlp_norm, w_up, w_down;
};

struct Transformer {
  TransformerConfig config;

  // Checks, on every rank alike and before anything is allocated, that the configuration and the
  // mesh fit: the mesh's axes are among data, seq and model; d_model divides into heads of an even
  // d_head; tokens [batch, seq] divide over (data, seq); every weight's spec divides its shape.
  // Throws UsageError, MeshError or ShapeError naming what does not fit.
  void validate(const MeshShape& mesh, const Shape& tokens) const;

  // Declares every weight (paths, shapes, specs, initializers); `tokens` is [batch, seq].
  void declare(const nn::ParamDecl& decl, const Shape& tokens) const;

  // The spec of a weight's shape string on `mesh`: the `layers` dimension dropped in the loop
  // form, `data` dropped without fsdp, axes the mesh lacks dropped.
  Spec weight_spec(const WeightDecl& weight, const MeshShape& mesh) const;
  Shape weight_shape(const WeightDecl& weight) const;

  // P(data, seq) for tokens and labels, P(data, seq, None) for the activations the products read
  // (axes the mesh lacks dropped).
  static Spec token_spec(const MeshShape& mesh);
  static Spec activation_spec(const MeshShape& mesh);
  // The residual stream's spec between the products: activation_spec, with model appended to
  // the positions' axes under sequence_parallel.
  Spec residual_spec(const MeshShape& mesh) const;
  // The axes that split the batch (data, seq; those the mesh has): a weight that does not use
  // them is replicated over them, and its optimizer state may be split over them
  // (nn::Optimizer::shard_state_over; train_lm --opt-state sharded).
  static Axes batch_axes(const MeshShape& mesh);

  // The forward pass: logits [batch, seq, vocab] split over (data, seq, model).
  nn::Var logits(const nn::ParamView& params, const ShardedTensor& tokens) const;
  // Mean cross-entropy (nats per token) of predicting labels [batch, seq] from tokens.
  nn::Var loss(const nn::ParamView& params, const ShardedTensor& tokens, const ShardedTensor& labels) const;

  // One block on the residual stream h [batch, seq, d_model] (the unit a rematerialisation
  // would wrap).
  nn::Var block(const nn::Var& h, const BlockWeights& w) const;

  // Block i's weights from the loop's "block_<i>/..." or the stack's "blocks/..." (layer i).
  BlockWeights block_weights(const nn::ParamView& params, int i) const;
  // A weight as its op uses it: cast to the compute dtype, then with fsdp all-gathered over data
  // (the gradient is reduce-scattered back by the tape); otherwise as it is.
  nn::Var use_weight(const nn::Var& w) const;
};

// The loop form's per-block parameters stacked into the scan form's (block_<i>/w -> blocks/w),
// for comparing the two forms on the same values. Collective.
nn::ParamTree stack_transformer_params(const nn::ParamTree& loop, int layers, const Mesh& mesh);

}  // namespace tessera::models
