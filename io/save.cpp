// save_checkpoint: one HDF5 file per checkpoint; rank 0 writes its skeleton, every block's owner
// writes its chunks with one collective MPI-IO call, and rank 0 commits it by rename.
//
// Phases, each ended by one agreement so that every rank throws the same IoError:
//   1. rank 0 creates the directory and writes the temporary file's skeleton through the skeleton driver
//      (io/skeleton_driver.h): root attributes, every dataset with its attributes, chunked with
//      Fletcher32, its chunks allocated by direct chunk writes the driver drops; meanwhile every owner
//      computes its chunks' checksums; then rank 0 broadcasts the address of every chunk;
//   2. every rank writes the chunks inside the blocks it owns (one replica per block), each
//      followed by the Fletcher32 checksum it computed, in one MPI_File_write_all, and closes;
//   3. rank 0 writes every dataset's chunk digest (the checksums the owners computed, reduced to
//      rank 0) into the synced file, then fsyncs, renames, updates `latest` and lists what to
//      prune, which a thread of rank 0 unlinks after the save returns (SaveOptions).
// The file is what HDF5's own filtered write would have left: HDF5 reads it and checks every
// checksum (verify_checkpoint, h5dump, tests/io/chunk_io_test.cpp). Only the fill chunks HDF5
// would have filtered and written first, and the rewrite through one ROMIO aggregator, are gone.
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <filesystem>
#include <memory>
#include <set>
#include <system_error>
#include <thread>

#include "collectives/collective_check.h"
#include "core/checked.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/checkpoint_dir.h"
#include "io/checkpoint_format.h"
#include "io/chunk_address.h"
#include "io/directory_lock.h"
#include "io/fletcher32.h"
#include "io/io_errors.h"
#include "io/parallel_file.h"
#include "io/skeleton_driver.h"
#include "mesh/agree.h"
#include "mesh/mpi_check.h"

namespace tessera {

namespace format = checkpoint_format;
using checkpoint_io::capture_error;

namespace {

// The phases of this process's last successful save (last_save_phases).
SavePhases last_phases;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Replicated facts only: every rank reaches the same verdict without communication.
void validate_for_save(const CheckpointState& state) {
  if (state.step < 0) throw IoError("save_checkpoint: step " + std::to_string(state.step) + " is negative");
  std::set<std::string> paths;
  for (const auto& array : state.arrays) {
    format::validate_array_path(array.path);
    if (!paths.insert(array.path).second) throw IoError("save_checkpoint: array path '" + array.path + "' repeats");
    const ShardedTensor& value = array.tensor();
    if (value.spec().is_partial()) {
      throw IoError("save_checkpoint: array '" + array.path + "' has the partial spec " + value.spec().to_string() +
                    "; reshard it to a spec without partial axes before saving");
    }
    if (!array.logical_names.empty() && static_cast<int>(array.logical_names.size()) != value.ndim()) {
      throw IoError("save_checkpoint: array '" + array.path + "' has " + std::to_string(array.logical_names.size()) +
                    " logical names for " + std::to_string(value.ndim()) + " dimensions");
    }
  }
  // A dataset cannot also be a group: "a/b" and "a/b/c" cannot both be arrays.
  for (const auto& path : paths) {
    auto it = paths.lower_bound(path + "/");
    if (it != paths.end() && it->starts_with(path + "/")) {
      throw IoError("save_checkpoint: array path '" + path + "' is also a group of '" + *it + "'");
    }
  }
}

// True when this rank writes the block: coordinate 0 on every mesh axis the spec does not use,
// so each block is written by exactly one rank.
bool writes_block(const ShardedTensor& value) {
  const Mesh& mesh = value.mesh();
  for (const auto& axis : unused_axes(value.spec(), mesh.shape())) {
    if (mesh.coords()[mesh.shape().axis_index(axis)] != 0) return false;
  }
  return true;
}

void write_root_attributes(hid_t file, const CheckpointState& state, const MeshShape& mesh, const std::string& path) {
  const std::string context = format::file_context(path);
  format::write_string_attribute(file, format::attr_format, format::format_name, context);
  format::write_int64_attribute(file, format::attr_version, format::format_version, context);
  format::write_int64_attribute(file, format::attr_step, state.step, context);
  format::write_uint64_attribute(file, format::attr_seed, state.seed, context);
  format::write_string_attribute(file, format::attr_config, state.config, context);
  format::write_string_array_attribute(file, format::attr_mesh_names, mesh.names(), context);
  std::vector<std::int64_t> sizes(mesh.sizes().begin(), mesh.sizes().end());
  format::write_int64_array_attribute(file, format::attr_mesh_sizes, sizes, context);
  format::write_string_attribute(file, format::attr_mesh, mesh.to_string(), context);
}

// How an array's dataset is chunked. Replicated facts (global shape, spec, dtype), so every rank
// computes the same table without communication.
struct Chunking {
  bool chunked = false;            // false: a scalar (compact) or an empty dataset
  std::vector<hsize_t> chunk;      // chunk shape
  std::vector<hsize_t> grid;       // chunks per dimension of the dataset
  std::uint64_t chunk_bytes = 0;   // unfiltered bytes of one chunk
  std::size_t first = 0;           // index of the array's first chunk in the address table
  std::size_t count = 0;           // chunks of the array
};

std::vector<Chunking> chunkings_of(const CheckpointState& state, const SaveOptions& options,
                                       std::size_t& total) {
  std::vector<Chunking> chunkings;
  total = 0;
  for (const auto& array : state.arrays) {
    Chunking chunking;
    const Shape& global = array.tensor().global_shape();
    if (!global.empty() && numel(global) > 0) {
      chunking.chunked = true;
      const std::uint64_t limit = options.max_chunk_bytes > 0 ? std::min(options.max_chunk_bytes, format::max_chunk_bytes)
                                                              : format::max_chunk_bytes;
      // Chunks divide the largest block, so every block (they start at multiples of it) starts on
      // a chunk boundary; a short block's last chunk is the dataset's edge chunk.
      const ShardedTensor& value = array.tensor();
      chunking.chunk = format::chunk_shape(max_local_shape(value.spec(), value.mesh().shape(), global),
                                           value.dtype(), limit);
      chunking.chunk_bytes = dtype_size(array.tensor().dtype());
      chunking.count = 1;
      for (std::size_t d = 0; d < global.size(); ++d) {
        chunking.grid.push_back((static_cast<hsize_t>(global[d]) + chunking.chunk[d] - 1) / chunking.chunk[d]);
        chunking.chunk_bytes *= chunking.chunk[d];
        chunking.count *= chunking.grid.back();
      }
      chunking.first = total;
      total += chunking.count;
    }
    chunkings.push_back(std::move(chunking));
  }
  return chunkings;
}

// The chunk grid coordinates of flat index `index` (row-major over `grid`).
std::vector<hsize_t> grid_coords(std::size_t index, const std::vector<hsize_t>& grid) {
  std::vector<hsize_t> coords(grid.size());
  for (std::size_t d = grid.size(); d-- > 0;) {
    coords[d] = index % grid[d];
    index /= grid[d];
  }
  return coords;
}

// The first element of chunk `index` (row-major over the chunk grid).
std::vector<hsize_t> chunk_start(const Chunking& chunking, std::size_t index) {
  std::vector<hsize_t> start = grid_coords(index, chunking.grid);
  for (std::size_t d = 0; d < start.size(); ++d) start[d] *= chunking.chunk[d];
  return start;
}

// Creates one dataset (its chunks are allocated by write_skeleton). Scalars are written here: a
// compact dataset lives in the object header.
H5Handle write_array_skeleton(hid_t file, const CheckpointArray& array, const Chunking& chunking,
                              const std::string& path) {
  const std::string context = format::dataset_context(path, array.path);
  const ShardedTensor& value = array.tensor();
  const Shape& global = value.global_shape();
  const DType dtype = value.dtype();

  H5Handle space;
  H5Handle create = plist_handle(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", context);
  if (global.empty()) {
    // Scalars cannot be chunked; a compact dataset is covered by its object header's checksum.
    space = dataspace_handle(H5Screate(H5S_SCALAR), "H5Screate", context);
    check_h5(H5Pset_layout(create.get(), H5D_COMPACT), "H5Pset_layout", context);
  } else {
    std::vector<hsize_t> dims(global.begin(), global.end());
    space = dataspace_handle(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), "H5Screate_simple",
                             context);
    if (chunking.chunked) {
      check_h5(H5Pset_chunk(create.get(), static_cast<int>(chunking.chunk.size()), chunking.chunk.data()), "H5Pset_chunk",
               context);
      check_h5(H5Pset_fletcher32(create.get()), "H5Pset_fletcher32", context);
      check_h5(H5Pset_alloc_time(create.get(), H5D_ALLOC_TIME_INCR), "H5Pset_alloc_time", context);
    }
  }
  check_h5(H5Pset_fill_time(create.get(), H5D_FILL_TIME_NEVER), "H5Pset_fill_time", context);
  H5Handle link = plist_handle(H5Pcreate(H5P_LINK_CREATE), "H5Pcreate", context);
  check_h5(H5Pset_create_intermediate_group(link.get(), 1), "H5Pset_create_intermediate_group", context);
  H5Handle dataset;
  {
    checkpoint_io::DropRawWrites drop;
    dataset = dataset_handle(H5Dcreate2(file, format::dataset_name(array.path).c_str(), format::file_type(dtype),
                                        space.get(), link.get(), create.get(), H5P_DEFAULT),
                             "H5Dcreate2", context);
  }
  format::write_string_attribute(dataset.get(), format::attr_spec, value.spec().to_string(), context);
  format::write_string_array_attribute(dataset.get(), format::attr_logical_names, array.logical_names, context);
  format::write_string_attribute(dataset.get(), format::attr_dtype, dtype_name(dtype), context);

  if (global.empty()) {
    check_h5(H5Dwrite(dataset.get(), format::memory_type(dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, value.local().raw()),
             "H5Dwrite", context);
  }
  return dataset;
}

// The rank of the mesh (row-major coordinates) that writes the chunk at `start` of `value`:
// coordinate 0 on every axis the spec does not use (writes_block), on a dimension's axes the
// digits of the block index that holds the chunk (each chunk lies inside one block).
int writer_of_chunk(const ShardedTensor& value, const MeshShape& mesh, const std::vector<hsize_t>& start) {
  std::vector<int> coords(static_cast<std::size_t>(mesh.ndim()), 0);
  const Shape& global = value.global_shape();
  for (int d = 0; d < static_cast<int>(global.size()); ++d) {
    const Axes& axes = value.spec().axes(d);
    if (axes.empty()) continue;
    std::int64_t block = static_cast<std::int64_t>(start[d]) / block_chunk(global[d], shard_count(value.spec(), mesh, d));
    for (auto axis = axes.rbegin(); axis != axes.rend(); ++axis) {
      const int a = mesh.axis_index(*axis);
      coords[a] = static_cast<int>(block % mesh.sizes()[a]);
      block /= mesh.sizes()[a];
    }
  }
  return mesh.rank_of(coords);
}

// The skeleton's metadata (object headers, chunk indexes: measured about 3 KiB per dataset with up
// to 64 chunks, about 41 bytes per further chunk) is carved from one block at the start of the
// file, so that a restore's planning reads it in one sweep rather than a seek per dataset to the
// index before its chunks (cold-cache planning of 24 arrays: 9-12 -> 3-6 ms). This is its size.
std::uint64_t metadata_bytes(const CheckpointState& state, std::size_t total_chunks) {
  return std::clamp<std::uint64_t>(
      (std::uint64_t{4096} * (state.arrays.size() + 1) + std::uint64_t{64} * total_chunks + 4095) / 4096 * 4096,
      std::uint64_t{4096}, std::uint64_t{8} << 20);
}

// The bytes the file will take: the metadata block and every chunk with its checksum (the
// attributes of the chunk digests, written last, can add to that a few bytes a chunk).
std::uint64_t file_bytes(const CheckpointState& state, const std::vector<Chunking>& chunkings,
                         std::size_t total_chunks) {
  std::uint64_t bytes = metadata_bytes(state, total_chunks);
  for (const Chunking& chunking : chunkings) {
    bytes = checked_add(bytes, checked_mul<std::uint64_t>(chunking.count, chunking.chunk_bytes + 4, "checkpoint size"),
                        "checkpoint size");
  }
  return bytes;
}

// Rank 0: the whole file but the chunks' bytes. Returns the address of every chunk.
std::vector<std::uint64_t> write_skeleton(const CheckpointState& state, const std::vector<Chunking>& chunkings,
                                        std::size_t total_chunks, const MeshShape& mesh_shape,
                                        const std::string& temporary) {
  const std::string context = format::file_context(temporary);
  std::vector<std::uint64_t> addresses(total_chunks, 0);
  // Created new, never through a symlink planted at the temporary name (the skeleton driver
  // opens with O_NOFOLLOW too, so one planted after this is refused).
  ::close(checkpoint_dir::create_exclusive(temporary));
  const checkpoint_io::DeferWriteFailures failures;
  H5Handle access = checkpoint_io::skeleton_file_access(context, metadata_bytes(state, total_chunks));
  H5Handle file = file_handle(H5Fcreate(temporary.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get()), "H5Fcreate",
                              context);
  write_root_attributes(file.get(), state, mesh_shape, temporary);
  std::vector<H5Handle> datasets;
  datasets.reserve(state.arrays.size());
  for (std::size_t i = 0; i < state.arrays.size(); ++i) {
    datasets.push_back(write_array_skeleton(file.get(), state.arrays[i], chunkings[i], temporary));
  }
  // Chunks are laid out writer by writer (then array by array, each in chunk-grid order), so that
  // what one rank writes, and reads back on the same mesh, is one run of the file.
  struct Allocation {
    int writer;
    std::size_t array;
    std::size_t chunk;
  };
  std::vector<Allocation> order;
  order.reserve(total_chunks);
  for (std::size_t a = 0; a < state.arrays.size(); ++a) {
    const Chunking& chunking = chunkings[a];
    if (!chunking.chunked) continue;
    for (std::size_t i = 0; i < chunking.count; ++i) {
      order.push_back({writer_of_chunk(state.arrays[a].tensor(), mesh_shape, chunk_start(chunking, i)), a, i});
    }
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const Allocation& x, const Allocation& y) { return x.writer < y.writer; });
  // The filtered size of every chunk is its bytes plus the checksum; an owner writes exactly
  // that many bytes at the chunk's address, so anything else must stop the save here.
  for (const Allocation& allocation : order) {
    const Chunking& chunking = chunkings[allocation.array];
    const std::string where = format::dataset_context(temporary, state.arrays[allocation.array].path);
    const std::vector<hsize_t> start = chunk_start(chunking, allocation.chunk);
    const hid_t dataset = datasets[allocation.array].get();
    checkpoint_io::allocate_chunk(dataset, start, chunking.chunk_bytes + 4, where);
    addresses[chunking.first + allocation.chunk] =
        checkpoint_io::filtered_chunk_address(dataset, start, chunking.chunk_bytes, where);
  }
  for (std::size_t i = 0; i < datasets.size(); ++i) {
    datasets[i].close(format::dataset_context(temporary, state.arrays[i].path));
  }
  file.close(context);
  failures.check(context);
  return addresses;
}

// A chunk this rank writes: where its bytes are, and the checksum that follows them in the file.
struct OwnedChunk {
  std::size_t table_index;  // in the address table
  const void* data;
  std::uint64_t bytes;
  std::array<unsigned char, 4> trailer;
  // An edge chunk of a short block (uneven dimensions): its elements packed, the part past the
  // dataset's end zero, as HDF5 stores an edge chunk (whole, filtered as a whole).
  std::shared_ptr<Tensor> packed;
};

// Every chunk inside the blocks this rank writes, with its checksum. chunk_shape only cuts
// leading dimensions, so every chunk is one run of its block's memory.
std::vector<OwnedChunk> owned_chunks(const CheckpointState& state, const std::vector<Chunking>& chunkings) {
  static_assert(std::endian::native == std::endian::little,
                "chunks are written as they lie in memory; the file's types are little-endian");
  std::vector<OwnedChunk> chunks;
  for (std::size_t a = 0; a < state.arrays.size(); ++a) {
    const Chunking& chunking = chunkings[a];
    const ShardedTensor& value = state.arrays[a].tensor();
    if (!chunking.chunked || !writes_block(value)) continue;
    const Tensor& local = value.local();
    const Shape& block = local.shape();
    if (numel(block) == 0) continue;  // an empty trailing block: nothing to write
    if (!checkpoint_io::chunk_is_contiguous(max_local_shape(value.spec(), value.mesh().shape(), value.global_shape()),
                                            chunking.chunk)) {
      throw Error("save_checkpoint: internal error: a chunk of '" + state.arrays[a].path +
                  "' is not one run of its block");
    }
    const bool contiguous = checkpoint_io::chunk_is_contiguous(block, chunking.chunk);
    const std::vector<std::int64_t> block_offsets = value.block_offsets();
    std::vector<hsize_t> per_block(block.size());
    std::size_t chunks_in_block = 1;
    for (std::size_t d = 0; d < block.size(); ++d) {
      per_block[d] = (static_cast<hsize_t>(block[d]) + chunking.chunk[d] - 1) / chunking.chunk[d];
      chunks_in_block *= per_block[d];
    }
    const Shape chunk_shape(chunking.chunk.begin(), chunking.chunk.end());
    for (std::size_t c = 0; c < chunks_in_block; ++c) {
      const std::vector<hsize_t> local_coords = grid_coords(c, per_block);
      std::size_t flat = 0;     // the chunk's index in the dataset's chunk grid
      std::uint64_t first = 0;  // its first element's index in the block
      bool inside = contiguous;  // the whole chunk is one run of the block
      std::vector<std::int64_t> at(block.size());
      Shape overlap(block.size());
      for (std::size_t d = 0; d < block.size(); ++d) {
        const std::uint64_t local_offset = local_coords[d] * chunking.chunk[d];
        flat = flat * chunking.grid[d] +
               (static_cast<std::uint64_t>(block_offsets[d]) + local_offset) / chunking.chunk[d];
        first = first * static_cast<std::uint64_t>(block[d]) + local_offset;
        at[d] = static_cast<std::int64_t>(local_offset);
        overlap[d] = std::min<std::int64_t>(static_cast<std::int64_t>(chunking.chunk[d]), block[d] - at[d]);
        inside = inside && overlap[d] == static_cast<std::int64_t>(chunking.chunk[d]);
      }
      OwnedChunk chunk{chunking.first + flat, nullptr, chunking.chunk_bytes, {}, nullptr};
      if (inside) {
        chunk.data = static_cast<const std::byte*>(local.raw()) + first * dtype_size(local.dtype());
      } else {
        chunk.packed = std::make_shared<Tensor>(chunk_shape, local.dtype());
        insert_block(*chunk.packed, extract_block(local, at, overlap), std::vector<std::int64_t>(block.size(), 0));
        chunk.data = chunk.packed->raw();
      }
      chunk.trailer = checkpoint_io::fletcher32_trailer(checkpoint_io::fletcher32(chunk.data, chunking.chunk_bytes));
      chunks.push_back(std::move(chunk));
    }
  }
  return chunks;
}

// One contiguous run of the file this rank writes, and the memory it comes from.
struct FileSpan {
  std::uint64_t offset;
  const void* data;
  std::uint64_t bytes;
};

// The owned chunks at their addresses: each chunk's bytes, then its checksum, in file order, cut
// into runs of at most max_mpi_run bytes.
std::vector<FileSpan> file_pieces(const std::vector<OwnedChunk>& chunks, const std::vector<std::uint64_t>& addresses) {
  std::vector<FileSpan> pieces;
  for (const OwnedChunk& chunk : chunks) {
    const std::uint64_t address = addresses[chunk.table_index];
    pieces.push_back({address, chunk.data, chunk.bytes});
    pieces.push_back({address + chunk.bytes, chunk.trailer.data(), chunk.trailer.size()});
  }
  std::sort(pieces.begin(), pieces.end(), [](const FileSpan& x, const FileSpan& y) { return x.offset < y.offset; });
  constexpr std::uint64_t max_run = checkpoint_io::max_mpi_run;
  std::vector<FileSpan> runs;
  for (const FileSpan& piece : pieces) {
    for (std::uint64_t done = 0; done < piece.bytes; done += max_run) {
      runs.push_back({piece.offset + done, static_cast<const std::byte*>(piece.data) + done,
                      std::min(max_run, piece.bytes - done)});
    }
  }
  return runs;
}

// What a failed write's message adds: the free space of the file's file system, which ROMIO's
// MPI_ERR_IO does not name (a disk that filled during the write; the check before the save sees
// only one that is full when it starts).
std::string space_note(const std::string& file) {
  const std::optional<std::uint64_t> free = checkpoint_dir::free_bytes(std::filesystem::path(file).parent_path().string());
  if (!free) return {};
  return " (the file system holds " + std::to_string(*free) + " bytes free" +
         (*free < (std::uint64_t{1} << 20) ? ": it is full)" : ")");
}

// Every rank: its pieces into the laid-out file, in one collective write.
void write_pieces(const std::vector<FileSpan>& pieces, const Communicator& comm, const std::string& temporary,
                  const SaveOptions& options, std::int64_t step) {
  const std::string context = format::file_context(temporary);
  std::optional<std::string> error;
  MPI_Info info = checkpoint_io::make_info(options.mpi_io_hints);
  MPI_File handle = MPI_FILE_NULL;
  const std::string name = checkpoint_io::mpi_io_name(temporary);
  int rc = MPI_File_open(comm.handle(), name.c_str(), MPI_MODE_WRONLY, info, &handle);
  MPI_Info_free(&info);
  if (rc != MPI_SUCCESS) error = context + ": MPI_File_open failed: " + mpi_error_text(rc);
  agree_or_throw<IoError>(comm, error);

  // File view: the pieces' offsets; memory: their absolute addresses. A rank with nothing to
  // write joins with an empty write (ROMIO 3.2 cannot free the flattened form of an empty
  // derived type).
  const int n = static_cast<int>(pieces.size());
  std::vector<int> lengths(pieces.size());
  std::vector<MPI_Aint> file_offsets(pieces.size()), memory(pieces.size());
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    lengths[i] = static_cast<int>(pieces[i].bytes);
    file_offsets[i] = static_cast<MPI_Aint>(pieces[i].offset);
    check_mpi(MPI_Get_address(pieces[i].data, &memory[i]), "MPI_Get_address");
  }
  MPI_Datatype file_type = MPI_BYTE, memory_type = MPI_BYTE;
  if (n > 0) {
    check_mpi(MPI_Type_create_hindexed(n, lengths.data(), file_offsets.data(), MPI_BYTE, &file_type),
              "MPI_Type_create_hindexed");
    check_mpi(MPI_Type_commit(&file_type), "MPI_Type_commit");
    check_mpi(MPI_Type_create_hindexed(n, lengths.data(), memory.data(), MPI_BYTE, &memory_type),
              "MPI_Type_create_hindexed");
    check_mpi(MPI_Type_commit(&memory_type), "MPI_Type_commit");
  }
  char native[] = "native";
  rc = MPI_File_set_view(handle, 0, MPI_BYTE, file_type, native, MPI_INFO_NULL);
  if (rc != MPI_SUCCESS) {
    error = context + ": MPI_File_set_view failed: " + mpi_error_text(rc);
  } else {
    MPI_Status status;
    rc = MPI_File_write_all(handle, MPI_BOTTOM, n > 0 ? 1 : 0, memory_type, &status);
    if (rc != MPI_SUCCESS) error = context + ": MPI_File_write_all failed: " + mpi_error_text(rc) + space_note(temporary);
  }
  // Every rank's bytes reach the disk before the agreement below, after which rank 0 renames:
  // a rename can never publish a file whose data some rank still buffers.
  rc = MPI_File_sync(handle);
  if (rc != MPI_SUCCESS && !error) error = context + ": MPI_File_sync failed: " + mpi_error_text(rc) + space_note(temporary);
  checkpoint_dir::test_kill_point("after_write", comm.rank());
  checkpoint_dir::test_kill_point("after_write@" + std::to_string(step), comm.rank());
  // ROMIO's close is collective and polls. The ranks that wrote nothing (every replica but one of
  // a block) or finished first wait here asleep instead, so that on oversubscribed cores the
  // writers' copies into the page cache and their fsyncs do not share the CPUs with polling
  // ranks (8 ranks of 2 cores, 96 MiB: save against plain write 0.81-0.88 -> 0.84-0.94, with the
  // sleep before the chunks' agreement below 0.87-0.95; docs/design.md, "How a save writes").
  comm.barrier_sleeping();
  rc = MPI_File_close(&handle);
  if (rc != MPI_SUCCESS && !error) error = context + ": MPI_File_close failed: " + mpi_error_text(rc) + space_note(temporary);
  // Freed after the close: ROMIO 3.2 keeps the view's flattened type until then.
  if (n > 0) {
    MPI_Type_free(&file_type);
    MPI_Type_free(&memory_type);
  }
  checkpoint_dir::test_kill_point("before_rename", comm.rank());
  checkpoint_dir::test_kill_point("before_rename@" + std::to_string(step), comm.rank());
  agree_or_throw<IoError>(comm, error);
}

// Rank 0, after every rank's data is on disk: each chunked dataset's attribute chunk_fletcher32
// (format version 2), the checksums of its chunks in chunk-grid order.
void write_chunk_digests(const CheckpointState& state, const std::vector<Chunking>& chunkings,
                         const std::vector<std::uint32_t>& digest, const std::string& temporary) {
  const std::string context = format::file_context(temporary);
  // Through the skeleton driver, whose failed writes wait for the close (DeferWriteFailures), with
  // version 1.8 object headers: an attribute over 64 KiB (8192 chunks) goes to dense storage.
  const checkpoint_io::DeferWriteFailures failures;
  H5Handle access = checkpoint_io::skeleton_file_access(context);
  H5Handle file = file_handle(H5Fopen(temporary.c_str(), H5F_ACC_RDWR, access.get()), "H5Fopen", context);
  for (std::size_t a = 0; a < state.arrays.size(); ++a) {
    const Chunking& chunking = chunkings[a];
    if (!chunking.chunked) continue;
    const std::string where = format::dataset_context(temporary, state.arrays[a].path);
    H5Handle dataset = dataset_handle(
        H5Dopen2(file.get(), format::dataset_name(state.arrays[a].path).c_str(), H5P_DEFAULT), "H5Dopen2", where);
    std::vector<std::int64_t> values(digest.begin() + static_cast<std::ptrdiff_t>(chunking.first),
                                     digest.begin() + static_cast<std::ptrdiff_t>(chunking.first + chunking.count));
    format::write_int64_array_attribute(dataset.get(), format::attr_chunk_digest, values, where);
    dataset.close(where);
  }
  file.close(context);
  failures.check(context);
}

}  // namespace

SavePhases last_save_phases() { return last_phases; }

std::string save_checkpoint(const CheckpointState& state, const std::string& dir, const SaveOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  SavePhases phases;
  quiet_hdf5_errors();
  // TESSERA_COLLECTIVE_CHECK: every rank is at this save, into the same directory (a rank at
  // another collective, or saving elsewhere, is named before the agreements below, which are
  // MPI's own calls). What runs inside follows from what it checks.
  const Mesh* checked_mesh = checkpoint_io::first_mesh(state);
  std::optional<detail::CollectiveCheck> check;
  if (checked_mesh != nullptr) check.emplace(*checked_mesh, [&] { return "save_checkpoint into '" + dir + "'"; });
  // Every rank's state first, so that the checks after it see the same facts on every rank.
  checkpoint_io::agree_on_state(state, "save_checkpoint", /*whole_state=*/true, "directory", dir);
  validate_for_save(state);
  const Mesh* mesh = checkpoint_io::common_mesh(state, "save_checkpoint");
  const Communicator world = Communicator::world();
  const Communicator& comm = mesh != nullptr ? mesh->comm() : world;
  const MeshShape mesh_shape = mesh != nullptr ? mesh->shape() : MeshShape({"data"}, {comm.size()});
  const int rank = comm.rank();

  const std::string final_path = (std::filesystem::path(dir) / checkpoint_dir::file_name(state.step)).string();
  const std::string temporary = final_path + checkpoint_dir::temporary_suffix;

  // Rank 0 makes the directory and writes the file's skeleton while the owners checksum their chunks
  // (rank 0 on a second thread: it owns the blocks of every replicated array, the largest share).
  std::optional<std::string> error;
  std::size_t total_chunks = 0;
  const std::vector<Chunking> chunkings = chunkings_of(state, options, total_chunks);
  std::vector<std::uint64_t> addresses(total_chunks, 0);
  // Rank 0 holds the directory's lock for the whole save unless this process holds it already
  // (train_mlp takes it for the whole run).
  std::unique_ptr<DirectoryLock> lock;
  // A save that fails after rank 0 made its temporary file under the lock leaves nothing behind:
  // rank 0 removes the file as the error leaves (after every rank closed it, still under the lock).
  struct RemoveUncommitted {
    const std::string& path;
    bool made = false;
    bool committed = false;
    ~RemoveUncommitted() {
      if (made && !committed) ::unlink(path.c_str());
    }
  } uncommitted{temporary};
  std::vector<OwnedChunk> chunks;
  std::optional<std::string> checksum_error;
  const auto checksum = [&] { checksum_error = capture_error([&] { chunks = owned_chunks(state, chunkings); }); };
  if (rank == 0) {
    // HDF5 stays on this thread; the checksums touch only the state's memory. Where no thread can
    // be started, they run after the skeleton, as on the other ranks.
    std::optional<std::thread> checksums;
    try {
      checksums.emplace(checksum);
    } catch (const std::system_error&) {
    }
    error = capture_error([&] {
      // The previous save's removals finish first (and release the lock that save took).
      checkpoint_dir::wait_for_removals();
      checkpoint_dir::make_directories(dir);
      if (!DirectoryLock::held_here(dir)) lock = DirectoryLock::acquire(dir);
      // Under the lock, a temporary file is the leftover of a save that was killed or failed:
      // removed before the check, so that it does not hold the space this save needs.
      checkpoint_dir::remove_files(checkpoint_dir::leftover_temporaries(dir));
      checkpoint_dir::check_free_space(dir, file_bytes(state, chunkings, total_chunks), state.step);
      uncommitted.made = true;
      addresses = write_skeleton(state, chunkings, total_chunks, mesh_shape, temporary);
    });
    if (checksums) {
      checksums->join();
    } else {
      checksum();
    }
  } else {
    checksum();
  }
  if (!error) error = checksum_error;
  // While rank 0 writes the skeleton, the ranks that own no chunk or are done checksumming wait
  // asleep, not in the agreement's polling (as in write_pieces).
  comm.barrier_sleeping();
  agree_or_throw<IoError>(comm, error);
  if (total_chunks > 0) {
    check_mpi(MPI_Bcast(addresses.data(), static_cast<int>(total_chunks), MPI_UINT64_T, 0, comm.handle()),
              "MPI_Bcast");
  }
  // Every chunk has one owner: OR-ing the owners' checksums gives the whole digest on rank 0.
  std::vector<std::uint32_t> digest(total_chunks, 0);
  for (const OwnedChunk& chunk : chunks) digest[chunk.table_index] = checkpoint_io::fletcher32_from_trailer(chunk.trailer.data());
  if (total_chunks > 0) {
    const int count = checked_cast<int>(total_chunks, "checkpoint chunk count");
    check_mpi(MPI_Reduce(rank == 0 ? MPI_IN_PLACE : digest.data(), digest.data(), count, MPI_UINT32_T, MPI_BOR, 0,
                         comm.handle()),
              "MPI_Reduce");
  }
  phases.laid_out = seconds_since(start);
  write_pieces(file_pieces(chunks, addresses), comm, temporary, options, state.step);
  phases.written = seconds_since(start);

  if (rank == 0) {
    error = capture_error([&] {
      write_chunk_digests(state, chunkings, digest, temporary);
      checkpoint_dir::commit(temporary, final_path);
      uncommitted.committed = true;
      if (options.prune_in_background) {
        checkpoint_dir::remove_in_background(checkpoint_dir::prunable(dir, options.keep, final_path),
                                             std::shared_ptr<DirectoryLock>(std::move(lock)));
      } else {
        checkpoint_dir::prune(dir, options.keep, final_path);
      }
    });
  }
  // The other ranks wait asleep while rank 0 digests, commits and lists what to prune.
  comm.barrier_sleeping();
  agree_or_throw<IoError>(comm, error);
  phases.returned = seconds_since(start);
  last_phases = phases;
  return final_path;
}

void wait_for_pruning() { checkpoint_dir::wait_for_removals(); }

}  // namespace tessera
