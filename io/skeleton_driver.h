// The skeleton driver: an HDF5 virtual file driver with which one process writes the skeleton of
// a checkpoint file (superblock, groups, object headers, attributes, chunk indexes, and the file space of
// every chunk) without writing the chunks' bytes, so that the ranks owning the data can write
// them afterwards, in parallel, straight into the space HDF5 allocated (io/save.cpp).
//
// Why: with Fletcher32 on a chunked dataset, HDF5 1.10 allocates every chunk when the dataset
// is created under MPI-IO and writes a checksummed fill chunk into it, and the collective
// filtered write then rewrites it; every byte goes to the file twice, the second time through
// one ROMIO aggregator per node. Laid out by this driver, each chunk's space is allocated by a
// direct chunk write whose bytes it drops (allocate_chunk): no fill is computed or written.
//
// It is POSIX I/O (pread/pwrite) like HDF5's sec2 driver, and writes no driver information into
// the superblock, so the file it leaves opens with every HDF5 client's default driver. While a
// DropRawWrites guard is alive, writes of raw data (H5FD_MEM_DRAW) are not performed: the
// bytes they would have covered stay holes until the owners write them. Serial, one thread.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "io/hdf5_handle.h"

namespace tessera::checkpoint_io {

// A file access property list for the skeleton driver (registered on first use), with the same
// format bounds as every tessera file. `metadata_bytes` (0: HDF5's default of 2 KiB) is the size
// of the blocks HDF5 carves metadata from: given the file's expected metadata, its object headers
// and chunk indexes lie together at the file's start instead of each index before its chunks.
H5Handle skeleton_file_access(std::string_view context, std::uint64_t metadata_bytes = 0);

// While one is alive, raw-data writes through the skeleton driver are dropped (and counted).
class DropRawWrites {
 public:
  DropRawWrites();
  ~DropRawWrites();
  DropRawWrites(const DropRawWrites&) = delete;
  DropRawWrites& operator=(const DropRawWrites&) = delete;
  // Bytes of raw data dropped since this guard was made.
  unsigned long long dropped_bytes() const;

 private:
  unsigned long long start_;
};

// While one is alive, a failed write, truncate or close through the skeleton driver is not
// returned to HDF5: the first is recorded, the file's later writes are skipped, and check()
// throws it once the file is closed. HDF5 1.10 does not survive a close that fails: once the flush
// inside H5Fclose fails, the file's identifier stays, half destroyed, and the library's shutdown
// at MPI_Finalize crashes on it (SIGSEGV in H5F__close_cb, with a disk that fills or a file-size
// limit: checkpoint_bad_files_test). Declared before the file's handle, so that it outlives it.
class DeferWriteFailures {
 public:
  DeferWriteFailures();
  ~DeferWriteFailures();
  DeferWriteFailures(const DeferWriteFailures&) = delete;
  DeferWriteFailures& operator=(const DeferWriteFailures&) = delete;
  // Throws IoError("<context>: <the first failure>") when one was recorded.
  void check(std::string_view context) const;
};

// Allocates the chunk of `dataset` at `offset` (element coordinates) with `stored_bytes` of file
// space (its bytes and their Fletcher32), writing nothing: a direct chunk write (H5Dwrite_chunk,
// filter mask 0) whose raw write the driver drops. The dataset is chunked with ALLOC_TIME_INCR:
// allocated early, HDF5 would first run the filter over a chunk-sized fill buffer for every
// dataset (4 MiB chunks, 24 datasets: 27-52 ms of rank 0's skeleton, most of it page faults).
// Throws IoError naming `context`.
void allocate_chunk(hid_t dataset, const std::vector<hsize_t>& offset, std::uint64_t stored_bytes,
                    std::string_view context);

}  // namespace tessera::checkpoint_io
