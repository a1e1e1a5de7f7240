// shard_map against the global view: the tutorial's DotReluDot and MLP written in the local view
// with Megatron's explicit collectives (column-parallel W1, local relu, row-parallel W2, one
// psum over `model`) give the global-view model's loss, gradients, Adam steps and collectives,
// but for one difference: the hand-written program's weight gradients are partial products
// all-reduced over `data` (shard_map's transpose), where the global view gathers each weight
// gradient's two operands over `data` instead (nn/einsum.h, einsum_toward), fewer bytes at
// this batch.
// Also: stacked signatures for a scanned MLP, signatures, is_fully_sharded, and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <optional>

#include "collectives/comm_stats.h"
#include "core/error.h"
#include "nn/einsum.h"
#include "nn/embedding.h"
#include "models/mlp.h"
#include "nn/ops.h"
#include "nn/shard_map.h"
#include "nn/train.h"
#include "tests/nn/nn_test_util.h"
#include "tests/test_meshes.h"

namespace tessera::nn {
namespace {

using models::ApplyContext;
using models::MLP;
using models::stack_loop_params;
using models::tutorial_rules;

using testing_support::meshes_of_size;
using testing_support::world_rank;
using testing_support::world_size;
using testing_util::max_relative_error;

std::vector<MeshShape> meshes_2d() { return testing_support::meshes_2d_of_size(world_size()); }

Signature layer_signature(DType dtype) {
  const std::string t(dtype_name(dtype));
  return parse_signature("x: " + t + "[batch/data embed], w1: " + t + "[embed hidden/model], w2: " + t +
                         "[hidden/model embed] -> " + t + "[batch/data embed]");
}

// One DotReluDot in the local view: every rank multiplies its blocks, one psum over model.
std::vector<Var> megatron_body(const std::vector<Var>& a) {
  Var y = relu(einsum("bd,dh->bh", a[0], a[1]));  // (batch/data, hidden/model): no communication
  Var z = einsum("bh,hd->bd", y, a[2]);            // partial sums over the hidden blocks
  return {psum(z, "model")};
}

Var megatron_layer(const Mesh& mesh, const Var& x, const Var& w1, const Var& w2) {
  return shard_map(mesh, layer_signature(x.dtype()), megatron_body, {x, w1, w2})[0];
}

std::string w1_path(int i) { return "DotReluDot_" + std::to_string(i) + "/Dense_0/kernel"; }
std::string w2_path(int i) { return "DotReluDot_" + std::to_string(i) + "/W2"; }

LossFn global_view_loss(const MLP& mlp) {
  return [mlp](const VarTree& p, const Batch& b) {
    return sum_loss(mlp.apply(ParamView(p), ApplyContext{tutorial_rules()}, Var(b.x)));
  };
}

LossFn shard_map_loss(const MLP& mlp, const Mesh& mesh) {
  return [mlp, mesh](const VarTree& p, const Batch& b) {
    Var h(b.x);
    for (int i = 0; i < mlp.num_layers; ++i) h = megatron_layer(mesh, h, p.at(w1_path(i)), p.at(w2_path(i)));
    return sum_loss(h);
  };
}

ShardedTensor input(const Mesh& mesh, std::int64_t batch, std::int64_t features, DType dtype) {
  const RngKey key = rng_key(7, "input");
  return ShardedTensor::from_fn(
      mesh, parse_spec("P(data, None)"), {batch, features}, dtype, [&](std::int64_t i) { return normal(key, i); },
      "x");
}

ParamTree init_mlp(const MLP& mlp, const Mesh& mesh, const Shape& x_shape) {
  return init_params(abstract_init(mlp, mesh.shape(), tutorial_rules(), x_shape), mesh, 0);
}

// Records as a sorted list of strings: the two views may issue the same collectives in another
// order (the tape visits a shard_map's inputs in its own order).
std::vector<std::string> sorted(const std::vector<CommRecord>& records) {
  std::vector<std::string> out;
  for (const auto& r : records) out.push_back(to_string(r) + " dim " + std::to_string(r.dim));
  std::sort(out.begin(), out.end());
  return out;
}

bool over_data(const CommRecord& r) { return r.axes == Axes{"data"}; }

// The global view's records against the shard_map program's: the same collectives over every
// axis but `data`; over `data` the loss's all-reduce in both, and for each weight gradient that
// the program all-reduces, two all-gathers of its operands (along the batch, dimension 0) that
// send fewer bytes in all.
void expect_global_view_gathers_weight_gradients(const std::vector<CommRecord>& global,
                                                 const std::vector<CommRecord>& local, int data_size,
                                                 const std::string& label) {
  std::vector<CommRecord> global_rest, local_rest, global_data, local_data;
  for (const auto& r : global) (over_data(r) ? global_data : global_rest).push_back(r);
  for (const auto& r : local) (over_data(r) ? local_data : local_rest).push_back(r);
  EXPECT_EQ(sorted(global_rest), sorted(local_rest)) << label;
  const CommRecord loss{CommOp::all_reduce, {"data"}, -1, send_bytes(CommOp::all_reduce, data_size, 4)};
  std::int64_t gradient_reductions = 0, reduced_bytes = 0, gathers = 0, gathered_bytes = 0;
  for (const auto& r : local_data) {
    if (r == loss) continue;
    EXPECT_EQ(r.op, CommOp::all_reduce) << label << ": " << to_string(r);
    ++gradient_reductions;
    reduced_bytes += r.bytes;
  }
  for (const auto& r : global_data) {
    if (r == loss) continue;
    EXPECT_EQ(r.op, CommOp::all_gather) << label << ": " << to_string(r);
    EXPECT_EQ(r.dim, 0) << label << ": " << to_string(r);
    ++gathers;
    gathered_bytes += r.bytes;
  }
  EXPECT_EQ(std::count(local_data.begin(), local_data.end(), loss), 1) << label;
  EXPECT_EQ(std::count(global_data.begin(), global_data.end(), loss), 1) << label;
  EXPECT_EQ(gathers, 2 * gradient_reductions) << label;
  EXPECT_LT(gathered_bytes, reduced_bytes) << label;
}

void expect_trees_near(const ParamTree& got, const ParamTree& want, double tolerance, const std::string& label) {
  ASSERT_EQ(got.size(), want.size()) << label;
  for (const auto& [path, w] : want) {
    EXPECT_EQ(got.at(path).spec(), w.spec()) << label << " " << path;
    EXPECT_LT(max_relative_error(got.at(path).to_global(), w.to_global()), tolerance) << label << " " << path;
  }
}

TEST(ShardMap, MegatronLossGradientsAndBytesMatchGlobalView) {
  const std::int64_t batch = 8, features = 16, depth = 32;
  for (int layers : {1, 3}) {
    MLP mlp{layers, depth, false, false};
    for (const auto& shape : meshes_2d()) {
      Mesh mesh = Mesh::world(shape);
      const std::string label = (layers == 1 ? "DotReluDot on " : "MLP on ") + shape.to_string();
      ParamTree params = init_mlp(mlp, mesh, {batch, features});
      Batch b{input(mesh, batch, features, DType::f32)};
      std::vector<CommRecord> global_records, local_records;
      LossAndGrads want, got;
      {
        CommScope scope;
        want = value_and_grad(params, global_view_loss(mlp), b);
        global_records = scope.records();
      }
      {
        CommScope scope;
        got = value_and_grad(params, shard_map_loss(mlp, mesh), b);
        local_records = scope.records();
      }
      EXPECT_NEAR(got.loss, want.loss, 1e-5 * std::abs(want.loss)) << label;
      expect_trees_near(got.grads, want.grads, 1e-5, label);
      if (shape.axis_size("data") == 1) {
        EXPECT_EQ(sorted(local_records), sorted(global_records)) << label;
      } else {
        expect_global_view_gathers_weight_gradients(global_records, local_records, shape.axis_size("data"), label);
      }
      if (world_rank() == 0) {
        std::int64_t global_bytes = 0, local_bytes = 0;
        for (const auto& r : global_records) global_bytes += r.bytes;
        for (const auto& r : local_records) local_bytes += r.bytes;
        std::cout << "[ figures ] value_and_grad of " << label << " (batch 8, depth 32): global view "
                  << global_bytes << " bytes in " << global_records.size() << " collectives, shard_map " << local_bytes
                  << " bytes in " << local_records.size() << " collectives (rank 0)\n";
      }
    }
  }
}

// 10 Adam steps, in f64 for the reason tests/models/mlp_test.cpp gives (Adam's sign-like update).
TEST(ShardMap, TenAdamStepsMatchGlobalView) {
  const std::int64_t batch = 8, features = 16, depth = 32;
  MLP mlp{2, depth, false, false};
  mlp.dtype = DType::f64;
  const Optimizer opt = adam(1e-3);
  for (const auto& shape : meshes_2d()) {
    if (world_size() == 8 && !(shape == MeshShape({"data", "model"}, {2, 4}) ||
                               shape == MeshShape({"data", "model"}, {4, 2}) ||
                               shape == MeshShape({"data", "model"}, {1, 8}))) {
      continue;
    }
    Mesh mesh = Mesh::world(shape);
    Batch b{input(mesh, batch, features, DType::f64)};
    auto run = [&](const LossFn& fn, std::int64_t& bytes) {
      TrainState state = create_train_state(init_mlp(mlp, mesh, {batch, features}), opt);
      CommScope scope;
      for (int step = 0; step < 10; ++step) train_step(state, opt, fn, b);
      bytes = scope.total_bytes();
      return state;
    };
    std::int64_t global_bytes = 0, local_bytes = 0;
    TrainState want = run(global_view_loss(mlp), global_bytes);
    TrainState got = run(shard_map_loss(mlp, mesh), local_bytes);
    const std::string label = "Adam on " + shape.to_string();
    EXPECT_EQ(got.opt_state.count, 10);
    expect_trees_near(got.params, want.params, 1e-5, label + " params");
    expect_trees_near(got.opt_state.mu, want.opt_state.mu, 1e-5, label + " mu");
    expect_trees_near(got.opt_state.nu, want.opt_state.nu, 1e-5, label + " nu");
    // The same bytes without a data axis; with one, the gathers of the weight gradients'
    // operands send less than the program's all-reduces of the gradients.
    if (shape.axis_size("data") == 1) {
      EXPECT_EQ(local_bytes, global_bytes) << label;
    } else {
      EXPECT_LT(global_bytes, local_bytes) << label;
    }
  }
}

// The tutorial's size (batch 8, depth 1024) on 2x4: one train step of DotReluDot, the global
// view's exact bytes (which tests/models/megatron_comm_test.cpp pins record by record) against
// the hand-written program's.
TEST(ShardMap, TutorialTrainStepBytesOnTwoByFour) {
  if (world_size() != 8) GTEST_SKIP() << "the 2x4 mesh";
  const std::int64_t batch = 8, depth = 1024;
  MLP mlp{1, depth, false, false};
  Mesh mesh = Mesh::world(MeshShape({"data", "model"}, {2, 4}));
  ParamTree params = init_mlp(mlp, mesh, {batch, depth});
  Batch b{input(mesh, batch, depth, DType::f32)};
  const Optimizer opt = adam(1e-3);
  std::vector<CommRecord> records[2];
  double loss[2];
  int i = 0;
  for (const LossFn& fn : {global_view_loss(mlp), shard_map_loss(mlp, mesh)}) {
    TrainState state = create_train_state(params, opt);
    CommScope scope;
    loss[i] = train_step(state, opt, fn, b);
    records[i++] = scope.records();
  }
  EXPECT_NEAR(loss[1], loss[0], 1e-5 * std::abs(loss[0]));
  expect_global_view_gathers_weight_gradients(records[0], records[1], 2, "DotReluDot on 2x4");
  std::int64_t bytes[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    for (const auto& r : records[k]) bytes[k] += r.bytes;
  }
  // Both: the activation's all-reduce over model (4x1024 f32 block): 24576, and the loss: 4.
  // The global view: each weight gradient's operands gathered over data, a 4x256 and a 4x1024
  // f32 block: 4096 + 16384 each. The program: two weight-gradient all-reduces over data
  // (1024x256 f32 blocks): 1048576 each.
  EXPECT_EQ(bytes[0], 24576 + 2 * (4096 + 16384) + 4);
  EXPECT_EQ(bytes[1], 24576 + 2 * 1048576 + 4);
  if (world_rank() == 0) {
    std::cout << "[ figures ] DotReluDot train step on 2x4 (batch 8, depth 1024): global view " << bytes[0]
              << " bytes in " << records[0].size() << " collectives, shard_map " << bytes[1] << " bytes in "
              << records[1].size() << " collectives per rank\n";
  }
}

// A scanned MLP: the whole stack in one shard_map, weights with a leading `layers` dimension
// (seqax's Array['layers', ...]), equal to the loop.
TEST(ShardMap, StackedSignatureForAScannedMlp) {
  const std::int64_t batch = 8, features = 16, depth = 32;
  const int layers = 3;
  MLP loop{layers, depth, false, false};
  const Signature sig = layer_signature(DType::f32).stacked({"w1", "w2"});
  EXPECT_EQ(sig.to_string(),
            "x: f32[batch/data embed], w1: f32[layers embed hidden/model], w2: f32[layers hidden/model embed] -> "
            "f32[batch/data embed]");
  for (const auto& shape : meshes_2d()) {
    Mesh mesh = Mesh::world(shape);
    ParamTree loop_params = init_mlp(loop, mesh, {batch, features});
    ParamTree stacked = stack_loop_params(loop_params, layers, mesh);
    Batch b{input(mesh, batch, features, DType::f32)};
    LossFn scanned = [&](const VarTree& p, const Batch& batch_) {
      Var z = shard_map(mesh, sig, [&](const std::vector<Var>& a) {
        Var h = a[0];
        for (int i = 0; i < layers; ++i) h = megatron_body({h, take_layer(a[1], i), take_layer(a[2], i)})[0];
        return std::vector<Var>{h};
      }, {Var(batch_.x), p.at("ScanDotReluDot_0/Dense_0/kernel"), p.at("ScanDotReluDot_0/W2")})[0];
      return sum_loss(z);
    };
    auto want = value_and_grad(loop_params, global_view_loss(loop), b);
    auto got = value_and_grad(stacked, scanned, b);
    EXPECT_NEAR(got.loss, want.loss, 1e-5 * std::abs(want.loss)) << shape.to_string();
    expect_trees_near(got.grads, stack_loop_params(want.grads, layers, mesh), 1e-5, shape.to_string());
  }
}

// An input without a gradient still types the body: relu(x) varies over data, so W1's
// cotangent is summed over data although nothing differentiates through x.
TEST(ShardMap, InputsWithoutGradientsStillTypeTheBody) {
  for (const auto& shape : meshes_2d()) {
    Mesh mesh = Mesh::world(shape);
    const std::int64_t batch = 8, features = 6, hidden = 8;
    Var x(ShardedTensor::from_global(mesh, parse_spec("P(data, None)"), testing_util::test_values({batch, features}, 3),
                                     "x"));
    Var w1(ShardedTensor::from_global(mesh, parse_spec("P(None, model)"),
                                      testing_util::test_values({features, hidden}, 4), "w1"),
           true);
    Var want = sum_loss(einsum("bd,dh->bh", relu(x), w1));
    Var got = sum_loss(shard_map(mesh, "x: f64[batch/data embed], w1: f64[embed hidden/model] -> f64[batch/data hidden/model]",
                                 [](const std::vector<Var>& a) {
                                   return std::vector<Var>{einsum("bd,dh->bh", relu(a[0]), a[1])};
                                 },
                                 {x, w1})[0]);
    auto gw = gradients(want, {w1}), gg = gradients(got, {w1});
    ASSERT_TRUE(gg[0] && gw[0]) << shape.to_string();
    EXPECT_LT(max_relative_error(gg[0]->to_global(), gw[0]->to_global()), 1e-12) << shape.to_string();
  }
}

// The README's example, with the signature as text.
TEST(ShardMap, ReadmeExample) {
  Mesh mesh = Mesh::world(MeshShape({"data", "model"}, {1, world_size()}));
  MLP mlp{1, 8 * world_size(), false, false};
  ParamTree params = init_mlp(mlp, mesh, {4, 8});
  Var x(input(mesh, 4, 8, DType::f32));
  Var w1(params.at(w1_path(0))), w2(params.at(w2_path(0)));
  Var z = shard_map(mesh,
      "x: f32[batch/data embed], w1: f32[embed hidden/model], w2: f32[hidden/model embed]"
      " -> f32[batch/data embed]",
      [](const std::vector<Var>& a) {
        Var y = relu(einsum("bd,dh->bh", a[0], a[1]));
        Var z = einsum("bh,hd->bd", y, a[2]);
        return std::vector<Var>{psum(z, "model")};
      },
      {x, w1, w2})[0];
  EXPECT_TRUE(z.value().to_global().bit_equal(megatron_layer(mesh, x, w1, w2).value().to_global()));
}

TEST(ShardMap, InputsAreReshardedToInSpecsAndPartialOutputsAllowed) {
  Mesh mesh = Mesh::world(MeshShape({"data", "model"}, {1, world_size()}));
  const std::int64_t n = 4 * world_size();
  Tensor xg = testing_util::test_values({n, 3}, 1);
  Var x(ShardedTensor::from_global(mesh, Spec(), xg, "x"), true);
  // Sum of squares of each block, partial over model: its global value is the full sum.
  Var s = shard_map(mesh, [](const std::vector<Var>& a) { return std::vector<Var>{sum(square(a[0]))}; },
                    {parse_spec("P(model, None)")}, {parse_spec("P(; partial=model)")}, {x})[0];
  double want = 0;
  for (std::int64_t i = 0; i < xg.numel(); ++i) want += xg.at(i) * xg.at(i);
  EXPECT_NEAR(scalar_value(s.value()), want, 1e-12 * want);
  auto g = gradients(s, {x});
  ASSERT_TRUE(g[0]);
  EXPECT_EQ(g[0]->spec(), Spec());
  EXPECT_LT(max_relative_error(g[0]->to_global(), binary(BinaryOp::add, xg, xg)), 1e-12);
}

TEST(Signature, ParsesPrintsAndGivesSpecs) {
  Signature sig = parse_signature("x: f32[batch/data embed], w: f32[embed hidden/model] -> f32[batch/data hidden/model]");
  ASSERT_EQ(sig.inputs.size(), 2u);
  EXPECT_EQ(sig.inputs[1].name, "w");
  EXPECT_EQ(sig.in_specs()[0], parse_spec("P(data, None)"));
  EXPECT_EQ(sig.in_specs()[1], parse_spec("P(None, model)"));
  EXPECT_EQ(sig.out_specs()[0], parse_spec("P(data, model)"));
  EXPECT_EQ(sig.to_string(), "x: f32[batch/data embed], w: f32[embed hidden/model] -> f32[batch/data hidden/model]");
  Signature two = parse_signature("a: f64[n/data 8] -> (s: f64[n/data], f64[8])");
  EXPECT_EQ(two.outputs.size(), 2u);
  EXPECT_EQ(two.outputs[0].name, "s");
  EXPECT_EQ(parse_signature(two.to_string()), two);
}

TEST(Signature, IsFullySharded) {
  const MeshShape mesh({"data", "model"}, {2, 4});
  EXPECT_TRUE(is_fully_sharded(parse_spec("P(data, model)"), mesh));
  EXPECT_TRUE(is_fully_sharded(parse_spec("P((data, model), None)"), mesh));
  EXPECT_FALSE(is_fully_sharded(parse_spec("P(None, model)"), mesh));
  EXPECT_FALSE(is_fully_sharded(parse_spec("P(None; partial=data)"), mesh));
  EXPECT_TRUE(is_fully_sharded(parse_spec("P(None, model)"), MeshShape({"data", "model"}, {1, 4})));
}

// Bad input: the same error on every rank, before any communication, and the job goes on.
template <class E, class F>
void expect_error(F&& f, const std::string& message) {
  try {
    f();
    ADD_FAILURE() << "no error; expected: " << message;
  } catch (const E& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

struct BadInput {
  Mesh mesh = Mesh::world(MeshShape({"data", "model"}, {1, world_size()}));
  const std::int64_t hidden = 4 * world_size();
  Var x{ShardedTensor::zeros(mesh, parse_spec("P(data, None)"), {8, 16}, DType::f32, "x")};
  Var w1{ShardedTensor::zeros(mesh, parse_spec("P(None, model)"), {16, hidden}, DType::f32, "w1")};
  Var w2{ShardedTensor::zeros(mesh, parse_spec("P(model, None)"), {hidden, 16}, DType::f32, "w2")};
};

TEST(ShardMapErrors, SignatureThatDoesNotParse) {
  expect_error<SpecError>([] { parse_signature("x: f32[batch/data embed], w: f32[embed hidden/] -> f32[batch]"); },
                          "signature \"x: f32[batch/data embed], w: f32[embed hidden/] -> f32[batch]\": argument 'w': shape string "
      "'embed hidden/': expected a mesh axis name after '/', found end of text at column 14\n  embed hidden/\n"
      "               ^");
  expect_error<SpecError>([] { parse_signature("x: f32[batch] f32[batch]"); },
                          "signature \"x: f32[batch] f32[batch]\": no '->' between arguments and results");
  expect_error<SpecError>([] { parse_signature("x: f16[batch] -> f32[batch]"); },
                          "signature \"x: f16[batch] -> f32[batch]\": unknown dtype 'f16' (expected f32, f64 or i32)");
  expect_error<SpecError>([] { parse_signature("f32[batch] -> f32[batch]"); },
                          "signature \"f32[batch] -> f32[batch]\": argument 'f32[batch]' has no name (write name: "
                          "dtype[shape])");
  // Found by the parse_signature fuzz target: a name that is not an identifier did not print back.
  expect_error<SpecError>([] { parse_signature("x: f32[a] -> result x: f32[a]"); },
                          "signature \"x: f32[a] -> result x: f32[a]\": argument name 'result x' is not an identifier");
  // Two arguments of one name are refused, also when they are next to each other.
  expect_error<SpecError>([] { parse_signature("x: f32[a], x: f32[a] -> f32[a]"); },
                          "signature \"x: f32[a], x: f32[a] -> f32[a]\": argument name 'x' is used twice");
}

TEST(ShardMapErrors, ArgumentOfTheWrongSize) {
  BadInput s;
  Var w1_wrong(ShardedTensor::zeros(s.mesh, parse_spec("P(None, model)"), {32, s.hidden}, DType::f32, "w1"));
  expect_error<ShapeError>([&] { megatron_layer(s.mesh, s.x, w1_wrong, s.w2); },
                           "shard_map: argument 'w1' (\"embed hidden/model\", global shape [32, " +
                               std::to_string(s.hidden) + "] on mesh data: 1, model: " + std::to_string(world_size()) +
                               "): dimension embed: expected 16, got 32; embed was bound by 'x'");
}

// shard_map's body sees one block shape on every rank: an argument its in_spec splits unevenly
// is refused on every rank, before any communication (reshard or pad it outside).
TEST(ShardMapErrors, UnevenArgumentIsRefused) {
  if (world_size() == 1) GTEST_SKIP() << "every size divides over one rank";
  const int n = world_size();
  Mesh mesh = Mesh::world(MeshShape({"data"}, {n}));
  Var x(ShardedTensor::zeros(mesh, Spec(), {n + 1, 4}, DType::f32, "x"));
  auto body = [](const std::vector<Var>& a) { return std::vector<Var>{a[0]}; };
  expect_error<SpecError>([&] { shard_map(mesh, body, {parse_spec("P(data)")}, {parse_spec("P(data)")}, {x}); },
                          "shard_map: dimension 0 of 'argument 0' (size " + std::to_string(n + 1) +
                              ") does not divide over axes (data) of size " + std::to_string(n) +
                              "; shard_map's blocks must all have one shape");
}

// TESSERA_SHARD_MAP_CHECK is read again at each shard_map: a value outside its list set after
// the mesh was made (Mesh::create agreed on the environment before) is refused, not taken as 0.
TEST(ShardMapErrors, ReplicationCheckSettingOutsideItsList) {
  BadInput s;
  auto body = [](const std::vector<Var>& a) { return std::vector<Var>{a[0]}; };
  // The caller's setting, if any, is given back after.
  const char* caller = std::getenv("TESSERA_SHARD_MAP_CHECK");
  const std::optional<std::string> before = caller ? std::optional<std::string>(caller) : std::nullopt;
  setenv("TESSERA_SHARD_MAP_CHECK", "yes", 1);
  expect_error<UsageError>(
      [&] { shard_map(s.mesh, body, {parse_spec("P(data, None)")}, {parse_spec("P(data, None)")}, {s.x}); },
      "TESSERA_SHARD_MAP_CHECK must be unset, 0 or 1, got 'yes'");
  if (before) {
    setenv("TESSERA_SHARD_MAP_CHECK", before->c_str(), 1);
  } else {
    unsetenv("TESSERA_SHARD_MAP_CHECK");
  }
}

TEST(ShardMapErrors, DtypeMismatch) {
  BadInput s;
  Var w2_f64(ShardedTensor::zeros(s.mesh, parse_spec("P(model, None)"), {s.hidden, 16}, DType::f64, "w2"));
  expect_error<DTypeError>([&] { megatron_layer(s.mesh, s.x, s.w1, w2_f64); },
                           "shard_map: argument 'w2' has dtype f64, the signature says f32");
}

TEST(ShardMapErrors, CollectiveOverAnAxisNotInTheMesh) {
  BadInput s;
  auto body = [](const std::vector<Var>& a) {
    Var z = einsum("bh,hd->bd", relu(einsum("bd,dh->bh", a[0], a[1])), a[2]);
    return std::vector<Var>{psum(z, "tensor")};
  };
  expect_error<SpecError>([&] { shard_map(s.mesh, layer_signature(DType::f32), body, {s.x, s.w1, s.w2}); },
                          "psum: mesh axis 'tensor' is not in mesh(data: 1, model: " + std::to_string(world_size()) +
                              ")");
  expect_error<Error>([&] { psum(s.x, "model"); }, "psum: called outside shard_map (no mesh axes are bound)");
}

TEST(ShardMapErrors, ResultThatVariesOverAnUnmentionedAxis) {
  if (world_size() == 1) GTEST_SKIP() << "needs a model axis of size > 1";
  BadInput s;
  auto no_psum = [](const std::vector<Var>& a) {
    return std::vector<Var>{einsum("bh,hd->bd", relu(einsum("bd,dh->bh", a[0], a[1])), a[2])};
  };
  Var w1(s.w1.value(), true);  // the tape records the body
  expect_error<SpecError>([&] { shard_map(s.mesh, layer_signature(DType::f32), no_psum, {s.x, w1, s.w2}); },
                          "shard_map: result 0 varies over mesh axis 'model' but its out_spec P(data, None) "
                          "does not mention it (reduce it with psum or pmax, or name the axis in the spec)");
  // Values that differ along an unmentioned axis without the tape knowing (a constant made from
  // axis_index): the debug check compares them.
  auto by_index = [](const std::vector<Var>& a) {
    const Tensor& b = a[0].value().local();
    Var c(ShardedTensor(a[0].mesh(), a[0].spec(), b.shape(), Tensor::full(b.shape(), axis_index("model"), b.dtype())));
    return std::vector<Var>{add(a[0], c)};
  };
  expect_error<ShapeError>(
      [&] { shard_map(s.mesh, by_index, {parse_spec("P(data, None)")}, {parse_spec("P(data, None)")}, {s.x}, ShardMapOptions{true}); },
      "shard_map: result 0 is not the same along mesh axis 'model', which its out_spec P(data, None) does not mention "
      "(blocks differ by up to " + std::to_string(double(world_size() - 1)) + ")");
}

// A body whose results differ from rank to rank (in count, dtype or block shape) would make the
// ranks infer different global shapes and run collectives of different sizes, or one rank throw
// alone. Every call agrees on them first: every rank throws the same error, naming rank 0's
// results and the first other rank's, with the debug check or without.
TEST(ShardMapErrors, ResultsThatDifferFromRankToRank) {
  if (world_size() == 1) GTEST_SKIP() << "needs two ranks";
  BadInput s;
  const Spec rows = parse_spec("P(data, None)");
  // Rank r's block has 8 + min(r, 1) rows: rank 0 returns its input, the others one row more.
  auto by_rank_shape = [](const std::vector<Var>& a) {
    if (world_rank() == 0) return std::vector<Var>{a[0]};
    const Shape shape{9, 16};
    return std::vector<Var>{Var(ShardedTensor(a[0].mesh(), Spec::replicated(2), shape, Tensor::zeros(shape, DType::f32)))};
  };
  expect_error<ShapeError>(
      [&] { shard_map(s.mesh, by_rank_shape, {rows}, {rows}, {s.x}, ShardMapOptions{true}); },
      "rank 1: shard_map: the body's results differ from rank 0's (1 result: result 0 f32[9, 16] here, 1 result: "
      "result 0 f32[8, 16] on rank 0); a result's block must have one dtype and shape on every rank");
  // Another count of results on the ranks after 0: named before the count is checked against
  // out_specs, which rank 0 alone would have passed.
  auto by_rank_count = [](const std::vector<Var>& a) {
    return world_rank() == 0 ? std::vector<Var>{a[0]} : std::vector<Var>{a[0], a[0]};
  };
  expect_error<ShapeError>(
      [&] { shard_map(s.mesh, by_rank_count, {rows}, {rows}, {s.x}); },
      "rank 1: shard_map: the body's results differ from rank 0's (2 results: result 0 f32[8, 16], result 1 "
      "f32[8, 16] here, 1 result: result 0 f32[8, 16] on rank 0); a result's block must have one dtype and shape "
      "on every rank");
  // Typed: the signature's local check would have thrown on the ranks after 0 alone; the result is
  // named as the signature names it.
  auto by_rank_dtype = [](const std::vector<Var>& a) {
    if (world_rank() == 0) return std::vector<Var>{a[0]};
    const Tensor& b = a[0].value().local();
    return std::vector<Var>{Var(ShardedTensor(a[0].mesh(), Spec::replicated(2), b.shape(), Tensor::zeros(b.shape(), DType::f64)))};
  };
  expect_error<ShapeError>(
      [&] { shard_map(s.mesh, "x: f32[batch/data embed] -> y: f32[batch/data embed]", by_rank_dtype, {s.x}); },
      "rank 1: shard_map: the body's results differ from rank 0's (1 result: result 'y' f64[8, 16] here, 1 result: "
      "result 'y' f32[8, 16] on rank 0); a result's block must have one dtype and shape on every rank");
  // Alike on every rank: the check passes and the result is the input.
  auto same = [](const std::vector<Var>& a) { return std::vector<Var>{a[0]}; };
  Var out = shard_map(s.mesh, same, {rows}, {rows}, {s.x}, ShardMapOptions{true})[0];
  EXPECT_EQ(out.shape(), (Shape{8, 16}));
}

// A body that throws on some ranks only: every rank throws that error (its type and message,
// with the first failing rank named), where the others waited in the results' agreement for ever.
// Where every rank's body throws, each rank's own error stands, as before.
TEST(ShardMapErrors, BodyThatThrowsOnSomeRanks) {
  if (world_size() == 1) GTEST_SKIP() << "needs two ranks";
  BadInput s;
  const Spec rows = parse_spec("P(data, None)");
  auto on_rank_1 = [](const std::vector<Var>& a) {
    if (world_rank() == 1) throw DTypeError("the body's check failed on rank 1");
    return std::vector<Var>{a[0]};
  };
  expect_error<DTypeError>([&] { shard_map(s.mesh, on_rank_1, {rows}, {rows}, {s.x}); },
                           "rank 1: the body's check failed on rank 1");
  // An op's own agreement inside a body covers the body's one-rank mesh only: a token id outside
  // the vocabulary in rank 1's block (embed's check) is now every rank's error.
  Tensor ids = Tensor::zeros({2 * world_size()}, DType::i32);
  ids.data<std::int32_t>()[3] = 99;  // rank 1's block holds elements 2 and 3
  const ShardedTensor tokens = ShardedTensor::from_global(s.mesh, parse_spec("P(model)"), ids);
  Var table(ShardedTensor::zeros(s.mesh, parse_spec("P(None, None)"), {16, 8}, DType::f32, "table"), true);
  auto lookup = [&](const std::vector<Var>& a) {
    ShardedTensor block(a[0].mesh(), parse_spec("P(None)"), tokens.local().shape(), tokens.local());
    return std::vector<Var>{embed(a[0], block)};
  };
  expect_error<ShapeError>(
      [&] { shard_map(s.mesh, lookup, {parse_spec("P(None, None)")}, {parse_spec("P(None, None)")}, {table}); },
      "rank 1: embed: token id 99 in '' [2] P(None) is outside the vocabulary [0, 16) of '' [16, 8] P(None, None)");
  // On every rank alike: each rank's own error, unprefixed.
  auto everywhere = [](const std::vector<Var>&) -> std::vector<Var> { throw SpecError("the body's check failed"); };
  expect_error<SpecError>([&] { shard_map(s.mesh, everywhere, {rows}, {rows}, {s.x}); }, "the body's check failed");
}

}  // namespace
}  // namespace tessera::nn
