// The tessera checkpoint file format (format "tessera-checkpoint", version 2) and the attribute
// helpers that read and write it. One place names every attribute, so save, restore, info and
// the README agree:
//   root:     format, format_version, step, seed, config, mesh_axis_names, mesh_axis_sizes, mesh
//   /<path>:  one dataset per array with its GLOBAL shape and HDF5 element type; attributes
//             spec (JAX text), logical_names (string array), dtype ("f32", "f64", "i32",
//             "bf16"). bf16 is stored as its bits, H5T_STD_U16LE, with dtype "bf16": h5py and
//             h5dump read the bits losslessly; f32 = (uint32(bits) << 16) viewed as float32.
//   chunks:   the saved spec's block shape, Fletcher32 per chunk; scalars are compact datasets
//             (kept in the object header, whose checksum covers them).
//   digest:   (version 2) every chunked dataset's attribute chunk_fletcher32: the Fletcher32 of
//             each chunk in row-major chunk-grid order, written after every rank's data is on
//             disk. A chunk that was never written reads as zeros with a zero checksum, which
//             HDF5's filter accepts; the digest says what its checksum must be.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

namespace tessera::checkpoint_format {

inline constexpr std::string_view format_name = "tessera-checkpoint";
inline constexpr std::int64_t format_version = 2;
// The oldest version this build reads: version 1 files have no chunk digest.
inline constexpr std::int64_t oldest_format_version = 1;

// Root attributes.
inline constexpr const char* attr_format = "format";
inline constexpr const char* attr_version = "format_version";
inline constexpr const char* attr_step = "step";
inline constexpr const char* attr_seed = "seed";
inline constexpr const char* attr_config = "config";
inline constexpr const char* attr_mesh_names = "mesh_axis_names";
inline constexpr const char* attr_mesh_sizes = "mesh_axis_sizes";
inline constexpr const char* attr_mesh = "mesh";
// Dataset attributes.
inline constexpr const char* attr_spec = "spec";
inline constexpr const char* attr_logical_names = "logical_names";
inline constexpr const char* attr_dtype = "dtype";
inline constexpr const char* attr_chunk_digest = "chunk_fletcher32";

// Every object of a file by its absolute path ("/params/W1"), the root left out, and its type.
using ObjectTypes = std::map<std::string, H5O_type_t>;

// A dataset's storage as its creation properties give it: the layout, the number of external
// files and, where the layout is chunked, the filters in pipeline order and the chunk's shape.
// Read once per dataset (dataset_storage) for every check that needs it: HDF5 copies the whole
// property list on each H5Dget_create_plist (3.7 us, against 2.3 for opening the dataset).
struct DatasetStorage {
  H5D_layout_t layout = H5D_LAYOUT_ERROR;
  int external_files = 0;
  std::vector<H5Z_filter_t> filters;
  std::vector<hsize_t> chunk;
};
DatasetStorage dataset_storage(hid_t dataset, std::string_view context);

// Throws IoError "<context>: unknown format version V (this build reads versions 1 to 2)"
// unless this build reads `version`.
void check_format_version(std::int64_t version, std::string_view context);
// The root's identity: IoError unless `file` carries the format attribute with format_name and a
// version this build reads (check_format_version), and no links. Returns {format, version}, and
// into `objects`, where given, the objects reject_links found.
std::pair<std::string, std::int64_t> read_format_and_version(hid_t file, const std::string& context,
                                                             ObjectTypes* objects = nullptr);

// A dataset's chunk digest (attribute chunk_fletcher32), checked to hold `chunks` values, each a
// 32-bit checksum. Throws IoError naming the attribute when it is missing or malformed.
std::vector<std::uint32_t> read_chunk_digest(hid_t dataset, std::uint64_t chunks, std::string_view context);

// Throws IoError unless `path` is a relative slash-separated path with non-empty components
// other than "." and "..".
void validate_array_path(const std::string& path);
// The HDF5 name of an array's dataset: "/" + path.
inline std::string dataset_name(const std::string& path) { return "/" + path; }

// The HDF5 type of an element in memory (native) and in the file (little-endian standard; bf16:
// its 16 bits as H5T_STD_U16LE).
hid_t memory_type(DType dtype);
hid_t file_type(DType dtype);
// True when the dataset's HDF5 type is the file type of `dtype` (class, size, sign). For bf16 the
// reader also checks the dtype attribute (a plain uint16 dataset is not bf16).
// The stored type in words, for messages: "64-bit floats", "16-bit unsigned integers", "strings".
std::string type_text(hid_t dataset_type);
bool type_matches(hid_t dataset_type, DType dtype);

// HDF5 stores a filtered chunk's size in 32 bits; Fletcher32 adds 4 bytes to each chunk.
inline constexpr std::uint64_t max_chunk_bytes = (std::uint64_t{1} << 32) - 1 - 4;

// The chunk shape for a dataset saved with blocks of `block` elements: the block itself, with
// leading dimensions divided by their smallest prime factors while a chunk holds more than
// `limit` bytes. Each chunk therefore lies inside one block (its owner writes it whole).
std::vector<hsize_t> chunk_shape(const Shape& block, DType dtype, std::uint64_t limit = max_chunk_bytes);

// Attribute writers (collective in a parallel file: every rank writes the same value).
// `context` names the file and object in error messages.
void write_string_attribute(hid_t object, const char* name, std::string_view value, std::string_view context);
void write_int64_attribute(hid_t object, const char* name, std::int64_t value, std::string_view context);
void write_uint64_attribute(hid_t object, const char* name, std::uint64_t value, std::string_view context);
void write_string_array_attribute(hid_t object, const char* name, const std::vector<std::string>& values,
                                  std::string_view context);
void write_int64_array_attribute(hid_t object, const char* name, const std::vector<std::int64_t>& values,
                                 std::string_view context);

// Attribute readers; throw IoError("<context>: attribute '<name>' ...") when it is missing or
// of another kind.
bool has_attribute(hid_t object, const char* name, std::string_view context);
std::string read_string_attribute(hid_t object, const char* name, std::string_view context);
std::int64_t read_int64_attribute(hid_t object, const char* name, std::string_view context);
std::uint64_t read_uint64_attribute(hid_t object, const char* name, std::string_view context);
std::vector<std::string> read_string_array_attribute(hid_t object, const char* name, std::string_view context);
std::vector<std::int64_t> read_int64_array_attribute(hid_t object, const char* name, std::string_view context);

// The global shape of a dataset (IoError for a null dataspace or a dimension past int64).
Shape dataset_shape(hid_t dataset, std::string_view context);

// The chunk shape of a dataset stored as tessera saves it (chunked, Fletcher32 its only filter,
// little-endian), whose chunks a reader takes directly and checks against the file's digest
// (version 2); empty for any other dataset (another writer's: contiguous, compressed, big-endian).
std::vector<hsize_t> direct_chunk_shape(hid_t dataset, const DatasetStorage& storage, std::string_view context);

// Checks of what a reader takes from a file before it uses it (the file may be corrupt or
// hostile). Each throws IoError("<context>: ...") naming the attribute or dataset.
//
// The root's step attribute, which must be >= 0 and, where the file at `path` has a checkpoint's
// name (ckpt_<step>.h5), that name's step: a directory orders its checkpoints by their names, so
// a file renamed or copied in under another step would be resumed from as the newest and its
// save would prune the checkpoints of the steps between.
std::int64_t read_step(hid_t file, const std::string& path, std::string_view context);
// The mesh attributes: as many sizes as names, every size in 1..INT_MAX, names non-empty.
void validate_mesh_axes(const std::vector<std::string>& names, const std::vector<std::int64_t>& sizes,
                        std::string_view context);
// A dataset's storage: no external files, no virtual layout; the whole dataset holds at most
// `file_bytes` bytes (every element of a saved dataset is stored); a chunked dataset's chunk has
// the dataset's rank, every size >= 1 and at most `file_bytes` (and max_chunk_bytes) bytes. Returns the chunk shape (empty when not
// chunked). `file_bytes` bounds every buffer a reader allocates for the dataset. `storage` is
// the dataset's (dataset_storage).
std::vector<hsize_t> validated_storage(hid_t dataset, const DatasetStorage& storage, const Shape& shape, DType dtype,
                                       std::uint64_t file_bytes, std::string_view context);
// Every link in the file is a hard link (a soft or external link would point a reader elsewhere).
// Returns what the walk found: every object the file's links reach, by each of its paths.
ObjectTypes reject_links(hid_t file, std::string_view context);

// "file 'x.h5'" and "file 'x.h5', dataset '/params/W1'" for messages.
std::string file_context(const std::string& file);
std::string dataset_context(const std::string& file, const std::string& path);

}  // namespace tessera::checkpoint_format
