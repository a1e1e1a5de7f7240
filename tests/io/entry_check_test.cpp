// TESSERA_COLLECTIVE_CHECK (collectives/collective_check.h) at the entries of the layers above the
// collectives whose agreements are MPI's own calls: a checkpoint's save and restore, and
// shard_map. A rank at one of them while another is at a collective, or at the same save or
// restore with another directory, would otherwise hang or mismatch in those agreements; with the
// check on, every rank throws one Error naming both, and nothing is written.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "collectives/collective_check.h"
#include "collectives/collectives.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "mesh/sharded_tensor.h"
#include "nn/shard_map.h"
#include "tests/collective_check_support.h"
#include "tests/test_meshes.h"

namespace tessera {
namespace {

using testing_support::check_error;
using testing_support::CheckOn;
using testing_support::world_rank;
using testing_support::world_size;

// A fresh directory under the build's io tmp/, the same name on every rank.
std::string fresh_dir(const std::string& name) {
  const std::string dir = std::string(TESSERA_IO_TEST_TMP) + "/entry_check_" + name + "_" + std::to_string(world_size());
  if (world_rank() == 0) std::filesystem::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

CheckpointState one_array(const Mesh& mesh) {
  CheckpointState state;
  state.arrays.push_back({"w", ShardedTensor::zeros(mesh, parse_spec("P(data, None)"), {2 * mesh.size(), 3}, DType::f32, "w"), {}});
  return state;
}

const std::string kTail = "; every rank runs the same collectives in the same order with the same arguments";

TEST(EntryCheck, ASaveOnSomeRanksOnlyIsNamedAndWritesNothing) {
  const int n = world_size();
  Mesh mesh = Mesh::world(MeshShape({"data"}, {n}));
  const CheckOn on;
  const std::string dir = fresh_dir("some_ranks");
  const CheckpointState state = one_array(mesh);
  Tensor block = Tensor::zeros({2, 3}, DType::f32);
  const std::string message = check_error([&] {
    if (world_rank() == 0) {
      (void)save_checkpoint(state, dir);
    } else {
      (void)all_reduce(mesh, block, {"data"});
    }
  });
  EXPECT_EQ(message, "rank 1: TESSERA_COLLECTIVE_CHECK: collective 1 on mesh(data: " + std::to_string(n) +
                         ") differs from rank 0's: all_reduce (sum) over (data) of f32 rank-2 blocks here, "
                         "save_checkpoint into '" + dir + "' on rank 0" + kTail);
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST(EntryCheck, SavesIntoDifferentDirectoriesAreNamedAndWriteNothing) {
  const int n = world_size(), last = n - 1;
  Mesh mesh = Mesh::world(MeshShape({"data"}, {n}));
  const CheckOn on;
  const std::string dir = fresh_dir("dirs"), other = dir + "_other";
  const CheckpointState state = one_array(mesh);
  const std::string mine = world_rank() == last ? other : dir;
  const std::string message = check_error([&] { (void)save_checkpoint(state, mine); });
  EXPECT_EQ(message, "rank " + std::to_string(last) + ": TESSERA_COLLECTIVE_CHECK: collective 1 on mesh(data: " +
                         std::to_string(n) + ") differs from rank 0's: save_checkpoint into '" + other +
                         "' here, save_checkpoint into '" + dir + "' on rank 0" + kTail);
  EXPECT_FALSE(std::filesystem::exists(dir));
  EXPECT_FALSE(std::filesystem::exists(other));
  // In step again: a save and a restore from one directory pass the check, and round-trip.
  const std::string path = save_checkpoint(state, dir);
  CheckpointState target = one_array(mesh);
  restore_checkpoint_into(dir, target);
  EXPECT_TRUE(target.arrays[0].tensor().local().bit_equal(state.arrays[0].tensor().local()));
  // Restores from different places are named as well, before any rank reads.
  const std::string from = world_rank() == last ? path : dir;
  const std::string restore_message = check_error([&] { restore_checkpoint_into(from, target); });
  EXPECT_EQ(restore_message, "rank " + std::to_string(last) + ": TESSERA_COLLECTIVE_CHECK: collective 4 on mesh(data: " +
                                 std::to_string(n) + ") differs from rank 0's: restore_checkpoint from '" + path +
                                 "' here, restore_checkpoint from '" + dir + "' on rank 0" + kTail);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::filesystem::remove_all(dir);
}

TEST(EntryCheck, AShardMapOnSomeRanksOnlyIsNamed) {
  const int n = world_size();
  Mesh mesh = Mesh::world(MeshShape({"data"}, {n}));
  const CheckOn on;
  const nn::Var x(ShardedTensor::zeros(mesh, parse_spec("P(data)"), {2 * n}, DType::f32, "x"));
  Tensor block = Tensor::zeros({2}, DType::f32);
  // A body with no collective of its own: without the check at shard_map's start, rank 0 would
  // wait in the agreement on its results, and the others in their all-reduce.
  const std::string message = check_error([&] {
    if (world_rank() == 0) {
      (void)nn::shard_map(mesh, [](const std::vector<nn::Var>& blocks) { return blocks; }, {parse_spec("P(data)")},
                          {parse_spec("P(data)")}, {x});
    } else {
      (void)all_reduce(mesh, block, {"data"});
    }
  });
  EXPECT_EQ(message, "rank 1: TESSERA_COLLECTIVE_CHECK: collective 1 on mesh(data: " + std::to_string(n) +
                         ") differs from rank 0's: all_reduce (sum) over (data) of f32 rank-1 blocks here, shard_map with "
                         "in_specs (P(data)) and out_specs (P(data)) on rank 0" + kTail);
}

}  // namespace
}  // namespace tessera
