// Save on one mesh, restore onto every mesh of this rank count with many target specs: every
// array bit-identical to its reference value, step, seed, config and Adam's count included.
// A 2x4-saved fixture (written once by the 8-rank fixture setup test) is restored on 1, 2, 4 and
// 8 ranks. Also: the `latest` pointer and keep-K pruning, info/verify, h5dump's view of the file,
// one chunk per block, partial targets, and partial sources refused.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/file.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "collectives/collective_check.h"
#include "io/checkpoint_dir.h"
#include "io/checkpoint_format.h"
#include "io/hdf5_handle.h"
#include "tests/io/io_test_support.h"

namespace tessera {
namespace {

using io_testing::ArrayDef;
using io_testing::model_arrays;
using io_testing::TempDir;
using io_testing::varied_state;
using testing_support::meshes_of_size;
using testing_support::world_rank;
using testing_support::world_size;

// The tutorial's specs on data x model (DotReluDot: W1 (None, model), W2 (model, None)), with a
// two-axis dimension for layer 1's W1.
Spec tutorial_spec(const ArrayDef& def, std::size_t) {
  if (def.path.ends_with("DotReluDot_1/W1")) return parse_spec("P((data, model), None)");
  if (def.path.ends_with("W1")) return parse_spec("P(None, model)");
  if (def.path.ends_with("W2")) return parse_spec("P(model, None)");
  if (def.path.ends_with("bias")) return parse_spec("P(model)");
  if (def.path.ends_with("Stacked_0/W")) return parse_spec("P(None, data, model)");
  return Spec();
}

TEST(CheckpointRoundTrip, SaveOnEveryMeshRestoreOnEveryMeshOfThisSize) {
  const auto defs = model_arrays();
  int restores = 0;
  for (const auto& save_shape : meshes_of_size(world_size(), true)) {
    TempDir dir("save_" + save_shape.to_string());
    Mesh save_mesh = Mesh::world(save_shape);
    const std::string file = save_checkpoint(varied_state(save_mesh, defs, 0, true), dir.path());
    EXPECT_EQ(file, dir / "ckpt_00001234.h5");
    for (const auto& target_shape : meshes_of_size(world_size(), true)) {
      Mesh target_mesh = Mesh::world(target_shape);
      for (int k = 1; k <= 2; ++k) {
        CheckpointState restored = restore_checkpoint(dir.path(), varied_state(target_mesh, defs, k, false));
        io_testing::expect_state_equals_reference(
            restored, defs, "saved on " + save_shape.to_string() + ", restored on " + target_shape.to_string());
        ++restores;
      }
    }
  }
  EXPECT_GT(restores, 0);
}

// Datasets laid out as another writer (h5py, h5repack) might: contiguous, big-endian, gzip. Restore
// reads a small one whole on rank 0 and broadcasts it, and a larger one (2 MiB, past the 1 MiB
// that is broadcast) with every rank's HDF5; both are restored onto every mesh under varied
// specs, bit for bit, beside the arrays tessera chunked itself.
enum class Layout { contiguous, big_endian_chunked, gzip_chunked };

// Rank 0 replaces dataset `path` of `file` with the same values stored in `layout`.
void rewrite_dataset(const std::string& file, const ArrayDef& def, Layout layout) {
  namespace format = checkpoint_format;
  const std::string context = "test rewrite of " + def.path;
  H5Handle handle = file_handle(H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), "H5Fopen", context);
  const std::string name = format::dataset_name(def.path);
  check_h5(H5Ldelete(handle.get(), name.c_str(), H5P_DEFAULT), "H5Ldelete", context);
  const std::vector<hsize_t> dims(def.shape.begin(), def.shape.end());
  H5Handle space = dataspace_handle(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                                    "H5Screate_simple", context);
  H5Handle create = plist_handle(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", context);
  if (layout != Layout::contiguous) {
    std::vector<hsize_t> chunk = dims;
    chunk[0] = std::max<hsize_t>(1, chunk[0] / 3);  // chunks that no block lines up with
    check_h5(H5Pset_chunk(create.get(), static_cast<int>(chunk.size()), chunk.data()), "H5Pset_chunk", context);
    if (layout == Layout::gzip_chunked) check_h5(H5Pset_deflate(create.get(), 4), "H5Pset_deflate", context);
  }
  const bool f64 = def.dtype == DType::f64;
  const hid_t file_type = layout == Layout::big_endian_chunked ? (f64 ? H5T_IEEE_F64BE : H5T_IEEE_F32BE)
                                                                : (f64 ? H5T_IEEE_F64LE : H5T_IEEE_F32LE);
  H5Handle dataset = dataset_handle(
      H5Dcreate2(handle.get(), name.c_str(), file_type, space.get(), H5P_DEFAULT, create.get(), H5P_DEFAULT),
      "H5Dcreate2", context);
  const Tensor value = io_testing::reference_value(def);
  check_h5(H5Dwrite(dataset.get(), format::memory_type(def.dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, value.raw()),
           "H5Dwrite", context);
  format::write_string_attribute(dataset.get(), format::attr_dtype, std::string(dtype_name(def.dtype)), context);
  dataset.close(context);
  handle.close(context);
}

TEST(CheckpointRoundTrip, DatasetsOfAnotherWriterRestoreOnEveryMesh) {
  auto defs = model_arrays();
  defs.push_back({"params/Big", {512, 1024}, DType::f32, {}});
  defs.push_back({"opt_state/mu/Big", {512, 1024}, DType::f32, {}});
  const std::vector<std::pair<std::string, Layout>> rewrites = {
      {"params/MLP_0/DotReluDot_0/W1", Layout::contiguous},
      {"params/MLP_0/bias", Layout::big_endian_chunked},
      {"opt_state/nu/Stacked_0/W", Layout::gzip_chunked},
      {"params/Big", Layout::contiguous},
      {"opt_state/mu/Big", Layout::gzip_chunked},
  };
  TempDir dir("another_writer");
  Mesh save_mesh = Mesh::world(MeshShape({"data"}, {world_size()}));
  const std::string file = save_checkpoint(varied_state(save_mesh, defs, 0, true), dir.path());
  if (world_rank() == 0) {
    for (const auto& rewrite : rewrites) {
      const auto def =
          std::find_if(defs.begin(), defs.end(), [&](const ArrayDef& d) { return d.path == rewrite.first; });
      rewrite_dataset(file, *def, rewrite.second);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  int restores = 0;
  for (const auto& target_shape : meshes_of_size(world_size(), true)) {
    Mesh target_mesh = Mesh::world(target_shape);
    for (int k = 1; k <= 2; ++k) {
      CheckpointState restored = restore_checkpoint(dir.path(), varied_state(target_mesh, defs, k, false));
      io_testing::expect_state_equals_reference(restored, defs, "restored on " + target_shape.to_string());
      ++restores;
    }
  }
  EXPECT_GT(restores, 0);
}

// Uneven dimensions (extents 3, 7, 10, 13: short and empty trailing blocks): saved under varied
// specs on every mesh of this size, whole blocks and blocks cut into small chunks (whose last
// chunk is the dataset's edge chunk), verified, and restored onto every mesh under other specs,
// even (replicated) and uneven, bit for bit.
TEST(CheckpointRoundTrip, UnevenBlocksSaveAndRestoreOnEveryMesh) {
  const std::vector<ArrayDef> defs = {
      {"params/U/W", {7, 10}, DType::f32, {"embed", "hidden"}},
      {"params/U/b", {13}, DType::f64, {"hidden"}},
      {"params/U/E", {10, 13, 3}, DType::bf16, {"layer", "embed", "hidden"}},
      {"params/U/V", {3, 7}, DType::f32, {"embed", "hidden"}},
  };
  int restores = 0, uneven = 0;
  for (const auto& save_shape : meshes_of_size(world_size(), true)) {
    Mesh save_mesh = Mesh::world(save_shape);
    for (std::uint64_t max_chunk : {std::uint64_t{0}, std::uint64_t{24}}) {
      TempDir dir("uneven_" + save_shape.to_string() + "_" + std::to_string(max_chunk));
      const CheckpointState state = varied_state(save_mesh, defs, 0, true);
      for (const auto& array : state.arrays) {
        uneven += !splits_evenly(array.value.spec(), save_shape, array.value.global_shape());
      }
      SaveOptions options;
      options.max_chunk_bytes = max_chunk;
      const std::string file = save_checkpoint(state, dir.path(), options);
      if (world_rank() == 0) {
        std::string report;
        EXPECT_TRUE(verify_checkpoint(file, &report)) << report;
      }
      for (const auto& target_shape : meshes_of_size(world_size(), true)) {
        Mesh target_mesh = Mesh::world(target_shape);
        for (int k = 1; k <= 3; ++k) {
          CheckpointState restored = restore_checkpoint(dir.path(), varied_state(target_mesh, defs, k, false));
          io_testing::expect_state_equals_reference(restored, defs,
                                                    "uneven, saved on " + save_shape.to_string() + " (chunk limit " +
                                                        std::to_string(max_chunk) + "), restored on " +
                                                        target_shape.to_string());
          ++restores;
        }
      }
    }
  }
  EXPECT_GT(restores, 0);
  if (world_size() > 1) {
    EXPECT_GT(uneven, 0);
  }
}

// A small max_chunk_bytes cuts every block into several chunks (leading dimensions first), each
// written by the block's owner; restores onto every mesh read chunks that straddle their blocks.
TEST(CheckpointRoundTrip, BlocksCutIntoSeveralChunksRestoreOnEveryMesh) {
  const auto defs = model_arrays();
  const MeshShape save_shape = meshes_of_size(world_size(), true).back();
  Mesh save_mesh = Mesh::world(save_shape);
  TempDir dir("small_chunks");
  const CheckpointState state = varied_state(save_mesh, defs, 0, true);
  SaveOptions options;
  options.max_chunk_bytes = 24;
  const std::string file = save_checkpoint(state, dir.path(), options);
  if (world_rank() == 0) {
    const CheckpointInfo info = read_checkpoint_info(file);
    int cut = 0;
    for (const auto& array : info.arrays) {
      if (array.shape.empty()) continue;
      const CheckpointArray* saved = state.find(array.path);
      ASSERT_NE(saved, nullptr);
      const Shape& block = saved->value.local().shape();
      const auto expected = checkpoint_format::chunk_shape(block, array.dtype, 24);
      EXPECT_EQ(array.chunk, std::vector<std::int64_t>(expected.begin(), expected.end())) << array.path;
      if (numel(block) * static_cast<std::int64_t>(dtype_size(array.dtype)) > 24) {
        EXPECT_LT(numel(Shape(array.chunk.begin(), array.chunk.end())), numel(block)) << array.path;
        ++cut;
      }
    }
    EXPECT_GT(cut, 3);
    std::string report;
    EXPECT_TRUE(verify_checkpoint(file, &report)) << report;
  }
  int restores = 0;
  for (const auto& target_shape : meshes_of_size(world_size(), true)) {
    Mesh target_mesh = Mesh::world(target_shape);
    for (int k = 0; k <= 2; ++k) {
      CheckpointState restored = restore_checkpoint(dir.path(), varied_state(target_mesh, defs, k, false));
      io_testing::expect_state_equals_reference(
          restored, defs, "saved on " + save_shape.to_string() + " in small chunks, restored on " + target_shape.to_string());
      ++restores;
    }
  }
  EXPECT_GT(restores, 0);
}

// The save lays the chunks out writer by writer: along the file, the rank that writes each chunk
// (the block's replica with coordinate 0 on the axes its spec does not use) never decreases, so
// what one rank writes, and reads back onto the saved mesh, is one run of the file (HDF5's
// chunk index may put its small nodes between chunks).
TEST(CheckpointRoundTrip, EachWritersChunksAreOneRunOfTheFile) {
  const auto defs = model_arrays();
  const int data = world_size() % 2 == 0 ? 2 : 1;
  const MeshShape shape({"data", "model"}, {data, world_size() / data});
  Mesh mesh = Mesh::world(shape);
  TempDir dir("writer_runs");
  const CheckpointState state = io_testing::make_state(mesh, defs, tutorial_spec, true);
  SaveOptions options;
  options.max_chunk_bytes = 24;  // several chunks per block
  const std::string file = save_checkpoint(state, dir.path(), options);
  if (world_rank() == 0) {
    struct Stored {
      std::uint64_t address, bytes;
      int writer;
      std::string where;
    };
    std::vector<Stored> chunks;
    H5Handle handle = file_handle(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "H5Fopen", file);
    for (const auto& array : state.arrays) {
      const ShardedTensor& value = array.tensor();
      if (value.global_shape().empty()) continue;
      H5Handle dataset = dataset_handle(H5Dopen2(handle.get(), ("/" + array.path).c_str(), H5P_DEFAULT), "H5Dopen2",
                                        array.path);
      hsize_t count = 0;
      H5Handle space = dataspace_handle(H5Dget_space(dataset.get()), "H5Dget_space", array.path);
      check_h5(H5Dget_num_chunks(dataset.get(), space.get(), &count), "H5Dget_num_chunks", array.path);
      for (hsize_t i = 0; i < count; ++i) {
        std::vector<hsize_t> start(value.global_shape().size());
        unsigned mask = 0;
        haddr_t address = 0;
        hsize_t bytes = 0;
        check_h5(H5Dget_chunk_info(dataset.get(), space.get(), i, start.data(), &mask, &address, &bytes),
                 "H5Dget_chunk_info", array.path);
        // The writer: the rank whose block holds the chunk, with coordinate 0 off the spec's axes.
        int writer = -1;
        const Axes used = value.spec().used_axes();
        for (int r = 0; r < shape.size() && writer < 0; ++r) {
          const std::vector<int> coords = shape.coords_of(r);
          bool owns = true;
          for (int a = 0; a < shape.ndim(); ++a) {
            if (std::find(used.begin(), used.end(), shape.names()[a]) == used.end() && coords[a] != 0) owns = false;
          }
          const auto offsets = block_offsets(value.spec(), shape, value.global_shape(), coords);
          const Shape block = local_shape(value.spec(), shape, value.global_shape(), coords);
          for (std::size_t d = 0; d < start.size() && owns; ++d) {
            owns = static_cast<std::int64_t>(start[d]) >= offsets[d] &&
                   static_cast<std::int64_t>(start[d]) < offsets[d] + block[d];
          }
          if (owns) writer = r;
        }
        ASSERT_GE(writer, 0) << array.path << " chunk " << i;
        chunks.push_back({address, bytes, writer, array.path + " chunk " + std::to_string(i)});
      }
    }
    std::sort(chunks.begin(), chunks.end(), [](const Stored& x, const Stored& y) { return x.address < y.address; });
    ASSERT_GT(chunks.size(), static_cast<std::size_t>(2 * shape.size()));
    for (std::size_t i = 1; i < chunks.size(); ++i) {
      EXPECT_LE(chunks[i - 1].writer, chunks[i].writer) << chunks[i - 1].where << " then " << chunks[i].where;
      // Back to back: no overlap, and no metadata (a chunk index) between them; the skeleton's
      // metadata lies before the first chunk, where a restore's planning reads it in one sweep.
      EXPECT_EQ(chunks[i - 1].address + chunks[i - 1].bytes, chunks[i].address)
          << chunks[i - 1].where << " then " << chunks[i].where;
    }
    EXPECT_EQ(chunks.front().writer, 0);
    EXPECT_EQ(chunks.back().writer, shape.size() - 1);
  }
  CheckpointState restored = restore_checkpoint(dir.path(), io_testing::make_state(mesh, defs, tutorial_spec, false));
  io_testing::expect_state_equals_reference(restored, defs, "saved and restored on " + shape.to_string());
}

// Run by the fixture setup test on 8 ranks only (see tests/io/CMakeLists.txt).
TEST(CheckpointFixture, DISABLED_WriteFixtureSavedOn2x4) {
  ASSERT_EQ(world_size(), 8);
  Mesh mesh = Mesh::world(MeshShape({"data", "model"}, {2, 4}));
  if (world_rank() == 0) std::filesystem::remove_all(TESSERA_IO_FIXTURE_DIR);
  MPI_Barrier(MPI_COMM_WORLD);
  save_checkpoint(io_testing::make_state(mesh, model_arrays(), tutorial_spec, true), TESSERA_IO_FIXTURE_DIR);
}

TEST(CheckpointRoundTrip, RestoreFixtureSavedOn2x4OnEveryMesh) {
  ASSERT_TRUE(latest_checkpoint(TESSERA_IO_FIXTURE_DIR).has_value())
      << "no fixture in " << TESSERA_IO_FIXTURE_DIR << "; run ctest (the fixture setup test writes it)";
  const auto defs = model_arrays();
  const CheckpointInfo info = read_checkpoint_info(*latest_checkpoint(TESSERA_IO_FIXTURE_DIR));
  EXPECT_EQ(info.mesh_axis_names, (std::vector<std::string>{"data", "model"}));
  EXPECT_EQ(info.mesh_axis_sizes, (std::vector<int>{2, 4}));
  for (const auto& shape : meshes_of_size(world_size(), true)) {
    Mesh mesh = Mesh::world(shape);
    for (int k = 0; k < 3; ++k) {
      CheckpointState restored = restore_checkpoint(TESSERA_IO_FIXTURE_DIR, varied_state(mesh, defs, k, false));
      io_testing::expect_state_equals_reference(restored, defs, "2x4 fixture restored on " + shape.to_string());
    }
  }
}

TEST(CheckpointRoundTrip, PartialTargetHoldsTheValueOnOneReplica) {
  const auto defs = model_arrays();
  Mesh mesh = Mesh::world(meshes_of_size(world_size()).back());
  TempDir dir("partial");
  save_checkpoint(varied_state(mesh, defs, 0, true), dir.path());
  const std::string last_axis = mesh.axis_names().back();
  CheckpointState target = io_testing::make_state(
      mesh, defs,
      [&](const ArrayDef& def, std::size_t) { return Spec(std::vector<Axes>(def.shape.size()), {last_axis}); }, false);
  CheckpointState restored = restore_checkpoint(dir.path(), target);
  io_testing::expect_state_equals_reference(restored, defs, "partial target");
}

// Borrowed arrays: the save reads the caller's tensors, the restore fills the caller's storage
// in place (the same buffers before and after), on every mesh of this rank count.
TEST(CheckpointRoundTrip, BorrowedArraysSaveFromAndRestoreIntoTheCallersTensors) {
  const auto defs = model_arrays();
  Mesh save_mesh = Mesh::world(meshes_of_size(world_size()).front());
  const CheckpointState owned = varied_state(save_mesh, defs, 0, true);
  CheckpointState borrowed;
  borrowed.step = owned.step;
  borrowed.seed = owned.seed;
  borrowed.config = owned.config;
  for (const auto& a : owned.arrays) borrowed.arrays.push_back(CheckpointArray::borrow(a.path, a.value, a.logical_names));
  TempDir dir("borrowed");
  save_checkpoint(borrowed, dir.path());
  int k = 0;
  for (const MeshShape& shape : meshes_of_size(world_size())) {
    Mesh target_mesh = Mesh::world(shape);
    CheckpointState tensors = varied_state(target_mesh, defs, k++, false);
    CheckpointState target;
    std::vector<const void*> buffers;
    for (auto& a : tensors.arrays) {
      target.arrays.push_back(CheckpointArray::borrow(a.path, a.value, a.logical_names));
      buffers.push_back(a.value.local().raw());
    }
    restore_checkpoint_into(dir.path(), target);
    EXPECT_EQ(target.step, owned.step);
    EXPECT_EQ(target.seed, owned.seed);
    EXPECT_EQ(target.config, owned.config);
    for (std::size_t i = 0; i < tensors.arrays.size(); ++i) {
      EXPECT_EQ(tensors.arrays[i].value.local().raw(), buffers[i]) << tensors.arrays[i].path << " was reallocated";
    }
    io_testing::expect_state_equals_reference(tensors, defs, "borrowed target on " + shape.to_string());
  }
}

// last_restore_phases: the plan, the reads and the return of the last successful restore, in
// order and within the call's own time on this rank; a restore that fails leaves them as they were.
TEST(CheckpointRoundTrip, RestorePhasesAreInOrderAndOnlyASuccessfulRestoreSetsThem) {
  const auto defs = model_arrays();
  Mesh mesh = Mesh::world(meshes_of_size(world_size()).front());
  const CheckpointState saved = varied_state(mesh, defs, 0, true);
  TempDir dir("phases");
  save_checkpoint(saved, dir.path());
  CheckpointState target = varied_state(mesh, defs, 1, false);
  const auto start = std::chrono::steady_clock::now();
  restore_checkpoint_into(dir.path(), target);
  const double call = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const RestorePhases phases = last_restore_phases();
  EXPECT_GT(phases.planned, 0.0);
  EXPECT_LE(phases.planned, phases.read);
  EXPECT_LE(phases.read, phases.returned);
  EXPECT_LE(phases.returned, call);
  io_testing::expect_state_equals_reference(target, defs, "the restore timed");

  const std::string message =
      io_testing::io_error_of([&] { restore_checkpoint_into(dir.path() + "/no_such_file.h5", target); });
  EXPECT_FALSE(message.empty());
  const RestorePhases after = last_restore_phases();
  EXPECT_EQ(after.planned, phases.planned);
  EXPECT_EQ(after.read, phases.read);
  EXPECT_EQ(after.returned, phases.returned);
}

// last_save_phases: the layout, the write and the return of the last successful save, in order
// and within the call's own time on this rank; a save that fails leaves them as they were.
TEST(CheckpointRoundTrip, SavePhasesAreInOrderAndOnlyASuccessfulSaveSetsThem) {
  const auto defs = model_arrays();
  Mesh mesh = Mesh::world(meshes_of_size(world_size()).front());
  const CheckpointState saved = varied_state(mesh, defs, 0, true);
  TempDir dir("save_phases");
  const auto start = std::chrono::steady_clock::now();
  save_checkpoint(saved, dir.path());
  const double call = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const SavePhases phases = last_save_phases();
  EXPECT_GT(phases.laid_out, 0.0);
  EXPECT_LE(phases.laid_out, phases.written);
  EXPECT_LE(phases.written, phases.returned);
  EXPECT_LE(phases.returned, call);

  CheckpointState partial;
  const std::string axis = mesh.axis_names().back();
  partial.arrays.push_back({"params/W", ShardedTensor::zeros(mesh, Spec({{}, {}}, {axis}), {8, 8}), {}});
  EXPECT_FALSE(io_testing::io_error_of([&] { save_checkpoint(partial, dir.path()); }).empty());
  const SavePhases after = last_save_phases();
  EXPECT_EQ(after.laid_out, phases.laid_out);
  EXPECT_EQ(after.written, phases.written);
  EXPECT_EQ(after.returned, phases.returned);
}

// The message of a save of `state` into `dir` that is refused, after checking that every rank got
// it and that nothing was written (no checkpoint, no temporary file).
std::string refused_save(const CheckpointState& state, const TempDir& dir) {
  const std::string message = io_testing::io_error_of([&] { save_checkpoint(state, dir.path()); });
  EXPECT_TRUE(io_testing::same_on_every_rank(message)) << message;
  EXPECT_FALSE(latest_checkpoint(dir.path()).has_value()) << message;
  EXPECT_TRUE(checkpoint_dir::leftover_temporaries(dir.path()).empty()) << message;
  return message;
}

TEST(CheckpointRoundTrip, PartialSourceIsRefusedOnEveryRank) {
  Mesh mesh = Mesh::world(meshes_of_size(world_size()).back());
  TempDir dir("refused");
  CheckpointState state;
  const std::string axis = mesh.axis_names().back();
  state.arrays.push_back({"params/W", ShardedTensor::zeros(mesh, Spec({{}, {}}, {axis}), {8, 8}), {}});
  EXPECT_EQ(refused_save(state, dir), "save_checkpoint: array 'params/W' has the partial spec P(None, None; partial=" +
                                          axis + "); reshard it to a spec without partial axes before saving");
}

// States a checkpoint cannot hold are refused before anything is written, with the same IoError
// on every rank: a negative step (its file name would not parse back), an array path given twice,
// a path with a '..' part, a path that is also another array's group, and logical names that do
// not name every dimension.
TEST(CheckpointRoundTrip, StatesACheckpointCannotHoldAreRefusedOnEveryRank) {
  Mesh mesh = Mesh::world(meshes_of_size(world_size()).back());
  TempDir dir("refused_states");
  const auto array = [&](const std::string& path, std::vector<std::string> names = {}) {
    return CheckpointArray{path, ShardedTensor::zeros(mesh, Spec(), {4, 4}), std::move(names)};
  };
  const auto refusal = [&](const CheckpointState& state) { return refused_save(state, dir); };
  CheckpointState negative;
  negative.step = -1;
  negative.arrays.push_back(array("params/W"));
  EXPECT_EQ(refusal(negative), "save_checkpoint: step -1 is negative");
  CheckpointState twice;
  twice.arrays.push_back(array("params/W"));
  twice.arrays.push_back(array("params/W"));
  EXPECT_EQ(refusal(twice), "save_checkpoint: array path 'params/W' repeats");
  CheckpointState dots;
  dots.arrays.push_back(array("params/../W"));
  EXPECT_EQ(refusal(dots), "checkpoint: array path 'params/../W' must be slash-separated names without a leading "
                           "slash, empty, '.' or '..' parts");
  CheckpointState group;
  group.arrays.push_back(array("params/W"));
  group.arrays.push_back(array("params/W/b"));
  EXPECT_EQ(refusal(group), "save_checkpoint: array path 'params/W' is also a group of 'params/W/b'");
  CheckpointState names;
  names.arrays.push_back(array("params/W", {"embed"}));
  EXPECT_EQ(refusal(names), "save_checkpoint: array 'params/W' has 1 logical names for 2 dimensions");
}

// Every rank must pass the same directory and state. A step or a directory that differed from
// rank to rank named two files and ended in an MPI-IO error; arrays that differed went on into
// collectives of different sizes. Now the first rank whose arguments differ from rank 0's names
// the difference, on every rank, and nothing is written.
TEST(CheckpointRoundTrip, StatesThatDifferFromRankToRankAreRefusedOnEveryRank) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  Mesh mesh = Mesh::world(meshes_of_size(world_size()).back());
  const int last = world_size() - 1;
  const bool odd_one = world_rank() == last;
  TempDir dir("differs");
  auto state_of = [&](std::int64_t step, Shape shape, std::string path) {
    CheckpointState state;
    state.step = step;
    state.arrays.push_back({"params/b", ShardedTensor::zeros(mesh, Spec(), {4}), {}});
    state.arrays.push_back({std::move(path), ShardedTensor::zeros(mesh, Spec(), std::move(shape)), {}});
    return state;
  };
  const std::string prefix = "rank " + std::to_string(last) + ": save_checkpoint: this rank's arguments differ from rank 0's: ";
  const std::string suffix = " on rank 0; every rank passes the same directory, step, seed, configuration and arrays";
  std::string message =
      io_testing::io_error_of([&] { save_checkpoint(state_of(odd_one ? 4 : 3, {8, 8}, "params/W"), dir.path()); });
  EXPECT_EQ(message, prefix + "step 4 here, step 3" + suffix);
  EXPECT_TRUE(io_testing::same_on_every_rank(message));
  message = io_testing::io_error_of([&] { save_checkpoint(state_of(3, {8, odd_one ? 4 : 8}, "params/W"), dir.path()); });
  EXPECT_EQ(message, prefix + "array 'params/W' f32[8, 4] P(None, None) on " + mesh.shape().to_string() +
                         " here, array 'params/W' f32[8, 8] P(None, None) on " + mesh.shape().to_string() + suffix);
  CheckpointState fewer = state_of(3, {8, 8}, "params/W");
  if (odd_one) fewer.arrays.pop_back();
  message = io_testing::io_error_of([&] { save_checkpoint(fewer, dir.path()); });
  EXPECT_EQ(message, prefix + "1 array here, 2 arrays" + suffix);
  EXPECT_TRUE(io_testing::same_on_every_rank(message));
  // Logical names are compared too (rank 0 alone writes the skeleton, so the others' names would
  // be lost without a word).
  CheckpointState named = state_of(3, {8, 8}, "params/W");
  named.arrays.back().logical_names = odd_one ? std::vector<std::string>{"embed", "mlp"}
                                              : std::vector<std::string>{"embed", "hidden"};
  message = io_testing::io_error_of([&] { save_checkpoint(named, dir.path()); });
  const std::string array = "array 'params/W' f32[8, 8] P(None, None) on " + mesh.shape().to_string();
  EXPECT_EQ(message, prefix + array + " named (embed, mlp) here, " + array + " named (embed, hidden)" + suffix);
  EXPECT_TRUE(io_testing::same_on_every_rank(message));
  // (With TESSERA_COLLECTIVE_CHECK=1 the check at the save's start names a directory that differs
  // first: tests/io/entry_check_test.cpp.)
  const std::string elsewhere = dir.path() + "/elsewhere";
  if (!collective_check_enabled()) {
    message = io_testing::io_error_of(
        [&] { save_checkpoint(state_of(3, {8, 8}, "params/W"), odd_one ? elsewhere : dir.path()); });
    EXPECT_EQ(message, prefix + "directory '" + elsewhere + "' here, directory '" + dir.path() + "'" + suffix);
    EXPECT_TRUE(io_testing::same_on_every_rank(message));
    EXPECT_FALSE(std::filesystem::exists(elsewhere));
  }
  EXPECT_FALSE(latest_checkpoint(dir.path()).has_value());

  // The same for a restore's target (its step comes from the file).
  save_checkpoint(state_of(3, {8, 8}, "params/W"), dir.path());
  CheckpointState target = state_of(0, {8, 8}, odd_one ? "params/V" : "params/W");
  message = io_testing::io_error_of([&] { restore_checkpoint_into(dir.path(), target); });
  const std::string restore_prefix = "rank " + std::to_string(last) + ": restore_checkpoint: this rank's arguments differ from rank 0's: ";
  const std::string restore_suffix = " on rank 0; every rank passes the same checkpoint path and arrays";
  EXPECT_EQ(message, restore_prefix + "array 'params/V' f32[8, 8] P(None, None) on " + mesh.shape().to_string() +
                         " here, array 'params/W' f32[8, 8] P(None, None) on " + mesh.shape().to_string() + restore_suffix);
  EXPECT_TRUE(io_testing::same_on_every_rank(message));
  // And the checkpoint it names: a directory on some ranks, its file on others.
  const std::string file = *latest_checkpoint(dir.path());
  CheckpointState same = state_of(0, {8, 8}, "params/W");
  if (!collective_check_enabled()) {
    message = io_testing::io_error_of([&] { restore_checkpoint_into(odd_one ? file : dir.path(), same); });
    EXPECT_EQ(message, restore_prefix + "checkpoint path '" + file + "' here, checkpoint path '" + dir.path() + "'" +
                           restore_suffix);
    EXPECT_TRUE(io_testing::same_on_every_rank(message));
  }
}

// A save into a directory whose lock another job holds (flock(2) on <dir>/.lock; here a descriptor
// of rank 0's own stands in for that job) is refused on every rank, naming the holder, and writes
// nothing there; once the lock is released the save goes through.
TEST(CheckpointDirectory, SaveIntoADirectoryLockedByAnotherJobIsRefused) {
  Mesh mesh = Mesh::world(meshes_of_size(world_size()).front());
  const CheckpointState state = varied_state(mesh, model_arrays(), 0, true);
  TempDir dir("locked");
  int other_job = -1;
  if (world_rank() == 0) {
    other_job = ::open((dir / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    const std::string holder = "host otherhost pid 4242\n";
    EXPECT_EQ(::write(other_job, holder.data(), holder.size()), static_cast<ssize_t>(holder.size()));
    EXPECT_EQ(::flock(other_job, LOCK_EX | LOCK_NB), 0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string message = io_testing::io_error_of([&] { save_checkpoint(state, dir.path()); });
  EXPECT_EQ(message, std::string(world_size() > 1 ? "rank 0: " : "") + "checkpoint directory '" + dir.path() +
                         "' is in use by another job (lock '" + (dir / ".lock") + "' held by host otherhost pid 4242)");
  EXPECT_TRUE(io_testing::same_on_every_rank(message));
  EXPECT_FALSE(latest_checkpoint(dir.path()).has_value());
  EXPECT_TRUE(checkpoint_dir::leftover_temporaries(dir.path()).empty());
  if (world_rank() == 0) ::close(other_job);
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(save_checkpoint(state, dir.path()), dir / checkpoint_dir::file_name(state.step));
  wait_for_pruning();
}

// A big-endian dataset stored with Fletcher32 alone (h5py's fletcher32=True on '>f4') is chunked as
// tessera chunks but its bytes are not tessera's little-endian ones: it is read through HDF5, which
// converts them, never by the direct path, and restores by value.
TEST(CheckpointRoundTrip, BigEndianDatasetWithFletcher32RestoresByValue) {
  Mesh mesh = Mesh::world(meshes_of_size(world_size()).back());
  TempDir dir("big_endian_fletcher32");
  const ArrayDef def{"params/W", {8, 16}, DType::f32, {}};
  const Tensor reference = io_testing::reference_value(def);
  CheckpointState state;
  state.arrays.push_back({def.path, ShardedTensor::from_global(mesh, Spec::replicated(2), reference, def.path), {}});
  const std::string file = save_checkpoint(state, dir.path());
  if (world_rank() == 0) {
    H5Handle handle = file_handle(H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), "H5Fopen", file);
    check_h5(H5Ldelete(handle.get(), "/params/W", H5P_DEFAULT), "H5Ldelete", file);
    H5Handle create = plist_handle(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", file);
    const hsize_t dims[2] = {8, 16}, chunk[2] = {4, 16};
    check_h5(H5Pset_chunk(create.get(), 2, chunk), "H5Pset_chunk", file);
    check_h5(H5Pset_fletcher32(create.get()), "H5Pset_fletcher32", file);
    H5Handle space = dataspace_handle(H5Screate_simple(2, dims, nullptr), "H5Screate_simple", file);
    H5Handle dataset = dataset_handle(H5Dcreate2(handle.get(), "/params/W", H5T_IEEE_F32BE, space.get(), H5P_DEFAULT,
                                                 create.get(), H5P_DEFAULT),
                                      "H5Dcreate2", file);
    check_h5(H5Dwrite(dataset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, reference.raw()), "H5Dwrite", file);
    checkpoint_format::write_string_attribute(dataset.get(), checkpoint_format::attr_dtype, "f32", file);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  CheckpointState target;
  target.arrays.push_back({def.path, ShardedTensor::zeros(mesh, parse_spec("P(None, " + mesh.axis_names().back() + ")"),
                                                          def.shape, DType::f32, def.path), {}});
  const CheckpointState restored = restore_checkpoint(file, target);
  EXPECT_TRUE(restored.arrays[0].value.to_global().bit_equal(reference)) << restored.arrays[0].value.describe();
}

// Keep-last-K with old checkpoints removed before the save returns and by rank 0's background
// thread: with the thread, a save returns with at most K + 1 complete checkpoints (the one it
// is removing), and exactly K once wait_for_pruning() returns.
TEST(CheckpointDirectory, LatestPointerAndKeepLastK) {
  Mesh mesh = Mesh::world(meshes_of_size(world_size()).front());
  const auto defs = model_arrays();
  CheckpointState state = varied_state(mesh, defs, 0, true);
  for (bool background : {false, true}) {
    TempDir dir(background ? "keep_background" : "keep");
    for (std::int64_t step : {10, 20, 30, 40, 50}) {
      state.step = step;
      save_checkpoint(state, dir.path(), SaveOptions{.keep = 3, .prune_in_background = background});
      MPI_Barrier(MPI_COMM_WORLD);
      const std::size_t saved = static_cast<std::size_t>(step / 10);
      const std::size_t left = checkpoint_dir::list_complete(dir.path()).size();
      if (background) {
        EXPECT_GE(left, std::min<std::size_t>(saved, 3)) << "after step " << step;
        EXPECT_LE(left, std::min<std::size_t>(saved, 4)) << "after step " << step;
      } else {
        EXPECT_EQ(left, std::min<std::size_t>(saved, 3)) << "after step " << step;
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
    wait_for_pruning();
    MPI_Barrier(MPI_COMM_WORLD);
    auto complete = checkpoint_dir::list_complete(dir.path());
    ASSERT_EQ(complete.size(), 3u);
    EXPECT_EQ(complete[0].first, 30);
    EXPECT_EQ(complete[2].second, dir / "ckpt_00000050.h5");
    EXPECT_EQ(latest_checkpoint(dir.path()), dir / "ckpt_00000050.h5");
    std::ifstream pointer(dir / "latest");
    std::string line;
    std::getline(pointer, line);
    EXPECT_EQ(line, "ckpt_00000050.h5");
    CheckpointState restored = restore_checkpoint(dir.path(), varied_state(mesh, defs, 1, false));
    EXPECT_EQ(restored.step, 50);
  }
}

TEST(CheckpointInspect, InfoVerifyAndOneChunkPerBlock) {
  Mesh mesh = Mesh::world(meshes_of_size(world_size()).back());
  TempDir dir("inspect");
  const auto defs = model_arrays();
  const CheckpointState state = varied_state(mesh, defs, 0, true);
  const std::string file = save_checkpoint(state, dir.path());
  if (world_rank() != 0) return;
  const CheckpointInfo info = read_checkpoint_info(file);
  EXPECT_EQ(info.format, "tessera-checkpoint");
  EXPECT_EQ(info.version, 2);
  EXPECT_EQ(info.step, io_testing::reference_step);
  EXPECT_EQ(info.seed, io_testing::reference_seed);
  EXPECT_EQ(info.config, io_testing::reference_config);
  EXPECT_EQ(info.mesh_axis_names, mesh.axis_names());
  EXPECT_EQ(info.mesh_axis_sizes, mesh.shape().sizes());
  ASSERT_EQ(info.arrays.size(), defs.size());
  for (const auto& array : info.arrays) {
    const CheckpointArray* saved = state.find(array.path);
    ASSERT_NE(saved, nullptr) << array.path;
    EXPECT_EQ(array.shape, saved->value.global_shape()) << array.path;
    EXPECT_EQ(array.spec, saved->value.spec().to_string()) << array.path;
    EXPECT_EQ(array.logical_names, saved->logical_names) << array.path;
    EXPECT_EQ(array.dtype, saved->value.dtype()) << array.path;
    if (array.shape.empty()) continue;
    // Chunks are the saved spec's blocks, and there is one chunk per distinct block.
    EXPECT_EQ(array.chunk, saved->value.local().shape()) << array.path;
    H5Handle handle = file_handle(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "H5Fopen", file);
    H5Handle dataset =
        dataset_handle(H5Dopen2(handle.get(), ("/" + array.path).c_str(), H5P_DEFAULT), "H5Dopen2", file);
    H5Handle space = dataspace_handle(H5Dget_space(dataset.get()), "H5Dget_space", file);
    hsize_t chunks = 0;
    check_h5(H5Dget_num_chunks(dataset.get(), space.get(), &chunks), "H5Dget_num_chunks", file);
    std::int64_t blocks = 1;
    for (int d = 0; d < saved->value.ndim(); ++d) blocks *= shard_count(saved->value.spec(), mesh.shape(), d);
    EXPECT_EQ(static_cast<std::int64_t>(chunks), blocks) << array.path;
  }
  std::string report;
  EXPECT_TRUE(verify_checkpoint(file, &report)) << report;
  EXPECT_NE(report.find("ok     /params/MLP_0/DotReluDot_0/W1 f32[8, 16]"), std::string::npos) << report;
}

std::string run_and_capture(const std::string& command) {
  std::string text;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return text;
  char buffer[4096];
  while (std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) text.append(buffer, n);
  pclose(pipe);
  return text;
}

TEST(CheckpointInspect, H5dumpShowsDatasetsAndAttributes) {
  Mesh mesh = Mesh::world(meshes_of_size(world_size()).back());
  TempDir dir("h5dump");
  const std::string file = save_checkpoint(varied_state(mesh, model_arrays(), 0, true), dir.path());
  if (world_rank() != 0) return;
  const std::string header = run_and_capture(std::string(TESSERA_H5DUMP) + " -H -p " + file + " 2>&1");
  for (const char* expected :
       {"GROUP \"params\"", "GROUP \"opt_state\"", "DATASET \"W1\"", "DATASET \"count\"", "ATTRIBUTE \"format\"",
        "ATTRIBUTE \"format_version\"", "ATTRIBUTE \"mesh_axis_names\"", "ATTRIBUTE \"config\"", "ATTRIBUTE \"spec\"",
        "ATTRIBUTE \"logical_names\"", "ATTRIBUTE \"dtype\"", "CHECKSUM FLETCHER32", "H5T_IEEE_F32LE", "H5T_IEEE_F64LE",
        "H5T_STD_I32LE", "DATASPACE  SIMPLE { ( 8, 16 ) / ( 8, 16 ) }"}) {
    EXPECT_NE(header.find(expected), std::string::npos) << "h5dump -H -p lacks " << expected << ":\n" << header;
  }
  const std::string format = run_and_capture(std::string(TESSERA_H5DUMP) + " -a /format " + file + " 2>&1");
  EXPECT_NE(format.find("\"tessera-checkpoint\""), std::string::npos) << format;
  const std::string spec =
      run_and_capture(std::string(TESSERA_H5DUMP) + " -a /params/MLP_0/DotReluDot_0/W1/spec " + file + " 2>&1");
  EXPECT_NE(spec.find("\"P("), std::string::npos) << spec;
}

// bf16 datasets are stored as their bits (H5T_STD_U16LE) with the attribute dtype = "bf16": any
// HDF5 reader gets the exact values ((uint32(bits) << 16) viewed as f32); restore checks the
// attribute and refuses another dtype.
TEST(CheckpointInspect, Bf16IsUint16BitsWithADtypeAttribute) {
  Mesh mesh = Mesh::world(meshes_of_size(world_size()).back());
  TempDir dir("bf16");
  const ArrayDef def{"params/emb", {4, 8}, DType::bf16, {}};
  CheckpointState state;
  state.arrays.push_back(
      {def.path, ShardedTensor::from_global(mesh, Spec::replicated(2), io_testing::reference_value(def), def.path), {}});
  const std::string file = save_checkpoint(state, dir.path());
  const CheckpointInfo info = read_checkpoint_info(file);
  ASSERT_EQ(info.arrays.size(), 1u);
  EXPECT_EQ(info.arrays[0].dtype, DType::bf16);
  CheckpointState target;
  target.arrays.push_back({def.path, ShardedTensor::zeros(mesh, parse_spec("P(None, " + mesh.axis_names().back() + ")"),
                                                          def.shape, DType::bf16, def.path), {}});
  CheckpointState restored = restore_checkpoint(file, target);
  EXPECT_TRUE(restored.arrays[0].value.to_global().bit_equal(io_testing::reference_value(def)));
  target.arrays[0].value = ShardedTensor::zeros(mesh, Spec::replicated(2), def.shape, DType::f32, def.path);
  EXPECT_EQ(io_testing::io_error_of([&] { restore_checkpoint(file, target); }),
            std::string(world_size() > 1 ? "rank 0: " : "") + "restore_checkpoint: file '" + file +
                "', dataset '/params/emb': dtype is bf16 in the file, f32 wanted");
  if (world_rank() != 0) return;
  const std::string header = run_and_capture(std::string(TESSERA_H5DUMP) + " -H " + file + " 2>&1");
  EXPECT_NE(header.find("DATATYPE  H5T_STD_U16LE"), std::string::npos) << header;
  const std::string dtype = run_and_capture(std::string(TESSERA_H5DUMP) + " -a /params/emb/dtype " + file + " 2>&1");
  EXPECT_NE(dtype.find("\"bf16\""), std::string::npos) << dtype;
  // The data as h5dump prints it (-y: no indices): the bits, in row-major order.
  const std::string data = run_and_capture(std::string(TESSERA_H5DUMP) + " -d /params/emb -y " + file + " 2>&1");
  const std::size_t begin = data.find("DATA {");
  ASSERT_NE(begin, std::string::npos) << data;
  std::vector<std::int64_t> printed;
  std::istringstream numbers(data.substr(begin + 6, data.find('}', begin) - begin - 6));
  for (std::string item; std::getline(numbers, item, ',');) printed.push_back(std::stoll(item));
  const Tensor want = io_testing::reference_value(def);
  std::vector<std::int64_t> bits;
  for (std::int64_t i = 0; i < want.numel(); ++i) bits.push_back(want.data<bfloat16>()[i].bits);
  EXPECT_EQ(printed, bits) << data;
}

}  // namespace
}  // namespace tessera
