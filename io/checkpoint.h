// HDF5 checkpoints of sharded state, written and read with MPI-IO: save on one mesh, restore
// onto any mesh and spec, each rank touching only its own block. How save and restore move the
// bytes is at the top of io/save.cpp and io/restore.cpp. The file layout is in
// README.md ("Checkpoint format") and io/checkpoint_format.h.
//
// Errors are IoError. Errors one rank alone sees (a file it cannot open, a checksum failure in
// the block it reads) are agreed on with one collective, so every rank throws the same IoError.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "io/checkpoint_state.h"

namespace tessera {

struct SaveOptions {
  // Complete checkpoints kept in the directory after a save (the new one included); <= 0 keeps all.
  int keep = 3;
  // Largest chunk, in bytes: a block bigger than this is stored as several chunks (leading
  // dimensions divided first). 0: HDF5's limit, 4 GiB less the 4 checksum bytes. The default,
  // 8 MiB, bounds the buffer a restore reads a chunk into where it straddles the target's blocks,
  // and the buffer a save packs the edge chunk of a short block into.
  std::uint64_t max_chunk_bytes = std::uint64_t{8} << 20;
  // MPI-IO hints of the collective write of the chunks (ROMIO's names). Each rank writes whole
  // chunks, so the default sends each straight to the file instead of through collective
  // buffering's aggregators, and never reads a gap back (data sieving).
  std::vector<std::pair<std::string, std::string>> mpi_io_hints = {{"romio_cb_write", "disable"},
                                                                   {"romio_ds_write", "disable"}};
  // Checkpoints beyond `keep` are unlinked by a thread of rank 0 after the save returns (holding
  // the directory's lock if the save took it), so the step does not wait for the file system to
  // free them; the next save, wait_for_pruning() and the process's exit wait for it. false:
  // removed before the save returns.
  bool prune_in_background = true;
};

// Where this rank's last successful save_checkpoint (and the saves built on it) spent its time,
// in seconds from its start on this rank: `laid_out` when the skeleton was written, the chunks'
// addresses broadcast and their checksums reduced, `written` when this rank's chunks were written
// and every rank had synced and closed the file, `returned` when it returned (the digest written,
// the file committed). All zero before the first. For benchmarks: bench_checkpoint reports each
// phase as the slowest rank saw it (`save_phases_s`). Local (no MPI).
struct SavePhases {
  double laid_out = 0;
  double written = 0;
  double returned = 0;
};
SavePhases last_save_phases();

// Rank 0 (a no-op elsewhere): waits until the removal of old checkpoints a save left running
// is done, so that the directory holds at most `keep` of them.
void wait_for_pruning();

// Collective over the arrays' mesh (MPI_COMM_WORLD when there are no arrays). Writes
// <dir>/ckpt_<step, 8 digits>.h5 (rank 0 lays it out, each block's owner writes its chunks with
// one collective MPI-IO write) atomically: under a temporary name, fsync'd after every rank
// closed it, then one rename by rank 0, then the `latest` pointer file, then checkpoints beyond
// `keep` and leftovers of interrupted saves are removed (by default on a thread of rank 0 after
// the save returns: SaveOptions::prune_in_background). Returns the final path. Arrays must be
// on one mesh and not partial (reshard them first). Each block is written once: only the
// replica at coordinate 0 of every mesh axis the spec does not use writes. Every rank passes the
// same directory, step, seed, config and arrays (paths, dtypes, global shapes, specs, mesh,
// logical names): checked first with one all-reduce of a hash, and a rank whose arguments differ
// from rank 0's is named in an IoError on every rank before anything is written.
std::string save_checkpoint(const CheckpointState& state, const std::string& dir, const SaveOptions& options = {});

// Collective over the target arrays' mesh. `dir_or_file` is a checkpoint file or a directory
// (its latest complete checkpoint). `target` lists the arrays wanted with the mesh, spec, global
// shape and dtype wanted; each rank reads only its block of the TARGET spec. Format name and
// version, presence, global shape, dtype and every chunk's Fletcher32 checksum are validated
// before returning; the returned state holds the step, seed, config and the filled arrays. Every
// rank passes the same target arrays (checked first, as save_checkpoint's state).
CheckpointState restore_checkpoint(const std::string& dir_or_file, const CheckpointState& target);

// The same, into the target's own storage: every array's block (held or borrowed, see
// CheckpointArray::borrow) is filled in place, and `target`'s step, seed and config are set. No
// copy of the state is made: the only memory a restore adds is a chunk that straddles blocks.
// On an error (the same IoError on every rank) the arrays' contents are unspecified.
void restore_checkpoint_into(const std::string& dir_or_file, CheckpointState& target);

// Where this rank's last successful restore (restore_checkpoint_into, and the restores built on
// it) spent its time, in seconds from its start on this rank: `planned` when this rank held the
// plan (the file resolved, rank 0's plan of its metadata broadcast), `read` when its blocks were
// read and checked, `returned` when it returned (after every rank had read and the outcome was
// agreed). All zero before the first. For benchmarks: bench_checkpoint reports each phase as the
// slowest rank saw it (`restore_phases_s`). Local (no MPI).
struct RestorePhases {
  double planned = 0;
  double read = 0;
  double returned = 0;
};
RestorePhases last_restore_phases();

// The newest complete checkpoint in `dir`, or nullopt. Local (no MPI).
std::optional<std::string> latest_checkpoint(const std::string& dir);
// The checkpoint file a path names: the path itself, or for a directory its newest complete
// checkpoint. IoError, naming `what` (the caller), when a directory holds none or nothing exists
// at the path. Local (no MPI).
std::string resolve_checkpoint(const std::string& dir_or_file, std::string_view what);

struct CheckpointArrayInfo {
  std::string path;  // without leading slash, as in CheckpointArray
  Shape shape;
  std::string spec;  // JAX-style text, as saved
  std::vector<std::string> logical_names;
  DType dtype = DType::f32;
  std::vector<std::int64_t> chunk;  // chunk shape in the file (empty when not chunked)
};

struct CheckpointInfo {
  std::string file;
  std::string format;
  std::int64_t version = 0;
  std::int64_t step = 0;
  std::uint64_t seed = 0;
  std::string config;
  std::vector<std::string> mesh_axis_names;
  std::vector<int> mesh_axis_sizes;
  std::vector<CheckpointArrayInfo> arrays;  // sorted by path
};

// Reads the root attributes and every array's metadata (no data). Local: may run on one rank.
// Throws IoError naming the file (and dataset) when it is not a tessera checkpoint.
CheckpointInfo read_checkpoint_info(const std::string& file);

// Reads the root attributes only (format, version, step, seed, config), as a restore reads them;
// `mesh_axis_*` and `arrays` stay empty. Local. Throws IoError naming the file where a restore
// would refuse them too, so a check before a restore can leave the file's faults to the restore.
CheckpointInfo read_checkpoint_root(const std::string& file);

// Reads every chunk of every dataset so each Fletcher32 checksum is checked. Local. Returns true
// when all pass; `report` (optional) gets one line per array and the first failure's message.
bool verify_checkpoint(const std::string& file, std::string* report = nullptr);

}  // namespace tessera
