// save_checkpoint: one collective HDF5 file per checkpoint, each block written once with
// collective MPI-IO, committed by rename (io/atomic_dir.h).
//
// Phases, each ended by one agreement so that every rank throws the same IoError:
//   1. rank 0 creates the directory;
//   2. every rank creates the temporary file, the datasets and attributes (collective metadata,
//      the same calls with the same values on every rank) and writes its blocks, then closes;
//   3. rank 0 fsyncs, renames, updates `latest` and prunes.
#include <algorithm>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "io/atomic_dir.h"
#include "io/checkpoint.h"
#include "io/checkpoint_format.h"
#include "io/parallel_file.h"
#include "mesh/agree.h"

namespace tessera {

namespace format = checkpoint_format;
using checkpoint_io::capture_error;

namespace {

// Replicated facts only: every rank reaches the same verdict without communication.
void validate_for_save(const CheckpointState& state) {
  if (state.step < 0) throw IoError("save_checkpoint: step " + std::to_string(state.step) + " is negative");
  std::set<std::string> paths;
  for (const auto& array : state.arrays) {
    format::validate_array_path(array.path);
    if (!paths.insert(array.path).second) throw IoError("save_checkpoint: array path '" + array.path + "' repeats");
    const ShardedTensor& value = array.value;
    if (value.spec().is_partial()) {
      throw IoError("save_checkpoint: array '" + array.path + "' has the partial spec " + value.spec().to_string() +
                    "; reshard it to a spec without partial axes before saving");
    }
    if (!array.logical_names.empty() && static_cast<int>(array.logical_names.size()) != value.rank()) {
      throw IoError("save_checkpoint: array '" + array.path + "' has " + std::to_string(array.logical_names.size()) +
                    " logical names for " + std::to_string(value.rank()) + " dimensions");
    }
  }
  // A dataset cannot also be a group: "a/b" and "a/b/c" cannot both be arrays.
  for (const auto& path : paths) {
    auto it = paths.lower_bound(path + "/");
    if (it != paths.end() && it->starts_with(path + "/")) {
      throw IoError("save_checkpoint: array path '" + path + "' is also a group of '" + *it + "'");
    }
  }
}

// True when this rank writes the block: coordinate 0 on every mesh axis the spec does not use,
// so each block is written by exactly one rank.
bool writes_block(const ShardedTensor& value) {
  const Mesh& mesh = value.mesh();
  const Axes used = value.spec().used_axes();
  for (int a = 0; a < mesh.shape().ndim(); ++a) {
    const auto& axis = mesh.shape().names()[a];
    if (std::find(used.begin(), used.end(), axis) == used.end() && mesh.coords()[a] != 0) return false;
  }
  return true;
}

void write_root_attributes(hid_t file, const CheckpointState& state, const MeshShape& mesh, const std::string& path) {
  const std::string context = format::file_context(path);
  format::write_string_attribute(file, format::attr_format, format::format_name, context);
  format::write_int64_attribute(file, format::attr_version, format::format_version, context);
  format::write_int64_attribute(file, format::attr_step, state.step, context);
  format::write_uint64_attribute(file, format::attr_seed, state.seed, context);
  format::write_string_attribute(file, format::attr_config, state.config, context);
  format::write_string_array_attribute(file, format::attr_mesh_names, mesh.names(), context);
  std::vector<std::int64_t> sizes(mesh.sizes().begin(), mesh.sizes().end());
  format::write_int64_array_attribute(file, format::attr_mesh_sizes, sizes, context);
  format::write_string_attribute(file, format::attr_mesh, mesh.to_string(), context);
}

void write_array(hid_t file, hid_t transfer, const CheckpointArray& array, const std::string& path) {
  const std::string context = format::dataset_context(path, array.path);
  const ShardedTensor& value = array.value;
  const Shape& global = value.global_shape();
  const Shape& block = value.local().shape();
  const DType dtype = value.dtype();

  H5Handle space;
  H5Handle create = plist_handle(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", context);
  if (global.empty()) {
    // Scalars cannot be chunked; a compact dataset lives in the object header, whose checksum
    // covers it. Every rank writes the same value (metadata is identical on every rank).
    space = dataspace_handle(H5Screate(H5S_SCALAR), "H5Screate", context);
    check_h5(H5Pset_layout(create.get(), H5D_COMPACT), "H5Pset_layout", context);
  } else {
    std::vector<hsize_t> dims(global.begin(), global.end());
    space = dataspace_handle(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), "H5Screate_simple",
                             context);
    if (numel(global) > 0) {
      auto chunk = format::chunk_shape(block, dtype);
      check_h5(H5Pset_chunk(create.get(), static_cast<int>(chunk.size()), chunk.data()), "H5Pset_chunk", context);
      check_h5(H5Pset_fletcher32(create.get()), "H5Pset_fletcher32", context);
    }
  }
  check_h5(H5Pset_fill_time(create.get(), H5D_FILL_TIME_NEVER), "H5Pset_fill_time", context);
  H5Handle link = plist_handle(H5Pcreate(H5P_LINK_CREATE), "H5Pcreate", context);
  check_h5(H5Pset_create_intermediate_group(link.get(), 1), "H5Pset_create_intermediate_group", context);
  H5Handle dataset = dataset_handle(H5Dcreate2(file, format::dataset_name(array.path).c_str(), format::file_type(dtype),
                                               space.get(), link.get(), create.get(), H5P_DEFAULT),
                                    "H5Dcreate2", context);
  format::write_string_attribute(dataset.get(), format::attr_spec, value.spec().to_string(), context);
  format::write_string_array_attribute(dataset.get(), format::attr_logical_names, array.logical_names, context);
  format::write_string_attribute(dataset.get(), format::attr_dtype, dtype_name(dtype), context);

  if (numel(global) > 0) {
    const bool take_part = global.empty() || writes_block(value);
    H5Handle file_space = checkpoint_io::select_block(dataset.get(), value.block_offsets(), block, take_part, context);
    H5Handle memory = checkpoint_io::memory_space(block, take_part, context);
    // HDF5 wants a buffer even for an empty selection; a zero-size block has none.
    static const std::byte dummy[16] = {};
    const void* data = value.local().nbytes() > 0 ? value.local().raw() : dummy;
    check_h5(H5Dwrite(dataset.get(), format::memory_type(dtype), memory.get(), file_space.get(), transfer, data),
             "H5Dwrite", context);
  }
  dataset.close(context);
}

void write_file(const CheckpointState& state, const MeshShape& mesh_shape, const Communicator& comm,
                const std::string& temporary) {
  const std::string context = format::file_context(temporary);
  H5Handle access = checkpoint_io::parallel_file_access(comm.handle(), context);
  H5Handle file =
      file_handle(H5Fcreate(checkpoint_io::mpi_io_name(temporary).c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get()),
                  "H5Fcreate", context);
  write_root_attributes(file.get(), state, mesh_shape, temporary);
  // Parallel HDF5 writes filtered (Fletcher32) chunks only with collective transfers.
  H5Handle transfer = checkpoint_io::transfer_properties(H5FD_MPIO_COLLECTIVE, context);
  for (const auto& array : state.arrays) write_array(file.get(), transfer.get(), array, temporary);
  checkpoint_dir::test_kill_point("after_write", comm.rank());
  file.close(context);
}

}  // namespace

std::string save_checkpoint(const CheckpointState& state, const std::string& dir, const SaveOptions& options) {
  quiet_hdf5_errors();
  validate_for_save(state);
  const Mesh* mesh = checkpoint_io::common_mesh(state, "save_checkpoint");
  const Communicator world = Communicator::world();
  const Communicator& comm = mesh != nullptr ? mesh->comm() : world;
  const MeshShape mesh_shape = mesh != nullptr ? mesh->shape() : MeshShape({"data"}, {comm.size()});
  const int rank = comm.rank();

  const std::string final_path = (std::filesystem::path(dir) / checkpoint_dir::file_name(state.step)).string();
  const std::string temporary = final_path + checkpoint_dir::temporary_suffix;

  std::optional<std::string> error;
  if (rank == 0) error = capture_error([&] { checkpoint_dir::make_directories(dir); });
  agree_or_throw<IoError>(comm, error);

  error = capture_error([&] { write_file(state, mesh_shape, comm, temporary); });
  checkpoint_dir::test_kill_point("before_rename", rank);
  agree_or_throw<IoError>(comm, error);

  if (rank == 0) {
    error = capture_error([&] {
      checkpoint_dir::commit(temporary, final_path);
      checkpoint_dir::prune(dir, options.keep);
    });
  }
  agree_or_throw<IoError>(comm, error);
  return final_path;
}

}  // namespace tessera
