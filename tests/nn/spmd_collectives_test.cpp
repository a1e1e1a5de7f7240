// Every local-view collective's gradient through shard_map against central finite differences
// in f64: loss = sum(weights * shard_map(collective)(x)) with x sharded, differences taken on the
// global x. On 2 ranks over the mesh data: 2; on 4 ranks over data: 4 and over both axes of 2x2;
// on 2x2 also over model alone with an input replicated over model (its cotangent is summed).
#include <gtest/gtest.h>

#include <functional>

#include "collectives/comm_stats.h"
#include "core/error.h"
#include "nn/ops.h"
#include "nn/shard_map.h"
#include "tests/nn/nn_test_util.h"
#include "tests/test_meshes.h"

namespace tessera::nn {
namespace {

using testing_support::world_size;
using testing_util::test_values;

struct Case {
  std::string name;
  Shape x_shape;
  Spec in, out;
  std::function<Var(const Var&)> body;
};

Spec spec_of(std::vector<Axes> dims) { return Spec(std::move(dims)); }

// Cases for a collective over `axes` (n ranks along them). `other` (may be empty) is a mesh axis
// the input is split on as well, untouched by the collective.
std::vector<Case> cases(const Axes& axes, int n, const Axes& other) {
  const std::int64_t m = 2;  // block rows
  std::vector<std::pair<int, int>> shift, chain;
  for (int i = 0; i < n; ++i) shift.emplace_back(i, (i + 1) % n);
  for (int i = 0; i + 1 < n; ++i) chain.emplace_back(i, i + 1);
  Axes both = other;
  both.insert(both.end(), axes.begin(), axes.end());
  const std::int64_t o = other.empty() ? 1 : 2;  // `other` has size 2 where used
  return {
      {"psum", {m * n * o, 3}, spec_of({both, {}}), spec_of({other, {}}), [=](const Var& x) { return psum(x, axes); }},
      {"pmax", {m * n * o, 3}, spec_of({both, {}}), spec_of({other, {}}), [=](const Var& x) { return pmax(x, axes); }},
      {"all_gather dim 0", {m * n * o, 3}, spec_of({both, {}}), spec_of({both, {}}),
       [=](const Var& x) { return all_gather(x, axes, 0); }},
      {"all_gather dim 1", {m * o, 3 * n}, spec_of({other, axes}), spec_of({both, {}}),
       [=](const Var& x) { return all_gather(x, axes, 1); }},
      {"psum_scatter dim 0", {m * n * n * o, 3}, spec_of({both, {}}), spec_of({both, {}}),
       [=](const Var& x) { return psum_scatter(x, axes, 0); }},
      {"psum_scatter dim 1", {m * o, 3 * n * n}, spec_of({other, axes}), spec_of({other, axes}),
       [=](const Var& x) { return psum_scatter(x, axes, 1); }},
      {"all_to_all", {m * n * o, 2 * n}, spec_of({both, {}}), spec_of({other, axes}),
       [=](const Var& x) { return all_to_all(x, axes, 1, 0); }},
      {"ppermute shift", {m * n * o, 3}, spec_of({both, {}}), spec_of({both, {}}),
       [=](const Var& x) { return ppermute(x, axes, shift); }},
      {"ppermute chain", {m * n * o, 3}, spec_of({both, {}}), spec_of({both, {}}),
       [=](const Var& x) { return ppermute(x, axes, chain); }},
  };
}

// Cases where the input is replicated over the collective's axes (invariant there).
std::vector<Case> invariant_cases(const Axes& axes, const Axes& other) {
  return {
      {"psum of a replicated input", {4, 3}, spec_of({other, {}}), spec_of({other, {}}),
       [=](const Var& x) { return psum(x, axes); }},
      {"pmax of a replicated input", {4, 3}, spec_of({other, {}}), spec_of({other, {}}),
       [=](const Var& x) { return pmax(x, axes); }},
      {"all_gather of a replicated input", {4, 3}, spec_of({other, {}}), spec_of({other, axes}),
       [=](const Var& x) { return all_gather(x, axes, 1); }},
  };
}

void check_case(const Mesh& mesh, const Case& c) {
  const std::string label = c.name + " on " + mesh.to_string();
  auto run = [&](const Tensor& x_global, bool grad) {
    Var x(ShardedTensor::from_global(mesh, c.in, x_global, "x"), grad);
    Var y = shard_map(mesh, [&](const std::vector<Var>& a) { return std::vector<Var>{c.body(a[0])}; }, {c.in},
                      {c.out}, {x}, ShardMapOptions{true})[0];
    Var w(ShardedTensor::from_global(mesh, y.spec(), test_values(y.shape(), 99), "w"));
    return std::pair{x, sum_loss(mul(w, y))};
  };
  const Tensor x0 = test_values(c.x_shape, 5);
  auto [x, loss] = run(x0, true);
  auto grads = gradients(loss, {x});
  ASSERT_TRUE(grads[0]) << label;
  EXPECT_EQ(grads[0]->spec(), x.spec().without_partial()) << label;
  const Tensor g = grads[0]->to_global();
  const double h = 1e-6;
  double err = 0, scale = 1e-30;
  for (std::int64_t i = 0; i < x0.numel(); ++i) {
    Tensor plus = x0, minus = x0;
    plus.data<double>()[i] += h;
    minus.data<double>()[i] -= h;
    const double fd = (scalar_value(run(plus, false).second.value()) - scalar_value(run(minus, false).second.value())) / (2 * h);
    err = std::max(err, std::abs(fd - g.at(i)));
    scale = std::max(scale, std::abs(g.at(i)));
  }
  EXPECT_LT(err / scale, 1e-6) << label;
}

TEST(SpmdCollectives, GradientsMatchFiniteDifferences) {
  const int n = world_size();
  if (n != 2 && n != 4) GTEST_SKIP() << "run on 2 and 4 ranks";
  Mesh line = Mesh::world(MeshShape({"data"}, {n}));
  for (const auto& c : cases({"data"}, n, {})) check_case(line, c);
  if (n == 4) {
    Mesh square = Mesh::world(MeshShape({"data", "model"}, {2, 2}));
    for (const auto& c : cases({"data", "model"}, 4, {})) check_case(square, c);
    for (const auto& c : cases({"model"}, 2, {"data"})) check_case(square, c);
    for (const auto& c : invariant_cases({"model"}, {"data"})) check_case(square, c);
  }
}

// Each collective in the body makes one record of the collectives layer, with its byte figure.
TEST(SpmdCollectives, BytesAreCounted) {
  const int n = world_size();
  if (n == 1) GTEST_SKIP() << "no communication on one rank";
  Mesh line = Mesh::world(MeshShape({"data"}, {n}));
  const std::int64_t block = 2 * 3 * 8;  // a (2, 3) f64 block
  std::vector<std::pair<int, int>> shift;
  for (int i = 0; i < n; ++i) shift.emplace_back(i, (i + 1) % n);
  const Spec split = spec_of({Axes{"data"}, Axes{}});
  const Axes data{"data"};
  std::vector<std::pair<Case, CommRecord>> expects;
  expects.emplace_back(Case{"psum", Shape{2 * n, 3}, split, Spec(), [](const Var& x) { return psum(x, "data"); }},
                       CommRecord{CommOp::all_reduce, data, -1, 2 * (n - 1) * block / n});
  expects.emplace_back(
      Case{"all_gather", Shape{2 * n, 3}, split, split, [](const Var& x) { return all_gather(x, "data", 0); }},
      CommRecord{CommOp::all_gather, data, 0, (n - 1) * block});
  expects.emplace_back(Case{"psum_scatter", Shape{2 * n * n, 3}, split, split,
                            [](const Var& x) { return psum_scatter(x, "data", 0); }},
                       CommRecord{CommOp::reduce_scatter, data, 0, (n - 1) * (n * block) / n});
  expects.emplace_back(Case{"all_to_all", Shape{2 * n, 3 * n}, split, spec_of({Axes{}, data}),
                            [](const Var& x) { return all_to_all(x, "data", 1, 0); }},
                       CommRecord{CommOp::all_to_all, data, 1, (n - 1) * (n * block) / n});
  expects.emplace_back(
      Case{"ppermute", Shape{2 * n, 3}, split, split, [shift](const Var& x) { return ppermute(x, "data", shift); }},
      CommRecord{CommOp::permute, data, -1, block});
  for (const auto& expected : expects) {
    const Case& c = expected.first;  // not a structured binding: clang 14 cannot capture one
    const CommRecord& want = expected.second;
    Var x(ShardedTensor::from_global(line, c.in, test_values(c.x_shape, 1), "x"));
    CommScope scope;
    shard_map(line, [&](const std::vector<Var>& a) { return std::vector<Var>{c.body(a[0])}; }, {c.in}, {c.out}, {x});
    const std::vector<CommRecord> records = scope.records();
    ASSERT_EQ(records.size(), 1u) << c.name;
    EXPECT_EQ(records[0].op, want.op) << c.name;
    EXPECT_EQ(records[0].axes, want.axes) << c.name;
    EXPECT_EQ(records[0].dim, want.dim) << c.name;
    EXPECT_EQ(records[0].bytes, want.bytes) << c.name;
  }
}

TEST(SpmdCollectives, AxisIndexAndSize) {
  const int n = world_size();
  Mesh mesh = Mesh::world(MeshShape({"data", "model"}, {1, n}));
  int index = -1, size = -1, both = -1;
  Var x(ShardedTensor::zeros(mesh, Spec(), {2}, DType::f64));
  shard_map(mesh, [&](const std::vector<Var>& a) {
    index = axis_index("model");
    size = axis_size("model");
    both = axis_size(Axes{"data", "model"});
    EXPECT_TRUE(in_shard_map());
    EXPECT_EQ(shard_map_mesh(), mesh);
    return a;
  }, {Spec()}, {Spec()}, {x});
  EXPECT_EQ(index, mesh.coord("model"));
  EXPECT_EQ(size, n);
  EXPECT_EQ(both, n);
  EXPECT_FALSE(in_shard_map());
  EXPECT_THROW(axis_index("model"), Error);
}

}  // namespace
}  // namespace tessera::nn
