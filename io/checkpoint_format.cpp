// Attribute and type helpers of the checkpoint file format. Strings are fixed-length, null-terminated
// UTF-8 (readable by h5dump and h5py without variable-length memory to reclaim).
#include "io/checkpoint_format.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "io/checkpoint_dir.h"
#include "io/hdf5_handle.h"

namespace tessera::checkpoint_format {

std::string file_context(const std::string& file) { return "file '" + file + "'"; }

std::string dataset_context(const std::string& file, const std::string& path) {
  return "file '" + file + "', dataset '" + dataset_name(path) + "'";
}

void validate_array_path(const std::string& path) {
  if (path.empty()) throw IoError("checkpoint: an array has an empty path");
  std::size_t start = 0;
  while (true) {
    std::size_t end = path.find('/', start);
    std::string part = path.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (part.empty() || part == "." || part == "..") {
      throw IoError("checkpoint: array path '" + path +
                    "' must be slash-separated names without a leading slash, empty, '.' or '..' parts");
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
}

hid_t memory_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return H5T_NATIVE_FLOAT;
    case DType::f64:
      return H5T_NATIVE_DOUBLE;
    case DType::i32:
      return H5T_NATIVE_INT32;
    case DType::bf16:
      return H5T_NATIVE_UINT16;
  }
  return H5T_NATIVE_FLOAT;
}

hid_t file_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return H5T_IEEE_F32LE;
    case DType::f64:
      return H5T_IEEE_F64LE;
    case DType::i32:
      return H5T_STD_I32LE;
    case DType::bf16:
      return H5T_STD_U16LE;  // the bf16 bits; the dataset's dtype attribute says "bf16"
  }
  return H5T_IEEE_F32LE;
}

std::string type_text(hid_t dataset_type) {
  const std::string bits = std::to_string(8 * H5Tget_size(dataset_type)) + "-bit ";
  switch (H5Tget_class(dataset_type)) {
    case H5T_FLOAT:
      return bits + "floats";
    case H5T_INTEGER:
      return bits + (H5Tget_sign(dataset_type) == H5T_SGN_NONE ? "unsigned integers" : "signed integers");
    case H5T_STRING:
      return "strings";
    default:
      return "values of a type that is neither a number nor a string";
  }
}

bool type_matches(hid_t dataset_type, DType dtype) {
  const H5T_class_t want_class = dtype == DType::i32 || dtype == DType::bf16 ? H5T_INTEGER : H5T_FLOAT;
  if (H5Tget_class(dataset_type) != want_class) return false;
  if (H5Tget_size(dataset_type) != dtype_size(dtype)) return false;
  const H5T_sign_t want_sign = dtype == DType::bf16 ? H5T_SGN_NONE : H5T_SGN_2;
  if (want_class == H5T_INTEGER && H5Tget_sign(dataset_type) != want_sign) return false;
  return true;
}

std::vector<hsize_t> chunk_shape(const Shape& block, DType dtype, std::uint64_t limit) {
  std::vector<hsize_t> chunk(block.begin(), block.end());
  for (auto& c : chunk) c = std::max<hsize_t>(c, 1);
  auto bytes = [&] {
    std::uint64_t n = dtype_size(dtype);
    for (auto c : chunk) n *= c;
    return n;
  };
  auto smallest_factor = [](hsize_t n) {
    for (hsize_t f = 2; f * f <= n; ++f) {
      if (n % f == 0) return f;
    }
    return n;
  };
  // Dividing by a prime factor keeps every chunk inside one block.
  for (std::size_t d = 0; bytes() > limit && d < chunk.size();) {
    if (chunk[d] > 1) {
      chunk[d] /= smallest_factor(chunk[d]);
    } else {
      ++d;
    }
  }
  return chunk;
}

namespace {

H5Handle string_type(std::size_t length, std::string_view context) {
  H5Handle type = type_handle(H5Tcopy(H5T_C_S1), "H5Tcopy", context);
  check_h5(H5Tset_size(type.get(), std::max<std::size_t>(length, 1)), "H5Tset_size", context);
  check_h5(H5Tset_strpad(type.get(), H5T_STR_NULLTERM), "H5Tset_strpad", context);
  check_h5(H5Tset_cset(type.get(), H5T_CSET_UTF8), "H5Tset_cset", context);
  return type;
}

std::string attribute_context(std::string_view context, const char* name) {
  return std::string(context) + ", attribute '" + name + "'";
}

void write_attribute(hid_t object, const char* name, hid_t type, hid_t space, const void* data,
                     std::string_view context) {
  const std::string where = attribute_context(context, name);
  if (H5Aexists(object, name) > 0) check_h5(H5Adelete(object, name), "H5Adelete", where);
  H5Handle attribute =
      attribute_handle(H5Acreate2(object, name, type, space, H5P_DEFAULT, H5P_DEFAULT), "H5Acreate2", where);
  if (data != nullptr) check_h5(H5Awrite(attribute.get(), type, data), "H5Awrite", where);
  attribute.close(where);
}

H5Handle open_attribute(hid_t object, const char* name, std::string_view context) {
  const std::string where = attribute_context(context, name);
  htri_t exists = H5Aexists(object, name);
  check_h5(exists, "H5Aexists", where);
  if (exists == 0) throw IoError(std::string(context) + ": attribute '" + name + "' is missing");
  return attribute_handle(H5Aopen(object, name, H5P_DEFAULT), "H5Aopen", where);
}

// The number of elements of an attribute's dataspace (0 for a null dataspace).
hssize_t attribute_elements(hid_t attribute, std::string_view where) {
  H5Handle space = dataspace_handle(H5Aget_space(attribute), "H5Aget_space", where);
  if (H5Sget_simple_extent_type(space.get()) == H5S_NULL) return 0;
  hssize_t n = H5Sget_simple_extent_npoints(space.get());
  check_h5(static_cast<herr_t>(n < 0 ? -1 : 0), "H5Sget_simple_extent_npoints", where);
  return n;
}

H5T_class_t attribute_class(hid_t attribute, std::string_view where, std::size_t* size = nullptr) {
  H5Handle type = type_handle(H5Aget_type(attribute), "H5Aget_type", where);
  if (size != nullptr) *size = H5Tget_size(type.get());
  // A variable-length string has the size of a pointer; it is not one of ours.
  if (H5Tget_class(type.get()) == H5T_STRING && H5Tis_variable_str(type.get()) != 0) return H5T_NO_CLASS;
  return H5Tget_class(type.get());
}

// The memory type to read a fixed-length string attribute of `width` bytes with, in the
// attribute's own character set: HDF5 converts none to another (an ASCII attribute, as h5py
// writes numpy's bytes, read as UTF-8 failed with "unable to convert between src and dst
// datatypes"), and ASCII is UTF-8's first half.
H5Handle string_type_of(hid_t attribute, std::size_t width, std::string_view where) {
  H5Handle type = string_type(width, where);
  H5Handle stored = type_handle(H5Aget_type(attribute), "H5Aget_type", where);
  const H5T_cset_t cset = H5Tget_cset(stored.get());
  if (cset == H5T_CSET_ASCII) check_h5(H5Tset_cset(type.get(), H5T_CSET_ASCII), "H5Tset_cset", where);
  return type;
}

// `elements` values of `width` bytes: IoError unless the attribute stores exactly that many
// bytes in the file, so that a reader never allocates more than it reads.
std::size_t attribute_bytes(hid_t attribute, hssize_t elements, std::size_t width, std::string_view context,
                            const char* name) {
  std::size_t bytes = 0;
  if (elements < 0 || __builtin_mul_overflow(static_cast<std::size_t>(elements), width, &bytes) ||
      H5Aget_storage_size(attribute) != bytes) {
    throw IoError(std::string(context) + ": attribute '" + name + "' has " + std::to_string(elements) +
                  " values of " + std::to_string(width) + " bytes but stores " +
                  std::to_string(H5Aget_storage_size(attribute)) + " bytes");
  }
  return bytes;
}

}  // namespace

void write_string_attribute(hid_t object, const char* name, std::string_view value, std::string_view context) {
  H5Handle type = string_type(value.size() + 1, context);
  H5Handle space = dataspace_handle(H5Screate(H5S_SCALAR), "H5Screate", context);
  std::string buffer(value);
  buffer.push_back('\0');
  write_attribute(object, name, type.get(), space.get(), buffer.data(), context);
}

void write_int64_attribute(hid_t object, const char* name, std::int64_t value, std::string_view context) {
  H5Handle space = dataspace_handle(H5Screate(H5S_SCALAR), "H5Screate", context);
  H5Handle type = type_handle(H5Tcopy(H5T_STD_I64LE), "H5Tcopy", context);
  const std::string where = attribute_context(context, name);
  if (H5Aexists(object, name) > 0) check_h5(H5Adelete(object, name), "H5Adelete", where);
  H5Handle attribute = attribute_handle(H5Acreate2(object, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                                        "H5Acreate2", where);
  check_h5(H5Awrite(attribute.get(), H5T_NATIVE_INT64, &value), "H5Awrite", where);
  attribute.close(where);
}

void write_uint64_attribute(hid_t object, const char* name, std::uint64_t value, std::string_view context) {
  H5Handle space = dataspace_handle(H5Screate(H5S_SCALAR), "H5Screate", context);
  const std::string where = attribute_context(context, name);
  H5Handle attribute = attribute_handle(H5Acreate2(object, name, H5T_STD_U64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                                        "H5Acreate2", where);
  check_h5(H5Awrite(attribute.get(), H5T_NATIVE_UINT64, &value), "H5Awrite", where);
  attribute.close(where);
}

void write_string_array_attribute(hid_t object, const char* name, const std::vector<std::string>& values,
                                  std::string_view context) {
  std::size_t width = 1;
  for (const auto& v : values) width = std::max(width, v.size() + 1);
  H5Handle type = string_type(width, context);
  if (values.empty()) {
    H5Handle space = dataspace_handle(H5Screate(H5S_NULL), "H5Screate", context);
    write_attribute(object, name, type.get(), space.get(), nullptr, context);
    return;
  }
  const hsize_t n = values.size();
  H5Handle space = dataspace_handle(H5Screate_simple(1, &n, nullptr), "H5Screate_simple", context);
  std::vector<char> buffer(width * values.size(), '\0');
  for (std::size_t i = 0; i < values.size(); ++i) std::memcpy(&buffer[i * width], values[i].data(), values[i].size());
  write_attribute(object, name, type.get(), space.get(), buffer.data(), context);
}

void write_int64_array_attribute(hid_t object, const char* name, const std::vector<std::int64_t>& values,
                                 std::string_view context) {
  const hsize_t n = values.size();
  H5Handle space = values.empty() ? dataspace_handle(H5Screate(H5S_NULL), "H5Screate", context)
                                  : dataspace_handle(H5Screate_simple(1, &n, nullptr), "H5Screate_simple", context);
  const std::string where = attribute_context(context, name);
  H5Handle attribute = attribute_handle(H5Acreate2(object, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                                        "H5Acreate2", where);
  if (!values.empty()) check_h5(H5Awrite(attribute.get(), H5T_NATIVE_INT64, values.data()), "H5Awrite", where);
  attribute.close(where);
}

bool has_attribute(hid_t object, const char* name, std::string_view context) {
  htri_t exists = H5Aexists(object, name);
  check_h5(exists, "H5Aexists", attribute_context(context, name));
  return exists > 0;
}

std::string read_string_attribute(hid_t object, const char* name, std::string_view context) {
  const std::string where = attribute_context(context, name);
  H5Handle attribute = open_attribute(object, name, context);
  std::size_t size = 0;
  if (attribute_class(attribute.get(), where, &size) != H5T_STRING || attribute_elements(attribute.get(), where) != 1) {
    throw IoError(std::string(context) + ": attribute '" + name + "' is not a string");
  }
  attribute_bytes(attribute.get(), 1, size, context, name);
  H5Handle type = string_type_of(attribute.get(), size, where);
  std::string buffer(size, '\0');
  check_h5(H5Aread(attribute.get(), type.get(), buffer.data()), "H5Aread", where);
  buffer.resize(std::strlen(buffer.c_str()));
  return buffer;
}

std::int64_t read_int64_attribute(hid_t object, const char* name, std::string_view context) {
  const std::string where = attribute_context(context, name);
  H5Handle attribute = open_attribute(object, name, context);
  std::size_t size = 0;
  if (attribute_class(attribute.get(), where, &size) != H5T_INTEGER || size != 8 ||
      attribute_elements(attribute.get(), where) != 1) {
    throw IoError(std::string(context) + ": attribute '" + name + "' is not a 64-bit integer");
  }
  std::int64_t value = 0;
  check_h5(H5Aread(attribute.get(), H5T_NATIVE_INT64, &value), "H5Aread", where);
  return value;
}

std::uint64_t read_uint64_attribute(hid_t object, const char* name, std::string_view context) {
  const std::string where = attribute_context(context, name);
  H5Handle attribute = open_attribute(object, name, context);
  std::size_t size = 0;
  if (attribute_class(attribute.get(), where, &size) != H5T_INTEGER || size != 8 ||
      attribute_elements(attribute.get(), where) != 1) {
    throw IoError(std::string(context) + ": attribute '" + name + "' is not a 64-bit integer");
  }
  std::uint64_t value = 0;
  check_h5(H5Aread(attribute.get(), H5T_NATIVE_UINT64, &value), "H5Aread", where);
  return value;
}

std::vector<std::string> read_string_array_attribute(hid_t object, const char* name, std::string_view context) {
  const std::string where = attribute_context(context, name);
  H5Handle attribute = open_attribute(object, name, context);
  std::size_t width = 0;
  if (attribute_class(attribute.get(), where, &width) != H5T_STRING) {
    throw IoError(std::string(context) + ": attribute '" + name + "' is not a string array");
  }
  const hssize_t n = attribute_elements(attribute.get(), where);
  if (n == 0) return {};
  const std::size_t bytes = attribute_bytes(attribute.get(), n, width, context, name);
  H5Handle type = string_type_of(attribute.get(), width, where);
  std::vector<char> buffer(bytes, '\0');
  check_h5(H5Aread(attribute.get(), type.get(), buffer.data()), "H5Aread", where);
  std::vector<std::string> values;
  for (hssize_t i = 0; i < n; ++i) {
    const char* start = &buffer[static_cast<std::size_t>(i) * width];
    values.emplace_back(start, strnlen(start, width));
  }
  return values;
}

std::vector<std::int64_t> read_int64_array_attribute(hid_t object, const char* name, std::string_view context) {
  const std::string where = attribute_context(context, name);
  H5Handle attribute = open_attribute(object, name, context);
  std::size_t size = 0;
  if (attribute_class(attribute.get(), where, &size) != H5T_INTEGER || size != 8) {
    throw IoError(std::string(context) + ": attribute '" + name + "' is not a 64-bit integer array");
  }
  const hssize_t n = attribute_elements(attribute.get(), where);
  attribute_bytes(attribute.get(), n, size, context, name);
  std::vector<std::int64_t> values(static_cast<std::size_t>(n));
  if (n > 0) check_h5(H5Aread(attribute.get(), H5T_NATIVE_INT64, values.data()), "H5Aread", where);
  return values;
}

std::pair<std::string, std::int64_t> read_format_and_version(hid_t file, const std::string& context,
                                                             ObjectTypes* objects) {
  if (!has_attribute(file, attr_format, context)) {
    throw IoError(context + ": not a tessera checkpoint (no '" + attr_format + "' attribute)");
  }
  std::string name = read_string_attribute(file, attr_format, context);
  if (name != format_name) {
    throw IoError(context + ": format is '" + name + "', expected '" + std::string(format_name) + "'");
  }
  const std::int64_t version = read_int64_attribute(file, attr_version, context);
  check_format_version(version, context);
  ObjectTypes found = reject_links(file, context);
  if (objects != nullptr) *objects = std::move(found);
  return {std::move(name), version};
}

void check_format_version(std::int64_t version, std::string_view context) {
  if (version < oldest_format_version || version > format_version) {
    throw IoError(std::string(context) + ": unknown format version " + std::to_string(version) +
                  " (this build reads versions " + std::to_string(oldest_format_version) + " to " +
                  std::to_string(format_version) + ")");
  }
}

std::vector<std::uint32_t> read_chunk_digest(hid_t dataset, std::uint64_t chunks, std::string_view context) {
  if (!has_attribute(dataset, attr_chunk_digest, context)) {
    throw IoError(std::string(context) + ": has no attribute '" + attr_chunk_digest +
                  "' (a version 2 checkpoint carries the checksum of every chunk)");
  }
  const std::vector<std::int64_t> values = read_int64_array_attribute(dataset, attr_chunk_digest, context);
  if (values.size() != chunks) {
    throw IoError(std::string(context) + ": attribute '" + attr_chunk_digest + "' has " +
                  std::to_string(values.size()) + " values for " + std::to_string(chunks) + " chunks");
  }
  std::vector<std::uint32_t> digest(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i] < 0 || values[i] > std::int64_t{0xffffffff}) {
      throw IoError(std::string(context) + ": attribute '" + attr_chunk_digest + "' value " + std::to_string(i) +
                    " is " + std::to_string(values[i]) + ", not a 32-bit checksum");
    }
    digest[i] = static_cast<std::uint32_t>(values[i]);
  }
  return digest;
}

Shape dataset_shape(hid_t dataset, std::string_view context) {
  H5Handle space = dataspace_handle(H5Dget_space(dataset), "H5Dget_space", context);
  if (H5Sget_simple_extent_type(space.get()) == H5S_NULL) {
    throw IoError(std::string(context) + ": has a null dataspace (no shape)");
  }
  const int rank = H5Sget_simple_extent_ndims(space.get());
  check_h5(rank < 0 ? -1 : 0, "H5Sget_simple_extent_ndims", context);
  std::vector<hsize_t> dims(rank);
  if (rank > 0)
    check_h5(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), "H5Sget_simple_extent_dims", context);
  for (auto d : dims) {
    if (d > static_cast<hsize_t>(INT64_MAX)) {
      throw IoError(std::string(context) + ": dimension " + std::to_string(d) + " is past the int64 range");
    }
  }
  return Shape(dims.begin(), dims.end());
}

std::int64_t read_step(hid_t file, const std::string& path, std::string_view context) {
  const std::int64_t step = read_int64_attribute(file, attr_step, context);
  if (step < 0) {
    throw IoError(std::string(context) + ": attribute '" + attr_step + "' is " + std::to_string(step) +
                  "; a step is >= 0");
  }
  const std::string name = std::filesystem::path(path).filename().string();
  if (const auto named = checkpoint_dir::parse_file_name(name); named && *named != step) {
    throw IoError(std::string(context) + ": attribute '" + attr_step + "' is " + std::to_string(step) +
                  " but the file's name is that of step " + std::to_string(*named) +
                  " (renamed, or copied in from another run?)");
  }
  return step;
}

void validate_mesh_axes(const std::vector<std::string>& names, const std::vector<std::int64_t>& sizes,
                        std::string_view context) {
  if (names.size() != sizes.size()) {
    throw IoError(std::string(context) + ": attribute '" + attr_mesh_sizes + "' has " + std::to_string(sizes.size()) +
                  " values but '" + attr_mesh_names + "' has " + std::to_string(names.size()));
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (names[i].empty()) {
      throw IoError(std::string(context) + ": attribute '" + attr_mesh_names + "' has an empty name at index " +
                    std::to_string(i));
    }
    if (sizes[i] < 1 || sizes[i] > INT_MAX) {
      throw IoError(std::string(context) + ": attribute '" + attr_mesh_sizes + "' gives axis '" + names[i] +
                    "' size " + std::to_string(sizes[i]) + "; a mesh axis size is 1.." + std::to_string(INT_MAX));
    }
  }
}

DatasetStorage dataset_storage(hid_t dataset, std::string_view context) {
  H5Handle create = plist_handle(H5Dget_create_plist(dataset), "H5Dget_create_plist", context);
  DatasetStorage storage;
  storage.external_files = H5Pget_external_count(create.get());
  check_h5(storage.external_files, "H5Pget_external_count", context);
  storage.layout = H5Pget_layout(create.get());
  if (storage.layout != H5D_CHUNKED) return storage;
  const int filters = H5Pget_nfilters(create.get());
  check_h5(filters, "H5Pget_nfilters", context);
  for (int f = 0; f < filters; ++f) {
    unsigned flags = 0, config = 0;
    std::size_t values = 0;
    const H5Z_filter_t id =
        H5Pget_filter2(create.get(), static_cast<unsigned>(f), &flags, &values, nullptr, 0, nullptr, &config);
    check_h5(id, "H5Pget_filter2", context);
    storage.filters.push_back(id);
  }
  const int rank = H5Pget_chunk(create.get(), 0, nullptr);
  check_h5(rank, "H5Pget_chunk", context);
  storage.chunk.resize(static_cast<std::size_t>(rank));
  if (rank > 0) check_h5(H5Pget_chunk(create.get(), rank, storage.chunk.data()), "H5Pget_chunk", context);
  return storage;
}

std::vector<hsize_t> direct_chunk_shape(hid_t dataset, const DatasetStorage& storage, std::string_view context) {
  if (storage.layout != H5D_CHUNKED || storage.filters.size() != 1 || storage.filters[0] != H5Z_FILTER_FLETCHER32) {
    return {};
  }
  H5Handle type = type_handle(H5Dget_type(dataset), "H5Dget_type", context);
  if (H5Tget_order(type.get()) != H5T_ORDER_LE) return {};
  return storage.chunk;
}

std::vector<hsize_t> validated_storage(hid_t dataset, const DatasetStorage& storage, const Shape& shape, DType dtype,
                                       std::uint64_t file_bytes, std::string_view context) {
  const std::string where(context);
  if (storage.external_files > 0) {
    throw IoError(where + ": is stored in external files; a checkpoint holds its data itself");
  }
  const H5D_layout_t layout = storage.layout;
  if (layout != H5D_CHUNKED && layout != H5D_CONTIGUOUS && layout != H5D_COMPACT) {
    throw IoError(where + ": has an unsupported storage layout (" + std::to_string(static_cast<int>(layout)) + ")");
  }
  // Bytes of `dims` elements, or IoError when that passes the file's length (or overflows).
  auto bounded_bytes = [&](const std::vector<std::uint64_t>& dims, const char* what) {
    std::uint64_t bytes = dtype_size(dtype);
    for (auto d : dims) {
      if (__builtin_mul_overflow(bytes, d, &bytes) || bytes > file_bytes) {
        std::string text;
        for (auto e : dims) text += (text.empty() ? "" : ", ") + std::to_string(e);
        throw IoError(where + ": " + what + " [" + text + "] holds more bytes than the file's " +
                      std::to_string(file_bytes));
      }
    }
    return bytes;
  };
  // Every element of a tessera dataset is stored (save writes every chunk), so its bytes fit in
  // the file; this also bounds the chunks a reader walks through.
  bounded_bytes(std::vector<std::uint64_t>(shape.begin(), shape.end()), "shape");
  if (layout != H5D_CHUNKED) return {};
  const std::vector<hsize_t>& chunk = storage.chunk;
  if (chunk.size() != shape.size()) {
    throw IoError(where + ": chunk rank " + std::to_string(chunk.size()) + " differs from the dataset's rank " +
                  std::to_string(shape.size()));
  }
  for (auto c : chunk) {
    if (c < 1) throw IoError(where + ": has a chunk dimension of size 0");
  }
  const std::uint64_t bytes = bounded_bytes(std::vector<std::uint64_t>(chunk.begin(), chunk.end()), "chunk");
  if (bytes > max_chunk_bytes) {
    throw IoError(where + ": chunk of " + std::to_string(bytes) + " bytes is past HDF5's limit");
  }
  // HDF5 allocates a filtered chunk's buffer from the stored size in the chunk index before it
  // reads it: a corrupt size (2.5 GiB in a 22 KiB file, found by the checkpoint fuzz target)
  // must be refused first. The number of chunks is bounded by the shape check above.
  // HDF5's Fletcher32 filter reads the 4 checksum bytes at the chunk's end without checking
  // that the chunk has them (a SEGV on a chunk stored with fewer; found by the checkpoint fuzz
  // target). A chunk stored as tessera stores it (Fletcher32 the only filter, applied) holds
  // exactly its bytes and the checksum.
  const bool fletcher32 =
      std::find(storage.filters.begin(), storage.filters.end(), H5Z_FILTER_FLETCHER32) != storage.filters.end();
  const bool tessera_chunks = storage.filters.size() == 1 && fletcher32;
  // HDF5 1.10 refuses H5S_ALL here: the dataset's own dataspace selects every chunk.
  H5Handle space = dataspace_handle(H5Dget_space(dataset), "H5Dget_space", context);
  hsize_t chunks = 0;
  check_h5(H5Dget_num_chunks(dataset, space.get(), &chunks), "H5Dget_num_chunks", context);
  std::vector<hsize_t> offset(chunk.size());
  for (hsize_t i = 0; i < chunks; ++i) {
    unsigned mask = 0;
    haddr_t address = HADDR_UNDEF;
    hsize_t stored = 0;
    check_h5(H5Dget_chunk_info(dataset, space.get(), i, offset.data(), &mask, &address, &stored), "H5Dget_chunk_info",
             context);
    hsize_t end = 0;
    if (address == HADDR_UNDEF || __builtin_add_overflow(address, stored, &end) || end > file_bytes) {
      std::string at;
      for (auto o : offset) at += (at.empty() ? "" : ", ") + std::to_string(o);
      throw IoError(where + ": chunk at [" + at + "] is stored with " + std::to_string(stored) + " bytes at offset " +
                    std::to_string(address) + ", past the file's " + std::to_string(file_bytes) + " bytes");
    }
    if ((tessera_chunks && (stored != bytes + 4 || mask != 0)) || (fletcher32 && stored < 4)) {
      std::string at;
      for (auto o : offset) at += (at.empty() ? "" : ", ") + std::to_string(o);
      throw IoError(where + ": chunk at [" + at + "] is stored with " + std::to_string(stored) +
                    " bytes and filter mask " + std::to_string(mask) + "; expected " + std::to_string(bytes + 4) +
                    " bytes (data and Fletcher32 checksum) and mask 0");
    }
  }
  return chunk;
}

namespace {

herr_t collect_link(hid_t, const char* name, const H5L_info_t* info, void* data) {
  static_cast<std::vector<std::pair<std::string, H5L_type_t>>*>(data)->emplace_back(name, info->type);
  return 0;
}

}  // namespace

ObjectTypes reject_links(hid_t file, std::string_view context) {
  // The groups are walked here, one H5Literate per group, each group entered once (by its object
  // address), not by HDF5's recursive H5Lvisit: a corrupt file whose links lead back to a group
  // sent that into endless recursion (the input tests/fuzz/corpus/checkpoint/cyclic-groups).
  ObjectTypes objects;
  std::set<haddr_t> seen;
  H5O_info_t root;
  check_h5(H5Oget_info2(file, &root, H5O_INFO_BASIC), "H5Oget_info", context);
  seen.insert(root.addr);
  std::vector<std::string> groups = {"/"};
  while (!groups.empty()) {
    const std::string group = std::move(groups.back());
    groups.pop_back();
    std::vector<std::pair<std::string, H5L_type_t>> links;
    check_h5(H5Literate_by_name(file, group.c_str(), H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_link, &links,
                                H5P_DEFAULT),
             "H5Literate", context);
    for (auto it = links.rbegin(); it != links.rend(); ++it) {
      const std::string path = group + it->first;
      if (it->second != H5L_TYPE_HARD) {
        const char* kind = it->second == H5L_TYPE_SOFT       ? "a soft"
                           : it->second == H5L_TYPE_EXTERNAL ? "an external"
                                                             : "a user-defined";
        throw IoError(std::string(context) + ": '" + path + "' is " + kind + " link; a checkpoint holds no links");
      }
      H5O_info_t info;
      check_h5(H5Oget_info_by_name2(file, path.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT), "H5Oget_info_by_name",
               context);
      objects.emplace(path, info.type);
      if (info.type != H5O_TYPE_GROUP) continue;
      if (!seen.insert(info.addr).second) {
        throw IoError(std::string(context) + ": '" + path +
                      "' links to a group met before; a checkpoint's groups form a tree");
      }
      groups.push_back(path + "/");
    }
  }
  return objects;
}

}  // namespace tessera::checkpoint_format
