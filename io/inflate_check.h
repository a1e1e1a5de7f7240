// A check of a dataset's deflated chunks before HDF5 inflates them. HDF5's deflate filter grows
// its output for as long as a chunk's stream goes on, so a chunk of a few MB of zlib data in a
// dataset whose chunks hold 16 KiB inflates to gigabytes inside H5Dread: a restore or `ckpt_tool
// verify` of such a 2.3 MB file took 2 GB and 27 s before it failed, one of 8.6 MB ran past a
// minute (found on 2026-11-28). HDF5 1.10 lets no program replace its deflate filter (a
// predefined filter's id cannot be registered again), so each chunk's stream is inflated here
// first, into a fixed scratch buffer, and counted.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string_view>

#include "io/checkpoint_format.h"

namespace tessera::checkpoint_io {

// For a chunked dataset with the deflate filter (checkpoints of other writers: h5py's
// compression="gzip"): throws IoError("<context>: chunk at [..] inflates past N bytes, the most a
// chunk of this dataset holds (the file is corrupt)") when a chunk's stream inflates to more than
// the dataset's chunk bytes, and IoError when deflate lies under a filter other than Fletcher32
// (its stream could not be told apart). A chunk's stored size is bounded by `file_bytes`. Other
// datasets: nothing is read. `storage` is the dataset's (checkpoint_format::dataset_storage).
void check_deflated_chunks(hid_t dataset, const checkpoint_format::DatasetStorage& storage, std::uint64_t file_bytes,
                           std::string_view context);

}  // namespace tessera::checkpoint_io
