// restore_checkpoint: each rank reads only the block its TARGET spec gives it, from a file saved
// on any mesh; every failure is agreed on so that all ranks throw the same IoError.
//
// Phases, each ended by one agreement:
//   1. rank 0 resolves the directory to its newest complete checkpoint; the name is broadcast;
//   2. every rank checks that it sees the file and that it is HDF5 (no collective open of a file
//      some rank cannot read);
//   3. collective open; root attributes and every wanted dataset validated (format name and
//      version, presence, global shape, dtype);
//   4. blocks read with INDEPENDENT transfers: a Fletcher32 failure is then local to the ranks
//      whose blocks touch the bad chunk, which record it and go on to the collective close and
//      the agreement. (With collective transfers a rank that fails inside HDF5's filtered
//      collective read leaves the others waiting in that read's internal collectives.)
#include <filesystem>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/checkpoint_format.h"
#include "io/parallel_file.h"
#include "mesh/agree.h"

namespace tessera {

namespace format = checkpoint_format;
namespace fs = std::filesystem;
using checkpoint_io::capture_error;

namespace {

std::string resolve_file(const std::string& dir_or_file) {
  std::error_code ec;
  if (fs::is_directory(dir_or_file, ec)) {
    auto latest = latest_checkpoint(dir_or_file);
    if (!latest) {
      throw IoError("restore_checkpoint: directory '" + dir_or_file +
                    "' holds no complete checkpoint (ckpt_<step>.h5)");
    }
    return *latest;
  }
  if (!fs::exists(dir_or_file, ec)) {
    throw IoError("restore_checkpoint: " + format::file_context(dir_or_file) + " does not exist");
  }
  return dir_or_file;
}

void check_readable(const std::string& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) {
    throw IoError("restore_checkpoint: " + format::file_context(file) + " is not a regular file on this rank");
  }
  htri_t is_hdf5 = H5Fis_hdf5(file.c_str());
  check_h5(is_hdf5, "H5Fis_hdf5", "restore_checkpoint: " + format::file_context(file));
  if (is_hdf5 == 0) throw IoError("restore_checkpoint: " + format::file_context(file) + " is not an HDF5 file");
}

// Reads step, seed and config after checking format name and version.
void read_root(hid_t file, const std::string& path, CheckpointState& out) {
  const std::string context = "restore_checkpoint: " + format::file_context(path);
  if (!format::has_attribute(file, format::attr_format, context)) {
    throw IoError(context + ": not a tessera checkpoint (no '" + format::attr_format + "' attribute)");
  }
  const std::string name = format::read_string_attribute(file, format::attr_format, context);
  if (name != format::format_name) {
    throw IoError(context + ": format is '" + name + "', expected '" + std::string(format::format_name) + "'");
  }
  const std::int64_t version = format::read_int64_attribute(file, format::attr_version, context);
  if (version != format::format_version) {
    throw IoError(context + ": unknown format version " + std::to_string(version) + " (this build reads version " +
                  std::to_string(format::format_version) + ")");
  }
  out.step = format::read_int64_attribute(file, format::attr_step, context);
  out.seed = format::read_uint64_attribute(file, format::attr_seed, context);
  out.config = format::read_string_attribute(file, format::attr_config, context);
}

// True when every group on the way to `path` and the object itself exist (H5Lexists needs its
// parents to exist).
bool link_exists(hid_t file, const std::string& path, const std::string& context) {
  std::size_t end = 0;
  do {
    end = path.find('/', end + 1);
    const std::string prefix = "/" + path.substr(0, end);
    htri_t exists = H5Lexists(file, prefix.c_str(), H5P_DEFAULT);
    check_h5(exists, "H5Lexists", context);
    if (exists == 0) return false;
  } while (end != std::string::npos);
  return true;
}

H5Handle open_validated(hid_t file, const std::string& path, const CheckpointArray& target) {
  const std::string context = "restore_checkpoint: " + format::dataset_context(path, target.path);
  if (!link_exists(file, target.path, context)) throw IoError(context + ": missing");
  H5O_info_t info;
  check_h5(H5Oget_info_by_name2(file, format::dataset_name(target.path).c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT),
           "H5Oget_info_by_name", context);
  if (info.type != H5O_TYPE_DATASET) throw IoError(context + ": is not a dataset");
  H5Handle dataset =
      dataset_handle(H5Dopen2(file, format::dataset_name(target.path).c_str(), H5P_DEFAULT), "H5Dopen2", context);
  const ShardedTensor& want = target.value;
  H5Handle type = type_handle(H5Dget_type(dataset.get()), "H5Dget_type", context);
  if (!format::type_matches(type.get(), want.dtype())) {
    std::string saved = format::has_attribute(dataset.get(), format::attr_dtype, context)
                            ? format::read_string_attribute(dataset.get(), format::attr_dtype, context)
                            : std::string("another type");
    throw IoError(context + ": dtype is " + saved + " in the file, " + std::string(dtype_name(want.dtype())) +
                  " wanted");
  }
  const Shape shape = format::dataset_shape(dataset.get(), context);
  if (shape != want.global_shape()) {
    throw IoError(context + ": global shape is " + shape_to_string(shape) + " in the file, " +
                  shape_to_string(want.global_shape()) + " wanted");
  }
  return dataset;
}

// This rank's block of the target, read from the dataset.
CheckpointArray read_array(hid_t dataset, hid_t transfer, const std::string& path, const CheckpointArray& target) {
  const std::string context = "restore_checkpoint: " + format::dataset_context(path, target.path);
  const ShardedTensor& want = target.value;
  const Mesh& mesh = want.mesh();
  const Shape block = local_shape(want.spec(), mesh.shape(), want.global_shape());
  Tensor local(block, want.dtype());
  // Along partial axes the value lives on the replica at coordinate 0; the others hold zeros.
  const bool take_part = numel(block) > 0 && is_partial_holder(want.spec(), mesh.shape(), mesh.coords());
  if (take_part) {
    auto offsets = tessera::block_offsets(want.spec(), mesh.shape(), want.global_shape(), mesh.coords());
    H5Handle file_space = checkpoint_io::select_block(dataset, offsets, block, true, context);
    H5Handle memory = checkpoint_io::memory_space(block, true, context);
    herr_t status =
        H5Dread(dataset, format::memory_type(want.dtype()), memory.get(), file_space.get(), transfer, local.raw());
    if (status < 0) {
      std::string stack = take_hdf5_error_stack();
      const bool checksum = stack.find("checksum") != std::string::npos ||
                            stack.find("Fletcher") != std::string::npos || stack.find("filter") != std::string::npos;
      throw IoError(
          context +
          (checksum ? ": data failed its Fletcher32 checksum (the file is corrupt): " : ": H5Dread failed: ") + stack);
    }
  }
  return CheckpointArray{target.path,
                         ShardedTensor(mesh, want.spec(), want.global_shape(), std::move(local), target.path),
                         target.logical_names};
}

}  // namespace

CheckpointState restore_checkpoint(const std::string& dir_or_file, const CheckpointState& target) {
  quiet_hdf5_errors();
  for (const auto& array : target.arrays) format::validate_array_path(array.path);
  const Mesh* mesh = checkpoint_io::common_mesh(target, "restore_checkpoint");
  const Communicator world = Communicator::world();
  const Communicator& comm = mesh != nullptr ? mesh->comm() : world;

  std::string file;
  std::optional<std::string> error;
  if (comm.rank() == 0) error = capture_error([&] { file = resolve_file(dir_or_file); });
  agree_or_throw<IoError>(comm, error);
  file = checkpoint_io::broadcast_string(comm, file, 0);
  agree_or_throw<IoError>(comm, capture_error([&] { check_readable(file); }));

  const std::string context = "restore_checkpoint: " + format::file_context(file);
  H5Handle handle;
  error = capture_error([&] {
    H5Handle access = checkpoint_io::parallel_file_access(comm.handle(), context);
    handle = file_handle(H5Fopen(checkpoint_io::mpi_io_name(file).c_str(), H5F_ACC_RDONLY, access.get()), "H5Fopen",
                         context);
  });
  agree_or_throw<IoError>(comm, error);

  CheckpointState result;
  std::vector<H5Handle> datasets;
  error = capture_error([&] {
    read_root(handle.get(), file, result);
    for (const auto& array : target.arrays) datasets.push_back(open_validated(handle.get(), file, array));
  });
  auto agreed = first_error(comm, error);
  if (!agreed) {
    error = capture_error([&] {
      H5Handle transfer = checkpoint_io::transfer_properties(H5FD_MPIO_INDEPENDENT, context);
      for (std::size_t i = 0; i < target.arrays.size(); ++i) {
        result.arrays.push_back(read_array(datasets[i].get(), transfer.get(), file, target.arrays[i]));
      }
    });
  }
  // Every rank closes (collective) whatever happened, then the outcome is agreed.
  datasets.clear();
  auto close_error = capture_error([&] { handle.close(context); });
  if (agreed) throw IoError(*agreed);
  agree_or_throw<IoError>(comm, error ? error : close_error);
  return result;
}

}  // namespace tessera
