// check_deflated_chunks (see inflate_check.h): each allocated chunk's stored bytes, read raw with
// H5Dread_chunk, inflated by zlib into a 64 KiB scratch buffer and counted.
#include "io/inflate_check.h"

#include <zlib.h>

#include <array>
#include <climits>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/chunk_address.h"
#include "io/hdf5_handle.h"

namespace tessera::checkpoint_io {

namespace {

// The bytes a deflate stream inflates to, counted up to `bound` + 1 (more are not inflated), or
// -1 when the stream is not one zlib reads to its end.
std::int64_t inflated_bytes(const std::vector<unsigned char>& stored, std::uint64_t bound) {
  if (stored.size() > UINT_MAX) return -1;
  z_stream z{};
  z.next_in = const_cast<Bytef*>(stored.data());
  z.avail_in = static_cast<uInt>(stored.size());
  if (inflateInit(&z) != Z_OK) return -1;
  std::array<unsigned char, 65536> scratch;
  std::int64_t result = -1;
  while (true) {
    z.next_out = scratch.data();
    z.avail_out = static_cast<uInt>(scratch.size());
    const int status = inflate(&z, Z_NO_FLUSH);
    if (status == Z_STREAM_END) {
      result = static_cast<std::int64_t>(z.total_out);
      break;
    }
    if (z.total_out > bound) {  // enough to refuse the chunk
      result = static_cast<std::int64_t>(z.total_out);
      break;
    }
    // Z_OK with output space left means the input ran out before the stream's end.
    if (status != Z_OK || z.avail_out != 0) break;
  }
  inflateEnd(&z);
  return result;
}

}  // namespace

void check_deflated_chunks(hid_t dataset, const checkpoint_format::DatasetStorage& storage, std::uint64_t file_bytes,
                           std::string_view context) {
  const std::string where(context);
  if (storage.layout != H5D_CHUNKED) return;
  int deflate = -1;
  for (std::size_t i = 0; i < storage.filters.size(); ++i) {
    const H5Z_filter_t id = storage.filters[i];
    if (id == H5Z_FILTER_DEFLATE) {
      deflate = static_cast<int>(i);
    } else if (deflate >= 0 && id != H5Z_FILTER_FLETCHER32) {
      throw IoError(where + ": its deflated chunks pass through filter " + std::to_string(id) +
                    " after deflate; a checkpoint's reader takes deflate last, or before Fletcher32 only");
    }
  }
  if (deflate < 0) return;
  const std::vector<hsize_t>& chunk = storage.chunk;
  const int rank = static_cast<int>(chunk.size());
  H5Handle type = type_handle(H5Dget_type(dataset), "H5Dget_type", context);
  H5Handle space = dataspace_handle(H5Dget_space(dataset), "H5Dget_space", context);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0) check_h5(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), "H5Sget_simple_extent_dims", context);
  for (const hsize_t d : dims) {
    if (d == 0) return;  // no chunk
  }
  // The chunk's bytes (the reader checked the dataset's, and so the chunk's, against the file).
  std::uint64_t bound = H5Tget_size(type.get());
  for (const hsize_t c : chunk) bound *= c;
  std::vector<hsize_t> coords(chunk.size(), 0), offset(chunk.size());
  std::vector<unsigned char> stored;
  while (true) {
    for (std::size_t d = 0; d < chunk.size(); ++d) offset[d] = coords[d] * chunk[d];
    unsigned mask = 0;
    haddr_t address = HADDR_UNDEF;
    hsize_t size = 0;
    check_h5(H5Dget_chunk_info_by_coord(dataset, offset.data(), &mask, &address, &size), "H5Dget_chunk_info_by_coord",
             context);
    // An unallocated chunk is read as the fill value; one whose mask skipped deflate is not deflated.
    if (address != HADDR_UNDEF && (mask & (1u << deflate)) == 0) {
      if (size > file_bytes) {
        throw IoError(where + ": chunk at " + coords_text(offset) + " stores " + std::to_string(size) +
                      " bytes, more than the file's " + std::to_string(file_bytes) + " (the file is corrupt)");
      }
      stored.resize(static_cast<std::size_t>(size));
      unsigned read_mask = 0;
      check_h5(H5Dread_chunk(dataset, H5P_DEFAULT, offset.data(), &read_mask, stored.data()), "H5Dread_chunk", context);
      const std::int64_t inflated = inflated_bytes(stored, bound);
      if (inflated < 0) {
        throw IoError(where + ": chunk at " + coords_text(offset) +
                      " is not a deflate stream that zlib reads to its end (the file is corrupt)");
      }
      if (static_cast<std::uint64_t>(inflated) > bound) {
        throw IoError(where + ": chunk at " + coords_text(offset) + " inflates past " + std::to_string(bound) +
                      " bytes, the most a chunk of this dataset holds (the file is corrupt)");
      }
    }
    std::size_t d = chunk.size();
    while (d-- > 0) {  // odometer over the chunk grid, last dimension fastest
      if (++coords[d] * chunk[d] < dims[d]) break;
      coords[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1)) break;
  }
}

}  // namespace tessera::checkpoint_io
