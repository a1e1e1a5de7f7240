// Pieces the training apps share.
#include "apps/run_support.h"

#include <fcntl.h>
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "core/dtype.h"
#include "core/files.h"
#include "core/spec.h"
#include "core/text.h"
#include "io/checkpoint.h"
#include "io/checkpoint_dir.h"
#include "io/hdf5_handle.h"
#include "mesh/communicator.h"
#include "mesh/mpi_check.h"
#include "models/transformer.h"

namespace tessera::apps {

std::optional<std::string> claim_checkpoint_directory(const std::string& dir, bool resume, bool overwrite) {
  // What would make the run's saves fail is refused now, not after the training.
  checkpoint_dir::check_room_for_saves(dir);
  if (resume) return std::nullopt;
  auto complete = checkpoint_dir::list_complete(dir);
  if (complete.empty()) return std::nullopt;
  if (overwrite) {
    checkpoint_dir::remove_checkpoints(dir);
    return std::nullopt;
  }
  return "--ckpt-dir '" + dir + "' already holds checkpoints up to step " + std::to_string(complete.back().first) +
         " (" + checkpoint_dir::file_name(complete.back().first) +
         "): --resume continues that run, --overwrite deletes them and starts over";
}

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::optional<std::string> config_value(const std::string& json, const std::string& key) {
  const std::string name = "\"" + key + "\":";
  std::size_t at = 0;
  // A key's name follows '{' or ','; the same text inside a string value is not a key.
  while ((at = json.find(name, at)) != std::string::npos && at > 0 && json[at - 1] != '{' && json[at - 1] != ',') ++at;
  if (at == std::string::npos || at == 0) return std::nullopt;
  std::size_t begin = at + name.size();
  if (begin < json.size() && json[begin] == '"') {
    std::string value;
    for (std::size_t i = begin + 1; i < json.size(); ++i) {
      unsigned code = 0;
      if (json[i] == '\\' && i + 5 < json.size() && json[i + 1] == 'u' &&
          std::from_chars(json.data() + i + 2, json.data() + i + 6, code, 16).ptr == json.data() + i + 6 &&
          code < 0x80) {
        value += static_cast<char>(code);  // json_string's escape of a control character, \u00XX
        i += 5;
      } else if (json[i] == '\\' && i + 1 < json.size()) {
        value += json[++i];
      } else if (json[i] == '"') return value;
      else value += json[i];
    }
    return std::nullopt;  // an unterminated string
  }
  const std::size_t end = json.find_first_of(",}", begin);
  return json.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

namespace {

// Rank 0's reason to refuse resuming from `file` with `config`, or nullopt.
std::optional<std::string> resume_mismatch(const std::string& file, const ResumeConfig& config) {
  std::string saved;
  std::int64_t step = 0;
  try {
    // The root only: what else read_checkpoint_info checks (the mesh's axes, each dataset's
    // attributes) a restore does not need, and a fault there must not skip these checks.
    const auto info = read_checkpoint_root(file);
    saved = info.config;
    step = info.step;
  } catch (const Error&) {
    return std::nullopt;  // the restore reads the same attributes and names what is wrong
  }
  std::vector<std::string> keys = {"program"};
  keys.insert(keys.end(), config.keys.begin(), config.keys.end());
  for (const std::string& key : keys) {
    const auto then = config_value(saved, key), now = config_value(config.json, key);
    if (!then || !now || *then == *now) continue;
    if (key == "program") return "--resume: '" + file + "' was saved by " + *then + ", not by " + *now;
    if (key == "data") {
      return "--resume: '" + file + "' was saved training on other data (" + *then + ") than this run's --data (" +
             *now + "): a resume continues the saved model and its data (start a changed run in another --ckpt-dir)";
    }
    std::string flag = "--" + key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    return "--resume: '" + file + "' was saved with " + flag + " " + *then + ", this run has " + flag + " " + *now +
           ": a resume continues the saved model and its data (start a changed run in another --ckpt-dir)";
  }
  if (config.steps >= 0 && step > config.steps) {
    return "--resume: '" + file + "' is at step " + std::to_string(step) + ", past --steps " +
           std::to_string(config.steps) + ": a resume trains on from the checkpoint's step (give --steps " +
           std::to_string(step) + " or more, or start a new run in another --ckpt-dir)";
  }
  return std::nullopt;
}

}  // namespace

namespace {

// Rank 0's reason to refuse --metrics `metrics`, or nullopt.
std::optional<std::string> metrics_path_refusal(const std::string& metrics, const std::string& ckpt_dir,
                                                const std::string& data) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path file = fs::weakly_canonical(metrics, error);
  if (error) return std::nullopt;  // opening it reports what is wrong
  if (!ckpt_dir.empty()) {
    fs::path dir = fs::weakly_canonical(ckpt_dir, error);
    if (!error) {
      if (dir.filename().empty()) dir = dir.parent_path();
      const auto [d, f] = std::mismatch(dir.begin(), dir.end(), file.begin(), file.end());
      if (d == dir.end()) {
        return "--metrics '" + metrics + "' is inside --ckpt-dir '" + ckpt_dir +
               "', which holds only the run's checkpoints; write the metrics elsewhere";
      }
    }
  }
  if (!data.empty() && fs::equivalent(metrics, data, error) && !error) {
    return "--metrics '" + metrics + "' is the --data file; write the metrics elsewhere";
  }
  struct stat st {};
  if (::stat(metrics.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    bool hdf5 = false;
    try {
      hdf5 = is_hdf5_file(metrics, "--metrics");
    } catch (const IoError&) {
      // Not readable: opening it for the metrics reports what is wrong.
    }
    if (hdf5) {
      return "--metrics '" + metrics + "' is an HDF5 file (a checkpoint?), not a metrics file; it is left as it is";
    }
  }
  return std::nullopt;
}

}  // namespace

void check_metrics_path(const Communicator& comm, const std::string& metrics, const std::string& ckpt_dir,
                        const std::string& data) {
  if (metrics.empty()) return;
  const std::optional<std::string> refusal =
      comm.rank() == 0 ? metrics_path_refusal(metrics, ckpt_dir, data) : std::nullopt;
  if (auto message = broadcast_root_message(comm, refusal)) throw UsageError(*message);
}

RunCheckpoints open_run_checkpoints(const Communicator& comm, const std::string& dir, bool resume, bool overwrite,
                                    const ResumeConfig& config) {
  RunCheckpoints out;
  if (!dir.empty() && resume) {
    // A resume from a directory that is not there is refused before the lock, which would make it
    // (until the forty-fifth session a mistyped --ckpt-dir was left behind, holding a .lock).
    std::optional<std::string> missing;
    if (comm.rank() == 0) {
      std::error_code ec;
      if (!std::filesystem::exists(dir, ec)) missing = "--resume: no checkpoint in '" + dir + "' (no such directory)";
    }
    if (auto message = broadcast_root_message(comm, missing)) throw UsageError(*message);
  }
  if (!dir.empty()) {
    out.lock = lock_checkpoint_directory(comm, dir);
    std::optional<std::string> refusal;
    if (comm.rank() == 0) {
      try {
        refusal = claim_checkpoint_directory(dir, resume, overwrite);
      } catch (const Error& e) {
        refusal = e.what();
      }
    }
    if (auto message = broadcast_root_message(comm, refusal)) throw UsageError(*message);
  }
  if (resume) {
    out.resume_file = latest_checkpoint(dir);
    if (!out.resume_file) throw UsageError("--resume: no checkpoint in '" + dir + "'");
    if (!config.json.empty()) {
      const std::optional<std::string> mismatch = comm.rank() == 0 ? resume_mismatch(*out.resume_file, config) : std::nullopt;
      if (auto message = broadcast_root_message(comm, mismatch)) throw UsageError(*message);
    }
  }
  return out;
}

double elements(const Shape& shape) {
  double n = 1;
  for (auto d : shape) n *= static_cast<double>(d);
  return n;
}

double mlp_bytes_per_rank(const MlpSizes& o, const nn::ParamInfos& infos, const MeshShape& mesh, const Spec& x_spec) {
  double params = 0, largest_global = 0, largest_local = 0;
  for (const auto& info : infos) {
    const double bytes = static_cast<double>(dtype_size(info.dtype));
    const double local = elements(max_local_shape(info.spec, mesh, info.shape)) * bytes;
    params += local;
    largest_local = std::max(largest_local, local);
    // A stack's picture gathers one layer only.
    const double global = elements(info.shape) * bytes;
    largest_global = std::max(largest_global, info.shape.size() == 3 ? global / info.shape[0] : global);
  }
  const double rows = static_cast<double>(block_chunk(o.batch, shard_count(x_spec.padded(2), mesh, 0)));
  const double block = rows * static_cast<double>(o.depth) * (o.bf16 ? 2.0 : 4.0);
  const double activations = o.remat ? (o.layers + 4.0) * block : 4.0 * o.layers * block;
  const double casts = o.bf16 ? params / 2 : 0;  // bf16 copies of the f32 parameters
  return 4 * params + casts + activations + 2 * block + largest_global + largest_local;
}

double lm_bytes_per_rank(const LmSizes& o, const nn::ParamInfos& infos, const MeshShape& mesh) {
  double params = 0;
  for (const auto& info : infos) {
    params += elements(max_local_shape(info.spec, mesh, info.shape)) * static_cast<double>(dtype_size(info.dtype));
  }
  const auto size_of = [&](const char* axis) { return mesh.has_axis(axis) ? static_cast<double>(mesh.axis_size(axis)) : 1.0; };
  const double data = size_of(models::kDataAxis), seq = size_of(models::kSeqAxis), model = size_of(models::kModelAxis);
  const double rows = static_cast<double>(o.batch) / data * static_cast<double>(o.seq_len) / seq;
  const double scores = static_cast<double>(o.batch) / data * static_cast<double>(o.heads) / model *
                        static_cast<double>(o.seq_len) / seq * static_cast<double>(o.seq_len);
  const double d_model = static_cast<double>(o.d_model), d_ff = static_cast<double>(o.d_ff);
  const double per_block = 8 * rows * d_model + 8 * rows * d_model / model + 3 * rows * d_ff / model + 3 * scores;
  const double act_bytes = o.bf16 ? 2.0 : 4.0;
  const double layers = static_cast<double>(o.layers);
  const double kept = o.remat ? layers * rows * d_model + per_block : layers * per_block;
  return 4 * params + (o.bf16 ? params / 2 : 0.0) + act_bytes * kept + 4.0 * 3 * rows * 256 / model;
}

double memory_per_rank_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  const int on_node = Communicator::world().split_shared().size();  // ranks on this node
  // sysconf fails with -1: count it as no limit known rather than as no memory.
  double share = pages > 0 && page_size > 0 ? static_cast<double>(pages) * page_size / on_node : 1e300;
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &share, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD),
            "MPI_Allreduce (memory per rank)");
  return share;
}

void check_memory(double need_bytes, const std::string& what) {
  const double have = memory_per_rank_bytes();
  if (need_bytes > have) {
    constexpr double gib = 1024.0 * 1024.0 * 1024.0;
    char text[256];
    std::snprintf(text, sizeof text, "needs %.1f GiB per rank, this machine has %.1f GiB", need_bytes / gib, have / gib);
    throw UsageError(what + text);
  }
}

namespace {

// Whether any of `n` words has every bit of `exponent` set: a nan or an infinity, read from the bits.
template <class Word>
bool any_exponent_all_ones(const void* data, std::int64_t n, Word exponent) {
  const auto* p = static_cast<const Word*>(data);
  bool any = false;
  for (std::int64_t i = 0; i < n; ++i) any |= (p[i] & exponent) == exponent;
  return any;
}

// Whether a block holds a nan or an infinity.
bool holds_non_finite(const Tensor& t) {
  switch (t.dtype()) {
    case DType::f32:
      return any_exponent_all_ones<std::uint32_t>(t.raw(), t.numel(), 0x7f800000u);
    case DType::bf16:
      return any_exponent_all_ones<std::uint16_t>(t.raw(), t.numel(), 0x7f80u);
    case DType::f64:
      return any_exponent_all_ones<std::uint64_t>(t.raw(), t.numel(), 0x7ff0000000000000ull);
    case DType::i32:
      return false;
  }
  return false;
}

// "nan", "inf" or "-inf": the word the divergence messages name a loss that is not finite by.
std::string non_finite_name(double value) { return std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf"; }

}  // namespace

void check_loss_finite(double loss, std::int64_t step) {
  if (std::isfinite(loss)) return;
  throw UsageError("the loss is " + non_finite_name(loss) + " at step " + std::to_string(step) +
                   ": training diverged (a smaller --lr may help); stopped before saving this step");
}

std::string number_text(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

void check_heldout_finite(double loss, std::int64_t step) {
  if (std::isfinite(loss)) return;
  throw UsageError("the held-out loss is " + non_finite_name(loss) + " after step " + std::to_string(step) +
                   ": training diverged (a smaller --lr may help); stopped");
}

void check_state_finite(const nn::TrainState& state) {
  if (state.params.empty()) return;
  int bad = 0;
  for (const nn::ParamTree* tree : {&state.params, &state.opt_state.mu, &state.opt_state.nu}) {
    for (const auto& [path, value] : *tree) bad |= holds_non_finite(value.local()) ? 1 : 0;
  }
  const Communicator& comm = state.params.begin()->second.mesh().comm();
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_LOR, comm.handle()), "MPI_Allreduce");
  if (bad != 0) {
    throw UsageError("the parameters or their Adam moments hold a nan or an infinity after step " + std::to_string(state.step) +
                     ": training diverged (a smaller --lr may help); stopped before saving it");
  }
}

std::int64_t status_kib(const char* field) {
  FILE* in = std::fopen("/proc/self/status", "r");
  if (in == nullptr) return -1;
  char line[256];
  std::int64_t value = -1;
  const std::size_t n = std::strlen(field);
  while (std::fgets(line, sizeof line, in) != nullptr) {
    if (std::strncmp(line, field, n) == 0 && line[n] == ':') value = std::atoll(line + n + 1);
  }
  std::fclose(in);
  return value;
}

bool reset_peak_rss() {
  FILE* clear = std::fopen("/proc/self/clear_refs", "w");
  if (clear == nullptr) return false;
  const bool written = std::fputs("5", clear) >= 0;
  return (std::fclose(clear) == 0) && written;
}

namespace {

std::string join_names(const std::vector<std::string>& names) {
  return names.empty() ? "-" : parenthesized(names);
}

}  // namespace

std::string parameter_table(const nn::ParamInfos& infos, const MeshShape& mesh) {
  std::ostringstream out;
  char line[512];
  std::snprintf(line, sizeof line, "%-36s %-18s %-24s %-22s %s\n", "parameter", "global shape", "logical names",
                "spec", "local shape");
  out << line;
  std::int64_t total = 0;
  for (const auto& info : infos) {
    std::snprintf(line, sizeof line, "%-36s %-18s %-24s %-22s %s\n", info.path.c_str(),
                  shape_to_string(info.shape).c_str(), join_names(info.logical_names()).c_str(),
                  info.spec.to_string().c_str(), shape_to_string(max_local_shape(info.spec, mesh, info.shape)).c_str());
    out << line;
    total += numel(info.shape);
  }
  out << infos.size() << " parameters, " << total << " values\n";
  return out.str();
}

void check_learning_rate(double lr) {
  const std::string text = number_text(lr);
  if (!(lr > 0) || !std::isfinite(lr)) throw UsageError("--lr must be a finite number > 0, got " + text);
  // The optimizer's constants are f32 and the process flushes subnormals to zero (core/denormals.h):
  // a smaller rate would train at a rate of 0. Until the forty-fifth session a double subnormal
  // was refused as "must be a finite number > 0, got 9.99989e-321", and a float subnormal ran.
  const double smallest = std::numeric_limits<float>::min();
  if (lr < smallest) {
    // %g's six digits print a rate just below the bound as the bound itself ("at least
    // 1.17549e-38, got 1.17549e-38"): such a rate is printed with the digits that tell it apart.
    const std::string bound = number_text(smallest);
    std::string got = text;
    if (got == bound) {
      char digits[32];
      got.assign(digits, std::to_chars(digits, digits + sizeof digits, lr).ptr);
    }
    throw UsageError("--lr must be at least " + bound + ", the smallest normal float, got " + got);
  }
}

namespace {

// The length of the start of a metrics file to keep on a resume at `resumed_step`: its whole
// lines up to the first line of a later step (a line without a step is kept), and the number of
// lines after it.
std::pair<std::uint64_t, std::int64_t> metrics_to_keep(int fd, std::int64_t resumed_step) {
  // Read in pieces, holding one line at a time (the file may be long).
  std::uint64_t keep = 0, line_start = 0, total = 0;
  std::int64_t dropped = 0;
  bool cut = false;
  std::string line;
  char buffer[1 << 16];
  for (off_t at = 0;;) {
    const ssize_t got = ::pread(fd, buffer, sizeof buffer, at);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    for (ssize_t i = 0; i < got; ++i) {
      if (buffer[i] != '\n') {
        if (!cut && line.size() < 4096) line += buffer[i];
        continue;
      }
      const std::uint64_t line_end = static_cast<std::uint64_t>(at + i) + 1;
      if (!cut) {
        const auto step = config_value(line, "step");
        char* rest = nullptr;
        const long long value = step ? std::strtoll(step->c_str(), &rest, 10) : 0;
        cut = step && *rest == '\0' && value > resumed_step;
      }
      if (cut) {
        ++dropped;
      } else {
        keep = line_end;
      }
      line.clear();
      line_start = line_end;
    }
    at += got;
    total = static_cast<std::uint64_t>(at);
  }
  if (total > line_start) ++dropped;  // a last line cut short
  return {keep, dropped};
}

}  // namespace

MetricsFile::MetricsFile(std::string program, std::string path, std::optional<std::int64_t> resumed_step)
    : program_(std::move(program)), path_(std::move(path)) {
  if (path_.empty()) return;
  std::string why;
  fd_ = open_for_writing(path_, resumed_step.has_value(), why);
  if (fd_ < 0) {
    give_up(why);
    return;
  }
  struct stat st {};
  if (!resumed_step || ::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return;
  // Opened write-only for appending: read through a second descriptor.
  const int reader = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (reader < 0) return;
  const auto [keep, dropped] = metrics_to_keep(reader, *resumed_step);
  ::close(reader);
  if (dropped == 0) return;
  if (::ftruncate(fd_, static_cast<off_t>(keep)) != 0) {
    ::close(fd_);
    fd_ = -1;
    give_up("cannot be cut back to step " + std::to_string(*resumed_step) + ": " + std::strerror(errno));
    return;
  }
  std::cout << program_ << ": metrics file '" << path_ << "': " << dropped << (dropped == 1 ? " line" : " lines")
            << " after step " << *resumed_step << " dropped (this run trains those steps again)\n";
}

MetricsFile::~MetricsFile() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsFile::write(const std::string& text) {
  if (fd_ < 0) return;
  std::string why;
  if (!write_all(fd_, text, why)) {
    ::close(fd_);
    fd_ = -1;
    give_up("cannot be written: " + why);
  }
}

void MetricsFile::give_up(const std::string& why) {
  std::cerr << program_ << ": metrics file '" << path_ << "' " << why << "; continuing without" << std::endl;
}

}  // namespace tessera::apps
