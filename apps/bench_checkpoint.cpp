// bench_checkpoint: save and restore bandwidth of a sharded training state (params + Adam's mu
// and nu of an MLP of DotReluDot layers, the tutorial's specs W1 (None, model), W2 (model,
// None)), beside a plain sequential write + read of the same bytes on the same disk in the same
// run (rank 0, fwrite/fread in 64 MiB pieces, fsync). Before every read the file's pages are
// dropped from the page cache (posix_fadvise DONTNEED after fsync), so reads come from the disk
// or whatever cache lies below the kernel. The state is an nn::TrainState saved and restored
// as the apps do (save_train_state, restore_train_state_into an allocated target), and each is
// timed as its slowest rank's time from a common barrier to its return (slowest_rank); each rank
// also measures how much resident memory a save and a restore add at their peak above what it
// held just before (VmHWM after resetting it), over its bytes of the state:
// save_extra_rss_over_state and restore_extra_rss_over_state, the largest rank's. The save's
// removal of the previous checkpoint runs on after it returns (SaveOptions::prune_in_background);
// background_prune_wait_s is how long rank 0 then waits for it, outside both timings.
// save_phases_s splits the save by last_save_phases(): the skeleton written and the chunks'
// addresses and checksums exchanged, the chunks written and synced, the return (each the slowest
// rank's, in seconds from the call; medians over the repeats).
// restore_phases_s splits the restore by last_restore_phases(): the plan in every rank's hands,
// the first and the last rank done reading, the return (each the slowest rank's, in seconds from
// the call; medians over the repeats). One JSON object per line.
//   bash scripts/mpirun/local.sh 8 build/apps/bench_checkpoint --state both
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "apps/cli_main.h"
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <vector>

#include "apps/run_support.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/train_state_io.h"
#include "mesh/agree.h"
#include "mesh/environment.h"
#include "mesh/mesh.h"
#include "mesh/sharded_tensor.h"

namespace {

using namespace tessera;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// The median over repeats of plain[i] / timed[i]: each repeat's save or restore against the plain
// write or read of the same repeat, taken seconds apart. A virtual machine's disk read the same
// 1.1 GiB in 0.56 to 2.2 s within one hour, reads 5 s apart differing by up to 1.8 times
// (2026-11-29), and a ratio of two medians may pair a restore with another repeat's plain read.
double paired_ratio(const std::vector<double>& plain, const std::vector<double>& timed) {
  std::vector<double> ratios;
  for (std::size_t i = 0; i < plain.size() && i < timed.size(); ++i) ratios.push_back(plain[i] / timed[i]);
  return median(ratios);
}

// "[min, max]" of a repeat's times, as JSON.
std::string range_json(const std::vector<double>& values) {
  std::ostringstream out;
  out.precision(4);
  out << "[" << *std::min_element(values.begin(), values.end()) << ", "
      << *std::max_element(values.begin(), values.end()) << "]";
  return out.str();
}

// The slowest rank's time for a collective operation each rank timed from the same barrier: the
// save and the restore end in an agreement, so every rank returns once all have done their part.
// Not rank 0's time to a barrier after it: ranks past that barrier go on (comparing the restored
// bits, rank 0's plain write) and hold the two cores for whole scheduler ticks while the ranks
// still in MPI's yielding barrier wait for them, which added 0-18 ms, in steps of 4 ms, to a
// restore whose every rank had returned within 0.5 ms of the others (8 ranks on 2 cores, 96 MiB).
double slowest_rank(const Mesh& mesh, double seconds) {
  MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, mesh.comm().handle());
  return seconds;
}

// Drops a file's pages from the page cache (after fsync, so they are clean and can be dropped).
void drop_page_cache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw IoError("bench_checkpoint: cannot open '" + path + "'");
  ::fsync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// An MLP training state: `layers` x (W1 [depth, depth] P(None, model), W2 [depth, depth]
// P(model, None)) for params and Adam's mu and nu, plus the step count.
nn::TrainState mlp_state(const Mesh& mesh, int layers, std::int64_t depth, bool fill) {
  const std::string split = mesh.axis_names().back();
  nn::ParamTree params;
  for (int l = 0; l < layers; ++l) {
    for (const char* name : {"W1", "W2"}) {
      const std::string path = "MLP_0/DotReluDot_" + std::to_string(l) + "/" + name;
      const Spec spec =
          name == std::string("W1") ? Spec(std::vector<Axes>{{}, {split}}) : Spec(std::vector<Axes>{{split}, {}});
      params.emplace(path, ShardedTensor::zeros(mesh, spec, {depth, depth}, DType::f32, path));
    }
  }
  nn::TrainState state = nn::create_train_state(std::move(params), nn::Optimizer{});
  state.step = 100;
  state.opt_state.count = 100;
  if (fill) {
    int k = 0;
    for (nn::ParamTree* tree : {&state.params, &state.opt_state.mu, &state.opt_state.nu}) {
      for (auto& [path, value] : *tree) {
        auto values = value.local().values<float>();
        for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 1021) * 0.001f + k;
        ++k;
      }
    }
  }
  return state;
}

std::vector<const ShardedTensor*> arrays_of(const nn::TrainState& state) {
  std::vector<const ShardedTensor*> out;
  for (const nn::ParamTree* tree : {&state.params, &state.opt_state.mu, &state.opt_state.nu}) {
    for (const auto& [path, value] : *tree) out.push_back(&value);
  }
  return out;
}

// Global bytes of the state's arrays, and this rank's bytes of them.
std::int64_t state_bytes(const nn::TrainState& state) {
  std::int64_t bytes = 0;
  for (const ShardedTensor* a : arrays_of(state)) bytes += numel(a->global_shape()) * dtype_size(a->dtype());
  return bytes;
}
std::int64_t local_bytes(const nn::TrainState& state) {
  std::int64_t bytes = 0;
  for (const ShardedTensor* a : arrays_of(state)) bytes += a->local().nbytes();
  return bytes;
}

// Resident bytes that `work` adds at its peak above what the process held just before it
// (Linux: writing 5 to /proc/self/clear_refs resets the peak, VmHWM). -1 where unsupported.
template <class Work>
std::int64_t peak_extra_bytes(Work&& work) {
  const bool reset = apps::reset_peak_rss();
  const std::int64_t before = apps::status_kib("VmRSS");
  work();
  const std::int64_t peak = apps::status_kib("VmHWM");
  if (!reset || before < 0 || peak < 0) return -1;
  return std::max<std::int64_t>(0, peak - before) * 1024;
}

struct PlainFigures {
  double write_s, read_s;
};

// Sequential write then read of `bytes` bytes in 64 MiB pieces, with fsync and the cache dropped.
PlainFigures plain_write_read(const std::string& path, std::int64_t bytes) {
  const std::size_t piece = std::size_t{64} << 20;
  std::vector<char> buffer(piece);
  for (std::size_t i = 0; i < piece; ++i) buffer[i] = static_cast<char>(i * 31);
  auto start = Clock::now();
  FILE* out = std::fopen(path.c_str(), "wb");
  if (out == nullptr) throw IoError("bench_checkpoint: cannot create '" + path + "'");
  for (std::int64_t left = bytes; left > 0; left -= static_cast<std::int64_t>(piece)) {
    std::size_t n = static_cast<std::size_t>(std::min<std::int64_t>(left, piece));
    if (std::fwrite(buffer.data(), 1, n, out) != n) throw IoError("bench_checkpoint: short write to '" + path + "'");
  }
  std::fflush(out);
  ::fsync(::fileno(out));
  std::fclose(out);
  const double write_s = seconds_since(start);
  drop_page_cache(path);
  start = Clock::now();
  FILE* in = std::fopen(path.c_str(), "rb");
  std::int64_t read = 0;
  while (std::size_t n = std::fread(buffer.data(), 1, piece, in)) read += static_cast<std::int64_t>(n);
  std::fclose(in);
  const double read_s = seconds_since(start);
  if (read != bytes) throw IoError("bench_checkpoint: read back " + std::to_string(read) + " bytes");
  std::filesystem::remove(path);
  return {write_s, read_s};
}

void bench_state(const Mesh& mesh, const std::string& name, int layers, std::int64_t depth, const std::string& dir,
                 int repeats) {
  const int rank = mesh.rank();
  // The state and its restore target, each 3 x 2 x layers blocks [depth, depth / split] in f32
  // on a rank (mlp_state), refused on every rank before either is allocated when they exceed its
  // share of the node's memory (until the forty-fourth session nothing was checked, and the
  // largest --large-layers and --large-depth went on to allocate 16 GiB tensors).
  const std::int64_t columns = block_chunk(depth, mesh.shape().sizes().back());
  apps::check_memory(2 * 3 * 2 * static_cast<double>(layers) * static_cast<double>(depth) * static_cast<double>(columns) *
                     4.0);
  nn::TrainState state = mlp_state(mesh, layers, depth, true);
  nn::TrainState target = mlp_state(mesh, layers, depth, false);
  const std::int64_t bytes = state_bytes(state);
  const std::int64_t rank_bytes = local_bytes(state);
  // Rank-0-only failures are agreed on, so no rank waits in a barrier for a rank that threw.
  std::optional<std::string> error;
  if (rank == 0) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    struct statvfs fs {};
    if (ec) {
      error = "cannot create '" + dir + "': " + ec.message();
    } else if (statvfs(dir.c_str(), &fs) == 0 &&
        static_cast<double>(fs.f_bavail) * fs.f_frsize < 2.5 * static_cast<double>(bytes)) {
      error = "not enough free space in '" + dir + "' for " + std::to_string(bytes) + " bytes twice";
    }
  }
  agree_or_throw<IoError>(mesh.comm(), error);
  const TrainCheckpointMeta meta{0, "{\"layers\": " + std::to_string(layers) + ", \"depth\": " + std::to_string(depth) + "}", {}};
  std::vector<double> save_s, restore_s, write_s, read_s, prune_s;
  // Each restore's phases (last_restore_phases) as the slowest rank saw them, and the first rank
  // done reading: where the restore's time goes, repeat by repeat.
  std::vector<double> planned_s, first_read_s, read_done_s, returned_s;
  // Each save's phases (last_save_phases), the slowest rank's.
  std::vector<double> laid_out_s, written_s, saved_s;
  // The most a save (a restore into the allocated target) adds to a rank's resident memory, over
  // that rank's bytes of the state: the largest rank's, over all repeats.
  double save_extra = 0, restore_extra = 0;
  bool rss_known = true;
  for (int r = 0; r < repeats; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    auto start = Clock::now();
    std::string file;
    std::int64_t extra = peak_extra_bytes([&] { file = save_train_state(state, dir, meta, SaveOptions{.keep = 1}); });
    save_s.push_back(slowest_rank(mesh, seconds_since(start)));
    const SavePhases save_phases = last_save_phases();
    double save_slowest[3] = {save_phases.laid_out, save_phases.written, save_phases.returned};
    MPI_Allreduce(MPI_IN_PLACE, save_slowest, 3, MPI_DOUBLE, MPI_MAX, mesh.comm().handle());
    laid_out_s.push_back(save_slowest[0]);
    written_s.push_back(save_slowest[1]);
    saved_s.push_back(save_slowest[2]);
    rss_known = rss_known && extra >= 0;
    save_extra = std::max(save_extra, static_cast<double>(extra) / static_cast<double>(rank_bytes));
    // The previous checkpoint is unlinked by rank 0's background thread (SaveOptions): its end is
    // waited for here, outside both timings, so that it does not slow the restore measured next,
    // and reported apart (a training run overlaps it with its steps).
    start = Clock::now();
    wait_for_pruning();
    prune_s.push_back(seconds_since(start));
    if (rank == 0) drop_page_cache(file);
    MPI_Barrier(MPI_COMM_WORLD);
    start = Clock::now();
    extra = peak_extra_bytes([&] { restore_train_state_into(file, target); });
    restore_s.push_back(slowest_rank(mesh, seconds_since(start)));
    const RestorePhases phases = last_restore_phases();
    double slowest[3] = {phases.planned, phases.read, phases.returned}, first_read = phases.read;
    MPI_Allreduce(MPI_IN_PLACE, slowest, 3, MPI_DOUBLE, MPI_MAX, mesh.comm().handle());
    MPI_Allreduce(MPI_IN_PLACE, &first_read, 1, MPI_DOUBLE, MPI_MIN, mesh.comm().handle());
    planned_s.push_back(slowest[0]);
    first_read_s.push_back(first_read);
    read_done_s.push_back(slowest[1]);
    returned_s.push_back(slowest[2]);
    rss_known = rss_known && extra >= 0;
    restore_extra = std::max(restore_extra, static_cast<double>(extra) / static_cast<double>(rank_bytes));
    const auto saved = arrays_of(state), restored = arrays_of(target);
    for (std::size_t i = 0; i < saved.size(); ++i) {
      if (!restored[i]->local().bit_equal(saved[i]->local())) throw IoError("bench_checkpoint: restored values differ");
    }
    if (target.step != state.step || target.opt_state.count != state.opt_state.count) {
      throw IoError("bench_checkpoint: restored step or count differs");
    }
    if (rank == 0) {
      try {
        auto plain = plain_write_read(dir + "/plain.bin", bytes);
        write_s.push_back(plain.write_s);
        read_s.push_back(plain.read_s);
      } catch (const Error& e) {
        error = e.what();
      }
    }
    // The other ranks sleep while rank 0 alone writes and reads (MPI's barrier would poll and
    // yield, taking turns on rank 0's core).
    mesh.comm().barrier_sleeping();
    agree_or_throw<IoError>(mesh.comm(), error);
    state.step += 1;
  }
  double extras[2] = {save_extra, restore_extra};
  MPI_Allreduce(MPI_IN_PLACE, extras, 2, MPI_DOUBLE, MPI_MAX, mesh.comm().handle());
  int known = rss_known ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &known, 1, MPI_INT, MPI_MIN, mesh.comm().handle());
  if (rank == 0) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
    const double gb = static_cast<double>(bytes) / 1e9;
    const double save = median(save_s), restore = median(restore_s), write = median(write_s), read = median(read_s);
    std::ostringstream out;
    out.precision(4);
    out << "{\"bench\": \"checkpoint\", \"state\": \"" << name << "\", \"ranks\": " << mesh.size() << ", \"mesh\": \""
        << mesh.shape().to_string() << "\", \"layers\": " << layers << ", \"depth\": " << depth
        << ", \"arrays\": " << arrays_of(state).size() + 1 << ", \"bytes\": " << bytes
        << ", \"bytes_per_rank\": " << rank_bytes << ", \"repeats\": " << repeats
        << ", \"save_s\": " << save << ", \"save_GBps\": " << gb / save << ", \"restore_s\": " << restore
        << ", \"restore_GBps\": " << gb / restore << ", \"plain_write_s\": " << write
        << ", \"plain_write_GBps\": " << gb / write << ", \"plain_read_s\": " << read
        << ", \"plain_read_GBps\": " << gb / read << ", \"save_vs_plain_write\": " << write / save
        << ", \"restore_vs_plain_read\": " << read / restore
        << ", \"save_vs_plain_write_paired\": " << paired_ratio(write_s, save_s)
        << ", \"restore_vs_plain_read_paired\": " << paired_ratio(read_s, restore_s)
        << ", \"save_s_range\": " << range_json(save_s) << ", \"restore_s_range\": " << range_json(restore_s)
        << ", \"plain_write_s_range\": " << range_json(write_s) << ", \"plain_read_s_range\": " << range_json(read_s)
        << ", \"save_phases_s\": {\"laid_out\": " << median(laid_out_s) << ", \"written\": " << median(written_s)
        << ", \"returned\": " << median(saved_s) << "}"
        << ", \"restore_phases_s\": {\"planned\": " << median(planned_s) << ", \"first_read\": "
        << median(first_read_s) << ", \"read\": " << median(read_done_s) << ", \"returned\": " << median(returned_s)
        << "}, \"background_prune_wait_s\": " << median(prune_s);
    if (known == 1) {
      out << ", \"save_extra_rss_over_state\": " << extras[0] << ", \"restore_extra_rss_over_state\": " << extras[1];
    } else {
      out << ", \"save_extra_rss_over_state\": null, \"restore_extra_rss_over_state\": null";
    }
    out        << ", \"page_cache\": \"dropped per file (fsync + posix_fadvise DONTNEED) before each read\"}";
    std::cout << out.str() << std::endl;
  }
}

// Rank 0 makes a directory of this run's own inside `parent` (made first if need be), and every
// rank gets its name. The run saves, prunes and in the end removes only inside it: whatever
// `parent` held before, checkpoints of a training run included, stays as it was (until
// 2026-11-28 the run saved into `parent` itself, pruned its checkpoints and removed it whole).
std::string make_run_directory(const Mesh& mesh, const std::string& parent) {
  std::string run;
  std::optional<std::string> error;
  if (mesh.rank() == 0) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    std::string pattern = (std::filesystem::path(parent) / "bench_checkpoint.XXXXXX").string();
    if (ec) {
      error = "--dir '" + parent + "': cannot create: " + ec.message();
    } else if (::mkdtemp(pattern.data()) == nullptr) {
      error = "--dir '" + parent + "': cannot make a directory in it: " + std::strerror(errno);
    } else {
      run = pattern;
    }
  }
  agree_or_throw<IoError>(mesh.comm(), error);
  return broadcast_string(mesh.comm(), run, 0);
}

// Removes the run's directory when the run ends, however it ends (rank 0).
struct RemoveOnExit {
  std::string dir;
  ~RemoveOnExit() {
    std::error_code ignored;
    if (!dir.empty()) std::filesystem::remove_all(dir, ignored);
  }
};

}  // namespace

int main(int argc, char** argv) {
  tessera::Environment env(argc, argv);
  tessera::apps::CommandLine app{"tessera bench_checkpoint: checkpoint save/restore bandwidth beside plain sequential I/O"};
  std::string mesh_text = "data=2,model=4";
  std::string which = "both";
  std::string dir = "/tmp/tessera_bench_checkpoint";
  int repeats = 3;
  int large_layers = 3;
  std::int64_t large_depth = 4096;
  app.add_option("--mesh", mesh_text, "mesh axes, name=size,... (the last axis splits W1 and W2)")
      .capture_default_str();
  app.add_option("--state", which, "mlp (the tutorial: 4 layers, depth 1024), large, or both")
      .one_of({"mlp", "large", "both"})
      .capture_default_str();
  app.add_option("--dir", dir,
                 "directory in which the run makes a directory of its own for its files, removed afterwards "
                 "(nothing else in --dir is touched)")
      .non_empty_path()
      .capture_default_str();
  app.add_option("--repeats", repeats, "repetitions (the median is reported)")
      .capture_default_str();
  app.add_option("--large-layers", large_layers, "layers of the large state").capture_default_str();
  app.add_option("--large-depth", large_depth, "depth of the large state (3 x 2 x layers x depth^2 x 4 bytes)")
      .capture_default_str();
  return tessera::apps::parse_and_run("bench_checkpoint", app, argc, argv, [&](int) {
    // The large state holds 3 x 2 x layers x depth^2 floats: bounds that keep the count in range.
    if (repeats < 1) throw tessera::UsageError("--repeats must be >= 1, got " + std::to_string(repeats));
    if (large_layers < 1 || large_layers > 1024) {
      throw tessera::UsageError("--large-layers must be between 1 and 1024, got " + std::to_string(large_layers));
    }
    if (large_depth < 1 || large_depth > 65536) {
      throw tessera::UsageError("--large-depth must be between 1 and 65536, got " + std::to_string(large_depth));
    }
    tessera::Mesh mesh = tessera::Mesh::world(tessera::MeshShape::parse(mesh_text));
    const std::string run_dir = make_run_directory(mesh, dir);
    RemoveOnExit removal{mesh.rank() == 0 ? run_dir : std::string()};
    if (which != "large") bench_state(mesh, "mlp", 4, 1024, run_dir + "/mlp", repeats);
    if (which != "mlp") bench_state(mesh, "large", large_layers, large_depth, run_dir + "/large", repeats);
    return 0;
  });
}
