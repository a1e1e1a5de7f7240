// train_lm: a byte-level decoder-only transformer (models/transformer.h) trained SPMD over MPI on
// text, by default the licence texts of /usr/share/common-licenses. Every rank runs this same
// program on its own blocks; rank 0 prints. Bad input ends with one message and exit code 2.
//   scripts/mpirun/local.sh 8 build/apps/train_lm --mesh data=2,seq=2,model=2
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "apps/cli_main.h"
#include "apps/run_support.h"
#include "apps/step_profile.h"
#include "core/buffer_pool.h"
#include "core/error.h"
#include "core/files.h"
#include "core/rng.h"
#include "io/checkpoint_dir.h"
#include "io/directory_lock.h"
#include "io/train_state_io.h"
#include "mesh/environment.h"
#include "mesh/mesh.h"
#include "mesh/mpi_check.h"
#include "models/transformer.h"
#include "nn/ops.h"
#include "nn/optim.h"
#include "nn/precision.h"
#include "nn/shape_ops.h"
#include "nn/train.h"

namespace {

using namespace tessera;

constexpr const char* kDefaultCorpus = "/usr/share/common-licenses";
// The largest text train_lm reads (every rank holds all of it).
constexpr std::int64_t kMaxDataBytes = std::int64_t{1} << 30;

struct Options {
  std::string mesh = "data=2,seq=2,model=2";
  std::int64_t batch = 8;
  std::int64_t seq_len = 128;
  std::int64_t d_model = 256;
  std::int64_t heads = 8;
  std::int64_t d_ff = 1024;
  int layers = 4;
  bool fsdp = false;
  bool scan = false;
  std::string dtype = "f32";  // compute dtype: f32, or bf16 (f32 parameters and Adam, bf16 compute)
  bool remat = false;         // rematerialise each block
  bool sequence_parallel = true;  // Megatron's: the residual stream's positions split over model
  std::string opt_state = "replicated";  // Adam's moments: replicated like the weights, or sharded (ZeRO-1)
  std::int64_t steps = 300;
  double lr = 3e-3;
  std::uint64_t seed = 0;
  std::string data;
  std::string ckpt_dir;
  std::int64_t save_every = 0;
  int keep = 3;
  bool resume = false;
  bool overwrite = false;
  std::string metrics;
  bool quiet = false;
  std::int64_t eval_every = 100;
  std::string prompt = "This License";
  std::int64_t sample_bytes = 200;
  double temperature = 0.7;
};

// What identifies the text a run trains on, stored in its checkpoints so that a resume on other
// data is refused: its length and its FNV-1a 64 (core/rng.h), not the file's name, which may
// change while the bytes do not.
std::string data_identity(const std::string& text) {
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(stream_id(text)));
  return std::to_string(text.size()) + " bytes, FNV-1a 64 " + hash;
}

// The flags that fix the model, the data and the schedule, stored in checkpoints; `data` is the
// text's data_identity.
std::string config_json(const Options& o, const std::string& data) {
  std::ostringstream s;
  s << "{\"program\":\"train_lm\",\"batch\":" << o.batch << ",\"seq_len\":" << o.seq_len << ",\"d_model\":"
    << o.d_model << ",\"heads\":" << o.heads << ",\"d_ff\":" << o.d_ff << ",\"layers\":" << o.layers
    << ",\"fsdp\":" << (o.fsdp ? "true" : "false") << ",\"scan\":" << (o.scan ? "true" : "false")
    << ",\"steps\":" << o.steps << ",\"lr\":" << o.lr << ",\"seed\":" << o.seed
    << ",\"data\":" << apps::json_string(data) << "}";
  return s.str();
}

// Flags that are wrong whatever the mesh and the data.
void validate_flags(const Options& o) {
  if (o.batch < 1 || o.seq_len < 1 || o.d_model < 1 || o.heads < 1 || o.d_ff < 1 || o.layers < 1) {
    throw UsageError("--batch, --seq-len, --d-model, --heads, --d-ff and --layers must be >= 1");
  }
  if (o.layers > 10000) throw UsageError("--layers must be <= 10000, got " + std::to_string(o.layers));
  if (o.steps < 0) throw UsageError("--steps must be >= 0");
  // Step s draws its batch's windows as elements s * batch + r of the RNG (train_starts), which
  // has 2^56 of them; a run never takes a step at or past --steps, even resumed from a checkpoint
  // of a larger step.
  if (o.steps > (std::int64_t{1} << 56) / o.batch) {
    throw UsageError("--steps " + std::to_string(o.steps) + " of --batch " + std::to_string(o.batch) +
                     " draw more than 2^56 training windows, the data RNG's limit");
  }
  apps::check_learning_rate(o.lr);
  if (o.keep < 1) throw UsageError("--keep must be >= 1");
  if (o.save_every < 0) throw UsageError("--save-every must be >= 0");
  if (o.eval_every < 0) throw UsageError("--eval-every must be >= 0");
  if (o.sample_bytes < 0 || o.sample_bytes > 100000) {
    throw UsageError("--sample-bytes must be between 0 and 100000, got " + std::to_string(o.sample_bytes));
  }
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature)) {
    throw UsageError("--temperature must be a finite number >= 0, got " + apps::number_text(o.temperature));
  }
  if (o.sample_bytes > 0 && o.prompt.empty()) throw UsageError("--prompt must not be empty");
  if ((o.resume || o.save_every > 0 || o.overwrite) && o.ckpt_dir.empty()) {
    throw UsageError("--resume, --save-every and --overwrite need --ckpt-dir");
  }
  if (o.resume && o.overwrite) throw UsageError("--resume and --overwrite exclude each other");
}

// The files of the default corpus: the regular files of the directory (links to others, such as
// GPL -> GPL-3, left out), sorted by name.
std::vector<std::filesystem::path> corpus_files(const std::string& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file() && !entry.is_symlink()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string read_file(const std::filesystem::path& path, std::int64_t room) {
  // A FIFO, a device or a directory is refused at once: reading one would wait for a writer or
  // never end (core/files.h).
  std::string why;
  const int fd = open_regular_for_reading(path.string(), why);
  if (fd < 0) throw UsageError("--data: '" + path.string() + "' " + why);
  struct stat st {};
  const bool sized = ::fstat(fd, &st) == 0;
  if (!sized || st.st_size > room) {
    ::close(fd);
    throw UsageError("--data: '" + path.string() + "' is not a readable file of at most " + std::to_string(kMaxDataBytes) +
                     " bytes");
  }
  // Read to the end, not st_size bytes: a file whose size reads 0 (/proc/cpuinfo) has text (it was
  // reported as "0 bytes"), and one that grows while it is read is taken as far as it has grown,
  // up to `room` bytes.
  std::string bytes;
  bytes.reserve(static_cast<std::size_t>(st.st_size));
  std::vector<char> buffer(1 << 16);
  std::string error;
  while (error.empty()) {
    const ssize_t got = ::read(fd, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) error = std::strerror(errno);
    if (got <= 0) break;
    if (static_cast<std::int64_t>(bytes.size()) + got > room) {
      error = "it grew past " + std::to_string(kMaxDataBytes) + " bytes while read";
      break;
    }
    bytes.append(buffer.data(), static_cast<std::size_t>(got));
  }
  ::close(fd);
  if (!error.empty()) throw UsageError("--data: cannot read '" + path.string() + "': " + error);
  return bytes;
}

// Rank 0 reads the text (a failure is its message, broadcast so that every rank throws it), then
// broadcasts the bytes: every rank holds the whole text.
std::string load_text(const Options& o, const Communicator& comm) {
  std::string text;
  std::optional<std::string> error;
  if (comm.rank() == 0) {
    try {
      if (o.data.empty()) {
        for (const auto& f : corpus_files(kDefaultCorpus)) text += read_file(f, kMaxDataBytes - static_cast<std::int64_t>(text.size()));
      } else {
        text = read_file(o.data, kMaxDataBytes);
      }
    } catch (const UsageError& e) {
      error = e.what();
    } catch (const std::filesystem::filesystem_error& e) {
      error = std::string("--data: ") + e.what();
    }
  }
  if (auto message = broadcast_root_message(comm, error)) throw UsageError(*message);
  std::int64_t size = static_cast<std::int64_t>(text.size());
  check_mpi(MPI_Bcast(&size, 1, MPI_INT64_T, 0, comm.handle()), "MPI_Bcast (text size)");
  text.resize(static_cast<std::size_t>(size));
  for (std::int64_t at = 0; at < size; at += 1 << 30) {
    const int count = static_cast<int>(std::min<std::int64_t>(size - at, 1 << 30));
    check_mpi(MPI_Bcast(text.data() + at, count, MPI_CHAR, 0, comm.handle()), "MPI_Bcast (text)");
  }
  return text;
}

// The text cut into a training part and a held-out part: the last 5% (at least one window of
// seq_len + 1 bytes), as a replicated fact checked on every rank.
struct Splits {
  std::string_view train, heldout;
};

Splits split_text(const std::string& text, std::int64_t seq_len, const std::string& source) {
  const std::int64_t size = static_cast<std::int64_t>(text.size());
  const std::int64_t heldout = std::max(seq_len + 1, size / 20);
  if (size - heldout < seq_len + 1) {
    throw UsageError(source + " has " + std::to_string(size) + " bytes; --seq-len " + std::to_string(seq_len) +
                     " needs at least " + std::to_string(2 * (seq_len + 1)) +
                     " (a window to train on and one held out)");
  }
  const std::string_view all(text);
  return {all.substr(0, static_cast<std::size_t>(size - heldout)), all.substr(static_cast<std::size_t>(size - heldout))};
}

// Tokens and labels [rows, seq_len] of the windows starting at `starts` (row r at starts[r]):
// each rank fills only its block.
nn::Batch make_batch(const Mesh& mesh, std::string_view text, const std::vector<std::int64_t>& starts, std::int64_t seq_len) {
  const Spec spec = models::Transformer::token_spec(mesh.shape());
  const Shape shape = {static_cast<std::int64_t>(starts.size()), seq_len};
  const auto fill = [&](int shift) {
    return [&, shift](const std::vector<std::int64_t>& at, const Shape& block) {
      Tensor t(block, DType::i32);
      std::int32_t* out = t.data<std::int32_t>();
      for (std::int64_t r = 0; r < block[0]; ++r) {
        for (std::int64_t c = 0; c < block[1]; ++c) {
          const std::int64_t pos = starts[static_cast<std::size_t>(at[0] + r)] + at[1] + c + shift;
          out[r * block[1] + c] = static_cast<unsigned char>(text[static_cast<std::size_t>(pos)]);
        }
      }
      return t;
    };
  };
  return {ShardedTensor::from_block_fn(mesh, spec, shape, fill(0), "tokens"),
          ShardedTensor::from_block_fn(mesh, spec, shape, fill(1), "labels")};
}

// Step `step`'s training windows: offsets drawn from the RNG keyed by (seed, step, row), the same
// on every rank and every mesh, so a resumed run sees the batches of an uninterrupted one.
std::vector<std::int64_t> train_starts(const Options& o, std::int64_t step, std::int64_t train_size) {
  const RngKey key = rng_key(o.seed, "train_lm/batches");
  std::vector<std::int64_t> starts;
  const std::int64_t room = train_size - o.seq_len;  // windows of seq_len + 1 bytes
  for (std::int64_t r = 0; r < o.batch; ++r) {
    const double u = uniform_f64(key, static_cast<std::uint64_t>(step * o.batch + r));
    starts.push_back(std::min(room - 1, static_cast<std::int64_t>(u * static_cast<double>(room))));
  }
  return starts;
}

// The held-out evaluation: the held-out text cut into consecutive windows of seq_len + 1 bytes,
// in batches of --batch rows (windows repeat when there are fewer than a batch); the loss is the
// mean over the batches (nats per byte).
double heldout_loss(const Options& o, const models::Transformer& model, nn::ParamTree& params, const Mesh& mesh,
                    std::string_view heldout) {
  const std::int64_t windows = (static_cast<std::int64_t>(heldout.size()) - 1) / o.seq_len;
  const std::int64_t batches = std::max<std::int64_t>(1, windows / o.batch);
  const nn::VarTree vars = nn::as_vars(params, false);
  double total = 0;
  for (std::int64_t b = 0; b < batches; ++b) {
    std::vector<std::int64_t> starts;
    for (std::int64_t r = 0; r < o.batch; ++r) starts.push_back(((b * o.batch + r) % windows) * o.seq_len);
    const nn::Batch batch = make_batch(mesh, heldout, starts, o.seq_len);
    total += nn::scalar_value(model.loss(nn::ParamView(vars), batch.x, *batch.y).value());
  }
  return total / static_cast<double>(batches);
}

// The learning rate of step `step` (0-based): a linear warmup to --lr over the first kWarmup
// steps, then inverse square-root decay (--lr * sqrt(kWarmup / (step + 1))). A function of the
// step alone, so a run stopped early and resumed follows the schedule of an uninterrupted one.
constexpr double kWarmup = 20;
double learning_rate(const Options& o, std::int64_t step) {
  const double s = static_cast<double>(step + 1);
  return o.lr * std::min(s / kWarmup, std::sqrt(kWarmup / s));
}

// Text generation from --prompt: each new byte is drawn from softmax(logits / temperature) at the
// last position of the context (its last seq_len bytes), greedy at temperature 0. The batch holds
// the context in every row (as many rows as the data axis has ranks) and zeros after it, which
// causal attention never looks at. The draws come from the RNG keyed by (seed, index), so every
// rank picks the same byte. Collective.
std::string sample_text(const Options& o, const models::Transformer& model, nn::ParamTree& params, const Mesh& mesh) {
  const auto& names = mesh.shape().names();
  const bool has_data = std::find(names.begin(), names.end(), models::kDataAxis) != names.end();
  const std::int64_t rows = has_data ? mesh.shape().axis_size(models::kDataAxis) : 1;
  const nn::VarTree vars = nn::as_vars(params, false);
  const RngKey key = rng_key(o.seed, "train_lm/sample");
  std::string text = o.prompt;
  std::string out;
  for (std::int64_t i = 0; i < o.sample_bytes; ++i) {
    const std::size_t n = std::min<std::size_t>(text.size(), static_cast<std::size_t>(o.seq_len));
    const std::string context = text.substr(text.size() - n);
    std::string padded = context + std::string(static_cast<std::size_t>(o.seq_len) - n + 1, '\0');
    const nn::Batch batch = make_batch(mesh, padded, std::vector<std::int64_t>(static_cast<std::size_t>(rows), 0), o.seq_len);
    const nn::Var logits = model.logits(nn::ParamView(vars), batch.x);
    const Tensor last = nn::slice(logits, 1, static_cast<std::int64_t>(n) - 1, 1).value().to_global();
    const std::int64_t vocab = last.shape()[2];
    std::vector<double> z(static_cast<std::size_t>(vocab));
    for (std::int64_t v = 0; v < vocab; ++v) z[static_cast<std::size_t>(v)] = last.at(v);  // row 0
    std::int64_t pick = std::max_element(z.begin(), z.end()) - z.begin();
    if (o.temperature > 0) {
      const double top = z[static_cast<std::size_t>(pick)];
      double sum = 0;
      for (auto& x : z) sum += (x = std::exp((x - top) / o.temperature));
      double u = uniform_f64(key, static_cast<std::uint64_t>(i)) * sum;
      for (pick = 0; pick + 1 < vocab && u >= z[static_cast<std::size_t>(pick)]; ++pick) u -= z[static_cast<std::size_t>(pick)];
    }
    text.push_back(static_cast<char>(pick));
    out.push_back(static_cast<char>(pick));
  }
  return out;
}

// Printable form of sampled bytes: newlines and tabs kept, other control bytes and bytes >= 0x7f
// (a byte model may cut a UTF-8 sequence) as '?'.
std::string printable(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) out.push_back(c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?');
  return out;
}

int run(const Options& o, int world_rank) {
  const bool root = world_rank == 0;
  validate_flags(o);
  const MeshShape mesh_shape = MeshShape::parse(o.mesh);
  models::TransformerConfig config;
  config.d_model = o.d_model;
  config.heads = o.heads;
  config.d_ff = o.d_ff;
  config.layers = o.layers;
  config.scan = o.scan;
  config.fsdp = o.fsdp;
  config.sequence_parallel = o.sequence_parallel;
  config.bf16 = nn::Precision::parse(o.dtype).mixed();
  config.remat = o.remat;
  const models::Transformer model{config};
  const Shape tokens_shape = {o.batch, o.seq_len};
  model.validate(mesh_shape, tokens_shape);
  Mesh mesh = Mesh::world(mesh_shape);
  const nn::ParamInfos infos = nn::abstract_init(model, mesh_shape, {}, tokens_shape);
  apps::check_memory(apps::lm_bytes_per_rank({o.batch, o.seq_len, o.d_model, o.heads, o.d_ff, o.layers, config.bf16, o.remat},
                                              infos, mesh_shape));

  const std::string source = o.data.empty() ? std::string(kDefaultCorpus) : "--data '" + o.data + "'";
  const std::string text = load_text(o, mesh.comm());
  const Splits splits = split_text(text, o.seq_len, source);
  const std::string data = data_identity(text);

  // Held until the run ends: rank 0's lock on the directory and the checkpoint to resume from.
  // A resume continues the saved model and its data: these flags must be the checkpoint's.
  // --metrics names no checkpoint, nothing in --ckpt-dir and not the data (a resume cuts it back).
  apps::check_metrics_path(mesh.comm(), o.metrics, o.ckpt_dir, o.data);
  const apps::RunCheckpoints checkpoints = apps::open_run_checkpoints(
      mesh.comm(), o.ckpt_dir, o.resume, o.overwrite,
      {config_json(o, data), {"layers", "d_model", "heads", "d_ff", "scan", "seq_len", "batch", "seed", "data"}, o.steps});
  const std::optional<std::string>& resume_file = checkpoints.resume_file;
  if (root) {
    std::cout << "train_lm: " << mesh.to_string() << " over " << mesh.size() << " ranks\n"
              << "model: byte-level transformer(layers=" << o.layers << ", d_model=" << o.d_model << ", heads=" << o.heads
              << ", d_ff=" << o.d_ff << (o.scan ? ", scan" : "") << (o.fsdp ? ", fsdp" : "") << (o.remat ? ", remat per block" : "")
              << (o.opt_state == "sharded" ? ", Adam's state sharded over the batch's axes" : "")
              << (mesh_shape.has_axis(models::kModelAxis) && mesh_shape.axis_size(models::kModelAxis) > 1
                      ? (o.sequence_parallel ? ", sequence parallel" : ", no sequence parallelism")
                      : "")
              << "), dtype " << o.dtype << (config.bf16 ? " (f32 parameters and Adam moments, bf16 compute)" : "")
              << ", batch " << o.batch
              << " x " << o.seq_len << " bytes, adam(lr=" << o.lr << ", 20 warmup steps, 1/sqrt decay), seed " << o.seed << "\n"
              << "data: " << source << ", " << text.size() << " bytes: " << splits.train.size() << " to train on, "
              << splits.heldout.size() << " held out\n\n"
              << apps::parameter_table(infos, mesh_shape) << '\n';
  }

  // With --opt-state sharded, each weight's moments split over the batch's axes (ZeRO's first
  // stage); the step's optimizer (made per step for its learning rate) follows the state's specs.
  nn::Optimizer initial = nn::adam(o.lr);
  if (o.opt_state == "sharded") initial.shard_state_over = models::Transformer::batch_axes(mesh_shape);
  nn::TrainState state = nn::create_train_state(nn::init_params(infos, mesh, o.seed), initial);
  std::int64_t last_saved = -1;
  if (resume_file) {
    restore_train_state_into(*resume_file, state);
    last_saved = state.step;
    if (root) std::cout << "resumed from " << *resume_file << " at step " << state.step << "\n\n";
  }

  const nn::LossFn loss_fn = [&](const nn::VarTree& params, const nn::Batch& batch) {
    return model.loss(nn::ParamView(params), batch.x, *batch.y);
  };
  // Rank 0 writes the metrics; the others pass no file.
  apps::MetricsFile metrics("train_lm", root ? o.metrics : std::string(),
                             resume_file ? std::optional<std::int64_t>(state.step) : std::nullopt);
  const auto report_heldout = [&](std::int64_t step, double loss) {
    if (root) std::printf("step %6lld  held-out loss %.4f nats/byte (%.3f bits/byte)\n", static_cast<long long>(step), loss,
                          loss / std::log(2.0));
    std::fflush(stdout);
  };

  nn::StepTimes times;
  nn::StepOptions step_options;
  step_options.times = &times;
  apps::RunProfile run_profile;
  std::size_t run_peak_bytes = 0;  // rank 0's peak of tensor storage over the steps
  const auto run_start = std::chrono::steady_clock::now();
  std::int64_t last_eval = -1;
  double last_heldout = 0;
  while (state.step < o.steps) {
    const std::int64_t step = state.step;
    const nn::Batch batch = make_batch(mesh, splits.train, train_starts(o, step, static_cast<std::int64_t>(splits.train.size())), o.seq_len);
    nn::Optimizer optimizer = nn::adam(learning_rate(o, step));
    checkpoint_dir::test_kill_point("step" + std::to_string(step + 1), world_rank);  // fault tests only
    CommStats::global().reset();  // this step's records only
    const double comm_before = CommStats::global().seconds();
    reset_peak_tensor_bytes();  // this step's peak of tensor storage
    const auto start = std::chrono::steady_clock::now();
    const double loss = nn::train_step(state, optimizer, loss_fn, batch, step_options);
    apps::check_loss_finite(loss, step + 1);
    const std::size_t peak_bytes = peak_tensor_bytes();
    run_peak_bytes = std::max(run_peak_bytes, peak_bytes);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const apps::StepProfile profile = apps::profile_step(
        mesh.comm().handle(),
        {seconds, CommStats::global().seconds() - comm_before, times.optimizer_seconds, times.optimizer_comm_seconds},
        CommStats::global().records());
    run_profile.add(profile);
    const double ms = profile.step_ms;
    const double tokens_per_s = static_cast<double>(o.batch * o.seq_len) / (ms / 1000.0);
    std::optional<double> heldout;
    if (o.eval_every > 0 && (state.step % o.eval_every == 0 || state.step == o.steps)) {
      heldout = heldout_loss(o, model, state.params, mesh, splits.heldout);
      apps::check_heldout_finite(*heldout, state.step);
      last_eval = state.step;
      last_heldout = *heldout;
    }
    if (root) {
      if (!o.quiet) {
        std::printf("step %6lld  loss %.9g  %8.1f ms/step  %8.0f tokens/s  lr %.3g\n", static_cast<long long>(step + 1),
                    loss, ms, tokens_per_s, optimizer.learning_rate);
      }
      std::fflush(stdout);
      if (metrics) {
        char line[256];
        std::snprintf(line, sizeof line, "{\"step\":%lld,\"loss\":%.17g,\"ms\":%.3f,\"tokens_per_s\":%.3f,\"lr\":%.6g",
                      static_cast<long long>(step + 1), loss, ms, tokens_per_s, optimizer.learning_rate);
        std::string text = line;
        if (heldout) {
          std::snprintf(line, sizeof line, ",\"heldout_loss\":%.17g", *heldout);
          text += line;
        }
        metrics.write(text + apps::metrics_fields(profile) + ",\"peak_tensor_bytes\":" + std::to_string(peak_bytes) +
                      "}\n");
      }
    }
    if (heldout) report_heldout(state.step, *heldout);
    if (!o.ckpt_dir.empty() && o.save_every > 0 && state.step % o.save_every == 0) {
      apps::check_state_finite(state);
      const std::string file = save_train_state(state, o.ckpt_dir, {o.seed, config_json(o, data), infos}, SaveOptions{o.keep});
      last_saved = state.step;
      if (root) std::cout << "saved " << file << '\n';
    }
  }
  const double train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  // The last update reached no training loss: the state it left is checked, and evaluated, before
  // it is saved (until the forty-fifth session a run whose last update diverged saved that state
  // and, without --eval-every, exited 0).
  apps::check_state_finite(state);
  if (last_eval != state.step) {
    last_heldout = heldout_loss(o, model, state.params, mesh, splits.heldout);
    apps::check_heldout_finite(last_heldout, state.step);
    report_heldout(state.step, last_heldout);
  }
  if (!o.ckpt_dir.empty() && last_saved != state.step) {
    const std::string file = save_train_state(state, o.ckpt_dir, {o.seed, config_json(o, data), infos}, SaveOptions{o.keep});
    if (root) std::cout << "saved " << file << '\n';
  }
  if (root) {
    std::printf("\ntrained to step %lld in %.1f s; held-out loss %.4f nats/byte (%.3f bits/byte)\n",
                static_cast<long long>(state.step), train_seconds, last_heldout, last_heldout / std::log(2.0));
    if (!o.quiet && run_profile.steps() > 0) std::cout << '\n' << run_profile.table();
    if (run_profile.steps() > 0) {
      std::printf("peak tensor storage per step (rank 0): %zu bytes (%.2f MiB)\n", run_peak_bytes,
                  static_cast<double>(run_peak_bytes) / (1 << 20));
    }
  }
  if (o.sample_bytes > 0) {
    const std::string sample = sample_text(o, model, state.params, mesh);
    if (root) std::cout << "\nsample (temperature " << o.temperature << "):\n" << printable(o.prompt + sample) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tessera::Environment env(argc, argv);
  tessera::apps::CommandLine app{"train_lm: a byte-level transformer language model, trained SPMD over MPI"};
  Options o;
  // A flag given twice takes its last value, so wrappers can be overridden.
  app.take_last_of_repeats();
  app.add_option("--mesh", o.mesh, "mesh axes among data (batch), seq (sequence) and model (heads, d_ff, vocabulary), "
                                   "name=size,... (product = ranks)")
      .capture_default_str();
  app.add_option("--batch", o.batch, "sequences per step (global)").capture_default_str();
  app.add_option("--seq-len", o.seq_len, "bytes per sequence").capture_default_str();
  app.add_option("--d-model", o.d_model, "width of the residual stream").capture_default_str();
  app.add_option("--heads", o.heads, "attention heads (d_head = d_model / heads, even)").capture_default_str();
  app.add_option("--d-ff", o.d_ff, "hidden width of each block's MLP").capture_default_str();
  app.add_option("--layers", o.layers, "transformer blocks").capture_default_str();
  app.add_flag("--fsdp", o.fsdp, "split every weight's d_model dimension over data (gathered before use)");
  app.add_flag("--scan", o.scan, "stacked blocks with a leading layers dimension, run by a scan");
  app.add_flag("--sequence-parallel,!--no-sequence-parallel", o.sequence_parallel,
               "Megatron's sequence parallelism (on by default): between the tensor-parallel products each rank of the "
               "model axis normalizes and adds its share of the positions; the products' all-reduces become "
               "reduce-scatters and all-gathers of the same bytes, the values the same");
  app.add_option("--opt-state", o.opt_state,
                 "Adam's moments: replicated (each like its weight) or sharded (each split further over the data and "
                 "seq axes that replicate its weight: every replica updates its part, then the weight is all-gathered; "
                 "ZeRO stage 1)")
      .one_of({"replicated", "sharded"})
      .capture_default_str();
  app.add_option("--dtype", o.dtype,
                 "compute dtype: f32, or bf16 (f32 parameters and Adam moments; bf16 matmuls, activations and "
                 "collectives; softmax and loss in f32)")
      .one_of({"f32", "bf16"})
      .capture_default_str();
  app.add_flag("--remat", o.remat, "recompute each block's forward pass in the backward pass instead of keeping its activations");
  app.add_option("--steps", o.steps, "train until this step").capture_default_str();
  app.add_option("--lr", o.lr, "peak Adam learning rate (linear warmup over 20 steps, then decay as "
                               "1/sqrt(step))")
      .capture_default_str();
  app.add_option("--seed", o.seed, "seed of the parameters, the batches and the sampling").capture_default_str();
  app.add_option("--data", o.data,
                 "text to train on, bytes as tokens; the last 5% held out (default: the regular files of "
                 "/usr/share/common-licenses, concatenated in name order)")
      .non_empty_path();
  app.add_option("--ckpt-dir", o.ckpt_dir,
                 "checkpoint directory: saves at the end and every --save-every (default: none, no checkpoints)")
      .non_empty_path();
  app.add_option("--save-every", o.save_every, "save every N steps (0: only at the end)").capture_default_str();
  app.add_option("--keep", o.keep, "checkpoints kept").capture_default_str();
  app.add_flag("--resume", o.resume, "continue from the latest checkpoint in --ckpt-dir (on any mesh)");
  app.add_flag("--overwrite", o.overwrite,
               "delete the checkpoints already in --ckpt-dir and start over (a run without it refuses them)");
  app.add_option("--metrics", o.metrics,
                 "write one JSON object per step to FILE: step, loss, ms, tokens_per_s, lr, the time split and "
                 "bytes by collective, heldout_loss on evaluation steps (default: none)")
      .non_empty_path();
  app.add_flag("--quiet", o.quiet, "no progress line per step");
  app.add_option("--eval-every", o.eval_every, "held-out loss every N steps and at the end (0: at the end only)")
      .capture_default_str();
  app.add_option("--prompt", o.prompt, "text the sample at the end starts from").capture_default_str();
  app.add_option("--sample-bytes", o.sample_bytes, "bytes sampled after training (0: no sample)").capture_default_str();
  app.add_option("--temperature", o.temperature, "sampling temperature (0: greedy)").capture_default_str();
  return tessera::apps::parse_and_run("train_lm", app, argc, argv, [&](int rank) { return run(o, rank); });
}
