// Bad checkpoint files: each gives one clear IoError, the same on every rank, and no hang (the
// suite runs under a 20 s ctest timeout). A corrupt chunk that only the last rank reads shows
// that a rank-local failure is agreed on.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "io/checkpoint_format.h"
#include "io/hdf5_handle.h"
#include "tests/io/io_test_support.h"

namespace tessera {
namespace {

using io_testing::ArrayDef;
using io_testing::model_arrays;
using io_testing::TempDir;
using testing_support::world_rank;
using testing_support::world_size;

const std::string w1 = "params/MLP_0/DotReluDot_0/W1";

// Every array split over all ranks where it divides: the blocks of W1 [8, 16] are column
// blocks, one per rank, so only the last rank reads the last chunk.
Mesh line_mesh() { return Mesh::world(MeshShape({"data"}, {world_size()})); }

Spec last_dim_split(const ArrayDef& def, std::size_t) {
  if (def.shape.empty()) return Spec();
  std::vector<Axes> dims(def.shape.size());
  if (def.shape.back() % world_size() == 0) dims.back() = {"data"};
  return Spec(dims);
}

CheckpointState saved_state() { return io_testing::make_state(line_mesh(), model_arrays(), last_dim_split, true); }
CheckpointState target_state() { return io_testing::make_state(line_mesh(), model_arrays(), last_dim_split, false); }

// "rank R: " as agree.h prefixes the first failing rank's message when there are several ranks.
std::string from_rank(int rank) { return world_size() > 1 ? "rank " + std::to_string(rank) + ": " : ""; }

// Restores `target` from `source` on every rank and returns this rank's IoError message, after
// checking that every rank got the same one.
std::string restore_error(const std::string& source, const CheckpointState& target) {
  const std::string message = io_testing::io_error_of([&] { restore_checkpoint(source, target); });
  EXPECT_TRUE(io_testing::same_on_every_rank(message)) << message;
  return message;
}

// Saves the reference state in `dir`, lets rank 0 damage the file, then waits for it.
template <class Damage>
std::string saved_then_damaged(const TempDir& dir, Damage&& damage) {
  const std::string file = save_checkpoint(saved_state(), dir.path());
  if (world_rank() == 0) damage(file);
  MPI_Barrier(MPI_COMM_WORLD);
  return file;
}

void flip_byte(const std::string& file, std::uint64_t offset) {
  std::fstream stream(file, std::ios::in | std::ios::out | std::ios::binary);
  stream.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  stream.get(c);
  stream.seekp(static_cast<std::streamoff>(offset));
  stream.put(static_cast<char>(c ^ 0x5a));
}

// The file offset of W1's chunk that starts at (0, column).
std::uint64_t w1_chunk_address(const std::string& file, hsize_t column) {
  H5Handle handle = file_handle(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "H5Fopen", file);
  H5Handle dataset = dataset_handle(H5Dopen2(handle.get(), ("/" + w1).c_str(), H5P_DEFAULT), "H5Dopen2", file);
  const hsize_t offset[2] = {0, column};
  unsigned filter_mask = 0;
  haddr_t address = 0;
  hsize_t size = 0;
  check_h5(H5Dget_chunk_info_by_coord(dataset.get(), offset, &filter_mask, &address, &size), "H5Dget_chunk_info", file);
  return address;
}

TEST(CheckpointBadFiles, FlippedByteInTheLastRanksChunkFailsItsChecksumOnEveryRank) {
  TempDir dir("flipped");
  const hsize_t last_column = 16 - 16 / world_size();
  const std::string file =
      saved_then_damaged(dir, [&](const std::string& f) { flip_byte(f, w1_chunk_address(f, last_column) + 5); });
  const std::string message = restore_error(dir.path(), target_state());
  const std::string expected = from_rank(world_size() - 1) + "restore_checkpoint: file '" + file + "', dataset '/" +
                               w1 + "': data failed its Fletcher32 checksum (the file is corrupt): ";
  EXPECT_TRUE(message.starts_with(expected)) << message << "\nexpected prefix: " << expected;
  // verify_checkpoint (one process, every chunk) finds it too.
  if (world_rank() == 0) {
    std::string report;
    EXPECT_FALSE(verify_checkpoint(file, &report));
    EXPECT_NE(report.find("FAILED /" + w1), std::string::npos) << report;
    EXPECT_NE(report.find("ok     /params/MLP_0/DotReluDot_0/W2"), std::string::npos) << report;
  }
}

TEST(CheckpointBadFiles, TruncatedFile) {
  TempDir dir("truncated");
  const std::string file = saved_then_damaged(
      dir, [](const std::string& f) { std::filesystem::resize_file(f, std::filesystem::file_size(f) / 2); });
  const std::string message = restore_error(dir.path(), target_state());
  const std::string expected = from_rank(0) + "restore_checkpoint: file '" + file + "': H5Fopen failed: ";
  EXPECT_TRUE(message.starts_with(expected)) << message;
  EXPECT_NE(message.find("truncated file"), std::string::npos) << message;
}

TEST(CheckpointBadFiles, MissingDataset) {
  TempDir dir("missing_dataset");
  const std::string file = save_checkpoint(saved_state(), dir.path());
  CheckpointState target = target_state();
  target.arrays.push_back({"params/MLP_0/Extra_0/W", ShardedTensor::zeros(line_mesh(), Spec(), {8, 8}), {}});
  EXPECT_EQ(restore_error(dir.path(), target),
            from_rank(0) + "restore_checkpoint: file '" + file + "', dataset '/params/MLP_0/Extra_0/W': missing");
}

TEST(CheckpointBadFiles, WrongShape) {
  TempDir dir("wrong_shape");
  const std::string file = save_checkpoint(saved_state(), dir.path());
  CheckpointState target = target_state();
  target.arrays[0].value = ShardedTensor::zeros(line_mesh(), Spec(), {16, 16});
  EXPECT_EQ(restore_error(dir.path(), target), from_rank(0) + "restore_checkpoint: file '" + file + "', dataset '/" +
                                                   w1 + "': global shape is [8, 16] in the file, [16, 16] wanted");
}

TEST(CheckpointBadFiles, WrongDtype) {
  TempDir dir("wrong_dtype");
  const std::string file = save_checkpoint(saved_state(), dir.path());
  CheckpointState target = target_state();
  target.arrays[0].value = ShardedTensor::zeros(line_mesh(), Spec(), {8, 16}, DType::f64);
  EXPECT_EQ(restore_error(dir.path(), target), from_rank(0) + "restore_checkpoint: file '" + file + "', dataset '/" +
                                                   w1 + "': dtype is f32 in the file, f64 wanted");
}

TEST(CheckpointBadFiles, UnknownFormatVersion) {
  TempDir dir("version");
  const std::string file = saved_then_damaged(dir, [](const std::string& f) {
    H5Handle handle = file_handle(H5Fopen(f.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), "H5Fopen", f);
    H5Handle attribute = attribute_handle(H5Aopen(handle.get(), "format_version", H5P_DEFAULT), "H5Aopen", f);
    const std::int64_t version = 2;
    check_h5(H5Awrite(attribute.get(), H5T_NATIVE_INT64, &version), "H5Awrite", f);
  });
  EXPECT_EQ(restore_error(dir.path(), target_state()), from_rank(0) + "restore_checkpoint: file '" + file +
                                                           "': unknown format version 2 (this build reads version 1)");
}

TEST(CheckpointBadFiles, HdfFileThatIsNotACheckpoint) {
  TempDir dir("foreign");
  const std::string file = dir / "ckpt_00000001.h5";
  if (world_rank() == 0) {
    H5Handle handle = file_handle(H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "H5Fcreate", file);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(restore_error(dir.path(), target_state()),
            from_rank(0) + "restore_checkpoint: file '" + file + "': not a tessera checkpoint (no 'format' attribute)");
}

TEST(CheckpointBadFiles, FileThatIsNotHdf5) {
  TempDir dir("not_hdf5");
  const std::string file = dir / "ckpt_00000001.h5";
  if (world_rank() == 0) std::ofstream(file) << "step=1\nthis is not an HDF5 file\n";
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(restore_error(dir.path(), target_state()),
            from_rank(0) + "restore_checkpoint: file '" + file + "' is not an HDF5 file");
  EXPECT_EQ(restore_error(file, target_state()),
            from_rank(0) + "restore_checkpoint: file '" + file + "' is not an HDF5 file");
}

TEST(CheckpointBadFiles, MissingFileAndEmptyDirectory) {
  TempDir dir("missing_file");
  EXPECT_EQ(restore_error(dir / "ckpt_00000007.h5", target_state()),
            from_rank(0) + "restore_checkpoint: file '" + (dir / "ckpt_00000007.h5") + "' does not exist");
  EXPECT_EQ(restore_error(dir.path(), target_state()), from_rank(0) + "restore_checkpoint: directory '" + dir.path() +
                                                           "' holds no complete checkpoint (ckpt_<step>.h5)");
}

}  // namespace
}  // namespace tessera
