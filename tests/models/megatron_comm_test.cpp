// The communication of one DotReluDot step on the 2x4 mesh, read from the byte counters, is
// Megatron's: forward one all-reduce over `model` of the activation; backward one all-reduce
// over `model` (the input's gradient). Each weight gradient of this small batch is computed from
// its operands gathered over `data` (einsum_toward: 20 KiB sent instead of all-reducing the
// gradient's 1 MiB block), and equals the gradient that the all-reduce of partial products gives.
#include <gtest/gtest.h>

#include "collectives/comm_stats.h"
#include "models/mlp.h"
#include "nn/ops.h"
#include "nn/train.h"
#include "tests/test_meshes.h"

namespace tessera {
// Readable records in failure messages.
inline void PrintTo(const CommRecord& r, std::ostream* os) { *os << to_string(r) << " dim " << r.dim; }
}  // namespace tessera

namespace tessera::models {
namespace {

using namespace tessera::nn;

using testing_support::world_size;

// x (8, 1024) P(data, None); W1 (1024, 1024) P(None, model); W2 (1024, 1024) P(model, None).
constexpr std::int64_t kBatch = 8, kDepth = 1024;
// The activation z's block before its all-reduce: (8/2) x 1024 f32 = 16 KiB; all_reduce over
// model (n = 4) sends 2 (n-1)/n of it.
constexpr std::int64_t kActivationBytes = 2 * 3 * (4 * 1024 * 4) / 4;
// A weight gradient's operands, all-gathered over data (n = 2) instead of all-reducing the
// gradient's 1024 x 256 f32 block (1 MiB): the hidden activation or its cotangent, (8/2) x
// (1024/4) f32, and the layer's input or output cotangent, (8/2) x 1024 f32.
constexpr std::int64_t kHiddenBlockBytes = 4 * 256 * 4;
constexpr std::int64_t kWideBlockBytes = 4 * 1024 * 4;
// The scalar loss, partial over data.
constexpr std::int64_t kLossBytes = 2 * 1 * 4 / 2;

CommRecord all_reduce(Axes axes, std::int64_t bytes) { return CommRecord{CommOp::all_reduce, std::move(axes), -1, bytes}; }
CommRecord all_gather_batch(std::int64_t bytes) { return CommRecord{CommOp::all_gather, {"data"}, 0, bytes}; }

struct LayerOnTwoByFour {
  Mesh mesh = Mesh::world(MeshShape({"data", "model"}, {2, 4}));
  DotReluDot layer{kDepth};
  ParamTree params = init_params(abstract_init(layer, mesh.shape(), tutorial_rules(), {kBatch, kDepth}), mesh, 0);
  ShardedTensor x = ShardedTensor::from_fn(
      mesh, parse_spec("P(data, None)"), {kBatch, kDepth}, DType::f32, [](std::int64_t i) { return (i % 13) * 0.1; },
      "x");
};

TEST(MegatronComm, ForwardAndBackwardOfOneLayer) {
  if (world_size() != 8) GTEST_SKIP() << "pinned on the 2x4 mesh";
  LayerOnTwoByFour s;
  VarTree vars = as_vars(s.params, true);
  Var x(s.x, true);  // inside a deeper model the layer's input needs its gradient too
  std::vector<CommRecord> forward, backward;
  Var loss;
  {
    CommScope scope;
    loss = sum_loss(s.layer.apply(ParamView(vars), ApplyContext{tutorial_rules()}, x));
    forward = scope.records();
  }
  {
    CommScope scope;
    gradients(loss, {vars.at("Dense_0/kernel"), vars.at("W2"), x});
    backward = scope.records();
  }
  EXPECT_EQ(forward, (std::vector<CommRecord>{all_reduce({"model"}, kActivationBytes)}));
  // W2's gradient first (the last einsum: relu(h) and the output's cotangent gathered), then
  // the input's (reduced over model: gathering W1 would cost more) and W1's (x and h's cotangent
  // gathered).
  EXPECT_EQ(backward, (std::vector<CommRecord>{all_gather_batch(kHiddenBlockBytes), all_gather_batch(kWideBlockBytes),
                                               all_reduce({"model"}, kActivationBytes),
                                               all_gather_batch(kWideBlockBytes), all_gather_batch(kHiddenBlockBytes)}));
}

TEST(MegatronComm, TrainStep) {
  if (world_size() != 8) GTEST_SKIP() << "pinned on the 2x4 mesh";
  LayerOnTwoByFour s;
  const Optimizer opt = adam(1e-3);
  TrainState state = create_train_state(s.params, opt);
  LossFn fn = [&](const VarTree& p, const Batch& b) {
    return sum_loss(s.layer.apply(ParamView(p), ApplyContext{tutorial_rules()}, Var(b.x)));
  };
  CommScope scope;
  train_step(state, opt, fn, Batch{s.x});
  // Forward: the activation; backward: the two weight gradients' operands gathered over data
  // (the batch input needs no gradient); then the loss value; the Adam update is local.
  EXPECT_EQ(scope.records(),
            (std::vector<CommRecord>{all_reduce({"model"}, kActivationBytes), all_gather_batch(kHiddenBlockBytes),
                                     all_gather_batch(kWideBlockBytes), all_gather_batch(kWideBlockBytes),
                                     all_gather_batch(kHiddenBlockBytes), all_reduce({"data"}, kLossBytes)}));
  EXPECT_EQ(scope.total_bytes(), kActivationBytes + 2 * (kHiddenBlockBytes + kWideBlockBytes) + kLossBytes);
}

}  // namespace
}  // namespace tessera::models
