// bench_checkpoint: save and restore bandwidth of a sharded training state (params + Adam's mu
// and nu of an MLP of DotReluDot layers, the tutorial's specs W1 (None, model), W2 (model,
// None)), beside a plain sequential write + read of the same bytes on the same disk in the same
// run (rank 0, fwrite/fread in 64 MiB pieces, fsync). Before every read the file's pages are
// dropped from the page cache (posix_fadvise DONTNEED after fsync), so reads come from the disk
// or whatever cache lies below the kernel. One JSON object per line.
//   bash scripts/mpirun/local.sh 8 build/apps/bench_checkpoint --state both
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "apps/cli_main.h"
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "io/checkpoint.h"
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

// Drops a file's pages from the page cache (after fsync, so they are clean and can be dropped).
void drop_page_cache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw IoError("bench_checkpoint: cannot open '" + path + "'");
  ::fsync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// An MLP state: `layers` x (W1 [depth, depth] P(None, model), W2 [depth, depth] P(model, None))
// for params, mu and nu, plus the step count.
CheckpointState mlp_state(const Mesh& mesh, int layers, std::int64_t depth, bool fill) {
  CheckpointState state;
  state.step = 100;
  state.seed = 0;
  state.config = "{\"layers\": " + std::to_string(layers) + ", \"depth\": " + std::to_string(depth) + "}";
  const std::string split = mesh.axis_names().back();
  for (const char* prefix : {"params/", "opt_state/mu/", "opt_state/nu/"}) {
    for (int l = 0; l < layers; ++l) {
      for (const char* name : {"W1", "W2"}) {
        const std::string path = std::string(prefix) + "MLP_0/DotReluDot_" + std::to_string(l) + "/" + name;
        const Spec spec =
            name == std::string("W1") ? Spec(std::vector<Axes>{{}, {split}}) : Spec(std::vector<Axes>{{split}, {}});
        ShardedTensor value = ShardedTensor::zeros(mesh, spec, {depth, depth}, DType::f32, path);
        if (fill) {
          auto values = value.local().values<float>();
          for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 1021) * 0.001f + l;
        }
        state.arrays.push_back({path, std::move(value), {}});
      }
    }
  }
  state.arrays.push_back({"opt_state/count", ShardedTensor::zeros(mesh, Spec(), {}, DType::i32, "count"), {}});
  return state;
}

std::int64_t state_bytes(const CheckpointState& state) {
  std::int64_t bytes = 0;
  for (const auto& a : state.arrays) bytes += numel(a.value.global_shape()) * dtype_size(a.value.dtype());
  return bytes;
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
  CheckpointState state = mlp_state(mesh, layers, depth, true);
  const CheckpointState target = mlp_state(mesh, layers, depth, false);
  const std::int64_t bytes = state_bytes(state);
  // Rank-0-only failures are agreed on, so no rank waits in a barrier for a rank that threw.
  std::optional<std::string> error;
  if (rank == 0) {
    std::filesystem::create_directories(dir);
    struct statvfs fs {};
    if (statvfs(dir.c_str(), &fs) == 0 &&
        static_cast<double>(fs.f_bavail) * fs.f_frsize < 2.5 * static_cast<double>(bytes)) {
      error = "bench_checkpoint: not enough free space in '" + dir + "' for " + std::to_string(bytes) + " bytes twice";
    }
  }
  agree_or_throw<IoError>(mesh.comm(), error);
  std::vector<double> save_s, restore_s, write_s, read_s;
  for (int r = 0; r < repeats; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    auto start = Clock::now();
    const std::string file = save_checkpoint(state, dir, SaveOptions{.keep = 1});
    MPI_Barrier(MPI_COMM_WORLD);
    save_s.push_back(seconds_since(start));
    if (rank == 0) drop_page_cache(file);
    MPI_Barrier(MPI_COMM_WORLD);
    start = Clock::now();
    CheckpointState restored = restore_checkpoint(file, target);
    MPI_Barrier(MPI_COMM_WORLD);
    restore_s.push_back(seconds_since(start));
    if (!restored.arrays.front().value.local().bit_equal(state.arrays.front().value.local())) {
      throw IoError("bench_checkpoint: restored values differ");
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
    agree_or_throw<IoError>(mesh.comm(), error);
    state.step += 1;
  }
  if (rank == 0) {
    std::filesystem::remove_all(dir);
    const double gb = static_cast<double>(bytes) / 1e9;
    const double save = median(save_s), restore = median(restore_s), write = median(write_s), read = median(read_s);
    std::ostringstream out;
    out.precision(4);
    out << "{\"bench\": \"checkpoint\", \"state\": \"" << name << "\", \"ranks\": " << mesh.size() << ", \"mesh\": \""
        << mesh.shape().to_string() << "\", \"layers\": " << layers << ", \"depth\": " << depth
        << ", \"arrays\": " << state.arrays.size() << ", \"bytes\": " << bytes << ", \"repeats\": " << repeats
        << ", \"save_s\": " << save << ", \"save_GBps\": " << gb / save << ", \"restore_s\": " << restore
        << ", \"restore_GBps\": " << gb / restore << ", \"plain_write_s\": " << write
        << ", \"plain_write_GBps\": " << gb / write << ", \"plain_read_s\": " << read
        << ", \"plain_read_GBps\": " << gb / read << ", \"save_vs_plain_write\": " << write / save
        << ", \"restore_vs_plain_read\": " << read / restore
        << ", \"page_cache\": \"dropped per file (fsync + posix_fadvise DONTNEED) before each read\"}";
    std::cout << out.str() << std::endl;
  }
}

}  // namespace

int main(int argc, char** argv) {
  tessera::Environment env(argc, argv);
  CLI::App app{"tessera bench_checkpoint: checkpoint save/restore bandwidth beside plain sequential I/O"};
  std::string mesh_text = "data=2,model=4";
  std::string which = "both";
  std::string dir = "/tmp/tessera_bench_checkpoint";
  int repeats = 3;
  int large_layers = 3;
  std::int64_t large_depth = 4096;
  app.add_option("--mesh", mesh_text, "mesh axes, name=size,... (the last axis splits W1 and W2)")
      ->capture_default_str();
  app.add_option("--state", which, "mlp (the tutorial: 4 layers, depth 1024), large, or both")
      ->check(CLI::IsMember({"mlp", "large", "both"}))
      ->capture_default_str();
  app.add_option("--dir", dir, "directory for the files (removed afterwards)")->capture_default_str();
  app.add_option("--repeats", repeats, "repetitions (the median is reported)")
      ->capture_default_str();
  app.add_option("--large-layers", large_layers, "layers of the large state")->capture_default_str();
  app.add_option("--large-depth", large_depth, "depth of the large state (3 x 2 x layers x depth^2 x 4 bytes)")
      ->capture_default_str();
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
    if (which != "large") bench_state(mesh, "mlp", 4, 1024, dir, repeats);
    if (which != "mlp") bench_state(mesh, "large", large_layers, large_depth, dir, repeats);
    return 0;
  });
}
