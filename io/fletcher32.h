// The checksum of HDF5's Fletcher32 filter (H5Z_FILTER_FLETCHER32), computed by the rank that
// owns a chunk so that it can write the filtered chunk (its bytes, then these four bytes,
// little-endian) straight into the file (io/save.cpp). HDF5 verifies it on every read.
//
// The sum runs over the bytes as big-endian 16-bit words (an odd last byte is the high byte of
// a last word), two running sums folded to 16 bits every 360 words, exactly as HDF5 does, so
// the result is bit-identical to the filter's (tests/io/chunk_io_test.cpp checks it against
// chunks HDF5 filtered itself).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace tessera::checkpoint_io {

std::uint32_t fletcher32(const void* data, std::size_t bytes);

// The four bytes HDF5 appends to a filtered chunk.
inline std::array<unsigned char, 4> fletcher32_trailer(std::uint32_t sum) {
  return {static_cast<unsigned char>(sum), static_cast<unsigned char>(sum >> 8),
          static_cast<unsigned char>(sum >> 16), static_cast<unsigned char>(sum >> 24)};
}

// The checksum those four bytes hold.
inline std::uint32_t fletcher32_from_trailer(const unsigned char* trailer) {
  return static_cast<std::uint32_t>(trailer[0]) | static_cast<std::uint32_t>(trailer[1]) << 8 |
         static_cast<std::uint32_t>(trailer[2]) << 16 | static_cast<std::uint32_t>(trailer[3]) << 24;
}

}  // namespace tessera::checkpoint_io
