// Where a filtered chunk lives in the file and whether it is one run of a rank's block.
#include "io/chunk_address.h"

#include "core/checked.h"
#include "core/error.h"
#include "io/hdf5_handle.h"

namespace tessera::checkpoint_io {

bool chunk_is_contiguous(const Shape& block, const std::vector<hsize_t>& chunk) {
  std::size_t d = 0;
  while (d < chunk.size() && chunk[d] == 1) ++d;
  for (std::size_t k = d + 1; k < chunk.size(); ++k) {
    if (static_cast<std::int64_t>(chunk[k]) != block[k]) return false;
  }
  return true;
}

std::string coords_text(const std::vector<hsize_t>& coords) {
  std::string text = "(";
  for (std::size_t d = 0; d < coords.size(); ++d) text += (d > 0 ? ", " : "") + std::to_string(coords[d]);
  return text + ")";
}

haddr_t filtered_chunk_address(hid_t dataset, const std::vector<hsize_t>& start, std::uint64_t chunk_bytes,
                               std::string_view context) {
  const std::string where = coords_text(start);
  unsigned mask = 0;
  haddr_t address = HADDR_UNDEF;
  hsize_t stored = 0;
  check_h5(H5Dget_chunk_info_by_coord(dataset, start.data(), &mask, &address, &stored), "H5Dget_chunk_info_by_coord",
           context);
  if (address == HADDR_UNDEF) throw IoError(std::string(context) + ": chunk at " + where + " is missing");
  // The chunk's end must be a file offset: readers add the size to the address.
  (void)checked_cast<std::int64_t>(checked_add<std::uint64_t>(address, stored, "chunk end offset"), "chunk end offset");
  if (stored != chunk_bytes + 4 || mask != 0) {
    throw IoError(std::string(context) + ": chunk at " + where + " is stored with " + std::to_string(stored) +
                  " bytes and filter mask " + std::to_string(mask) + "; expected " + std::to_string(chunk_bytes + 4) +
                  " bytes and mask 0");
  }
  return address;
}

}  // namespace tessera::checkpoint_io
