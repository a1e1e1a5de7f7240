// The byte-level transformer against the one-rank reference, in f64: loss and gradients on every
// mesh of this rank count over the axes data, seq and model (8 ranks: data=2,model=4,
// data=2,seq=2,model=2, seq=4,model=2), with FSDP and in the stacked form; 5 Adam steps; the
// declaration table's specs; what context parallelism moves; configurations that do not fit.
#include <gtest/gtest.h>

#include "collectives/comm_stats.h"
#include "core/buffer_pool.h"
#include "core/error.h"
#include "models/transformer.h"
#include "nn/activations.h"
#include "nn/attention.h"
#include "nn/einsum.h"
#include "nn/embedding.h"
#include "nn/losses.h"
#include "nn/normalization.h"
#include "nn/ops.h"
#include "nn/train.h"
#include "tests/nn/nn_test_util.h"
#include "tests/test_meshes.h"

namespace tessera::models {
namespace {

using namespace tessera::nn;

using testing_support::world_size;
using testing_util::expect_trees_near;
using testing_util::max_relative_error;
using testing_util::self_mesh;

constexpr std::int64_t kLmBatch = 4, kSeq = 8;

// Small enough for 8 ranks on two cores; every split divides: heads 4 and d_ff 32 over model
// (up to 4), d_model 16 over data (FSDP), d_head 4 (even, for rotary).
TransformerConfig tiny(bool scan, bool fsdp) {
  TransformerConfig c;
  c.d_model = 16;
  c.heads = 4;
  c.d_ff = 32;
  c.layers = 2;
  c.scan = scan;
  c.fsdp = fsdp;
  c.dtype = DType::f64;
  return c;
}

// The meshes of n ranks over the transformer's axes.
std::vector<MeshShape> meshes_of(int n) {
  const std::vector<std::string> all = {
      "data=1,seq=1,model=1", "data=2", "seq=2", "model=2", "data=2,model=2", "seq=2,model=2", "data=2,seq=2",
      "data=4", "data=2,model=4", "data=2,seq=2,model=2", "seq=4,model=2"};
  std::vector<MeshShape> out;
  for (const auto& text : all) {
    MeshShape m = MeshShape::parse(text);
    if (m.size() == n) out.push_back(m);
  }
  return out;
}

// A mesh of more than one rank whose first axis is data: FSDP has something to split.
bool splits_data(const MeshShape& shape) { return shape.size() > 1 && shape.names()[0] == "data"; }

// Whether some mesh of n ranks splits the vocabulary over a model axis of size > 1.
bool shape_has_model_axis_of(int n) {
  for (const auto& m : meshes_of(n)) {
    if (m.has_axis("model") && m.axis_size("model") > 1) return true;
  }
  return false;
}

// Tokens [batch, seq] and their next-token labels, a fixed byte pattern per step.
std::pair<ShardedTensor, ShardedTensor> batch_of(const Mesh& mesh, int step) {
  Tensor tokens(Shape{kLmBatch, kSeq}, DType::i32), labels(Shape{kLmBatch, kSeq}, DType::i32);
  for (std::int64_t i = 0; i < kLmBatch * kSeq; ++i) {
    tokens.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 37 + step * 11 + 5) % 256);
    labels.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 37 + step * 11 + 42) % 256);
  }
  const Spec spec = Transformer::token_spec(mesh.shape());
  return {ShardedTensor::from_global(mesh, spec, tokens, "tokens"), ShardedTensor::from_global(mesh, spec, labels, "labels")};
}

LossFn loss_of(const Transformer& model) {
  return [model](const VarTree& params, const Batch& batch) { return model.loss(ParamView(params), batch.x, *batch.y); };
}

// The parameters on `mesh`: the loop form's from the RNG (the same values on every mesh), then
// stacked for the scan form (whose own init is keyed by other paths).
ParamTree params_on(const Transformer& model, const Mesh& mesh) {
  Transformer loop = model;
  loop.config.scan = false;
  ParamTree p = init_params(abstract_init(loop, mesh.shape(), {}, {kLmBatch, kSeq}), mesh, 3);
  return model.config.scan ? stack_transformer_params(p, model.config.layers, mesh) : p;
}

struct Reference {
  double loss;
  ParamTree loop_grads;
};

Reference reference(const Mesh& one, std::int64_t vocab) {
  TransformerConfig c = tiny(false, false);
  c.vocab = vocab;
  const Transformer model{c};
  auto [tokens, labels] = batch_of(one, 0);
  auto r = value_and_grad(params_on(model, one), loss_of(model), Batch{tokens, labels});
  return {r.loss, r.grads};
}

// Loss and gradients of tiny() with `vocab` on every mesh of this rank count, loop and stacked,
// with FSDP where data splits, against the one-rank reference; every gradient in its
// parameter's spec. Returns how many of the runs split the embedding unevenly.
int expect_every_mesh_matches(const Mesh& one, const Reference& ref, std::int64_t vocab) {
  int checked = 0, uneven = 0;
  for (const auto& shape : meshes_of(world_size())) {
    Mesh mesh = Mesh::world(shape);
    for (bool scan : {false, true}) {
      for (bool fsdp : {false, true}) {
        if (fsdp && !splits_data(shape)) continue;
        TransformerConfig c = tiny(scan, fsdp);
        c.vocab = vocab;
        const Transformer model{c};
        const ParamTree params = params_on(model, mesh);
        uneven += !splits_evenly(params.at("embed").spec(), shape, params.at("embed").global_shape());
        auto [tokens, labels] = batch_of(mesh, 0);
        auto got = value_and_grad(params, loss_of(model), Batch{tokens, labels});
        const std::string label = shape.to_string() + (scan ? " scan" : " loop") + (fsdp ? " fsdp" : "");
        EXPECT_NEAR(got.loss, ref.loss, 1e-5 * ref.loss) << label;
        const ParamTree want = scan ? stack_transformer_params(ref.loop_grads, c.layers, one) : ref.loop_grads;
        expect_trees_near(got.grads, want, 1e-5, label);
        for (const auto& [path, g] : got.grads) EXPECT_EQ(g.spec(), params.at(path).spec()) << label << " " << path;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
  return uneven;
}

TEST(Transformer, LossAndGradientsMatchOneRankOnEveryMesh) {
  Mesh one = self_mesh({"data", "seq", "model"});
  const Reference ref = reference(one, 256);
  // A byte model at init predicts about uniformly: the loss is near log(256).
  EXPECT_NEAR(ref.loss, std::log(256.0), 1.0);
  EXPECT_EQ(expect_every_mesh_matches(one, ref, 256), 0);
}

// A vocabulary that the model axis does not divide (257 = 129 + 128 on model=2; 65, 65, 65, 62
// on model=4): the embedding lookup, the vocab-parallel loss and their gradients follow the block
// rule, and loss and gradients equal one rank's, with FSDP and stacked too.
TEST(Transformer, UnevenVocabularyMatchesOneRank) {
  Mesh one = self_mesh({"data", "seq", "model"});
  const int uneven = expect_every_mesh_matches(one, reference(one, 257), 257);
  if (shape_has_model_axis_of(world_size())) {
    EXPECT_GT(uneven, 0);
  }
}

TEST(Transformer, FiveAdamStepsMatchOneRank) {
  const Optimizer opt = adam(1e-2);
  const auto run = [&](const Transformer& model, const Mesh& mesh, std::vector<double>& losses) {
    TrainState state = create_train_state(params_on(model, mesh), opt);
    for (int step = 0; step < 5; ++step) {
      auto [tokens, labels] = batch_of(mesh, step);
      losses.push_back(train_step(state, opt, loss_of(model), Batch{tokens, labels}));
    }
    return state.params;
  };
  Mesh one = self_mesh({"data", "seq", "model"});
  std::vector<double> ref_losses;
  const ParamTree ref = run(Transformer{tiny(false, false)}, one, ref_losses);
  EXPECT_LT(ref_losses.back(), ref_losses.front());  // it learns
  const auto shapes = meshes_of(world_size());
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    Mesh mesh = Mesh::world(shapes[i]);
    // Loop on every mesh; the last mesh of this rank count also stacked with FSDP.
    const bool variant = i + 1 == shapes.size() && splits_data(shapes[i]);
    const Transformer model{tiny(variant, variant)};
    std::vector<double> losses;
    const ParamTree got = run(model, mesh, losses);
    const std::string label = shapes[i].to_string() + (variant ? " scan fsdp" : "");
    for (int step = 0; step < 5; ++step) EXPECT_NEAR(losses[step], ref_losses[step], 1e-5 * ref_losses[step]) << label;
    expect_trees_near(got, variant ? stack_transformer_params(ref, 2, one) : ref, 1e-5, label);
  }
}

// The loss on one rank against the pre-norm block written out from the ops: rmsnorm, rotary on
// q and k (not v), causal attention, the residual adds, each norm's own weight, gelu_tanh, the
// final norm and the unembedding. Every other test compares the model with itself on another
// mesh, where a miswired block (k without rotary, the attention's norm weight for the MLP's) is
// the same on both sides. The norm weights are drawn apart (ones at init would hide a swap).
TEST(Transformer, LossFollowsThePreNormBlock) {
  Mesh one = self_mesh({"data", "seq", "model"});
  const TransformerConfig c = tiny(false, false);
  const Transformer model{c};
  ParamTree params = params_on(model, one);
  int seed = 40;
  for (auto& [path, value] : params) {  // norm weights of their own (all ones at init)
    if (path.find("norm") == std::string::npos) continue;
    value = ShardedTensor::from_global(one, value.spec(),
                                       testing_util::test_values(value.global_shape(), seed++, c.dtype, true), path);
  }
  auto [tokens, labels] = batch_of(one, 0);
  const auto w = [&](const std::string& path) { return Var(params.at(path)); };
  Var h = embed(w("embed"), tokens);
  for (int i = 0; i < c.layers; ++i) {
    const std::string l = "block_" + std::to_string(i) + "/";
    const Var a = rmsnorm(h, w(l + "attn_norm"), c.norm_eps);
    const Var q = rotary(einsum("bsd,dhk->bshk", a, w(l + "w_q")), c.rope_base);
    const Var k = rotary(einsum("bsd,dhk->bshk", a, w(l + "w_k")), c.rope_base);
    const Var v = einsum("bsd,dhk->bshk", a, w(l + "w_v"));
    h = add(h, einsum("bshk,hkd->bsd", causal_attention(q, k, v), w(l + "w_o")));
    const Var m = rmsnorm(h, w(l + "mlp_norm"), c.norm_eps);
    h = add(h, einsum("bsf,fd->bsd", gelu_tanh(einsum("bsd,df->bsf", m, w(l + "w_up"))), w(l + "w_down")));
  }
  const Var logits = einsum("bsd,dv->bsv", rmsnorm(h, w("final_norm"), c.norm_eps), w("unembed"));
  const double want = scalar_value(softmax_cross_entropy_with_integer_labels(logits, labels).value());
  const double got = scalar_value(model.loss(ParamView(as_vars(params, false)), tokens, labels).value());
  EXPECT_NEAR(got, want, 1e-12 * std::abs(want));
}

// The declaration table is where the shardings are written: its shape strings give the specs.
TEST(Transformer, DeclarationTableGivesTheSpecs) {
  const MeshShape mesh = MeshShape::parse("data=2,seq=2,model=2");
  const auto specs = [&](bool scan, bool fsdp) {
    return param_specs(abstract_init(Transformer{tiny(scan, fsdp)}, mesh, {}, {kLmBatch, kSeq}));
  };
  const auto loop = specs(false, false);
  EXPECT_EQ(loop.at("embed").to_string(), "P(model, None)");
  EXPECT_EQ(loop.at("block_1/w_q").to_string(), "P(None, model, None)");
  EXPECT_EQ(loop.at("block_1/w_o").to_string(), "P(model, None, None)");
  EXPECT_EQ(loop.at("block_0/w_down").to_string(), "P(model, None)");
  EXPECT_EQ(loop.at("unembed").to_string(), "P(None, model)");
  EXPECT_EQ(loop.at("final_norm").to_string(), "P(None)");
  EXPECT_EQ(loop.size(), 2u + 2 * 8 + 1);
  const auto fsdp_scan = specs(true, true);
  EXPECT_EQ(fsdp_scan.at("blocks/w_q").to_string(), "P(None, data, model, None)");
  EXPECT_EQ(fsdp_scan.at("blocks/w_up").to_string(), "P(None, data, model)");
  EXPECT_EQ(fsdp_scan.at("embed").to_string(), "P(model, data)");
  EXPECT_EQ(fsdp_scan.size(), 2u + 8 + 1);
  // Axes the mesh lacks are dropped.
  const auto data_only = param_specs(abstract_init(Transformer{tiny(false, true)}, MeshShape::parse("data=2"), {}, {kLmBatch, kSeq}));
  EXPECT_EQ(data_only.at("block_0/w_q").to_string(), "P(data, None, None)");
  EXPECT_EQ(Transformer::token_spec(mesh).to_string(), "P(data, seq)");
  EXPECT_EQ(Transformer::activation_spec(MeshShape::parse("seq=2,model=2")).to_string(), "P(None, seq, None)");
}

// Context parallelism: over seq, the forward pass moves only K and V, all-gathered along the
// sequence dimension once per block; the loss's reductions are scalars.
TEST(Transformer, SequenceSplitGathersOnlyKeysAndValues) {
  if (world_size() != 2) GTEST_SKIP() << "the mesh seq=2";
  Mesh mesh = Mesh::world(MeshShape::parse("seq=2"));
  const Transformer model{tiny(false, false)};
  VarTree vars = as_vars(params_on(model, mesh), false);
  auto [tokens, labels] = batch_of(mesh, 0);
  CommScope scope;
  model.loss(ParamView(vars), tokens, labels);
  int gathers = 0;
  for (const auto& r : scope.records()) {
    if (r.op == CommOp::all_gather) {
      ++gathers;
      EXPECT_EQ(r.axes, Axes{"seq"});
      EXPECT_EQ(r.dim, 1);
      EXPECT_EQ(r.bytes, kLmBatch * kSeq / 2 * 16 * 8);  // one half of K or V, f64
    } else {
      EXPECT_EQ(r.op, CommOp::all_reduce) << to_string(r);
      EXPECT_LE(r.bytes, 64) << to_string(r);
    }
  }
  EXPECT_EQ(gathers, 2 * model.config.layers);
}

// The backward of those gathers: the cotangent of the whole-sequence K and V is a partial sum
// over seq, reduce-scattered straight back to the split (the tape keeps a reshard's cotangent as
// it arrives), never all-reduced whole and then sliced.
TEST(Transformer, SequenceSplitGradientsOfKeysAndValuesAreReduceScattered) {
  if (world_size() != 2) GTEST_SKIP() << "the mesh seq=2";
  Mesh mesh = Mesh::world(MeshShape::parse("seq=2"));
  const Transformer model{tiny(false, false)};
  const ParamTree params = params_on(model, mesh);
  auto [tokens, labels] = batch_of(mesh, 0);
  CommScope scope;
  value_and_grad(params, loss_of(model), Batch{tokens, labels});
  int gathers = 0, scatters = 0;
  for (const auto& r : scope.records()) {
    if (r.op == CommOp::all_gather) ++gathers;
    if (r.op == CommOp::reduce_scatter) {
      ++scatters;
      EXPECT_EQ(r.axes, Axes{"seq"});
      EXPECT_EQ(r.dim, 1);
      EXPECT_EQ(r.bytes, kLmBatch * kSeq / 2 * 16 * 8);  // one half of K's or V's cotangent, f64
    }
  }
  EXPECT_EQ(gathers, 2 * model.config.layers);
  EXPECT_EQ(scatters, 2 * model.config.layers);
}

// Sequence parallelism (on by default) against the plain Megatron pattern on every mesh with a
// model axis, loop and stacked, with FSDP: the same loss bit for bit (on one node the
// reduce-scatter and the all-reduce both sum in rank order, and each position's norm is the
// same arithmetic), and the same gradients within 1e-12 in f64 (the norm weights' sums over
// positions are taken by each model rank over its share before their all-reduce, and the
// residual stream's cotangents meet in other specs, so some sums associate otherwise); the
// residual stream split over (seq, model) between the products; in the forward pass,
// each block output's reduction over model a reduce-scatter (none without it) and each norm's
// output gathered over model before the products that read it (the final norm's too).
TEST(Transformer, SequenceParallelHasTheBitsOfTheAllReduces) {
  int checked = 0;
  for (const auto& shape : meshes_of(world_size())) {
    if (!shape.has_axis("model") || shape.axis_size("model") == 1) continue;
    Mesh mesh = Mesh::world(shape);
    for (bool scan : {false, true}) {
      for (bool fsdp : {false, true}) {
        if (fsdp && !splits_data(shape)) continue;
        TransformerConfig c = tiny(scan, fsdp);
        const Transformer sp{c};
        c.sequence_parallel = false;
        const Transformer plain{c};
        const std::string label = shape.to_string() + (scan ? " scan" : " loop") + (fsdp ? " fsdp" : "");
        Spec residual = Transformer::activation_spec(shape);
        residual.dims[1].push_back("model");
        EXPECT_EQ(sp.residual_spec(shape), residual) << label;
        EXPECT_EQ(plain.residual_spec(shape), Transformer::activation_spec(shape)) << label;
        const ParamTree params = params_on(plain, mesh);
        auto [tokens, labels] = batch_of(mesh, 0);
        const auto want = value_and_grad(params, loss_of(plain), Batch{tokens, labels});
        const auto got = value_and_grad(params, loss_of(sp), Batch{tokens, labels});
        EXPECT_EQ(got.loss, want.loss) << label;
        ASSERT_EQ(got.grads.size(), want.grads.size()) << label;
        for (const auto& [path, g] : want.grads) {
          EXPECT_LT(max_relative_error(got.grads.at(path).to_global(), g.to_global()), 1e-12) << label << " " << path;
          EXPECT_EQ(got.grads.at(path).spec(), g.spec()) << label << " " << path;
        }
        // The forward pass's collectives over model alone.
        for (const Transformer* model : {&sp, &plain}) {
          VarTree vars = as_vars(params, false);
          CommScope scope;
          model->loss(ParamView(vars), tokens, labels);
          int scatters = 0, gathers = 0;
          for (const auto& r : scope.records()) {
            if (r.axes != Axes{"model"}) continue;
            scatters += r.op == CommOp::reduce_scatter;
            gathers += r.op == CommOp::all_gather;
          }
          EXPECT_EQ(scatters, model == &sp ? 2 * c.layers : 0) << label << (model == &sp ? " sp" : " plain");
          EXPECT_EQ(gathers, model == &sp ? 2 * c.layers + 1 : 0) << label << (model == &sp ? " sp" : " plain");
        }
        ++checked;
      }
    }
  }
  if (shape_has_model_axis_of(world_size())) {
    EXPECT_GT(checked, 0);
  }
}

// Rematerialised blocks: loss and gradients bit for bit those of the plain tape, on every mesh,
// loop and stacked, with FSDP.
TEST(Transformer, RematGivesTheSameGradientsBitForBit) {
  int checked = 0;
  for (const auto& shape : meshes_of(world_size())) {
    Mesh mesh = Mesh::world(shape);
    for (bool scan : {false, true}) {
      for (bool fsdp : {false, true}) {
        if (fsdp && !splits_data(shape)) continue;
        TransformerConfig c = tiny(scan, fsdp);
        c.layers = 4;
        const Transformer plain{c};
        c.remat = true;
        const Transformer remat{c};
        const ParamTree params = params_on(plain, mesh);
        auto [tokens, labels] = batch_of(mesh, 0);
        const auto want = value_and_grad(params, loss_of(plain), Batch{tokens, labels});
        const auto got = value_and_grad(params, loss_of(remat), Batch{tokens, labels});
        const std::string label = shape.to_string() + (scan ? " scan" : " loop") + (fsdp ? " fsdp" : "");
        EXPECT_EQ(got.loss, want.loss) << label;
        ASSERT_EQ(got.grads.size(), want.grads.size()) << label;
        for (const auto& [path, g] : want.grads) {
          EXPECT_EQ(max_relative_error(got.grads.at(path).to_global(), g.to_global()), 0.0) << label << " " << path;
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
}

// Where activations outweigh the parameters (8 blocks, the whole batch on one rank), the tape's
// peak of tensor storage is lower with remat: it keeps each block's input, not its activations.
TEST(Transformer, RematLowersThePeakOfTheTape) {
  Mesh one = self_mesh({"data", "seq", "model"});
  TransformerConfig c = tiny(false, false);
  c.layers = 8;
  const Transformer plain{c};
  c.remat = true;
  const Transformer remat{c};
  const ParamTree params = params_on(plain, one);
  auto [tokens, labels] = batch_of(one, 0);
  reset_peak_tensor_bytes();
  value_and_grad(params, loss_of(plain), Batch{tokens, labels});
  const std::size_t plain_peak = peak_tensor_bytes();
  reset_peak_tensor_bytes();
  value_and_grad(params, loss_of(remat), Batch{tokens, labels});
  const std::size_t remat_peak = peak_tensor_bytes();
  if (testing_support::world_rank() == 0) std::printf("peak of the tape: %zu bytes plain, %zu with remat\n", plain_peak, remat_peak);
  EXPECT_LT(remat_peak, plain_peak);
}

// Mixed precision (f32 parameters, bf16 compute): the loss within 1% and every gradient within
// 10% of the largest (bf16 keeps 8 significant bits) of the f32 model on one rank; gradients f32
// with the parameters' specs.
TEST(Transformer, Bf16TracksF32OnEveryMesh) {
  Mesh one = self_mesh({"data", "seq", "model"});
  TransformerConfig c = tiny(false, false);
  c.dtype = DType::f32;
  const Transformer f32_model{c};
  auto [ref_tokens, ref_labels] = batch_of(one, 0);
  const auto ref = value_and_grad(params_on(f32_model, one), loss_of(f32_model), Batch{ref_tokens, ref_labels});
  int checked = 0;
  for (const auto& shape : meshes_of(world_size())) {
    Mesh mesh = Mesh::world(shape);
    for (bool fsdp : {false, true}) {
      if (fsdp && !splits_data(shape)) continue;
      TransformerConfig b = c;
      b.bf16 = true;
      b.fsdp = fsdp;
      const Transformer model{b};
      const ParamTree params = params_on(model, mesh);
      auto [tokens, labels] = batch_of(mesh, 0);
      const auto got = value_and_grad(params, loss_of(model), Batch{tokens, labels});
      const std::string label = shape.to_string() + (fsdp ? " fsdp" : "");
      EXPECT_NEAR(got.loss, ref.loss, 1e-2 * ref.loss) << label;
      double worst = 0;
      for (const auto& [path, g] : ref.grads) {
        const ShardedTensor& mine = got.grads.at(path);
        EXPECT_EQ(mine.dtype(), DType::f32) << label << " " << path;
        EXPECT_EQ(mine.spec(), params.at(path).spec()) << label << " " << path;
        const double error = max_relative_error(mine.to_global(), g.to_global());
        worst = std::max(worst, error);
        EXPECT_LT(error, 0.1) << label << " " << path;
      }
      if (testing_support::world_rank() == 0) std::printf("%s: bf16 loss %.6f vs f32 %.6f, worst gradient error %.4f\n",
                                                          label.c_str(), got.loss, ref.loss, worst);
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

// On seq=2 the K and V all-gathers of a bf16 model move half the bytes of the f32 model's.
TEST(Transformer, Bf16HalvesTheSequenceGathers) {
  if (world_size() != 2) GTEST_SKIP() << "the mesh seq=2";
  Mesh mesh = Mesh::world(MeshShape::parse("seq=2"));
  TransformerConfig c = tiny(false, false);
  c.dtype = DType::f32;
  c.bf16 = true;
  const Transformer model{c};
  VarTree vars = as_vars(params_on(model, mesh), false);
  auto [tokens, labels] = batch_of(mesh, 0);
  CommScope scope;
  model.loss(ParamView(vars), tokens, labels);
  int gathers = 0;
  for (const auto& r : scope.records()) {
    if (r.op != CommOp::all_gather) continue;
    ++gathers;
    EXPECT_EQ(r.bytes, kLmBatch * kSeq / 2 * 16 * 2);  // one half of K or V, bf16
  }
  EXPECT_EQ(gathers, 2 * model.config.layers);
}

TEST(Transformer, ConfigurationsThatDoNotFitAreErrors) {
  const auto expect_error = [](TransformerConfig c, const char* mesh, const std::string& want) {
    try {
      abstract_init(Transformer{c}, MeshShape::parse(mesh), {}, {kLmBatch, kSeq});
      ADD_FAILURE() << "no error for " << want;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), want);
    }
  };
  TransformerConfig c = tiny(false, false);
  c.heads = 3;
  expect_error(c, "model=1", "d_model 16 does not divide into 3 heads");
  c.heads = 16;
  expect_error(c, "model=1", "d_head = d_model / heads = 1 must be even (rotary embeddings rotate pairs)");
  c = tiny(false, false);
  expect_error(c, "model=8", "dimension 1 of 'w_q' (size 4) does not divide over axes (model) of size 8");
  expect_error(c, "seq=3", "dimension 1 of 'tokens' (size 8) does not divide over axes (seq) of size 3");
  expect_error(c, "data=2,tensor=2", "mesh axis 'tensor' is not one of the transformer's axes data, seq, model");
  c.bf16 = true;  // tiny() has f64 parameters
  expect_error(c, "model=1", "bf16 compute needs f32 parameters");
}

}  // namespace
}  // namespace tessera::models
