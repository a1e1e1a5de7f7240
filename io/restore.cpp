// restore_checkpoint: each rank reads only the block its TARGET spec gives it, from a file saved
// on any mesh; every failure is agreed on so that all ranks throw the same IoError.
//
// Phases, each ended by one agreement:
//   1. rank 0 resolves the directory to its newest complete checkpoint; the name is broadcast;
//   2. every rank checks that it sees the file and that it is HDF5 (no collective open of a file
//      some rank cannot read); rank 0 alone opens it with HDF5 and validates the root attributes
//      and every wanted dataset (format name and version, presence, global shape, dtype,
//      storage, every chunk's stored size and filter mask), and writes a plan: per array, every
//      chunk's file offset and digest entry, or, for a small dataset that is not chunked as
//      tessera saves it (the compact /opt_state/count), its elements. One broadcast hands the
//      plan to every rank, so the metadata is read once, not once per rank (8 ranks on 2 cores:
//      HDF5's collective open and the validation took 35-40 ms of a 90 ms restore of 96 MiB);
//   3. every rank opens the file itself (POSIX, no collective open) and reads its blocks, so that
//      a failure (a Fletcher32 mismatch, a short read) is local to the ranks whose blocks touch
//      the bad chunk, which record it and go on to the agreement.
// Ranks with nothing to do in a phase (all but rank 0 while it plans, a rank done reading before
// the others) wait in Communicator::barrier_sleeping, not in MPI's polling loop, which would take
// the CPU from the ranks still working when there are more ranks than cores.
//
// A dataset stored as tessera saves it (chunked, Fletcher32 its only filter, little-endian) is
// read without HDF5's filter pipeline: each chunk that overlaps the rank's block is read with one
// preadv (its bytes, then the 4-byte checksum stored after them), straight into the block when the
// chunk lies in it as one run of memory (the common case of restoring onto the saved spec), else
// into a buffer from which the overlap is copied. HDF5 would read each chunk into its own buffer,
// check it there and copy it out. The save lays each writer's chunks out as one run of the file,
// so a rank restoring onto the saved mesh reads one sequential range.
//
// Each chunk is checked (io/fletcher32.h, and against the file's digest) by one rank per node:
// the replicas of a block on one node (ranks that differ only on mesh axes the spec does not use)
// read its chunks through the same page cache, so the storage is read once per node and the
// bytes every replica gets are the bytes one of them checked; replica k of m checks the chunks
// k, k+m, ... of the block, counted from the array's place in the state (so that blocks of one
// chunk each spread their checks over the replicas too). A replica on another node reads its own
// copy and checks its share there. A larger dataset of another writer (contiguous, compressed,
// big-endian) is read by every rank with H5Dread after a collective H5Fopen, which only such a
// file pays for.
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "collectives/collective_check.h"
#include "core/checked.h"
#include "core/error.h"
#include "core/files.h"
#include "io/inflate_check.h"
#include "io/checkpoint.h"
#include "io/checkpoint_format.h"
#include "io/chunk_address.h"
#include "io/fletcher32.h"
#include "io/io_errors.h"
#include "io/parallel_file.h"
#include "mesh/agree.h"
#include "mesh/mpi_check.h"

namespace tessera {

namespace format = checkpoint_format;
namespace fs = std::filesystem;
using checkpoint_io::capture_error;

namespace {

void check_readable(const std::string& file) {
  // Opened without waiting (a FIFO's open would wait for a writer: core/files.h) and checked to
  // be a regular file before HDF5 opens it by name.
  if (const std::string why = regular_file_problem(file); !why.empty()) {
    throw IoError("restore_checkpoint: " + format::file_context(file) + " " + why + " on this rank");
  }
  if (!is_hdf5_file(file, "restore_checkpoint: " + format::file_context(file))) throw IoError("restore_checkpoint: " + format::file_context(file) + " is not an HDF5 file");
}

// Reads step, seed and config after checking format name and version; returns the version, and
// every object of the file into `objects` (format::reject_links).
std::int64_t read_root(hid_t file, const std::string& path, CheckpointState& out, format::ObjectTypes& objects) {
  const std::string context = "restore_checkpoint: " + format::file_context(path);
  const std::int64_t version = format::read_format_and_version(file, context, &objects).second;
  out.step = format::read_step(file, path, context);
  out.seed = format::read_uint64_attribute(file, format::attr_seed, context);
  out.config = format::read_string_attribute(file, format::attr_config, context);
  return version;
}

// A wanted dataset, open and checked against its target, and its storage (read once).
struct ValidatedDataset {
  H5Handle dataset;
  format::DatasetStorage storage;
};

// `objects`: what format::reject_links found in the file, which says whether the array's path
// leads to a dataset without asking HDF5 again (a fifth of the plan's time: one H5Lexists per
// prefix of the path, and H5Oget_info_by_name).
ValidatedDataset open_validated(hid_t file, const std::string& path, const CheckpointArray& target,
                                const format::ObjectTypes& objects) {
  const std::string context = "restore_checkpoint: " + format::dataset_context(path, target.path);
  const std::string name = format::dataset_name(target.path);
  const auto object = objects.find(name);
  if (object == objects.end()) throw IoError(context + ": missing");
  if (object->second != H5O_TYPE_DATASET) throw IoError(context + ": is not a dataset");
  H5Handle dataset = dataset_handle(H5Dopen2(file, name.c_str(), H5P_DEFAULT), "H5Dopen2", context);
  const ShardedTensor& want = target.tensor();
  H5Handle type = type_handle(H5Dget_type(dataset.get()), "H5Dget_type", context);
  if (!format::type_matches(type.get(), want.dtype())) {
    std::string saved = format::has_attribute(dataset.get(), format::attr_dtype, context)
                            ? format::read_string_attribute(dataset.get(), format::attr_dtype, context)
                            : std::string("another type");
    const std::string wanted(dtype_name(want.dtype()));
    // An attribute that names the wanted dtype over data of another type: the data's type is told.
    if (saved == wanted) {
      throw IoError(context + ": the data are " + format::type_text(type.get()) + ", though its dtype attribute says " +
                    saved + "; " + wanted + " wanted");
    }
    throw IoError(context + ": dtype is " + saved + " in the file, " + wanted + " wanted");
  }
  if (want.dtype() == DType::bf16) {
    // bf16 is stored as uint16: only the dtype attribute tells its bits from integers.
    const std::string saved = format::has_attribute(dataset.get(), format::attr_dtype, context)
                                  ? format::read_string_attribute(dataset.get(), format::attr_dtype, context)
                                  : std::string("u16 (no dtype attribute)");
    if (saved != dtype_name(DType::bf16)) throw IoError(context + ": dtype is " + saved + " in the file, bf16 wanted");
  }
  const Shape shape = format::dataset_shape(dataset.get(), context);
  if (shape != want.global_shape()) {
    throw IoError(context + ": global shape is " + shape_to_string(shape) + " in the file, " +
                  shape_to_string(want.global_shape()) + " wanted");
  }
  // Chunk rank and sizes, external storage: checked before read_array trusts them.
  std::error_code ec;
  const std::uint64_t file_bytes = std::filesystem::file_size(path, ec);
  if (ec) throw IoError(context + ": cannot take the file's size: " + ec.message());
  format::DatasetStorage storage = format::dataset_storage(dataset.get(), context);
  format::validated_storage(dataset.get(), storage, shape, want.dtype(), file_bytes, context);
  checkpoint_io::check_deflated_chunks(dataset.get(), storage, file_bytes, context);
  return {std::move(dataset), std::move(storage)};
}

// What rank 0 found of one wanted array, broadcast to every rank (see the top of the file).
struct ArrayPlan {
  enum class Kind : std::uint8_t { chunks, whole, hdf5 };
  Kind kind = Kind::hdf5;
  Shape shape;                           // the dataset's global shape, as validated
  DType dtype = DType::f32;              // its element type, as validated
  std::vector<std::uint64_t> chunk;      // chunks: the chunk shape
  std::vector<std::uint64_t> addresses;  // chunks: each chunk's file offset, in row-major chunk-grid order
  std::vector<std::uint32_t> digest;     // chunks: each chunk's checksum in that order (empty in version 1)
  std::string data;                      // whole: every element, row-major
};

struct RestorePlan {
  std::int64_t step = 0;
  std::uint64_t seed = 0;
  std::string config;
  std::vector<ArrayPlan> arrays;
};

// A dataset that is neither chunked as tessera saves it nor larger than this is read whole by
// rank 0 and broadcast (a compact scalar such as /opt_state/count, a small array of another
// writer); a larger one is read by every rank through HDF5.
constexpr std::uint64_t whole_limit = std::uint64_t{1} << 20;

// The plan as bytes for one broadcast, and back. The bytes come from rank 0 of the same job.
class PlanWriter {
 public:
  template <class T>
  void put(T value) {
    bytes_.append(reinterpret_cast<const char*>(&value), sizeof value);
  }
  template <class T>
  void put_vector(const std::vector<T>& values) {
    put<std::uint64_t>(values.size());
    bytes_.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  }
  void put_string(const std::string& text) {
    put<std::uint64_t>(text.size());
    bytes_ += text;
  }
  std::string take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

class PlanReader {
 public:
  explicit PlanReader(const std::string& bytes) : bytes_(bytes) {}
  template <class T>
  T get() {
    T value;
    std::memcpy(&value, take(sizeof value), sizeof value);
    return value;
  }
  template <class T>
  std::vector<T> get_vector() {
    const auto count = get<std::uint64_t>();
    if (count > (bytes_.size() - at_) / sizeof(T)) overrun();
    std::vector<T> values(count);
    if (count > 0) std::memcpy(values.data(), take(count * sizeof(T)), count * sizeof(T));
    return values;
  }
  std::string get_string() {
    const auto count = get<std::uint64_t>();
    if (count > bytes_.size() - at_) overrun();
    return std::string(take(count), count);
  }
  bool done() const { return at_ == bytes_.size(); }

 private:
  const char* take(std::size_t count) {
    if (count > bytes_.size() - at_) overrun();
    const char* p = bytes_.data() + at_;
    at_ += count;
    return p;
  }
  [[noreturn]] static void overrun() { throw Error("restore_checkpoint: internal error: the broadcast plan is cut off"); }
  const std::string& bytes_;
  std::size_t at_ = 0;
};

std::string serialize(const RestorePlan& plan) {
  PlanWriter out;
  out.put(plan.step);
  out.put(plan.seed);
  out.put_string(plan.config);
  out.put<std::uint64_t>(plan.arrays.size());
  for (const ArrayPlan& array : plan.arrays) {
    out.put(array.kind);
    out.put(array.dtype);
    out.put_vector(array.shape);
    out.put_vector(array.chunk);
    out.put_vector(array.addresses);
    out.put_vector(array.digest);
    out.put_string(array.data);
  }
  return out.take();
}

RestorePlan deserialize(const std::string& bytes) {
  PlanReader in(bytes);
  RestorePlan plan;
  plan.step = in.get<std::int64_t>();
  plan.seed = in.get<std::uint64_t>();
  plan.config = in.get_string();
  const auto arrays = in.get<std::uint64_t>();
  for (std::uint64_t i = 0; i < arrays; ++i) {
    ArrayPlan array;
    array.kind = in.get<ArrayPlan::Kind>();
    array.dtype = in.get<DType>();
    array.shape = in.get_vector<std::int64_t>();
    array.chunk = in.get_vector<std::uint64_t>();
    array.addresses = in.get_vector<std::uint64_t>();
    array.digest = in.get_vector<std::uint32_t>();
    array.data = in.get_string();
    plan.arrays.push_back(std::move(array));
  }
  if (!in.done()) throw Error("restore_checkpoint: internal error: the broadcast plan is longer than its arrays");
  return plan;
}

// H5Dread of `dataset`'s selection into `out`, with the error named as restore names it.
void hdf5_read(hid_t dataset, DType dtype, hid_t memory, hid_t file_space, hid_t transfer, void* out,
               const std::string& context) {
  if (H5Dread(dataset, format::memory_type(dtype), memory, file_space, transfer, out) >= 0) return;
  std::string stack = take_hdf5_error_stack();
  const bool checksum = stack.find("checksum") != std::string::npos || stack.find("Fletcher") != std::string::npos ||
                        stack.find("filter") != std::string::npos;
  throw IoError(context + (checksum ? ": data failed its Fletcher32 checksum (the file is corrupt): "
                                    : ": H5Dread failed: ") +
                stack);
}

// Rank 0: every wanted dataset validated, and where each chunk of it lies.
ArrayPlan plan_array(hid_t file, const std::string& path, const CheckpointArray& target, std::int64_t version,
                     const format::ObjectTypes& objects) {
  const std::string context = "restore_checkpoint: " + format::dataset_context(path, target.path);
  const ValidatedDataset validated = open_validated(file, path, target, objects);
  const H5Handle& dataset = validated.dataset;
  const ShardedTensor& want = target.tensor();
  ArrayPlan plan;
  plan.shape = want.global_shape();
  plan.dtype = want.dtype();
  const std::vector<hsize_t> chunk = plan.shape.empty() || numel(plan.shape) == 0
                                         ? std::vector<hsize_t>{}
                                         : format::direct_chunk_shape(dataset.get(), validated.storage, context);
  if (!chunk.empty()) {
    plan.kind = ArrayPlan::Kind::chunks;
    plan.chunk.assign(chunk.begin(), chunk.end());
    std::uint64_t chunk_bytes = dtype_size(plan.dtype);
    std::uint64_t chunks = 1;  // bounded by the elements, which validated_storage bounded by the file
    std::vector<hsize_t> grid(chunk.size());
    for (std::size_t d = 0; d < chunk.size(); ++d) {
      chunk_bytes *= chunk[d];
      grid[d] = (static_cast<hsize_t>(plan.shape[d]) + chunk[d] - 1) / chunk[d];
      chunks *= grid[d];
    }
    if (version >= 2) plan.digest = format::read_chunk_digest(dataset.get(), chunks, context);
    plan.addresses.reserve(chunks);
    std::vector<hsize_t> coords(chunk.size(), 0), start(chunk.size());
    for (std::uint64_t i = 0; i < chunks; ++i) {
      for (std::size_t d = 0; d < chunk.size(); ++d) start[d] = coords[d] * chunk[d];
      plan.addresses.push_back(checkpoint_io::filtered_chunk_address(dataset.get(), start, chunk_bytes, context));
      for (std::size_t d = chunk.size(); d-- > 0;) {  // odometer, last dimension fastest
        if (++coords[d] < grid[d]) break;
        coords[d] = 0;
      }
    }
    return plan;
  }
  const std::uint64_t bytes = static_cast<std::uint64_t>(numel(plan.shape)) * dtype_size(plan.dtype);
  if (bytes > whole_limit) return plan;  // Kind::hdf5
  plan.kind = ArrayPlan::Kind::whole;
  plan.data.resize(bytes);
  if (bytes > 0) hdf5_read(dataset.get(), plan.dtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, plan.data.data(), context);
  return plan;
}

// Rank 0: the root attributes and a plan for every wanted array, through one process's HDF5.
RestorePlan make_plan(const std::string& file, const CheckpointState& target) {
  const std::string context = "restore_checkpoint: " + format::file_context(file);
  H5Handle access = checkpoint_io::local_file_access(context);
  H5Handle handle = file_handle(H5Fopen(file.c_str(), H5F_ACC_RDONLY, access.get()), "H5Fopen", context);
  CheckpointState meta;
  format::ObjectTypes objects;
  const std::int64_t version = read_root(handle.get(), file, meta, objects);
  RestorePlan plan{meta.step, meta.seed, std::move(meta.config), {}};
  for (const auto& array : target.arrays) {
    plan.arrays.push_back(plan_array(handle.get(), file, array, version, objects));
  }
  handle.close(context);
  return plan;
}

// The file, opened read-only by this rank alone.
class ReadOnlyFile {
 public:
  ReadOnlyFile(const std::string& path, const std::string& context) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) throw IoError(context + ": cannot open for reading: " + std::strerror(errno));
  }
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;
  ~ReadOnlyFile() { ::close(fd_); }
  int fd() const { return fd_; }

 private:
  int fd_;
};

// A chunk's `bytes` bytes at `offset` into `data` and the 4 checksum bytes after them into
// `trailer`, or IoError (a short read means the file was cut off).
void read_chunk(const ReadOnlyFile& file, std::uint64_t offset, void* data, std::uint64_t bytes,
                unsigned char (&trailer)[4], const std::string& context) {
  const std::uint64_t total = checked_add<std::uint64_t>(bytes, 4, "chunk size");
  (void)checked_cast<off_t>(checked_add(offset, total, "file offset"), "file offset");
  iovec parts[2] = {{data, bytes}, {trailer, 4}};
  std::uint64_t done = 0;
  while (done < total) {
    // The parts not yet read, from `done` on.
    iovec left[2];
    int count = 0;
    std::uint64_t skip = done;
    for (const iovec& part : parts) {
      if (skip >= part.iov_len) {
        skip -= part.iov_len;
        continue;
      }
      left[count++] = {static_cast<std::byte*>(part.iov_base) + skip, part.iov_len - skip};
      skip = 0;
    }
    const ssize_t got = ::preadv(file.fd(), left, count, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw IoError(context + ": read failed: " + std::strerror(errno));
    }
    if (got == 0) {
      throw IoError(context + ": the file ends inside the data (read " + std::to_string(done) + " of " +
                    std::to_string(total) + " bytes at offset " + std::to_string(offset) + "; truncated file)");
    }
    done += static_cast<std::uint64_t>(got);
  }
}

// Which chunks of its block this rank checks: chunk p of the block (in the order it reads them)
// when (p + offset) % count == index (see the top of the file). The offset is the array's place
// in the restored state, alike on every replica, so that where each block is one chunk the
// arrays' checks still alternate among the replicas instead of all falling to the first.
struct CheckShare {
  std::uint64_t index = 0;
  std::uint64_t count = 1;
  std::uint64_t offset = 0;
};

// Reads every chunk overlapping [offsets, offsets + block) into `local` (see the top of the file).
// The plan's digest (empty for a version 1 file) catches a chunk that was never written (zeros,
// whose checksum 0 matches its zero trailer).
void read_block_direct(const ArrayPlan& plan, const ReadOnlyFile& file, const std::vector<std::int64_t>& offsets,
                       CheckShare share, Tensor& local, const std::string& context) {
  const Shape& block = local.shape();
  const std::size_t rank = block.size();
  const std::size_t element = dtype_size(local.dtype());
  const std::vector<hsize_t> chunk(plan.chunk.begin(), plan.chunk.end());
  std::uint64_t chunk_bytes = element;
  for (auto c : chunk) chunk_bytes *= c;
  const Shape chunk_shape(chunk.begin(), chunk.end());
  const bool contiguous = checkpoint_io::chunk_is_contiguous(block, chunk);
  std::vector<hsize_t> low(rank), high(rank);  // chunk grid coordinates, inclusive
  for (std::size_t d = 0; d < rank; ++d) {
    low[d] = static_cast<hsize_t>(offsets[d]) / chunk[d];
    high[d] = static_cast<hsize_t>(offsets[d] + block[d] - 1) / chunk[d];
  }
  std::optional<Tensor> buffer;
  std::vector<hsize_t> coords = low;
  for (std::uint64_t position = 0;; ++position) {
    std::vector<hsize_t> start(rank);
    bool inside = true;  // the whole chunk lies in the block
    std::uint64_t first = 0;
    std::uint64_t flat = 0;  // the chunk's index in the row-major chunk grid
    for (std::size_t d = 0; d < rank; ++d) {
      start[d] = coords[d] * chunk[d];
      const auto begin = static_cast<std::int64_t>(start[d]);
      inside = inside && begin >= offsets[d] && begin + static_cast<std::int64_t>(chunk[d]) <= offsets[d] + block[d];
      first = first * static_cast<std::uint64_t>(block[d]) + static_cast<std::uint64_t>(std::max<std::int64_t>(begin - offsets[d], 0));
      const std::uint64_t grid = (static_cast<std::uint64_t>(plan.shape[d]) + chunk[d] - 1) / chunk[d];
      flat = flat * grid + coords[d];
    }
    const std::uint64_t address = plan.addresses.at(flat);
    const bool direct = inside && contiguous;
    if (!direct && !buffer) buffer = Tensor::empty(chunk_shape, local.dtype());
    void* target = direct ? static_cast<void*>(static_cast<std::byte*>(local.raw()) + first * element) : buffer->raw();
    unsigned char trailer[4];
    read_chunk(file, address, target, chunk_bytes, trailer, context);
    const std::uint32_t want = checkpoint_io::fletcher32_from_trailer(trailer);
    const bool check = (position + share.offset) % share.count == share.index;
    const std::uint32_t got = check ? checkpoint_io::fletcher32(target, chunk_bytes) : want;
    if (got != want) {
      throw IoError(context + ": data failed its Fletcher32 checksum (the file is corrupt): chunk at " +
                    checkpoint_io::coords_text(start) + " stores " + std::to_string(want) + ", its bytes sum to " +
                    std::to_string(got));
    }
    if (check && !plan.digest.empty() && plan.digest.at(flat) != got) {
      throw IoError(context + ": chunk at " + checkpoint_io::coords_text(start) + " sums to " + std::to_string(got) +
                    " but the checkpoint's digest says " + std::to_string(plan.digest[flat]) +
                    " (its data was never written or was replaced; the file is incomplete)");
    }
    if (!direct) {
      std::vector<std::int64_t> in_chunk(rank), in_block(rank);
      Shape overlap(rank);
      for (std::size_t d = 0; d < rank; ++d) {
        const std::int64_t begin = std::max<std::int64_t>(static_cast<std::int64_t>(start[d]), offsets[d]);
        const std::int64_t end =
            std::min<std::int64_t>(static_cast<std::int64_t>(start[d] + chunk[d]), offsets[d] + block[d]);
        in_chunk[d] = begin - static_cast<std::int64_t>(start[d]);
        in_block[d] = begin - offsets[d];
        overlap[d] = end - begin;
      }
      insert_block(local, extract_block(*buffer, in_chunk, overlap), in_block);
    }
    // Next chunk coordinates (odometer, last dimension fastest).
    std::size_t d = rank;
    while (d > 0 && coords[d - 1] == high[d - 1]) {
      coords[d - 1] = low[d - 1];
      --d;
    }
    if (d == 0) break;
    ++coords[d - 1];
  }
}

// This rank's block of the target, read into the target's own storage as the plan says:
// `dataset` is the array's dataset opened by every rank (Kind::hdf5 only).
void read_array(const ArrayPlan& plan, hid_t dataset, hid_t transfer, const ReadOnlyFile& file, CheckShare share,
                const std::string& path, CheckpointArray& target) {
  const std::string context = "restore_checkpoint: " + format::dataset_context(path, target.path);
  ShardedTensor& want = target.tensor();
  // Rank 0 validated its own target; every rank's must be the same array.
  if (want.global_shape() != plan.shape) {
    throw IoError(context + ": global shape is " + shape_to_string(plan.shape) + " in the file, " +
                  shape_to_string(want.global_shape()) + " wanted");
  }
  if (want.dtype() != plan.dtype) {
    throw IoError(context + ": dtype is " + std::string(dtype_name(plan.dtype)) + " in the file, " +
                  std::string(dtype_name(want.dtype())) + " wanted");
  }
  const Mesh& mesh = want.mesh();
  const Shape block = local_shape(want.spec(), mesh.shape(), want.global_shape(), mesh.coords());
  Tensor& local = want.local();  // every element is read, or zeroed below
  if (local.shape() != block || local.dtype() != want.dtype()) {
    throw Error(context + ": internal error: the target's block is " + shape_to_string(local.shape()) + ", " +
                shape_to_string(block) + " wanted");
  }
  // Along partial axes the value lives on the replica at coordinate 0; the others hold zeros.
  const bool take_part = numel(block) > 0 && is_partial_holder(want.spec(), mesh.shape(), mesh.coords());
  if (!take_part) {
    local.fill_zero();
    return;
  }
  const auto offsets = tessera::block_offsets(want.spec(), mesh.shape(), want.global_shape(), mesh.coords());
  switch (plan.kind) {
    case ArrayPlan::Kind::chunks:
      read_block_direct(plan, file, offsets, share, local, context);
      break;
    case ArrayPlan::Kind::whole: {
      if (plan.data.size() != static_cast<std::size_t>(numel(plan.shape)) * dtype_size(plan.dtype)) {
        throw Error(context + ": internal error: the broadcast array has " + std::to_string(plan.data.size()) +
                    " bytes");
      }
      if (block == plan.shape) {
        std::memcpy(local.raw(), plan.data.data(), plan.data.size());
      } else {
        Tensor whole = Tensor::empty(plan.shape, plan.dtype);
        std::memcpy(whole.raw(), plan.data.data(), plan.data.size());
        const Tensor part = extract_block(whole, offsets, block);
        std::memcpy(local.raw(), part.raw(), local.nbytes());
      }
      break;
    }
    case ArrayPlan::Kind::hdf5: {
      H5Handle file_space = checkpoint_io::select_block(dataset, offsets, block, true, context);
      H5Handle memory = checkpoint_io::memory_space(block, true, context);
      hdf5_read(dataset, want.dtype(), memory.get(), file_space.get(), transfer, local.raw(), context);
      break;
    }
  }
}

// What identifies the kernel this rank runs on, whose page cache it reads through: Linux's boot
// id (one per booted kernel, shared by the containers on it), else the host name.
std::array<char, 64> kernel_identity() {
  std::array<char, 64> identity{};
  std::ifstream boot_id("/proc/sys/kernel/random/boot_id");
  std::string text;
  if (!(boot_id >> text) || text.empty()) {
    char host[identity.size()] = {};
    ::gethostname(host, sizeof host - 1);
    text = std::string("host:") + host;
  }
  std::memcpy(identity.data(), text.data(), std::min(text.size(), identity.size() - 1));
  return identity;
}

// For each rank of `comm`, the lowest rank of `comm` that reads through the same page cache:
// rank 0 for all in a job the launcher reports on one node (one kernel), else by one all-gather
// of 64 bytes per rank (collective; every rank takes the same branch).
std::vector<int> node_leaders(const Communicator& comm) {
  if (job_on_one_node()) return std::vector<int>(static_cast<std::size_t>(comm.size()), 0);
  const std::array<char, 64> mine = kernel_identity();
  const auto ranks = static_cast<std::size_t>(comm.size());
  std::vector<char> all(ranks * mine.size());
  check_mpi(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_CHAR, all.data(),
                          static_cast<int>(mine.size()), MPI_CHAR, comm.handle()),
            "MPI_Allgather");
  std::vector<int> leaders(ranks);
  for (std::size_t r = 0; r < ranks; ++r) {
    leaders[r] = static_cast<int>(r);
    for (std::size_t q = 0; q < r; ++q) {
      if (std::memcmp(&all[q * mine.size()], &all[r * mine.size()], mine.size()) == 0) {
        leaders[r] = static_cast<int>(q);
        break;
      }
    }
  }
  return leaders;
}

// The ranks that hold the same block of `want` as this one (differing only on the mesh axes its
// spec does not use): 1 when the block is not replicated.
int replicas_of(const ShardedTensor& want) {
  const MeshShape& shape = want.mesh().shape();
  return shape.axes_size(unused_axes(want.spec(), shape));
}

// This rank's share of the checks of `want`'s block among its replicas on this node (see the
// top of the file); `leaders` from node_leaders over the mesh's communicator, `array` the
// array's place in the restored state.
CheckShare check_share(const ShardedTensor& want, const std::vector<int>& leaders, std::size_t array) {
  const Mesh& mesh = want.mesh();
  const MeshShape& shape = mesh.shape();
  const Axes replica = unused_axes(want.spec(), shape);
  const int members = shape.axes_size(replica);
  if (members == 1) return {};
  const int me = mesh.rank();
  CheckShare share{0, 0, array};
  for (int k = 0; k < members; ++k) {
    const int member = shape.rank_of(shape.group_member(mesh.coords(), replica, k));
    if (leaders.at(static_cast<std::size_t>(member)) != leaders.at(static_cast<std::size_t>(me))) continue;
    if (member == me) share.index = share.count;
    ++share.count;
  }
  return share;
}

// The phases of this process's last successful restore (last_restore_phases).
RestorePhases last_phases;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

RestorePhases last_restore_phases() { return last_phases; }

void restore_checkpoint_into(const std::string& dir_or_file, CheckpointState& target) {
  const auto start = std::chrono::steady_clock::now();
  RestorePhases phases;
  quiet_hdf5_errors();
  // TESSERA_COLLECTIVE_CHECK: every rank is at this restore, from the same directory or file (as
  // at a save).
  const Mesh* checked_mesh = checkpoint_io::first_mesh(target);
  std::optional<detail::CollectiveCheck> check;
  if (checked_mesh != nullptr) {
    check.emplace(*checked_mesh, [&] { return "restore_checkpoint from '" + dir_or_file + "'"; });
  }
  // Every rank's target first, so that the checks after it see the same facts on every rank.
  checkpoint_io::agree_on_state(target, "restore_checkpoint", /*whole_state=*/false, "checkpoint path", dir_or_file);
  for (const auto& array : target.arrays) format::validate_array_path(array.path);
  const Mesh* mesh = checkpoint_io::common_mesh(target, "restore_checkpoint");
  const Communicator world = Communicator::world();
  const Communicator& comm = mesh != nullptr ? mesh->comm() : world;

  std::string file;
  std::optional<std::string> error;
  if (comm.rank() == 0) error = capture_error([&] { file = resolve_checkpoint(dir_or_file, "restore_checkpoint"); });
  checkpoint_io::agree_or_throw_io(comm, error);
  file = broadcast_string(comm, file, 0);
  // Every rank checks that it sees the file; rank 0 alone reads its metadata and plans while the
  // others sleep.
  std::string plan_bytes;
  error = capture_error([&] {
    check_readable(file);
    if (comm.rank() == 0) plan_bytes = serialize(make_plan(file, target));
  });
  comm.barrier_sleeping();
  checkpoint_io::agree_or_throw_io(comm, error);
  const RestorePlan plan = deserialize(broadcast_string(comm, plan_bytes, 0));
  phases.planned = seconds_since(start);
  const bool through_hdf5 = std::any_of(plan.arrays.begin(), plan.arrays.end(),
                                        [](const ArrayPlan& array) { return array.kind == ArrayPlan::Kind::hdf5; });
  // Who checks which chunks: arrays with blocks replicated on one node split the checks. Whether
  // any block is replicated follows from the specs, so every rank takes the gather or none does.
  std::vector<CheckShare> shares(target.arrays.size());
  if (std::any_of(target.arrays.begin(), target.arrays.end(),
                  [](const CheckpointArray& array) { return replicas_of(array.tensor()) > 1; })) {
    const std::vector<int> leaders = node_leaders(comm);
    for (std::size_t i = 0; i < target.arrays.size(); ++i) {
      shares[i] = check_share(target.arrays[i].tensor(), leaders, i);
    }
  }

  const std::string context = "restore_checkpoint: " + format::file_context(file);
  // Only a dataset of another writer too large to broadcast needs every rank's HDF5 (collective).
  std::optional<std::string> agreed;
  H5Handle handle;
  std::vector<H5Handle> datasets(plan.arrays.size());
  if (through_hdf5) {
    error = capture_error([&] {
      H5Handle access = checkpoint_io::parallel_file_access(comm.handle(), context);
      handle = file_handle(H5Fopen(checkpoint_io::mpi_io_name(file).c_str(), H5F_ACC_RDONLY, access.get()), "H5Fopen",
                           context);
      for (std::size_t i = 0; i < plan.arrays.size(); ++i) {
        if (plan.arrays[i].kind != ArrayPlan::Kind::hdf5) continue;
        const std::string name = format::dataset_name(target.arrays[i].path);
        datasets[i] = dataset_handle(H5Dopen2(handle.get(), name.c_str(), H5P_DEFAULT), "H5Dopen2",
                                     "restore_checkpoint: " + format::dataset_context(file, target.arrays[i].path));
      }
    });
    agreed = first_error(comm, error);
  }
  if (!agreed) {
    error = capture_error([&] {
      const ReadOnlyFile source(file, context);
      H5Handle transfer = checkpoint_io::transfer_properties(H5FD_MPIO_INDEPENDENT, context);
      for (std::size_t i = 0; i < target.arrays.size(); ++i) {
        read_array(plan.arrays[i], datasets[i].valid() ? datasets[i].get() : H5I_INVALID_HID, transfer.get(), source,
                   shares[i], file, target.arrays[i]);
      }
    });
  }
  phases.read = seconds_since(start);
  // Ranks done reading sleep until the last one is (see the top of the file); then every rank
  // closes (collective) whatever happened, and the outcome is agreed.
  comm.barrier_sleeping();
  datasets.clear();
  std::optional<std::string> close_error;
  if (through_hdf5) close_error = capture_error([&] { handle.close(context); });
  if (agreed) checkpoint_io::throw_io_error(*agreed);
  checkpoint_io::agree_or_throw_io(comm, error ? error : close_error);
  target.step = plan.step;
  target.seed = plan.seed;
  target.config = plan.config;
  phases.returned = seconds_since(start);
  last_phases = phases;
}

CheckpointState restore_checkpoint(const std::string& dir_or_file, const CheckpointState& target) {
  // The result's blocks: allocated here, filled by the restore (every element is read or zeroed).
  CheckpointState result;
  for (const auto& array : target.arrays) {
    const ShardedTensor& want = array.tensor();
    if (!want.mesh().valid()) break;  // restore_checkpoint_into names the array
    const Shape block = local_shape(want.spec(), want.mesh().shape(), want.global_shape(), want.mesh().coords());
    result.arrays.push_back({array.path,
                             ShardedTensor(want.mesh(), want.spec(), want.global_shape(),
                                           Tensor::empty(block, want.dtype()), array.path),
                             array.logical_names});
  }
  if (result.arrays.size() != target.arrays.size()) result = target;
  restore_checkpoint_into(dir_or_file, result);
  return result;
}

}  // namespace tessera
