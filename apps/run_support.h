// Pieces the apps share: the checkpoint directory's fresh-run rule, the memory check before
// allocation, the parameter table the training apps print, and the resident-set figures the
// benchmarks print.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/mesh_shape.h"
#include "io/directory_lock.h"
#include "nn/params.h"
#include "nn/train.h"

namespace tessera::apps {

// Rank 0, holding the directory's lock: the fresh-run rule. A run without --resume never mixes
// its checkpoints with another run's (prune would keep the other run's higher steps and a later
// --resume would take them): it is refused (the returned message), or with --overwrite the old
// ones go first.
std::optional<std::string> claim_checkpoint_directory(const std::string& dir, bool resume, bool overwrite);

// A run's checkpoint directory: rank 0's lock on it (held until this is destroyed, so no other
// job writes there meanwhile) and, with --resume, the checkpoint to resume from.
struct RunCheckpoints {
  std::unique_ptr<DirectoryLock> lock;
  std::optional<std::string> resume_file;
};

// What a resume must continue: the run's configuration as the program stores it in its
// checkpoints (flat JSON: "key":value), and the keys of the flags that fix the model and its data
// ("d_model" for --d-model). "program" is always compared.
struct ResumeConfig {
  std::string json;
  std::vector<std::string> keys;
  // The run's --steps: a checkpoint of a later step is refused (-1: not compared).
  std::int64_t steps = -1;
};

// Collective: --metrics must not name a file the run reads or keeps. A path inside --ckpt-dir
// (a resume cuts the metrics file back to its checkpoint's step, and a save replaces `latest`:
// either damaged a checkpoint or lost the metrics), the --data file (`data`, empty for none), or
// an HDF5 file (a checkpoint of another run, which the run would overwrite) is a UsageError on
// every rank, rank 0 deciding.
void check_metrics_path(const Communicator& comm, const std::string& metrics, const std::string& ckpt_dir,
                        const std::string& data);

// Collective: locks `dir`, applies the fresh-run rule on rank 0 (claim_checkpoint_directory)
// and agrees on its outcome (a refusal is a UsageError on every rank), and with `resume` finds
// the latest checkpoint (UsageError "--resume: no checkpoint in 'DIR'" when there is none) and
// compares the configuration stored in it with `config`'s: a flag of `config.keys` whose value
// differs is a UsageError on every rank naming the flag and both values, before anything is
// restored or written (a resume with fewer --layers restored the layers it had and its first save
// dropped the others). So is a checkpoint of a step past `config.steps` (the run would have
// ended there and reported the later step's model as its result). A key the file does not hold (an older writer) is not compared, and a file
// whose configuration cannot be read is left to the restore's own checks. An empty `dir` gives no
// lock and no checkpoint.
RunCheckpoints open_run_checkpoints(const Communicator& comm, const std::string& dir, bool resume, bool overwrite,
                                    const ResumeConfig& config = {});

// `text` as a JSON string, quotes included: '"', '\\' and control characters escaped, so that what
// a user gave (a rule's names) cannot end the string or add a key to the stored config.
std::string json_string(std::string_view text);

// The value of `key` in flat JSON text, as written: a string's characters without its quotes and
// escapes (json_string's, read back), another value's text; nullopt when the key is not there.
std::optional<std::string> config_value(const std::string& json, const std::string& key);

// The MLP's sizes that its memory per rank depends on (train_mlp, bench_train --model mlp).
struct MlpSizes {
  std::int64_t batch, layers, depth;
  bool bf16, remat;
};
// Memory estimate (bytes per rank), from each rank's local shapes, in double so that absurd sizes
// give a figure instead of an overflow (the estimate runs before anything is allocated):
//   parameters, gradients and Adam's two moments: 4 x the local parameter bytes;
//   activations kept for the backward pass: per layer x, x@W1, relu(x@W1) and their product
//     with W2, each at most a local batch block (`x_spec`'s rows) of depth columns:
//     4 x layers x rows x depth elements of the compute dtype; with remat one block per layer
//     plus one layer's four (recomputed in the backward pass); with bf16 also the parameters'
//     bf16 copies;
//   buffers: the batch (input and targets, 2 blocks), one gathered parameter (the picture of
//     layer 0, the inference output) and the collectives' staging copy of the largest block.
// It is a lower bound of the peak (the allocator, MPI and HDF5 add their own), so a refusal is
// certain not to fit; a run just under it may still fail.
double mlp_bytes_per_rank(const MlpSizes& mlp, const nn::ParamInfos& infos, const MeshShape& mesh, const Spec& x_spec);

// The transformer's sizes that its memory per rank depends on (train_lm, bench_train --model lm).
struct LmSizes {
  std::int64_t batch, seq_len, d_model, heads, d_ff, layers;
  bool bf16, remat;
};
// Memory estimate (bytes per rank) from each rank's local shapes, in double so that absurd sizes
// give a figure instead of an overflow: parameters, gradients and Adam's two moments (4 x the
// local parameter bytes); per block the activations the backward pass keeps (about 8 residual-
// width tensors, 8 of the heads' width, 3 of d_ff's and 3 attention score matrices per rank);
// the logits (3 copies). Activations take the compute dtype's bytes (the f32 softmax aside);
// with remat the tape keeps one residual-width tensor per block plus one block's activations
// while it is recomputed; bf16 adds the weights' bf16 copies (half the parameter bytes). A lower
// bound of the peak, so a refusal is certain not to fit.
double lm_bytes_per_rank(const LmSizes& lm, const nn::ParamInfos& infos, const MeshShape& mesh);

// This rank's share of the node's physical memory: the node's memory over the ranks on it. A
// per-node fact that may differ between nodes, so the ranks agree on the smallest share
// (collective over MPI_COMM_WORLD).
double memory_per_rank_bytes();

// The elements of `shape` in double, so that absurd sizes give a figure instead of an overflow:
// the memory estimates run before anything is allocated or checked. Local.
double elements(const Shape& shape);

// Collective: throws UsageError "<what>needs N GiB per rank, this machine has M GiB" when
// `need_bytes` exceeds memory_per_rank_bytes(); `what` names the need where it is not the whole
// run's ("--copy-mib 65536: the copy measurement ").
void check_memory(double need_bytes, const std::string& what = {});

// Throws UsageError "the loss is nan at step S: training diverged ..." when `loss` (the step's,
// the same on every rank) is not finite. Called before the step is saved or reported as trained:
// a diverged run stops on every rank with exit code 2 instead of training on NaN weights and
// rotating its last good checkpoints out of the directory (--keep) with NaN ones.
void check_loss_finite(double loss, std::int64_t step);

// A flag's number as the refusals print it (printf's %g: "1e-40", "inf", "nan").
std::string number_text(double value);

// Collective over the state's mesh: throws UsageError on every rank ("the parameters or their Adam moments hold a nan or
// an infinity after step N: training diverged ...; stopped before saving it") when any rank's block
// of any parameter or Adam moment holds a nan or an infinity. Called before every save: a step's
// loss is that of the weights before its update, so an update that diverged reaches only the next
// step's loss, and the last step's none (until the forty-fifth session such a state was saved,
// and a run of one step exited 0).
void check_state_finite(const nn::TrainState& state);
// The same for a held-out loss (the same bits on every rank, as the training loss's): "the
// held-out loss is nan after step N: ...".
void check_heldout_finite(double loss, std::int64_t step);

// Throws UsageError "--lr must be a finite number > 0, got X" unless `lr` is one: a nan, an
// infinite or a negative rate would train every weight to nan (or away from the minimum), and a
// run of one step would save those weights before any loss showed it.
void check_learning_rate(double lr);

// A /proc/self/status field in kB (VmRSS: resident now, VmHWM: the peak since the last reset),
// or -1 where it cannot be read.
std::int64_t status_kib(const char* field);

// Sets this process's peak resident set (VmHWM) back to its current size (Linux: "5" written to
// /proc/self/clear_refs). False where that is not supported; the peak then stays the process's.
bool reset_peak_rss();

// One line per parameter: path, global shape, logical names, spec, local shape; then the count.
std::string parameter_table(const nn::ParamInfos& infos, const MeshShape& mesh);

// The --metrics file: rank 0's JSON lines. Opened without waiting (core/files.h): a FIFO that no
// process reads is refused at once, where opening it would wait for a reader while the other
// ranks wait in the first step's collectives. A file that cannot be opened, or a write that
// fails (a full disk, a FIFO whose reader went away: EPIPE, not SIGPIPE), is reported once on
// stderr ("<program>: metrics file 'PATH' <why>; continuing without") and the run goes on
// without its metrics, as before the file existed.
class MetricsFile {
 public:
  // An empty `path` is no file. A fresh run (`resumed_step` empty) truncates the file. A run
  // resumed at step S appends to it, after dropping the lines of the steps after S that a run
  // before it wrote and this one trains again (a run that crashed after its last save), and any
  // last line a crash cut short, so that each step has one line.
  MetricsFile(std::string program, std::string path, std::optional<std::int64_t> resumed_step);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;

  explicit operator bool() const { return fd_ >= 0; }
  // Writes `text` whole (nothing once closed by a failure).
  void write(const std::string& text);

 private:
  void give_up(const std::string& why);

  std::string program_, path_;
  int fd_ = -1;
};

}  // namespace tessera::apps
