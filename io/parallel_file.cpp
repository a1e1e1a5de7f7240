// HDF5 file access through MPI-IO (or one process), hyperslab selections and MPI hints.
#include "io/parallel_file.h"

#include <functional>

#include "core/dtype.h"
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

namespace {

// One line per fact that every rank must share.
std::vector<std::string> describe_state(const CheckpointState& state, bool whole_state, std::string_view place_kind,
                                        const std::string& place) {
  std::vector<std::string> lines;
  lines.push_back(std::string(place_kind) + " '" + place + "'");
  if (whole_state) {
    lines.push_back("step " + std::to_string(state.step));
    lines.push_back("seed " + std::to_string(state.seed));
    lines.push_back("a configuration of " + std::to_string(state.config.size()) + " bytes (hash " +
                    std::to_string(std::hash<std::string>{}(state.config)) + ")");
  }
  lines.push_back(std::to_string(state.arrays.size()) + (state.arrays.size() == 1 ? " array" : " arrays"));
  for (const auto& array : state.arrays) {
    const ShardedTensor& t = array.tensor();
    std::string line = "array '" + array.path + "' ";
    if (!t.mesh().valid()) {
      line += "without a mesh";
    } else {
      line += std::string(dtype_name(t.dtype())) + shape_to_string(t.global_shape()) + " " + t.spec().to_string() +
              " on " + t.mesh().shape().to_string();
    }
    if (!array.logical_names.empty()) {
      line += " named (";
      for (std::size_t i = 0; i < array.logical_names.size(); ++i) line += (i ? ", " : "") + array.logical_names[i];
      line += ")";
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& line : lines) text += line + '\n';
  return text;
}

}  // namespace

const Mesh* first_mesh(const CheckpointState& state) {
  for (const auto& array : state.arrays) {
    if (array.tensor().mesh().valid()) return &array.tensor().mesh();
  }
  return nullptr;
}

void agree_on_state(const CheckpointState& state, std::string_view what, bool whole_state, std::string_view place_kind,
                    const std::string& place) {
  const Communicator world = Communicator::world();
  const Mesh* mesh = first_mesh(state);
  const Communicator* comm = mesh != nullptr ? &mesh->comm() : &world;
  const std::vector<std::string> mine = describe_state(state, whole_state, place_kind, place);
  const std::string text = join_lines(mine);
  const std::uint64_t hash = std::hash<std::string>{}(text);
  std::uint64_t most[2] = {hash, ~hash};
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, most, 2, MPI_UINT64_T, MPI_MAX, comm->handle()), "MPI_Allreduce");
  if (most[0] == ~most[1]) return;  // the largest hash is the smallest: all alike
  const std::string first = broadcast_string(*comm, text, 0);
  std::optional<std::string> error;
  if (text != first) {
    std::vector<std::string> theirs;
    for (std::size_t begin = 0, end; begin < first.size(); begin = end + 1) {
      end = first.find('\n', begin);
      theirs.push_back(first.substr(begin, end - begin));
    }
    std::size_t k = 0;
    while (k < mine.size() && k < theirs.size() && mine[k] == theirs[k]) ++k;
    const std::string here = k < mine.size() ? mine[k] : "nothing more";
    const std::string there = k < theirs.size() ? theirs[k] : "nothing more";
    error = std::string(what) + ": this rank's arguments differ from rank 0's: " + here + " here, " + there +
            " on rank 0; every rank passes the same " + std::string(place_kind) +
            (whole_state ? ", step, seed, configuration and arrays" : " and arrays");
  }
  agree_or_throw<IoError>(*comm, error);
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
