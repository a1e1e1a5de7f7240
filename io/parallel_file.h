// What save and restore share: the mesh a state lives on, parallel file access through MPI-IO,
// the hyperslab of a rank's block, and running a rank-local step whose failure is then agreed
// on by every rank (so no rank throws alone while another waits in a collective).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/shape.h"
#include "io/checkpoint_state.h"
#include "io/hdf5_handle.h"
#include "mesh/communicator.h"
#include "mesh/mesh.h"

namespace tessera::checkpoint_io {

// The mesh every array of `state` lives on, or nullptr when there are none. Throws IoError when
// two arrays are on meshes of different shapes. `what` names the caller in messages.
const Mesh* common_mesh(const CheckpointState& state, std::string_view what);

// File access through MPI-IO over `comm` (ROMIO: see docs/design.md), with the 1.8 file format as
// the oldest allowed so object headers carry checksums.
H5Handle parallel_file_access(MPI_Comm comm, std::string_view context);
// The name to give HDF5's MPI-IO driver for `path`. ROMIO reads "xyz:" at the start of a file
// name as a file-system prefix, so a path with a colon anywhere ("run_data:2/ckpt.h5") is
// passed as "ufs:<path>" (the generic POSIX driver); other paths go through unchanged.
std::string mpi_io_name(const std::string& path);
// File access for one process (info, verify), same format bounds.
H5Handle local_file_access(std::string_view context);
// Data transfer: collective or independent MPI-IO.
H5Handle transfer_properties(H5FD_mpio_xfer_t mode, std::string_view context);

// The file dataspace of `dataset` with the block [offsets, offsets + block) selected, or nothing
// selected when `take_part` is false (the rank still joins a collective transfer).
H5Handle select_block(hid_t dataset, const std::vector<std::int64_t>& offsets, const Shape& block, bool take_part,
                      std::string_view context);
// The memory dataspace of a block of shape `block` (scalar for rank 0), all or nothing selected.
H5Handle memory_space(const Shape& block, bool take_part, std::string_view context);

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

// The most bytes one MPI read or write moves here: MPI counts are ints.
inline constexpr std::uint64_t max_mpi_run = std::uint64_t{1} << 30;

// An MPI_Info holding `hints` (the caller frees it).
MPI_Info make_info(const std::vector<std::pair<std::string, std::string>>& hints);

// Runs `step` and returns the message of the tessera::Error (or std::exception) it threw, so
// the caller can agree on it with first_error before anything else.
template <class F>
std::optional<std::string> capture_error(F&& step) {
  try {
    step();
  } catch (const std::exception& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

// Every message of a data integrity failure ends in one of these phrases, so that an error agreed
// on as text (agree.h) is raised again as an IntegrityError.
inline constexpr const char* corrupt_phrase = "the file is corrupt";
inline constexpr const char* incomplete_phrase = "the file is incomplete";
inline constexpr const char* truncated_phrase = "truncated file";

// Throws IntegrityError(message) when it names an integrity failure, else IoError(message).
[[noreturn]] void throw_io_error(const std::string& message);

// Collective: every rank throws the first error any rank passed (see throw_io_error).
void agree_or_throw_io(const Communicator& comm, const std::optional<std::string>& local_error);

}  // namespace tessera::checkpoint_io
