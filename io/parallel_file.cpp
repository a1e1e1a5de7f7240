// HDF5 file access through MPI-IO (or one process), hyperslab selections and MPI hints.
#include "io/parallel_file.h"

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


MPI_Info make_info(const std::vector<std::pair<std::string, std::string>>& hints) {
  MPI_Info info = MPI_INFO_NULL;
  check_mpi(MPI_Info_create(&info), "MPI_Info_create");
  for (const auto& [key, value] : hints) check_mpi(MPI_Info_set(info, key.c_str(), value.c_str()), "MPI_Info_set");
  return info;
}

}  // namespace tessera::checkpoint_io
