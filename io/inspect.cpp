// read_checkpoint_root, read_checkpoint_info and verify_checkpoint: one process opens the file on its
// for ckpt_tool and for checks after a save.
#include <algorithm>
#include <filesystem>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "core/files.h"
#include "io/inflate_check.h"
#include "io/checkpoint.h"
#include "io/checkpoint_format.h"
#include "io/chunk_address.h"
#include "io/fletcher32.h"
#include "io/parallel_file.h"

namespace tessera {

namespace format = checkpoint_format;

namespace {

H5Handle open_local(const std::string& file) {
  quiet_hdf5_errors();
  const std::string context = format::file_context(file);
  // A FIFO or a device is refused before HDF5 opens it (its open of a FIFO would wait for a
  // writer: core/files.h).
  if (const std::string why = regular_file_problem(file); !why.empty()) throw IoError(context + " " + why);
  if (!is_hdf5_file(file, context)) throw IoError(context + " is not an HDF5 file");
  H5Handle access = checkpoint_io::local_file_access(context);
  return file_handle(H5Fopen(file.c_str(), H5F_ACC_RDONLY, access.get()), "H5Fopen", context);
}

herr_t collect_dataset(hid_t, const char* name, const H5O_info_t* info, void* data) {
  if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

// Paths (without leading slash) of every dataset in the file, sorted.
std::vector<std::string> dataset_paths(hid_t file, const std::string& context) {
  std::vector<std::string> paths;
  check_h5(H5Ovisit2(file, H5_INDEX_NAME, H5_ITER_INC, collect_dataset, &paths, H5O_INFO_BASIC), "H5Ovisit2", context);
  std::sort(paths.begin(), paths.end());
  return paths;
}

CheckpointArrayInfo array_info(hid_t file, const std::string& path, const std::string& file_name,
                               std::uint64_t file_bytes) {
  const std::string context = format::dataset_context(file_name, path);
  H5Handle dataset =
      dataset_handle(H5Dopen2(file, format::dataset_name(path).c_str(), H5P_DEFAULT), "H5Dopen2", context);
  CheckpointArrayInfo info;
  info.path = path;
  info.shape = format::dataset_shape(dataset.get(), context);
  info.spec = format::read_string_attribute(dataset.get(), format::attr_spec, context);
  info.logical_names = format::read_string_array_attribute(dataset.get(), format::attr_logical_names, context);
  const std::string dtype = format::read_string_attribute(dataset.get(), format::attr_dtype, context);
  try {
    info.dtype = parse_dtype(dtype);
  } catch (const Error&) {
    throw IoError(context + ": unknown dtype '" + dtype + "'");
  }
  H5Handle type = type_handle(H5Dget_type(dataset.get()), "H5Dget_type", context);
  if (!format::type_matches(type.get(), info.dtype)) {
    throw IoError(context + ": attribute 'dtype' says " + dtype + " but the data has another type");
  }
  // Bounds every buffer verify_checkpoint allocates for this dataset by the file's length.
  const std::vector<hsize_t> chunk = format::validated_storage(
      dataset.get(), format::dataset_storage(dataset.get(), context), info.shape, info.dtype, file_bytes, context);
  info.chunk.assign(chunk.begin(), chunk.end());
  return info;
}

// The file's size in bytes, the bound of what its metadata may claim.
std::uint64_t size_of(const std::string& file, const std::string& context) {
  std::error_code ec;
  const std::uint64_t bytes = std::filesystem::file_size(file, ec);
  if (ec) throw IoError(context + ": cannot take its size: " + ec.message());
  return bytes;
}

// Reads the dataset chunk by chunk (whole when not chunked): HDF5 checks each chunk's Fletcher32
// as it reads it. Returns the number of chunks read.
// A version 2 file's chunks are also checked against the dataset's digest (chunk_fletcher32),
// which catches a chunk that was never written.
std::int64_t read_every_chunk(hid_t file, const CheckpointArrayInfo& info, const std::string& file_name,
                              std::int64_t version, std::uint64_t file_bytes) {
  const std::string context = format::dataset_context(file_name, info.path);
  H5Handle dataset =
      dataset_handle(H5Dopen2(file, format::dataset_name(info.path).c_str(), H5P_DEFAULT), "H5Dopen2", context);
  const Shape chunk = info.chunk.empty() ? info.shape : Shape(info.chunk.begin(), info.chunk.end());
  if (numel(info.shape) == 0) return 0;
  const int ndim = static_cast<int>(info.shape.size());
  std::vector<std::byte> buffer(static_cast<std::size_t>(numel(chunk)) * dtype_size(info.dtype));
  const format::DatasetStorage storage = format::dataset_storage(dataset.get(), context);
  checkpoint_io::check_deflated_chunks(dataset.get(), storage, file_bytes, context);
  std::vector<std::uint32_t> digest;
  // The digest covers the datasets stored as tessera saves them (the restore reads it for those
  // only): a dataset another tool rewrote (h5repack with gzip) has its own filters and no digest.
  if (version >= 2 && !format::direct_chunk_shape(dataset.get(), storage, context).empty()) {
    std::uint64_t grid = 1;
    for (int d = 0; d < ndim; ++d) grid *= static_cast<std::uint64_t>((info.shape[d] + chunk[d] - 1) / chunk[d]);
    digest = format::read_chunk_digest(dataset.get(), grid, context);
  }
  std::vector<std::int64_t> start(ndim, 0);
  std::int64_t chunks = 0;
  while (true) {
    Shape count(ndim);
    for (int d = 0; d < ndim; ++d) count[d] = std::min(chunk[d], info.shape[d] - start[d]);
    H5Handle file_space = checkpoint_io::select_block(dataset.get(), start, count, true, context);
    // The chunk's elements land where they lie in the whole chunk, the rest zero: an edge chunk
    // (past the dataset's end in some dimension) is stored so, and its digest entry sums it so.
    H5Handle memory = checkpoint_io::memory_space(chunk, true, context);
    if (count != chunk) {
      std::fill(buffer.begin(), buffer.end(), std::byte{0});
      const std::vector<hsize_t> origin(ndim, 0), extent(count.begin(), count.end());
      check_h5(H5Sselect_hyperslab(memory.get(), H5S_SELECT_SET, origin.data(), nullptr, extent.data(), nullptr),
               "H5Sselect_hyperslab", context);
    }
    herr_t status = H5Dread(dataset.get(), format::memory_type(info.dtype), memory.get(), file_space.get(), H5P_DEFAULT,
                            buffer.data());
    if (status < 0) {
      throw IoError(context + ": chunk at " + shape_to_string(Shape(start.begin(), start.end())) +
                    " failed to read (Fletcher32 checksum or I/O error): " + take_hdf5_error_stack());
    }
    if (!digest.empty()) {
      const std::uint32_t got =
          checkpoint_io::fletcher32(buffer.data(), static_cast<std::size_t>(numel(chunk)) * dtype_size(info.dtype));
      if (got != digest[static_cast<std::size_t>(chunks)]) {
        throw IoError(context + ": chunk at " + checkpoint_io::coords_text(std::vector<hsize_t>(start.begin(), start.end())) + " sums to " +
                      std::to_string(got) + " but the checkpoint's digest says " +
                      std::to_string(digest[static_cast<std::size_t>(chunks)]) +
                      " (its data was never written or was replaced; the file is incomplete)");
      }
    }
    ++chunks;
    int d = ndim - 1;
    for (; d >= 0; --d) {
      start[d] += chunk[d];
      if (start[d] < info.shape[d]) break;
      start[d] = 0;
    }
    if (d < 0) break;
  }
  return chunks;
}

}  // namespace

namespace {

// The root attributes a restore reads: format, version, step, seed and config.
CheckpointInfo root_attributes(hid_t handle, const std::string& file, const std::string& context) {
  CheckpointInfo info;
  info.file = file;
  std::tie(info.format, info.version) = format::read_format_and_version(handle, context);
  info.step = format::read_step(handle, file, context);
  info.seed = format::read_uint64_attribute(handle, format::attr_seed, context);
  info.config = format::read_string_attribute(handle, format::attr_config, context);
  return info;
}

}  // namespace

CheckpointInfo read_checkpoint_root(const std::string& file) {
  H5Handle handle = open_local(file);
  const std::string context = format::file_context(file);
  CheckpointInfo info = root_attributes(handle.get(), file, context);
  handle.close(context);
  return info;
}

CheckpointInfo read_checkpoint_info(const std::string& file) {
  H5Handle handle = open_local(file);
  const std::string context = format::file_context(file);
  CheckpointInfo info = root_attributes(handle.get(), file, context);
  info.mesh_axis_names = format::read_string_array_attribute(handle.get(), format::attr_mesh_names, context);
  const auto sizes = format::read_int64_array_attribute(handle.get(), format::attr_mesh_sizes, context);
  format::validate_mesh_axes(info.mesh_axis_names, sizes, context);
  info.mesh_axis_sizes.assign(sizes.begin(), sizes.end());
  const std::uint64_t file_bytes = size_of(file, context);
  for (const auto& path : dataset_paths(handle.get(), context))
    info.arrays.push_back(array_info(handle.get(), path, file, file_bytes));
  handle.close(context);
  return info;
}

bool verify_checkpoint(const std::string& file, std::string* report) {
  std::ostringstream out;
  bool ok = true;
  try {
    CheckpointInfo info = read_checkpoint_info(file);
    const std::uint64_t file_bytes = size_of(file, format::file_context(file));
    H5Handle handle = open_local(file);
    out << "checkpoint " << file << ": step " << info.step << ", " << info.arrays.size() << " arrays\n";
    for (const auto& array : info.arrays) {
      try {
        std::int64_t chunks = read_every_chunk(handle.get(), array, file, info.version, file_bytes);
        out << "ok     /" << array.path << ' ' << dtype_name(array.dtype) << shape_to_string(array.shape) << ", "
            << chunks << (chunks == 1 ? " chunk" : " chunks") << '\n';
      } catch (const Error& e) {
        ok = false;
        out << "FAILED /" << array.path << ": " << e.what() << '\n';
      }
    }
    handle.close(format::file_context(file));
  } catch (const Error& e) {
    ok = false;
    out << "FAILED: " << e.what() << '\n';
  }
  if (report != nullptr) *report = out.str();
  return ok;
}

}  // namespace tessera
