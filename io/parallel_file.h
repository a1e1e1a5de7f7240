// HDF5 file access for save and restore: the mesh a state lives on, file access through MPI-IO
// (or one process), the hyperslab of a rank's block, and MPI-IO hints. Chunk addresses are in
// io/chunk_address.h, the agreement on file errors in io/io_errors.h.
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

// The mesh of the first array of `state` that has one (every array's, once agree_on_state and
// common_mesh have passed), or nullptr.
const Mesh* first_mesh(const CheckpointState& state);

// Collective over the communicator of the first array's mesh (the world's when no array has
// one): every rank must pass the same description of `state`: its arrays' count, paths, dtypes,
// global shapes, specs, meshes and logical names, and with `whole_state` also the step, the seed
// and the configuration. Ranks that passed different ones went on into collectives of different
// sizes or files of different names (an MPI-IO error, or a hang), or one rank refused alone. One
// all-reduce of a hash; only on a mismatch does rank 0's description go to every rank, and every
// rank throws the same IoError naming the first differing rank's first difference.
// The place the call names comes first: `place_kind` "directory" and `place` a save's directory,
// or "checkpoint path" and a restore's directory or file (ranks that named different ones wrote
// or read different files; a save's collective MPI-IO open failed with MPI_ERR_NO_SUCH_FILE).
void agree_on_state(const CheckpointState& state, std::string_view what, bool whole_state, std::string_view place_kind,
                    const std::string& place);

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

// The most bytes one MPI read or write moves here: MPI counts are ints.
inline constexpr std::uint64_t max_mpi_run = std::uint64_t{1} << 30;

// An MPI_Info holding `hints` (the caller frees it).
MPI_Info make_info(const std::vector<std::pair<std::string, std::string>>& hints);

}  // namespace tessera::checkpoint_io
