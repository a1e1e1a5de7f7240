// Shared pieces of parallel save and restore.
#include "io/parallel_file.h"

#include "core/checked.h"
#include "mesh/agree.h"
#include "mesh/mpi_check.h"

namespace tessera::checkpoint_io {

const Mesh* common_mesh(const CheckpointState& state, std::string_view what) {
  const Mesh* mesh = nullptr;
  for (const auto& array : state.arrays) {
    const Mesh& m = array.tensor().mesh();
    if (!m.valid()) throw IoError(std::string(what) + ": array '" + array.path + "' has no mesh");
    if (mesh == nullptr) {
      mesh = &m;
    } else if (!(m.shape() == mesh->shape())) {
      throw IoError(std::string(what) + ": array '" + array.path + "' is on " + m.to_string() + " but '" +
                    state.arrays.front().path + "' is on " + mesh->to_string() + "; a checkpoint holds one mesh");
    }
  }
  return mesh;
}

H5Handle parallel_file_access(MPI_Comm comm, std::string_view context) {
  H5Handle fapl = plist_handle(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate", context);
  check_h5(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL), "H5Pset_fapl_mpio", context);
  check_h5(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST), "H5Pset_libver_bounds", context);
  return fapl;
}

std::string mpi_io_name(const std::string& path) { return path.find(':') == std::string::npos ? path : "ufs:" + path; }

H5Handle local_file_access(std::string_view context) {
  H5Handle fapl = plist_handle(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate", context);
  check_h5(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST), "H5Pset_libver_bounds", context);
  return fapl;
}

H5Handle transfer_properties(H5FD_mpio_xfer_t mode, std::string_view context) {
  H5Handle dxpl = plist_handle(H5Pcreate(H5P_DATASET_XFER), "H5Pcreate", context);
  check_h5(H5Pset_dxpl_mpio(dxpl.get(), mode), "H5Pset_dxpl_mpio", context);
  return dxpl;
}

H5Handle select_block(hid_t dataset, const std::vector<std::int64_t>& offsets, const Shape& block, bool take_part,
                      std::string_view context) {
  H5Handle space = dataspace_handle(H5Dget_space(dataset), "H5Dget_space", context);
  if (!take_part) {
    check_h5(H5Sselect_none(space.get()), "H5Sselect_none", context);
  } else if (!block.empty()) {
    std::vector<hsize_t> start(offsets.begin(), offsets.end());
    std::vector<hsize_t> count(block.begin(), block.end());
    check_h5(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
             "H5Sselect_hyperslab", context);
  }
  return space;
}

H5Handle memory_space(const Shape& block, bool take_part, std::string_view context) {
  H5Handle space;
  if (block.empty()) {
    space = dataspace_handle(H5Screate(H5S_SCALAR), "H5Screate", context);
  } else {
    std::vector<hsize_t> dims(block.begin(), block.end());
    space = dataspace_handle(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), "H5Screate_simple",
                             context);
  }
  if (!take_part) check_h5(H5Sselect_none(space.get()), "H5Sselect_none", context);
  return space;
}

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

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<std::size_t>(length));
}

MPI_Info make_info(const std::vector<std::pair<std::string, std::string>>& hints) {
  MPI_Info info = MPI_INFO_NULL;
  check_mpi(MPI_Info_create(&info), "MPI_Info_create");
  for (const auto& [key, value] : hints) check_mpi(MPI_Info_set(info, key.c_str(), value.c_str()), "MPI_Info_set");
  return info;
}

std::string broadcast_string(const Communicator& comm, std::string value, int root) {
  int length = static_cast<int>(value.size());
  check_mpi(MPI_Bcast(&length, 1, MPI_INT, root, comm.handle()), "MPI_Bcast");
  value.resize(length);
  check_mpi(MPI_Bcast(value.data(), length, MPI_CHAR, root, comm.handle()), "MPI_Bcast");
  return value;
}

void throw_io_error(const std::string& message) {
  for (const char* phrase : {corrupt_phrase, incomplete_phrase, truncated_phrase}) {
    if (message.find(phrase) != std::string::npos) throw IntegrityError(message);
  }
  throw IoError(message);
}

void agree_or_throw_io(const Communicator& comm, const std::optional<std::string>& local_error) {
  if (auto message = first_error(comm, local_error)) throw_io_error(*message);
}

}  // namespace tessera::checkpoint_io
