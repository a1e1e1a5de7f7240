// Bad checkpoint files: each gives one clear IoError, the same on every rank, and no hang (the
// suite runs under a 20 s ctest timeout). A corrupt chunk that only the last rank reads shows
// that a rank-local failure is agreed on.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <zlib.h>

#include <csignal>

#include <filesystem>
#include <fstream>

#include "io/checkpoint_dir.h"
#include "io/checkpoint_format.h"
#include "io/hdf5_handle.h"
#include "io/train_state_io.h"
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

// target_state() with one more array, replicated zeros of `shape` at `path`: one the file holds
// in a way the reader refuses, or does not hold as wanted.
CheckpointState target_with(const std::string& path, const Shape& shape) {
  CheckpointState target = target_state();
  target.arrays.push_back({path, ShardedTensor::zeros(line_mesh(), Spec(), shape), {}});
  return target;
}

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

// The file offset of the chunk of dataset `path` that starts at (row, column).
std::uint64_t chunk_address(const std::string& file, const std::string& path, hsize_t column, hsize_t row = 0) {
  H5Handle handle = file_handle(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "H5Fopen", file);
  H5Handle dataset = dataset_handle(H5Dopen2(handle.get(), ("/" + path).c_str(), H5P_DEFAULT), "H5Dopen2", file);
  const hsize_t offset[2] = {row, column};
  unsigned filter_mask = 0;
  haddr_t address = 0;
  hsize_t size = 0;
  check_h5(H5Dget_chunk_info_by_coord(dataset.get(), offset, &filter_mask, &address, &size), "H5Dget_chunk_info", file);
  return address;
}

// The file offset of W1's chunk that starts at (row, column).
std::uint64_t w1_chunk_address(const std::string& file, hsize_t column, hsize_t row = 0) {
  return chunk_address(file, w1, column, row);
}

namespace format = checkpoint_format;

// Opens `file` for writing (one process, no MPI-IO) and hands its root to `edit`.
template <class Edit>
void edit_file(const std::string& file, Edit&& edit) {
  H5Handle handle = file_handle(H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), "H5Fopen", file);
  edit(handle.get());
  handle.close(file);
}

// Saves the reference state, lets rank 0 edit the file with the HDF5 API, then waits for it.
template <class Edit>
std::string saved_then_edited(const TempDir& dir, Edit&& edit) {
  return saved_then_damaged(dir, [&](const std::string& f) { edit_file(f, edit); });
}

// read_checkpoint_info's IoError message on every rank (each reads the file on its own), and
// verify_checkpoint's report carries the same message.
std::string info_error(const std::string& file) {
  const std::string message = io_testing::io_error_of([&] { read_checkpoint_info(file); });
  std::string report;
  EXPECT_FALSE(verify_checkpoint(file, &report));
  EXPECT_NE(report.find("FAILED: " + message), std::string::npos) << report;
  return message;
}

// Adds dataset `path` with the dataset attributes a reader needs (spec, logical names, dtype),
// the creation properties `create` and file type `type`, writing no data.
// `unlimited`: every dimension may grow (so that a chunk may be larger than the dataset).
void add_dataset(hid_t root, const std::string& path, const std::vector<hsize_t>& dims, hid_t create,
                 hid_t type = H5T_IEEE_F32LE, const std::string& dtype = "f32", bool unlimited = false) {
  const std::string context = "test dataset " + path;
  const std::vector<hsize_t> max_dims(dims.size(), H5S_UNLIMITED);
  H5Handle space = dataspace_handle(
      H5Screate_simple(static_cast<int>(dims.size()), dims.data(), unlimited ? max_dims.data() : nullptr),
      "H5Screate_simple", context);
  H5Handle dataset = dataset_handle(
      H5Dcreate2(root, path.c_str(), type, space.get(), H5P_DEFAULT, create, H5P_DEFAULT), "H5Dcreate2", context);
  format::write_string_attribute(dataset.get(), format::attr_spec, "P()", context);
  format::write_string_array_attribute(dataset.get(), format::attr_logical_names, {}, context);
  format::write_string_attribute(dataset.get(), format::attr_dtype, dtype, context);
}

H5Handle dataset_creation() {
  return plist_handle(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", "test dataset creation");
}

std::string file_bytes(const std::string& file) { return std::to_string(std::filesystem::file_size(file)); }

// The ckpt_tool list SIGSEGV of issue 11: two axis names, no sizes.
TEST(CheckpointBadFiles, EmptyMeshAxisSizesWhileNamesAreNot) {
  TempDir dir("empty_mesh_sizes");
  const std::string file = saved_then_edited(dir, [](hid_t root) {
    H5Adelete(root, format::attr_mesh_sizes);
    format::write_int64_array_attribute(root, format::attr_mesh_sizes, {}, "test");
  });
  EXPECT_EQ(info_error(file),
            "file '" + file + "': attribute 'mesh_axis_sizes' has 0 values but 'mesh_axis_names' has 1");
}

TEST(CheckpointBadFiles, MeshAxisSizeZero) {
  TempDir dir("mesh_size_zero");
  const std::string file = saved_then_edited(dir, [](hid_t root) {
    H5Adelete(root, format::attr_mesh_sizes);
    format::write_int64_array_attribute(root, format::attr_mesh_sizes, {0}, "test");
  });
  EXPECT_EQ(info_error(file),
            "file '" + file + "': attribute 'mesh_axis_sizes' gives axis 'data' size 0; a mesh axis size is 1..2147483647");
}

// The other bounds of the mesh's attributes: an axis without a name, and an axis size past what a
// mesh (an MPI communicator of int ranks) can hold.
TEST(CheckpointBadFiles, MeshAxisWithoutANameOrTooLarge) {
  TempDir dir("mesh_axis_bounds");
  std::string file = saved_then_edited(dir, [](hid_t root) {
    H5Adelete(root, format::attr_mesh_names);
    format::write_string_array_attribute(root, format::attr_mesh_names, {""}, "test");
  });
  EXPECT_EQ(info_error(file), "file '" + file + "': attribute 'mesh_axis_names' has an empty name at index 0");
  file = saved_then_edited(dir, [](hid_t root) {
    H5Adelete(root, format::attr_mesh_sizes);
    format::write_int64_array_attribute(root, format::attr_mesh_sizes, {std::int64_t{1} << 31}, "test");
  });
  EXPECT_EQ(info_error(file), "file '" + file +
                                  "': attribute 'mesh_axis_sizes' gives axis 'data' size 2147483648; a mesh axis size "
                                  "is 1..2147483647");
}

TEST(CheckpointBadFiles, MeshAxisSizesOfAnotherType) {
  TempDir dir("mesh_sizes_type");
  const std::string file = saved_then_edited(dir, [](hid_t root) {
    H5Adelete(root, format::attr_mesh_sizes);
    format::write_string_array_attribute(root, format::attr_mesh_sizes, {"8"}, "test");
  });
  EXPECT_EQ(info_error(file), "file '" + file + "': attribute 'mesh_axis_sizes' is not a 64-bit integer array");
}

TEST(CheckpointBadFiles, NegativeStep) {
  TempDir dir("negative_step");
  const std::string file =
      saved_then_edited(dir, [](hid_t root) { format::write_int64_attribute(root, format::attr_step, -3, "test"); });
  EXPECT_EQ(info_error(file), "file '" + file + "': attribute 'step' is -3; a step is >= 0");
  EXPECT_EQ(restore_error(file, target_state()),
            from_rank(0) + "restore_checkpoint: file '" + file + "': attribute 'step' is -3; a step is >= 0");
}

// A root attribute that is not there is named as missing (not as HDF5's failed open of it), by
// the restore and by read_checkpoint_info alike.
TEST(CheckpointBadFiles, MissingRootAttribute) {
  TempDir dir("missing_seed");
  const std::string file =
      saved_then_edited(dir, [](hid_t root) { check_h5(H5Adelete(root, format::attr_seed), "H5Adelete", "test"); });
  EXPECT_EQ(info_error(file), "file '" + file + "': attribute 'seed' is missing");
  EXPECT_EQ(restore_error(file, target_state()),
            from_rank(0) + "restore_checkpoint: file '" + file + "': attribute 'seed' is missing");
}

TEST(CheckpointBadFiles, StepThatIsAString) {
  TempDir dir("string_step");
  const std::string file = saved_then_edited(dir, [](hid_t root) {
    H5Adelete(root, format::attr_step);
    format::write_string_attribute(root, format::attr_step, "7", "test");
  });
  EXPECT_EQ(info_error(file), "file '" + file + "': attribute 'step' is not a 64-bit integer");
  EXPECT_EQ(restore_error(file, target_state()),
            from_rank(0) + "restore_checkpoint: file '" + file + "': attribute 'step' is not a 64-bit integer");
}

// A step of another integer width (32 bits, as a writer of int32 stores it) is refused like one
// stored as a string: the format's step is a 64-bit integer.
TEST(CheckpointBadFiles, StepOf32Bits) {
  TempDir dir("step_32_bits");
  const std::string file = saved_then_edited(dir, [](hid_t root) {
    check_h5(H5Adelete(root, format::attr_step), "H5Adelete", "test");
    H5Handle space = dataspace_handle(H5Screate(H5S_SCALAR), "H5Screate", "test");
    H5Handle attribute = attribute_handle(
        H5Acreate2(root, format::attr_step, H5T_STD_I32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), "H5Acreate2", "test");
    const std::int32_t step = static_cast<std::int32_t>(io_testing::reference_step);
    check_h5(H5Awrite(attribute.get(), H5T_NATIVE_INT32, &step), "H5Awrite", "test");
  });
  EXPECT_EQ(info_error(file), "file '" + file + "': attribute 'step' is not a 64-bit integer");
  EXPECT_EQ(restore_error(file, target_state()),
            from_rank(0) + "restore_checkpoint: file '" + file + "': attribute 'step' is not a 64-bit integer");
}

// Fixed-length ASCII strings (h5py's for numpy bytes) read as the UTF-8 ones tessera writes:
// HDF5 converts no character set to another, and the read failed with its conversion stack.
TEST(CheckpointBadFiles, AsciiStringAttributesRead) {
  TempDir dir("ascii_strings");
  const std::string file = saved_then_edited(dir, [](hid_t root) {
    const std::string value(format::format_name);
    H5Adelete(root, format::attr_format);
    H5Handle type = type_handle(H5Tcopy(H5T_C_S1), "H5Tcopy", "test");
    check_h5(H5Tset_size(type.get(), value.size()), "H5Tset_size", "test");
    check_h5(H5Tset_cset(type.get(), H5T_CSET_ASCII), "H5Tset_cset", "test");
    H5Handle space = dataspace_handle(H5Screate(H5S_SCALAR), "H5Screate", "test");
    H5Handle attribute = attribute_handle(
        H5Acreate2(root, format::attr_format, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), "H5Acreate2", "test");
    check_h5(H5Awrite(attribute.get(), type.get(), value.data()), "H5Awrite", "test");
  });
  EXPECT_EQ(read_checkpoint_info(file).format, format::format_name);
  io_testing::expect_state_equals_reference(restore_checkpoint(file, target_state()), model_arrays(), "ascii");
}

TEST(CheckpointBadFiles, SoftLink) {
  TempDir dir("soft_link");
  const std::string file = saved_then_edited(dir, [](hid_t root) {
    check_h5(H5Lcreate_soft(("/" + w1).c_str(), root, "/alias", H5P_DEFAULT, H5P_DEFAULT), "H5Lcreate_soft", "test");
  });
  EXPECT_EQ(info_error(file), "file '" + file + "': '/alias' is a soft link; a checkpoint holds no links");
  EXPECT_EQ(restore_error(file, target_state()), from_rank(0) + "restore_checkpoint: file '" + file +
                                                     "': '/alias' is a soft link; a checkpoint holds no links");
}

// A hard link from inside a group back to the group: a cycle, which HDF5's own recursive walk
// (H5Lvisit) followed until the stack overflowed (found by the checkpoint fuzz target).
TEST(CheckpointBadFiles, HardLinkBackToAGroup) {
  TempDir dir("group_cycle");
  const std::string file = saved_then_edited(dir, [](hid_t root) {
    check_h5(H5Lcreate_hard(root, "/params", root, "/params/loop", H5P_DEFAULT, H5P_DEFAULT), "H5Lcreate_hard", "test");
  });
  EXPECT_EQ(info_error(file),
            "file '" + file + "': '/params/loop' links to a group met before; a checkpoint's groups form a tree");
  EXPECT_EQ(restore_error(file, target_state()),
            from_rank(0) + "restore_checkpoint: file '" + file +
                "': '/params/loop' links to a group met before; a checkpoint's groups form a tree");
}

TEST(CheckpointBadFiles, ExternalLink) {
  TempDir dir("external_link");
  const std::string file = saved_then_edited(dir, [](hid_t root) {
    check_h5(H5Lcreate_external("elsewhere.h5", "/data", root, "/params/far", H5P_DEFAULT, H5P_DEFAULT),
             "H5Lcreate_external", "test");
  });
  EXPECT_EQ(info_error(file), "file '" + file + "': '/params/far' is an external link; a checkpoint holds no links");
  EXPECT_EQ(restore_error(file, target_state()),
            from_rank(0) + "restore_checkpoint: file '" + file +
                "': '/params/far' is an external link; a checkpoint holds no links");
}

TEST(CheckpointBadFiles, ExternalStorage) {
  TempDir dir("external_storage");
  const std::string file = saved_then_edited(dir, [](hid_t root) {
    H5Handle create = dataset_creation();
    check_h5(H5Pset_external(create.get(), "raw.bin", 0, 64), "H5Pset_external", "test");
    add_dataset(root, "/params/outside", {4, 4}, create.get());
  });
  const std::string message = "file '" + file +
                              "', dataset '/params/outside': is stored in external files; a checkpoint holds its "
                              "data itself";
  EXPECT_EQ(info_error(file), message);
  EXPECT_EQ(restore_error(file, target_with("params/outside", {4, 4})),
            from_rank(0) + "restore_checkpoint: " + message);
}

// A chunk of 1 GiB (in a dataset of 16 elements) in a file of a few KiB: refused before verify
// allocates a buffer for it.
TEST(CheckpointBadFiles, ChunkLargerThanTheFile) {
  TempDir dir("huge_chunk");
  const std::string file = saved_then_edited(dir, [](hid_t root) {
    H5Handle create = dataset_creation();
    const hsize_t chunk[2] = {16384, 16384};
    check_h5(H5Pset_chunk(create.get(), 2, chunk), "H5Pset_chunk", "test");
    add_dataset(root, "/params/huge", {4, 4}, create.get(), H5T_IEEE_F32LE, "f32", true);
  });
  EXPECT_EQ(info_error(file), "file '" + file + "', dataset '/params/huge': chunk [16384, 16384] holds more bytes " +
                                  "than the file's " + file_bytes(file));
}

// A chunked dataset of 4 TiB in chunks of 4 bytes (never written): refused before verify walks
// through its 2^40 chunks.
TEST(CheckpointBadFiles, ChunkedDatasetLargerThanTheFile) {
  TempDir dir("huge_chunked");
  const std::string file = saved_then_edited(dir, [](hid_t root) {
    H5Handle create = dataset_creation();
    const hsize_t chunk[1] = {1};
    check_h5(H5Pset_chunk(create.get(), 1, chunk), "H5Pset_chunk", "test");
    add_dataset(root, "/params/sparse", {hsize_t{1} << 40}, create.get());
  });
  EXPECT_EQ(info_error(file), "file '" + file + "', dataset '/params/sparse': shape [1099511627776] holds more " +
                                  "bytes than the file's " + file_bytes(file));
}

// An unchunked dataset of 4 TiB (never written): refused before verify reads it whole.
TEST(CheckpointBadFiles, ContiguousDatasetLargerThanTheFile) {
  TempDir dir("huge_contiguous");
  const std::string file = saved_then_edited(dir, [](hid_t root) {
    H5Handle create = dataset_creation();
    add_dataset(root, "/params/vast", {hsize_t{1} << 40}, create.get());
  });
  EXPECT_EQ(info_error(file), "file '" + file + "', dataset '/params/vast': shape [1099511627776] holds more " +
                                  "bytes than the file's " + file_bytes(file));
}

TEST(CheckpointBadFiles, DtypeAttributeThatDisagreesWithTheData) {
  TempDir dir("dtype_liar");
  const std::string file = saved_then_edited(dir, [](hid_t root) {
    H5Handle create = dataset_creation();
    add_dataset(root, "/params/liar", {4}, create.get(), H5T_STD_I32LE, "f32");
  });
  EXPECT_EQ(info_error(file),
            "file '" + file + "', dataset '/params/liar': attribute 'dtype' says f32 but the data has another type");
}

// The --resume row of issue 11: a count of -5 would make Adam's bias correction divide by zero.
TEST(CheckpointBadFiles, NegativeOptimizerCount) {
  CheckpointState restored;
  Tensor count(Shape{}, DType::i32);
  count.data<std::int32_t>()[0] = -5;
  restored.arrays.push_back(
      {"opt_state/count", ShardedTensor(line_mesh(), Spec(), Shape{}, std::move(count), "opt_state/count"), {}});
  EXPECT_EQ(io_testing::io_error_of([&] { from_checkpoint_state(restored, nn::TrainState{}); }),
            "train state checkpoint: dataset '/opt_state/count' holds -5; an optimizer step count is >= 0");
}

// The bound itself: a count of -1 is refused as -5 is; a count of 0 (a state saved before its
// first step) is restored.
TEST(CheckpointBadFiles, OptimizerCountOfZeroIsTakenAndMinusOneRefused) {
  for (const std::int32_t value : {-1, 0}) {
    CheckpointState restored;
    Tensor count(Shape{}, DType::i32);
    count.data<std::int32_t>()[0] = value;
    restored.arrays.push_back(
        {"opt_state/count", ShardedTensor(line_mesh(), Spec(), Shape{}, std::move(count), "opt_state/count"), {}});
    std::int32_t taken = -2;
    const std::string error =
        io_testing::io_error_of([&] { taken = from_checkpoint_state(restored, nn::TrainState{}).opt_state.count; });
    if (value < 0) {
      EXPECT_EQ(error, "train state checkpoint: dataset '/opt_state/count' holds -1; an optimizer step count is >= 0");
    } else {
      EXPECT_EQ(error, "");
      EXPECT_EQ(taken, 0);
    }
  }
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

// The replicas of a block on one node split its checks (io/restore.cpp): with W1 [8, 16]
// P(None, model) on data x model, in chunks of two rows (four per block), the replica at data 0
// checks the block's chunks 0 and 2, the one at data 1 chunks 1 and 3. A flipped byte is found by
// the replica that checks its chunk alone, and every rank throws its message.
TEST(CheckpointBadFiles, ReplicasOnOneNodeSplitTheChecksOfTheirBlock) {
  const int data = world_size() % 2 == 0 ? 2 : 1;
  const int model = world_size() / data;
  const Mesh mesh = Mesh::world(MeshShape({"data", "model"}, {data, model}));
  const std::vector<ArrayDef> defs = {model_arrays()[0]};  // W1 [8, 16]
  ASSERT_EQ(defs[0].path, w1);
  const auto spec = [](const ArrayDef&, std::size_t) { return parse_spec("P(None, model)"); };
  SaveOptions options;
  options.max_chunk_bytes = 2 * (16 / model) * 4;
  for (int position = 0; position < 4; ++position) {
    TempDir dir("replica_checks_" + std::to_string(position));
    const std::string file = save_checkpoint(io_testing::make_state(mesh, defs, spec, true), dir.path(), options);
    if (world_rank() == 0) flip_byte(file, w1_chunk_address(file, 0, 2 * position) + 5);
    MPI_Barrier(MPI_COMM_WORLD);
    const std::string message = restore_error(dir.path(), io_testing::make_state(mesh, defs, spec, false));
    const int checker = (position % data) * model;  // coordinates (position % data, 0)
    const std::string expected = from_rank(checker) + "restore_checkpoint: file '" + file + "', dataset '/" + w1 +
                                 "': data failed its Fletcher32 checksum (the file is corrupt): chunk at (" +
                                 std::to_string(2 * position) + ", 0) stores ";
    EXPECT_TRUE(message.starts_with(expected)) << message << "\nexpected prefix: " << expected;
  }
}

// Where every block is one chunk, the replicas take the arrays' checks in turn, from the array's
// place in the state: with W1 and the second layer's W1 ([8, 16] P(None, model) on data x model,
// one chunk per block), the replica at data 0 checks the first array's chunks and the one at
// data 1 the second's, so a flipped byte in either is reported by that replica alone.
TEST(CheckpointBadFiles, ReplicasTakeTheChecksOfOneChunkBlocksInTurn) {
  const int data = world_size() % 2 == 0 ? 2 : 1;
  const int model = world_size() / data;
  const Mesh mesh = Mesh::world(MeshShape({"data", "model"}, {data, model}));
  const std::vector<ArrayDef> defs = {model_arrays()[0], model_arrays()[2]};  // two W1 [8, 16]
  ASSERT_EQ(defs[0].path, w1);
  const auto spec = [](const ArrayDef&, std::size_t) { return parse_spec("P(None, model)"); };
  for (std::size_t array = 0; array < defs.size(); ++array) {
    TempDir dir("replica_turns_" + std::to_string(array));
    const std::string file = save_checkpoint(io_testing::make_state(mesh, defs, spec, true), dir.path());
    if (world_rank() == 0) flip_byte(file, chunk_address(file, defs[array].path, 0) + 5);
    MPI_Barrier(MPI_COMM_WORLD);
    const std::string message = restore_error(dir.path(), io_testing::make_state(mesh, defs, spec, false));
    const int checker = static_cast<int>(array % data) * model;  // coordinates (array % data, 0)
    const std::string expected = from_rank(checker) + "restore_checkpoint: file '" + file + "', dataset '/" +
                                 defs[array].path +
                                 "': data failed its Fletcher32 checksum (the file is corrupt): chunk at (0, 0) stores ";
    EXPECT_TRUE(message.starts_with(expected)) << message << "\nexpected prefix: " << expected;
  }
}

// A chunk whose bytes never reached the disk reads as zeros, and so does its checksum trailer:
// Fletcher32 of zeros is 0, so HDF5's filter passes it. The digest written after the data
// catches it, on the ranks that read the chunk, agreed on by all.
void zero_bytes(const std::string& file, std::uint64_t offset, std::uint64_t bytes) {
  std::fstream stream(file, std::ios::in | std::ios::out | std::ios::binary);
  stream.seekp(static_cast<std::streamoff>(offset));
  const std::string zeros(bytes, '\0');
  stream.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
}

// verify_checkpoint (rank 0) fails `file` and reports the never-written chunk of dataset `path`
// at (0, column), as the restore names it.
void expect_verify_finds_hole(const std::string& file, const std::string& path, hsize_t column) {
  if (world_rank() != 0) return;
  std::string report;
  EXPECT_FALSE(verify_checkpoint(file, &report));
  EXPECT_NE(report.find("FAILED /" + path + ": file '" + file + "', dataset '/" + path + "': chunk at (0, " +
                        std::to_string(column) + ") sums to 0 but the checkpoint's digest says "),
            std::string::npos)
      << report;
}

TEST(CheckpointBadFiles, ChunkNeverWrittenIsCaughtByTheDigest) {
  TempDir dir("hole");
  const hsize_t last_column = 16 - 16 / world_size();
  // W1 [8, 16] f32, one chunk per rank: 8 x (16 / ranks) x 4 bytes, then the 4-byte checksum.
  const std::uint64_t chunk_bytes = 8 * (16 / world_size()) * 4;
  const std::string file = saved_then_damaged(
      dir, [&](const std::string& f) { zero_bytes(f, w1_chunk_address(f, last_column), chunk_bytes + 4); });
  const std::string message = restore_error(dir.path(), target_state());
  const std::string expected = from_rank(world_size() - 1) + "restore_checkpoint: file '" + file + "', dataset '/" +
                               w1 + "': chunk at (0, " + std::to_string(last_column) +
                               ") sums to 0 but the checkpoint's digest says ";
  EXPECT_TRUE(message.starts_with(expected)) << message << "\nexpected prefix: " << expected;
  EXPECT_TRUE(message.ends_with(" (its data was never written or was replaced; the file is incomplete)")) << message;
  expect_verify_finds_hole(file, w1, last_column);
}

// The same for an edge chunk: with 11 columns over the ranks (blocks of ceil(11 / ranks)), the
// last chunk reaches past the dataset's end (on 1 rank it is the whole array). Its digest entry sums
// the whole chunk, the part past the end zero, and both the restore and verify_checkpoint check it.
TEST(CheckpointBadFiles, EdgeChunkNeverWrittenIsCaughtByTheDigest) {
  TempDir dir("edge_hole");
  const std::string path = "params/uneven";
  const std::vector<ArrayDef> defs = {{path, {8, 11}, DType::f32, {}}};
  const auto spec = [](const ArrayDef&, std::size_t) { return parse_spec("P(None, data)"); };
  const int ranks = world_size();
  const hsize_t chunk_columns = static_cast<hsize_t>((11 + ranks - 1) / ranks);
  const hsize_t last_column = (11 + chunk_columns - 1) / chunk_columns * chunk_columns - chunk_columns;
  if (ranks > 1) {
    ASSERT_LT(11 - last_column, chunk_columns);  // an edge chunk
  }
  const std::string file = save_checkpoint(io_testing::make_state(line_mesh(), defs, spec, true), dir.path());
  if (world_rank() == 0) zero_bytes(file, chunk_address(file, path, last_column), 8 * chunk_columns * 4 + 4);
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string message = restore_error(dir.path(), io_testing::make_state(line_mesh(), defs, spec, false));
  const std::string expected = from_rank(static_cast<int>(last_column / chunk_columns)) +
                               "restore_checkpoint: file '" + file + "', dataset '/" + path + "': chunk at (0, " +
                               std::to_string(last_column) + ") sums to 0 but the checkpoint's digest says ";
  EXPECT_TRUE(message.starts_with(expected)) << message << "\nexpected prefix: " << expected;
  expect_verify_finds_hole(file, path, last_column);
}

// A checkpoint that fails its integrity checks (a chunk whose bytes do not match its checksum, a
// chunk never written) ends as an IntegrityError on every rank, exit code 3 in the programs; a file
// that is sound but not what the restore wants stays a plain IoError, exit code 2. The class is
// found again from the agreed message's phrase (io/io_errors.h), so each phrase is checked here.
TEST(CheckpointBadFiles, IntegrityFailuresAreIntegrityErrorsOnEveryRank) {
  const auto error_class = [](auto&& restore) -> std::string {
    try {
      restore();
    } catch (const IntegrityError&) {
      return "IntegrityError";
    } catch (const IoError&) {
      return "IoError";
    }
    return "no error";
  };
  const hsize_t last_column = 16 - 16 / world_size();
  const std::uint64_t chunk_bytes = 8 * (16 / world_size()) * 4;
  {
    TempDir dir("integrity_flipped");
    saved_then_damaged(dir, [&](const std::string& f) { flip_byte(f, w1_chunk_address(f, last_column) + 5); });
    const std::string got = error_class([&] { restore_checkpoint(dir.path(), target_state()); });
    EXPECT_EQ(got, "IntegrityError") << "a chunk that fails its Fletcher32 checksum";
    EXPECT_TRUE(io_testing::same_on_every_rank(got)) << got;
  }
  {
    TempDir dir("integrity_hole");
    saved_then_damaged(
        dir, [&](const std::string& f) { zero_bytes(f, w1_chunk_address(f, last_column), chunk_bytes + 4); });
    const std::string got = error_class([&] { restore_checkpoint(dir.path(), target_state()); });
    EXPECT_EQ(got, "IntegrityError") << "a chunk that was never written (caught by the digest)";
    EXPECT_TRUE(io_testing::same_on_every_rank(got)) << got;
  }
  {
    TempDir dir("integrity_sound");
    save_checkpoint(saved_state(), dir.path());
    const std::string got =
        error_class([&] { restore_checkpoint(dir.path(), target_with("params/MLP_0/Extra_0/W", {8, 8})); });
    EXPECT_EQ(got, "IoError") << "a dataset the file does not hold";
    EXPECT_TRUE(io_testing::same_on_every_rank(got)) << got;
  }
}

// A version 2 file without a dataset's digest is refused, naming the attribute.
TEST(CheckpointBadFiles, MissingChunkDigest) {
  TempDir dir("no_digest");
  const std::string file = saved_then_edited(dir, [](hid_t root) {
    check_h5(H5Adelete_by_name(root, ("/" + w1).c_str(), format::attr_chunk_digest, H5P_DEFAULT), "H5Adelete", "test");
  });
  const std::string message = restore_error(dir.path(), target_state());
  EXPECT_NE(message.find("restore_checkpoint: file '" + file + "', dataset '/" + w1 +
                         "': has no attribute 'chunk_fletcher32' (a version 2 checkpoint carries the checksum of "
                         "every chunk)"),
            std::string::npos)
      << message;
}

// A digest of the wrong length is refused before it is indexed.
TEST(CheckpointBadFiles, ChunkDigestOfTheWrongLength) {
  TempDir dir("short_digest");
  const std::string file = saved_then_edited(dir, [](hid_t root) {
    H5Handle dataset = dataset_handle(H5Dopen2(root, ("/" + w1).c_str(), H5P_DEFAULT), "H5Dopen2", "test");
    check_h5(H5Adelete(dataset.get(), format::attr_chunk_digest), "H5Adelete", "test");
    format::write_int64_array_attribute(dataset.get(), format::attr_chunk_digest, {1, 2, 3, 4, 5, 6, 7, 8, 9},
                                        "test");
  });
  const std::string message = restore_error(dir.path(), target_state());
  EXPECT_NE(message.find("dataset '/" + w1 + "': attribute 'chunk_fletcher32' has 9 values for " +
                         std::to_string(world_size()) + " chunks"),
            std::string::npos)
      << message;
}

// A digest value outside 0 .. 2^32 - 1 is refused before it is used: cut to its low 32 bits, the
// right checksum plus 2^32 would pass as the right checksum.
TEST(CheckpointBadFiles, ChunkDigestValueOutsideTheChecksumRange) {
  TempDir dir("digest_range");
  const std::string file = saved_then_edited(dir, [](hid_t root) {
    H5Handle dataset = dataset_handle(H5Dopen2(root, ("/" + w1).c_str(), H5P_DEFAULT), "H5Dopen2", "test");
    std::vector<std::int64_t> digest =
        format::read_int64_array_attribute(dataset.get(), format::attr_chunk_digest, "test");
    digest[0] += std::int64_t{1} << 32;
    check_h5(H5Adelete(dataset.get(), format::attr_chunk_digest), "H5Adelete", "test");
    format::write_int64_array_attribute(dataset.get(), format::attr_chunk_digest, digest, "test");
  });
  const std::string message = restore_error(dir.path(), target_state());
  const std::string expected =
      "restore_checkpoint: file '" + file + "', dataset '/" + w1 + "': attribute 'chunk_fletcher32' value 0 is ";
  EXPECT_TRUE(message.starts_with(from_rank(0) + expected)) << message;
  EXPECT_TRUE(message.ends_with(", not a 32-bit checksum")) << message;
  if (world_rank() == 0) {
    std::string report;
    EXPECT_FALSE(verify_checkpoint(file, &report));
    EXPECT_NE(report.find("FAILED /" + w1 + ": file '" + file + "', dataset '/" + w1 +
                          "': attribute 'chunk_fletcher32' value 0 is "),
              std::string::npos)
        << report;
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
  EXPECT_EQ(restore_error(dir.path(), target_with("params/MLP_0/Extra_0/W", {8, 8})),
            from_rank(0) + "restore_checkpoint: file '" + file + "', dataset '/params/MLP_0/Extra_0/W': missing");
}

// A dataset missing from a group that exists, and a path that leads to a group.
TEST(CheckpointBadFiles, MissingLeafAndGroupPath) {
  TempDir dir("missing_leaf");
  const std::string file = save_checkpoint(saved_state(), dir.path());
  EXPECT_EQ(restore_error(dir.path(), target_with("params/MLP_0/DotReluDot_0/W9", {8, 8})),
            from_rank(0) + "restore_checkpoint: file '" + file + "', dataset '/params/MLP_0/DotReluDot_0/W9': missing");
  EXPECT_EQ(restore_error(dir.path(), target_with("params/MLP_0/DotReluDot_0", {8, 8})),
            from_rank(0) + "restore_checkpoint: file '" + file +
                "', dataset '/params/MLP_0/DotReluDot_0': is not a dataset");
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

// Data of another type under a dtype attribute that names the wanted one: the restore tells the
// data's type (before: "dtype is f32 in the file, f32 wanted").
TEST(CheckpointBadFiles, DtypeAttributeThatNamesTheWantedTypeOverOtherData) {
  TempDir dir("dtype_liar_restore");
  const std::string file = saved_then_edited(dir, [](hid_t root) {
    H5Ldelete(root, ("/" + w1).c_str(), H5P_DEFAULT);
    H5Handle create = dataset_creation();
    add_dataset(root, "/" + w1, {8, 16}, create.get(), H5T_IEEE_F64LE, "f32");
  });
  EXPECT_EQ(restore_error(dir.path(), target_state()),
            from_rank(0) + "restore_checkpoint: file '" + file + "', dataset '/" + w1 +
                "': the data are 64-bit floats, though its dtype attribute says f32; f32 wanted");
}

// bf16 is stored as its uint16 bits, and only the dtype attribute tells them from integers: a
// uint16 dataset without it, or whose attribute names another dtype, is refused for a bf16 target.
TEST(CheckpointBadFiles, Uint16DataWithoutTheBf16DtypeAttribute) {
  const std::string bf16 = "params/MLP_0/Embed_bf16";
  for (const bool removed : {true, false}) {
    TempDir dir(removed ? "bf16_without_dtype" : "bf16_dtype_u16");
    const std::string file = saved_then_edited(dir, [&](hid_t root) {
      H5Handle dataset = dataset_handle(H5Dopen2(root, ("/" + bf16).c_str(), H5P_DEFAULT), "H5Dopen2", "test");
      check_h5(H5Adelete(dataset.get(), format::attr_dtype), "H5Adelete", "test");
      if (!removed) format::write_string_attribute(dataset.get(), format::attr_dtype, "u16", "test");
    });
    EXPECT_EQ(restore_error(dir.path(), target_state()),
              from_rank(0) + "restore_checkpoint: file '" + file + "', dataset '/" + bf16 + "': dtype is " +
                  (removed ? "u16 (no dtype attribute)" : "u16") + " in the file, bf16 wanted");
  }
}

// Replaces W1 [8, 16] by a dataset of one chunk whose creation properties `filters` completes
// (each filter in pipeline order); returns it open, its chunk not written.
template <class Filters>
H5Handle replace_w1_with_one_chunk(hid_t root, Filters&& filters) {
  H5Ldelete(root, ("/" + w1).c_str(), H5P_DEFAULT);
  H5Handle create = dataset_creation();
  const hsize_t chunk[2] = {8, 16};
  check_h5(H5Pset_chunk(create.get(), 2, chunk), "H5Pset_chunk", "test");
  filters(create.get());
  add_dataset(root, "/" + w1, {8, 16}, create.get());
  return dataset_handle(H5Dopen2(root, ("/" + w1).c_str(), H5P_DEFAULT), "H5Dopen2", "test");
}

// The restore from `dir` fails with `expected` on every rank, and verify_checkpoint reports it.
void expect_restore_and_verify_refuse(const TempDir& dir, const std::string& file, const std::string& expected) {
  EXPECT_EQ(restore_error(dir.path(), target_state()), from_rank(0) + "restore_checkpoint: " + expected);
  std::string report;
  EXPECT_FALSE(verify_checkpoint(file, &report));
  EXPECT_NE(report.find(expected), std::string::npos) << report;
}

// A checkpoint whose W1 is one deflated chunk holding `bytes` compressed; returns the file.
std::string saved_with_deflated_w1(const TempDir& dir, const std::vector<unsigned char>& bytes) {
  return saved_then_edited(dir, [&](hid_t root) {
    H5Handle dataset = replace_w1_with_one_chunk(
        root, [](hid_t create) { check_h5(H5Pset_deflate(create, 9), "H5Pset_deflate", "test"); });
    uLongf size = compressBound(bytes.size());
    std::vector<unsigned char> stream(size);
    ASSERT_EQ(compress2(stream.data(), &size, bytes.data(), bytes.size(), 9), Z_OK);
    const hsize_t origin[2] = {0, 0};
    check_h5(H5Dwrite_chunk(dataset.get(), H5P_DEFAULT, 0, origin, size, stream.data()), "H5Dwrite_chunk", "test");
  });
}

// A deflated chunk whose stream inflates far past the chunk (16 MiB of zeros in 16 KiB of zlib
// data, for a chunk of 512 bytes): refused before HDF5 inflates it (io/inflate_check.h), where a
// 2.3 MB file of such chunks took 2 GB and 27 s. An integrity failure: exit code 3 in the apps.
// The bound is the chunk's own size, not more: a stream of one byte past the chunk (513 bytes)
// is refused as well.
TEST(CheckpointBadFiles, DeflatedChunkThatInflatesPastItsChunk) {
  for (const std::size_t bytes : {std::size_t{16} << 20, 8 * 16 * sizeof(float) + 1}) {
    TempDir dir("deflate_past_" + std::to_string(bytes));
    const std::string file = saved_with_deflated_w1(dir, std::vector<unsigned char>(bytes, bytes > 1024 ? 0 : 7));
    expect_restore_and_verify_refuse(dir, file,
                                     "file '" + file + "', dataset '/" + w1 +
                                         "': chunk at (0, 0) inflates past 512 bytes, the most a chunk of this dataset "
                                         "holds (the file is corrupt)");
  }
}

// Deflate under another filter (shuffle after it in the pipeline): its stream could not be told
// apart from what that filter makes of it, so the file is refused before any chunk is inflated.
TEST(CheckpointBadFiles, DeflateUnderAnotherFilter) {
  TempDir dir("deflate_then_shuffle");
  const std::string file = saved_then_edited(dir, [](hid_t root) {
    H5Handle dataset = replace_w1_with_one_chunk(root, [](hid_t create) {
      check_h5(H5Pset_deflate(create, 1), "H5Pset_deflate", "test");
      check_h5(H5Pset_shuffle(create), "H5Pset_shuffle", "test");
    });
    const std::vector<float> values(8 * 16, 1.5f);
    check_h5(H5Dwrite(dataset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), "H5Dwrite",
             "test");
  });
  expect_restore_and_verify_refuse(dir, file,
                                   "file '" + file + "', dataset '/" + w1 + "': its deflated chunks pass through " +
                                       "filter " + std::to_string(H5Z_FILTER_SHUFFLE) +
                                       " after deflate; a checkpoint's reader takes deflate last, or before "
                                       "Fletcher32 only");
}

// A chunk of a dataset stored as tessera stores it (Fletcher32 its only filter) written without
// its checksum (filter mask 1: the filter skipped): refused before HDF5's filter would read the 4
// checksum bytes past the chunk's data.
TEST(CheckpointBadFiles, ChunkStoredWithoutItsChecksum) {
  TempDir dir("chunk_without_checksum");
  const std::string file = saved_then_edited(dir, [](hid_t root) {
    H5Handle dataset = replace_w1_with_one_chunk(
        root, [](hid_t create) { check_h5(H5Pset_fletcher32(create), "H5Pset_fletcher32", "test"); });
    const std::vector<float> values(8 * 16, 1.5f);
    const hsize_t origin[2] = {0, 0};
    check_h5(H5Dwrite_chunk(dataset.get(), H5P_DEFAULT, 1, origin, values.size() * sizeof(float), values.data()),
             "H5Dwrite_chunk", "test");
  });
  const std::string message = "file '" + file + "', dataset '/" + w1 +
                              "': chunk at [0, 0] is stored with 512 bytes and filter mask 1; expected 516 bytes "
                              "(data and Fletcher32 checksum) and mask 0";
  EXPECT_EQ(info_error(file), message);
  EXPECT_EQ(restore_error(dir.path(), target_state()), from_rank(0) + "restore_checkpoint: " + message);
}

// The same for a chunk written with the filter applied (mask 0) but of another length than its
// data and checksum: refused by read_checkpoint_info (and so by ckpt_tool) as by the restore.
TEST(CheckpointBadFiles, ChunkStoredWithTheWrongLength) {
  TempDir dir("chunk_wrong_length");
  const std::string file = saved_then_edited(dir, [](hid_t root) {
    H5Handle dataset = replace_w1_with_one_chunk(
        root, [](hid_t create) { check_h5(H5Pset_fletcher32(create), "H5Pset_fletcher32", "test"); });
    const std::vector<unsigned char> bytes(100, 1);
    const hsize_t origin[2] = {0, 0};
    check_h5(H5Dwrite_chunk(dataset.get(), H5P_DEFAULT, 0, origin, bytes.size(), bytes.data()), "H5Dwrite_chunk",
             "test");
  });
  const std::string message = "file '" + file + "', dataset '/" + w1 +
                              "': chunk at [0, 0] is stored with 100 bytes and filter mask 0; expected 516 bytes "
                              "(data and Fletcher32 checksum) and mask 0";
  EXPECT_EQ(info_error(file), message);
  EXPECT_EQ(restore_error(dir.path(), target_state()), from_rank(0) + "restore_checkpoint: " + message);
}

// A virtual dataset (its elements mapped from another dataset, here of the same file): a
// checkpoint's datasets hold their data themselves.
TEST(CheckpointBadFiles, VirtualDataset) {
  TempDir dir("virtual_dataset");
  const std::string file = saved_then_edited(dir, [](hid_t root) {
    H5Handle plain = dataset_creation();
    add_dataset(root, "/params/source", {4, 4}, plain.get());
    const hsize_t dims[2] = {4, 4};
    H5Handle space = dataspace_handle(H5Screate_simple(2, dims, nullptr), "H5Screate_simple", "test");
    H5Handle create = dataset_creation();
    check_h5(H5Pset_virtual(create.get(), space.get(), ".", "/params/source", space.get()), "H5Pset_virtual", "test");
    add_dataset(root, "/params/virtual", {4, 4}, create.get());
  });
  const std::string message = "file '" + file + "', dataset '/params/virtual': has an unsupported storage layout (" +
                              std::to_string(static_cast<int>(H5D_VIRTUAL)) + ")";
  EXPECT_EQ(info_error(file), message);
  EXPECT_EQ(restore_error(file, target_with("params/virtual", {4, 4})),
            from_rank(0) + "restore_checkpoint: " + message);
}

TEST(CheckpointBadFiles, UnknownFormatVersion) {
  TempDir dir("version");
  const std::string file = saved_then_damaged(dir, [](const std::string& f) {
    H5Handle handle = file_handle(H5Fopen(f.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), "H5Fopen", f);
    H5Handle attribute = attribute_handle(H5Aopen(handle.get(), "format_version", H5P_DEFAULT), "H5Aopen", f);
    const std::int64_t version = 3;
    check_h5(H5Awrite(attribute.get(), H5T_NATIVE_INT64, &version), "H5Awrite", f);
  });
  EXPECT_EQ(restore_error(dir.path(), target_state()),
            from_rank(0) + "restore_checkpoint: file '" + file +
                "': unknown format version 3 (this build reads versions 1 to 2)");
}

// A version below the oldest this build reads (0, or negative) is refused too: taken for a
// version 1 file, its chunks would go unchecked against the digest.
TEST(CheckpointBadFiles, FormatVersionBelowTheOldest) {
  for (const std::int64_t version : {std::int64_t{0}, std::int64_t{-2}}) {
    TempDir dir("old_version_" + std::to_string(-version));
    const std::string file = saved_then_edited(
        dir, [&](hid_t root) { format::write_int64_attribute(root, format::attr_version, version, "test"); });
    const std::string expected = "file '" + file + "': unknown format version " + std::to_string(version) +
                                 " (this build reads versions 1 to 2)";
    EXPECT_EQ(restore_error(dir.path(), target_state()), from_rank(0) + "restore_checkpoint: " + expected);
    EXPECT_EQ(info_error(file), expected);
  }
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

// is_hdf5_file, which the restore, ckpt_tool and the programs' --metrics check share, finds
// HDF5's signature where HDF5's open does: also after a user block, which a check of the first
// eight bytes misses.
TEST(CheckpointBadFiles, IsHdf5FileFindsTheSignatureAfterAUserBlock) {
  TempDir dir("signature");
  const std::string plain = dir / "plain.h5", with_block = dir / "user_block.h5", text = dir / "text.h5";
  if (world_rank() == 0) {
    { H5Handle f = file_handle(H5Fcreate(plain.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "H5Fcreate", plain); }
    H5Handle create = plist_handle(H5Pcreate(H5P_FILE_CREATE), "H5Pcreate", with_block);
    check_h5(H5Pset_userblock(create.get(), 512), "H5Pset_userblock", with_block);
    { H5Handle f = file_handle(H5Fcreate(with_block.c_str(), H5F_ACC_TRUNC, create.get(), H5P_DEFAULT), "H5Fcreate", with_block); }
    std::ofstream(text) << "\x89HDF is not enough\n";
    EXPECT_TRUE(is_hdf5_file(plain, "test"));
    EXPECT_TRUE(is_hdf5_file(with_block, "test"));
    char head[8] = {};
    std::ifstream(with_block, std::ios::binary).read(head, sizeof head);
    EXPECT_NE(std::string(head, 8), std::string("\x89HDF\r\n\x1a\n", 8));  // not at the start
    EXPECT_FALSE(is_hdf5_file(text, "test"));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(CheckpointBadFiles, MissingFileAndEmptyDirectory) {
  TempDir dir("missing_file");
  EXPECT_EQ(restore_error(dir / "ckpt_00000007.h5", target_state()),
            from_rank(0) + "restore_checkpoint: file '" + (dir / "ckpt_00000007.h5") + "' does not exist");
  EXPECT_EQ(restore_error(dir.path(), target_state()), from_rank(0) + "restore_checkpoint: directory '" + dir.path() +
                                                           "' holds no complete checkpoint (ckpt_<step>.h5)");
}

// A FIFO named as the checkpoint is refused at once on every rank: opening it would wait for a
// writer while the other ranks waited in the restore's next agreement (core/files.h).
TEST(CheckpointBadFiles, FifoIsRefusedWithoutWaiting) {
  TempDir dir("fifo");
  const std::string fifo = dir / "ckpt_00000007.h5";
  if (testing_support::world_rank() == 0) {
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(restore_error(fifo, target_state()),
            from_rank(0) + "restore_checkpoint: file '" + fifo + "' is a FIFO, not a regular file on this rank");
}

// The file-size limit of this process for a scope (with SIGXFSZ ignored, a write past it fails
// with EFBIG, as one to a full disk fails with ENOSPC), restored as it leaves.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(std::uint64_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    previous_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, previous_handler_);
  }

 private:
  rlimit saved_{};
  void (*previous_handler_)(int) = nullptr;
};

// A save whose file cannot be written whole fails with the same IoError on every rank and leaves
// nothing behind: the previous checkpoint stays the latest, and no temporary file is left to hold
// the space. The file stops at two places: where the skeleton that rank 0 writes first sets the
// file's length past the first chunk, and at the last byte, which the chunk digests, written last,
// need. Before, both ended in a SIGSEGV at MPI_Finalize (skeleton_driver.h, DeferWriteFailures).
TEST(CheckpointBadFiles, SaveThatCannotWriteItsFileLeavesNothingBehind) {
  TempDir dir("write_fails");
  CheckpointState state = saved_state();
  const std::string first = save_checkpoint(state, dir.path());
  wait_for_pruning();
  const std::uint64_t size = std::filesystem::file_size(first);
  const std::uint64_t first_chunk = chunk_address(first, w1, 0);
  ASSERT_LT(first_chunk, size);
  const std::pair<std::uint64_t, std::string> cases[] = {{first_chunk + 1, "ftruncate failed: File too large"},
                                                          {size - 1, "pwrite failed: File too large"}};
  for (const auto& [limit, failure] : cases) {
    state.step += 1;
    const std::string temporary = dir / (checkpoint_dir::file_name(state.step) + ".tmp");
    std::string message;
    {
      FileSizeLimit guard(limit);
      message = io_testing::io_error_of([&] { save_checkpoint(state, dir.path()); });
    }
    EXPECT_TRUE(io_testing::same_on_every_rank(message)) << message;
    EXPECT_EQ(message, from_rank(0) + "file '" + temporary + "': " + failure) << "limit " << limit;
    EXPECT_FALSE(std::filesystem::exists(temporary)) << "limit " << limit;
    EXPECT_EQ(latest_checkpoint(dir.path()), first) << "limit " << limit;
  }
  // The next save, with room, succeeds.
  state.step += 1;
  EXPECT_EQ(save_checkpoint(state, dir.path()), dir / checkpoint_dir::file_name(state.step));
  wait_for_pruning();
}

}  // namespace
}  // namespace tessera
