// TESSERA_COLLECTIVE_CHECK (collectives/collective_check.h): with the check on, ranks that reach
// different collectives, or one collective with different arguments, or reshard to different
// targets, all throw one Error naming both, where they would otherwise hang or mismatch; checked
// calls are numbered per mesh, the collectives inside a reshard unnumbered; a rank kept waiting
// at a check says so on stderr and goes on. The check is turned on in-process
// (set_collective_check) on every rank alike.
#include "collectives/collective_check.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "collectives/collectives.h"
#include "collectives/reshard.h"
#include "core/error.h"
#include "mesh/sharded_tensor.h"
#include "tests/collective_check_support.h"
#include "tests/test_meshes.h"

namespace tessera {
namespace {

using testing_support::check_error;
using testing_support::CheckOn;
using testing_support::world_rank;
using testing_support::world_size;

TEST(CollectiveCheck, ReshardsToDifferentTargetsAreNamedOnEveryRank) {
  if (world_size() == 1) GTEST_SKIP() << "one rank cannot differ from another";
  const int n = world_size(), last = n - 1;
  Mesh mesh = Mesh::world(MeshShape({"data"}, {n}));
  const CheckOn on;
  ShardedTensor x = ShardedTensor::zeros(mesh, parse_spec("P(data, None)"), {4 * n, 8}, DType::f64, "x");
  // Two checked reshards that agree (each runs collectives inside, which are not numbered), then
  // one whose target the last rank computes differently: collective 3.
  (void)reshard(x, parse_spec("P(None, data)"));
  (void)reshard(x, parse_spec("P()"));
  const Spec mine = world_rank() == last ? parse_spec("P(None, data)") : parse_spec("P()");
  const std::string message = check_error([&] { (void)reshard(x, mine); });
  const std::string what = "reshard of f64[" + std::to_string(4 * n) + ", 8] from P(data, None) to ";
  EXPECT_EQ(message, "rank " + std::to_string(last) + ": TESSERA_COLLECTIVE_CHECK: collective 3 on mesh(data: " +
                         std::to_string(n) + ") differs from rank 0's: " + what + "P(None, data) here, " + what +
                         "P() on rank 0; every rank runs the same collectives in the same order with the same arguments");
  // The ranks are in step again: the next reshard runs, and moves the right values.
  Tensor t({4 * n, 8}, DType::f64);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = static_cast<double>(i);
  ShardedTensor y = reshard(ShardedTensor::from_global(mesh, parse_spec("P(data, None)"), t, "y"), parse_spec("P(None, data)"));
  EXPECT_EQ(y.to_global().data<double>()[8 * n + 1], static_cast<double>(8 * n + 1));
}

TEST(CollectiveCheck, ACollectiveOnSomeRanksOnlyIsCaught) {
  if (world_size() == 1) GTEST_SKIP() << "one rank cannot differ from another";
  const int n = world_size();
  Mesh mesh = Mesh::world(MeshShape({"data"}, {n}));
  const CheckOn on;
  Tensor block = Tensor::zeros({2, 3}, DType::f32);
  // Rank 0 sums before the all-gather every rank makes: its first collective is the sum, the
  // others' the all-gather. Rank 1 is the lowest that differs.
  const std::string message = check_error([&] {
    if (world_rank() == 0) (void)all_reduce(mesh, block, {"data"});
    (void)all_gather(mesh, block, {"data"}, 0);
  });
  EXPECT_EQ(message, "rank 1: TESSERA_COLLECTIVE_CHECK: collective 1 on mesh(data: " + std::to_string(n) +
                         ") differs from rank 0's: all_gather over (data) of f32 rank-2 blocks along dimension 0 here, "
                         "all_reduce (sum) over (data) of f32 rank-2 blocks on rank 0; every rank runs the same "
                         "collectives in the same order with the same arguments");
}

TEST(CollectiveCheck, ArgumentsThatDifferAreCaught) {
  if (world_size() == 1) GTEST_SKIP() << "one rank cannot differ from another";
  const int n = world_size(), last = n - 1;
  Mesh mesh = Mesh::world(MeshShape({"data", "model"}, {n / 2 > 0 && n % 2 == 0 ? n / 2 : n, n % 2 == 0 ? 2 : 1}));
  const CheckOn on;
  Tensor block = Tensor::zeros({4, 4}, DType::bf16);
  const std::string message = check_error([&] {
    (void)all_to_all(mesh, block, {"data", "model"}, 0, world_rank() == last ? 0 : 1);
  });
  EXPECT_EQ(message, "rank " + std::to_string(last) + ": TESSERA_COLLECTIVE_CHECK: collective 1 on " + mesh.to_string() +
                         " differs from rank 0's: all_to_all over (data, model) of bf16 rank-2 blocks, split dimension 0, "
                         "concat dimension 0 here, all_to_all over (data, model) of bf16 rank-2 blocks, split dimension "
                         "0, concat dimension 1 on rank 0; every rank runs the same collectives in the same order with "
                         "the same arguments");
  // Broadcast roots and ppermute pairs count too.
  const std::string roots = check_error([&] { (void)broadcast(mesh, block, {"data", "model"}, world_rank() == last ? 1 : 0); });
  EXPECT_NE(roots.find("broadcast over (data, model) of bf16 rank-2 blocks from position 1 here, broadcast over "
                       "(data, model) of bf16 rank-2 blocks from position 0 on rank 0"),
            std::string::npos)
      << roots;
  EXPECT_NE(roots.find("collective 2 on"), std::string::npos) << roots;
}

// Blocks of different extents (an uneven split) are not a difference: the check describes what
// every rank shares.
TEST(CollectiveCheck, UnevenBlocksPass) {
  const int n = world_size();
  Mesh mesh = Mesh::world(MeshShape({"data"}, {n}));
  const CheckOn on;
  Tensor t({2 * n + 1, 3}, DType::f64);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = static_cast<double>(i);
  ShardedTensor x = ShardedTensor::from_global(mesh, parse_spec("P(data, None)"), t, "x");
  Tensor summed = all_reduce(mesh, x.local(), {"data"});
  EXPECT_EQ(summed.shape(), x.local().shape());
  EXPECT_EQ(reshard(x, parse_spec("P(None, data)")).to_global().data<double>()[7], 7.0);
}

// A rank kept waiting at a check says so on stderr, then goes on when the others come.
TEST(CollectiveCheck, ARankKeptWaitingSaysSo) {
  if (world_size() == 1) GTEST_SKIP() << "one rank cannot wait for another";
  const int n = world_size();
  Mesh mesh = Mesh::world(MeshShape({"data"}, {n}));
  const CheckOn on;
  set_collective_check_warn_seconds(0.3);
  // Made now, as Mesh::create makes it when TESSERA_COLLECTIVE_CHECK=1 is in the environment (here
  // the check is turned on in-process): its first use would wait in MPI_Comm_dup.
  (void)mesh.check_comm();
  Tensor block = Tensor::zeros({5}, DType::f32);
  if (world_rank() == 0) usleep(1500 * 1000);
  testing::internal::CaptureStderr();
  Tensor summed = all_reduce(mesh, block, {"data"});
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(summed.numel(), 5);
  if (world_rank() == 1) {
    // "waited 0.3 s" or a little more, as the host schedules the oversubscribed ranks.
    const std::string head = "tessera: rank 1: TESSERA_COLLECTIVE_CHECK: waited ";
    const std::string tail = " s at collective 1 on mesh(data: " + std::to_string(n) +
                             ") (all_reduce (sum) over (data) of f32 rank-1 blocks) for the other ranks; a rank that " +
                             "never comes is in another collective, or has ended\n";
    ASSERT_EQ(err.rfind(head, 0), 0u) << err;
    const std::size_t end = err.find(tail);
    ASSERT_NE(end, std::string::npos) << err;
    const double waited = std::stod(err.substr(head.size(), end - head.size()));
    EXPECT_GE(waited, 0.3) << err;
    EXPECT_LT(waited, 1.5) << err;
  }
  if (world_rank() == 0) {
    EXPECT_EQ(err, "");
  }
}

}  // namespace
}  // namespace tessera
