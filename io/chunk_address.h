// A checkpoint's chunks: whether one is a single run of a rank's block, its coordinates in
// messages, and the file address of a Fletcher32-filtered chunk (what save writes and restore
// reads directly, without HDF5's filter pipeline).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/shape.h"

namespace tessera::checkpoint_io {

// True when a chunk of shape `chunk` inside a row-major block of shape `block` is one run of
// memory: past the leading dimensions where the chunk has extent 1, at most one dimension is
// cut and every later one is spanned whole.
bool chunk_is_contiguous(const Shape& block, const std::vector<hsize_t>& chunk);

// "(0, 256)": a chunk's starting element, for messages.
std::string coords_text(const std::vector<hsize_t>& coords);

// The file address of the Fletcher32-filtered chunk starting at element `start`, after checking
// that it exists and is stored as its `chunk_bytes` plus the 4 checksum bytes, unfiltered mask 0
// (what save writes and restore reads directly). Throws IoError naming the chunk otherwise.
haddr_t filtered_chunk_address(hid_t dataset, const std::vector<hsize_t>& start, std::uint64_t chunk_bytes,
                               std::string_view context);

}  // namespace tessera::checkpoint_io
