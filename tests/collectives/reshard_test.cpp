// reshard in the global view on the meshes of this rank count: the plans docs/design.md pins, run and
// counted (one all-to-all, 0 bytes, one reduce-scatter, one all-reduce), explain's text, no-ops
// and storage reuse, determinism of partial sums, and bad input raising the same error on every
// rank with nothing sent.
#include "collectives/reshard.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "tests/collectives/expect_error.h"
#include "tests/collectives/reshard_test_support.h"
#include "tests/test_meshes.h"

namespace tessera {
namespace {

using testing_support::expect_error;
using testing_support::meshes_of_size;
using testing_support::world_size;

using reshard_testing::value;

// Not integer-valued: sums round, so their order shows.
double noisy(std::int64_t i) { return std::sin(0.37 * static_cast<double>(i)) * 1e3 + 1e-3 * i; }

// The two-axis meshes of this rank count (data, model).
std::vector<MeshShape> two_axis_meshes() {
  std::vector<MeshShape> out;
  for (const auto& s : meshes_of_size(world_size())) {
    if (s.ndim() == 2) out.push_back(s);
  }
  return out;
}

TEST(Reshard, SplitToOtherDimensionRunsOneAllToAll) {
  for (const auto& shape : two_axis_meshes()) {
    Mesh mesh = Mesh::world(shape);
    auto x = ShardedTensor::from_fn(mesh, parse_spec("P(data, None)"), {16, 16}, DType::f32, value, "x");
    CommScope scope;
    auto y = reshard(x, parse_spec("P(None, data)"));
    const int n = shape.axis_size("data");
    if (n > 1) {
      ASSERT_EQ(scope.records().size(), 1u);
      EXPECT_EQ(scope.records()[0].op, CommOp::all_to_all);
      EXPECT_EQ(scope.records()[0].axes, Axes{"data"});
    }
    EXPECT_EQ(scope.total_bytes(), (n - 1) * std::int64_t(x.local().nbytes()) / n);
    EXPECT_TRUE(y.to_global().bit_equal(x.to_global()));
    EXPECT_EQ(explain(x, parse_spec("P(None, data)")),
              n == 1 ? "no-op: already P(None, data), 0 bytes\n"
                     : "all_to_all over (data) from dim 0 to dim 1: " + std::to_string(scope.total_bytes()) +
                           " bytes per rank\n");
  }
}

TEST(Reshard, ReplicatedToShardedMovesZeroBytes) {
  for (const auto& shape : meshes_of_size(world_size())) {
    Mesh mesh = Mesh::world(shape);
    auto x = ShardedTensor::from_fn(mesh, Spec(), {8, 8}, DType::f32, value, "x");
    for (const Spec& target : {Spec({shape.names()}), Spec(std::vector<Axes>{Axes{}, shape.names()}),
                              Spec(std::vector<Axes>{Axes{shape.names()[0]}})}) {
      CommScope scope;
      auto y = reshard(x, target);
      EXPECT_EQ(scope.records().size(), 0u) << target.to_string();
      EXPECT_TRUE(y.local().bit_equal(extract_block(x.local(), y.block_offsets(), y.local().shape())));
    }
  }
}

TEST(Reshard, PartialToShardedIsOneReduceScatterAndToReplicatedOneAllReduce) {
  for (const auto& shape : two_axis_meshes()) {
    Mesh mesh = Mesh::world(shape);
    const Tensor expected = ShardedTensor::from_fn(mesh, Spec(), {8, 16}, DType::f32, value).local();
    auto x = ShardedTensor::from_fn(mesh, parse_spec("P(data, None; partial=model)"), {8, 16}, DType::f32, value, "x");
    {
      CommScope scope;
      auto y = reshard(x, parse_spec("P(data, model)"));
      ASSERT_EQ(scope.records().size(), shape.axis_size("model") > 1 ? 1u : 0u);
      if (!scope.records().empty()) {
        EXPECT_EQ(scope.records()[0].op, CommOp::reduce_scatter);
        EXPECT_EQ(scope.records()[0].axes, Axes{"model"});
      }
      EXPECT_TRUE(y.to_global().bit_equal(expected));
    }
    {
      CommScope scope;
      auto y = reshard(x, parse_spec("P(data, None)"));
      ASSERT_EQ(scope.records().size(), shape.axis_size("model") > 1 ? 1u : 0u);
      if (!scope.records().empty()) {
        EXPECT_EQ(scope.records()[0], (CommRecord{CommOp::all_reduce, {"model"}, -1,
                                                  2 * (shape.axis_size("model") - 1) * 8 * 16 * 4 /
                                                      shape.axis_size("data") / shape.axis_size("model")}));
      }
      EXPECT_TRUE(y.to_global().bit_equal(expected));
    }
    // Partial over both axes to replicated: ONE all-reduce over both.
    auto both = ShardedTensor::from_fn(mesh, parse_spec("P(None, None; partial=(model, data))"), {8, 16}, DType::f32,
                                       value, "g");
    CommScope scope;
    auto y = reshard(both, Spec());
    if (mesh.size() > 1) {
      ASSERT_EQ(scope.records().size(), 1u);
      EXPECT_EQ(scope.records()[0].op, CommOp::all_reduce);
    }
    EXPECT_TRUE(y.local().bit_equal(expected));
  }
}

TEST(Reshard, ExplainPrintsOneLinePerStep) {
  if (world_size() != 8) GTEST_SKIP() << "pinned on 2x4";
  Mesh mesh = Mesh::world(MeshShape({"data", "model"}, {2, 4}));
  auto x = ShardedTensor::from_fn(mesh, parse_spec("P(data, model)"), {16, 32}, DType::f32, value, "W");
  EXPECT_EQ(explain(x, parse_spec("P(None, None)")),
            "all_gather over (data) on dim 0: 256 bytes per rank\n"
            "all_gather over (model) on dim 1: 1536 bytes per rank\n");
  EXPECT_EQ(explain(x, parse_spec("P(data, model)")), "no-op: already P(data, model), 0 bytes\n");
  auto g = ShardedTensor::from_fn(mesh, parse_spec("P(None, None; partial=(data, model))"), {16, 32}, DType::f32,
                                  value, "g");
  EXPECT_EQ(explain(g, parse_spec("P(model, data)")),
            "reduce_scatter over (model) onto dim 0: 1536 bytes per rank\n"
            "reduce_scatter over (data) onto dim 1: 256 bytes per rank\n");
}

TEST(Reshard, EqualSpecsAreANoOpAndRvaluesReuseStorage) {
  for (const auto& shape : meshes_of_size(world_size())) {
    Mesh mesh = Mesh::world(shape);
    auto x = ShardedTensor::from_fn(mesh, Spec({shape.names()}), {16, 4}, DType::f32, value, "x");
    CommScope scope;
    auto same = with_sharding_constraint(x, Spec({shape.names()}));
    EXPECT_TRUE(same.local().bit_equal(x.local()));
    const void* storage = x.local().raw();
    auto moved = reshard(std::move(x), Spec(std::vector<Axes>{shape.names(), Axes{}}));  // padded: the same spec
    EXPECT_EQ(moved.local().raw(), storage);
    // Partial -> replicated in place: the all-reduce writes into the moved block.
    auto p = ShardedTensor::from_fn(mesh, Spec(std::vector<Axes>{}, shape.names()), {4, 4}, DType::f32, value, "p");
    const void* partial_storage = p.local().raw();
    auto r = reshard(std::move(p), Spec());
    EXPECT_EQ(r.local().raw(), partial_storage);
    EXPECT_EQ(scope.records().size(), mesh.size() > 1 ? 1u : 0u);
  }
}

TEST(Reshard, PartialSumsAreDeterministicAndReplicasBitIdentical) {
  for (const auto& shape : meshes_of_size(world_size())) {
    Mesh mesh = Mesh::world(shape);
    // Every rank holds a different non-integer summand, so the order of the sum matters.
    auto x = ShardedTensor::from_fn(mesh, Spec(std::vector<Axes>{}, shape.names()), {32, 8}, DType::f32, noisy, "x");
    for (auto& v : x.local().values<float>()) v *= 1.0f + 0.1f * static_cast<float>(mesh.rank());
    for (const Spec& target : {Spec(), Spec({shape.names()}), Spec(std::vector<Axes>{Axes{shape.names().back()}})}) {
      auto a = reshard(x, target);
      auto b = reshard(x, target);
      EXPECT_TRUE(a.local().bit_equal(b.local())) << target.to_string();
      // Ranks holding the same block (replicas) hold the same bits.
      std::vector<float> all(a.local().numel() * mesh.size());
      MPI_Allgather(a.local().raw(), static_cast<int>(a.local().numel()), MPI_FLOAT, all.data(),
                    static_cast<int>(a.local().numel()), MPI_FLOAT, mesh.comm().handle());
      for (int r = 0; r < mesh.size(); ++r) {
        if (block_offsets(target.padded(2), shape, {32, 8}, shape.coords_of(r)) != a.block_offsets()) continue;
        EXPECT_EQ(std::memcmp(all.data() + r * a.local().numel(), a.local().raw(), a.local().nbytes()), 0)
            << "rank " << r << " " << target.to_string();
      }
    }
  }
}

TEST(Reshard, BadTargetsAreTheSameErrorOnEveryRankWithNothingSent) {
  for (const auto& shape : two_axis_meshes()) {
    Mesh mesh = Mesh::world(shape);
    auto x = ShardedTensor::from_fn(mesh, parse_spec("P(data, None)"), {8, 6}, DType::f32, value, "W2");
    CommScope scope;
    expect_error<SpecError>([&] { reshard(x, parse_spec("P(data, hidden)")); },
                            "reshard: spec P(data, hidden) of 'W2': unknown mesh axis 'hidden' (mesh has " +
                                shape.to_string() + ")");
    expect_error<SpecError>([&] { reshard(x, parse_spec("P(data, data)")); },
                            "reshard: spec P(data, data) of 'W2': mesh axis 'data' is used more than once");
    expect_error<SpecError>([&] { reshard(x, parse_spec("P(model, None; partial=model)")); },
                            "reshard: spec P(model, None; partial=model) of 'W2': mesh axis 'model' is used more "
                            "than once");
    expect_error<SpecError>([&] { explain(x, parse_spec("P(None, None, data)")); },
                            "reshard: spec P(None, None, data) of 'W2' has 3 dimensions but the tensor has shape [8, 6]");
    // Another Mesh object, even of the same shape and ranks, is another mesh.
    Mesh other = Mesh::world(shape);
    expect_error<MeshError>([&] { reshard(x, other, parse_spec("P(None, data)")); },
                            "reshard: 'W2' lives on mesh(" + shape.to_string() +
                                ") but the target sharding P(None, data) is on mesh(" + shape.to_string() +
                                "), a different Mesh object of the same shape; move it between meshes through a "
                                "checkpoint or to_global");
    EXPECT_NO_THROW(reshard(x, mesh, parse_spec("P(None, None)")));
    EXPECT_EQ(scope.records().size(), shape.axis_size("data") > 1 ? 1u : 0u);  // only the valid reshard
    // A size the axes do not divide is no error (the block rule): 6 over model=4 gives 2, 2, 2, 0.
    const ShardedTensor y = reshard(x, parse_spec("P(None, model)"));
    EXPECT_EQ(y.local().shape(), local_shape(y.spec(), shape, {8, 6}, mesh.coords()));
    EXPECT_TRUE(y.to_global().bit_equal(x.to_global()));
  }
}

}  // namespace
}  // namespace tessera
