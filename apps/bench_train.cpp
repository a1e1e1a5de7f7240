// bench_train: the train step of the tutorial's MLP (--model mlp) or of train_lm's transformer
// (--model lm) on the current mesh, beside the floor of docs/design.md ("Performance model")
// measured in the same run, the larger of two lower bounds:
//   compute floor = max(1, ranks per core) x (matrix FLOPs per rank / GEMM rate alone
//                   + 28 bytes per fp32 parameter per rank / bandwidth alone, of which the 24
//                     of a parameter updated in rows at the rows bandwidth alone
//                   - for each weight updated in rows, the shorter of its input gradient's FLOPs
//                     / GEMM rate and 4 bytes per parameter / bandwidth alone; for one updated
//                     in one pass, of both products' FLOPs and its 24 bytes at the rows bandwidth)
//   memory floor  = the same bytes at the bandwidths per rank, all at once (each rank's share
//                   of its node's memory with one rank per CPU streaming)
// The first is the busiest core's work (its ranks run one at a time, none faster than a rank
// alone on its core), the second the node's memory traffic. The GEMM rate is the fastest of the
// MLP layer's three products (forward, input gradient, weight gradient), on this rank's rows and
// on the whole batch's (the transformer: its MLP up-projection), a bandwidth the larger of
// memcpy's on a large buffer and that of a fused pass with Adam's own streams (read p, g, m, v;
// write p, m, v) over this rank's parameter blocks (copied until the measuring ranks stream the
// node's state: footprint_copies), and the rows bandwidth the largest of those
// and a pass with a weight in rows' streams (read and write p, m, v); "alone" is rank 0 with
// every other rank asleep, pinned to each of its node's CPUs in turn (their mean counts) where
// every CPU holds a rank and they are at most 8 (alone_cpus), else where it runs.
// The transformer's matrix FLOPs per step are 3x its forward's (each matmul has a weight and an
// input gradient): per token and layer 2*d*3d (q, k, v) + 2*d*d (o) + 2*2*d*d_ff (MLP), per
// token 2*d*vocab (unembedding), and per sequence, layer and head 2*2*d_head*s(s+1)/2 for the
// causal scores and their weighted sum (only the pairs a causal mask keeps: a lower bound).
// The same floor is printed again at the all-at-once rates measured where the host ran the
// node's CPUs during the steps (cpu_pair_ns: one die of the host or two), with the steps' ratio
// to it (ratio_same_placement). Each timed step follows an untimed one, run right after the probe
// of the CPUs before it (time_steps; untimed_steps counts them with the warmup). comm_ms_median
// is the median over the timed steps of the most time a rank spent inside tessera's collectives
// in the step (CommStats::seconds): its waits for the other ranks and its copies through them.
// update_ms_median is the same for the time inside the optimizer's update (StepTimes, less its
// collectives: with weights updated in one pass, their backward products too), and where every
// parameter is updated in one pass (the MLP on AVX-512) update_floor_ms is that update's bound on a
// rank computing alone (each pass the longer of its products and its streams; compute_floor_ms
// holds it times ranks_per_core) and update_ratio the one over the other; null otherwise. On ranks
// that share a core a rank's time inside its update also counts any turns the others take on the
// core meanwhile, so there the ratio is an upper estimate. work_ms_max_median and
// work_ms_min_median are the medians over the timed steps of the most and the least time a rank
// spent outside collectives (its step less its time inside them): equal on one rank; where every
// rank has the same share of the work, their difference is what the fastest rank waited for the
// slowest, as when one core runs slower than the other. alone_cpus is the number of CPUs each
// rate alone was measured on (their mean counting), 1 where rank 0 measured where it ran.
// One JSON object per line on stdout (rank 0).
//   scripts/mpirun/local.sh 8 build/apps/bench_train --layers 8 --depth 4096
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <iostream>
#include <new>
#include <thread>
#include <vector>

#include "apps/cli_main.h"
#include "apps/placements.h"
#include "apps/run_support.h"
#include "apps/synthetic_data.h"
#include "collectives/comm_stats.h"
#include "core/buffer_pool.h"
#include "core/error.h"
#include "core/kernels.h"
#include "mesh/communicator.h"
#include "mesh/environment.h"
#include "mesh/mesh.h"
#include "models/mlp.h"
#include "models/transformer.h"
#include "nn/optim.h"
#include "nn/train.h"

namespace {

using namespace tessera;
using apps::Placements;
using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

double allreduce(double v, MPI_Op op) {
  double out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The default mesh for the rank count: (data, model) with model = 4, 2 or 1 (1x2 on 2 ranks,
// 2x4 on 8), as the tutorial shards.
std::string default_mesh(int ranks) {
  const int model = ranks % 4 == 0 ? 4 : ranks % 2 == 0 ? 2 : 1;
  return "data=" + std::to_string(ranks / model) + ",model=" + std::to_string(model);
}

// The MLP's mesh and weight specs of a parallelism strategy on `ranks` ranks (--strategy):
//   dp    data=<ranks>: weights replicated, gradients all-reduced over data
//   tp    model=<ranks>: the tutorial's Megatron specs, W1 P(None, model), W2 P(model, None)
//   fsdp  data=<ranks>: W1 P(data, model), W2 P(model, data): each weight split over data,
//         gathered where a matmul uses it, its gradient reduce-scattered
//   2d    data=2,model=<ranks>/2 (the tutorial's 2x4 on 8 ranks), the tutorial's specs
struct Strategy {
  std::string mesh;
  Spec w1 = parse_spec("P(None, model)");
  Spec w2 = parse_spec("P(model, None)");
};

Strategy strategy_for(const std::string& name, int ranks) {
  const std::string n = std::to_string(ranks);
  if (name == "dp") return {"data=" + n + ",model=1"};
  if (name == "tp") return {"data=1,model=" + n};
  if (name == "fsdp") return {"data=" + n + ",model=1", parse_spec("P(data, model)"), parse_spec("P(model, data)")};
  if (name == "2d") {
    if (ranks < 4 || ranks % 2 != 0) {
      throw UsageError("--strategy 2d needs an even rank count of 4 or more (data=2,model=<ranks>/2), got " + n);
    }
    return {"data=2,model=" + std::to_string(ranks / 2)};
  }
  throw UsageError("--strategy must be dp, tp, fsdp or 2d, got '" + name + "'");
}

// This rank's node: its ranks (those that share its memory), this rank's place among them, and
// the CPUs they may run on together, the union of their affinity masks. Not this rank's own
// mask: a rank bound to one core (mpirun --bind-to core, srun's CPU binding) sees only that
// core, and two ranks bound to two cores counted as two ranks per core (floor 4.45 ms against a
// step of 3.22 for the tutorial's model on 1x2: ratio 0.72). Collective on its first call (every
// rank's first floor measurement), which finds it once for the run.
struct NodeShape {
  int ranks = 1, rank = 0;
  cpu_set_t cpu_set{};  // the union of the node's ranks' affinity masks
  // How many CPUs that union holds (1 if it reads as none).
  int cpus() const { return std::max(1, CPU_COUNT(&cpu_set)); }
  // The ranks that stream when the node's ranks measure at once: one per CPU, the first ones.
  int running() const { return std::min(ranks, cpus()); }
};
NodeShape find_node_shape() {
  const Communicator node = Communicator::world().split_shared();
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof cpus, &cpus) != 0) CPU_ZERO(&cpus);
  constexpr int words = sizeof(cpu_set_t) / sizeof(unsigned long);
  static_assert(sizeof(cpu_set_t) % sizeof(unsigned long) == 0);
  unsigned long mask[words];
  std::memcpy(mask, &cpus, sizeof mask);
  MPI_Allreduce(MPI_IN_PLACE, mask, words, MPI_UNSIGNED_LONG, MPI_BOR, node.handle());
  std::memcpy(&cpus, mask, sizeof mask);
  return {node.size(), node.rank(), cpus};
}
const NodeShape& node_shape() {
  static const NodeShape shape = find_node_shape();
  return shape;
}

// Ranks per core on the busiest node: a node's ranks over its CPUs, the most over all nodes.
double ranks_per_core() {
  const NodeShape& node = node_shape();
  return allreduce(static_cast<double>(node.ranks) / node.cpus(), MPI_MAX);
}

// Pins the calling thread to `cpu` alone; false where the system refuses.
bool pin_thread_to(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
}

// Where the host runs the node's CPUs. A virtual machine's two CPUs may run on one die of the
// host, sharing its link to memory, or on two, and the host moves them while a job runs: on this
// project's 2-CPU machine a cache line passed between them in 40-77 ns on one die and 201-239 ns
// across two, and both cores streaming at once reached 48-61 GB/s on one die against 78-107
// across two, one core alone 43-60 either way (docs/design.md, "Where the host runs the CPUs").
// A floor from rates measured across two dies is not the floor of steps run on one.
//
// The one-way time, in ns, of a cache line passed between the first two CPUs the node's ranks
// may run on (`node`, the union of their affinity masks: ranks bound to a core each, by mpirun
// --bind-to core or srun's binding, still probe the node's first two), a
// thread pinned to each, the caller's affinity restored after: the fastest of kProbeBatches
// batches of kProbeTrips round trips, so that a batch another task interrupts does not count. 0
// where the node's ranks may run on one CPU only or the pinning fails.
constexpr int kProbeBatches = 8, kProbeTrips = 256;
double probe_cpu_pair(const cpu_set_t& node) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (pthread_getaffinity_np(pthread_self(), sizeof mask, &mask) != 0) return 0;
  int cpus[2] = {-1, -1}, found = 0;
  for (int c = 0; c < CPU_SETSIZE && found < 2; ++c) {
    if (CPU_ISSET(c, &node)) cpus[found++] = c;
  }
  if (found < 2) return 0;
  alignas(64) std::atomic<std::uint32_t> line{0};
  std::atomic<bool> pinned{true};
  constexpr std::uint32_t trips = kProbeBatches * kProbeTrips;
  // The partner answers every trip, pinned or not, so that both loops end.
  std::thread partner([&] {
    if (!pin_thread_to(cpus[1])) pinned = false;
    for (std::uint32_t i = 0; i < trips; ++i) {
      while (line.load(std::memory_order_acquire) != 2 * i + 1) {
      }
      line.store(2 * i + 2, std::memory_order_release);
    }
  });
  if (!pin_thread_to(cpus[0])) pinned = false;
  double best = 0;
  for (std::uint32_t b = 0; b < kProbeBatches; ++b) {
    const auto start = clock_type::now();
    for (std::uint32_t i = b * kProbeTrips; i < (b + 1) * kProbeTrips; ++i) {
      line.store(2 * i + 1, std::memory_order_release);
      while (line.load(std::memory_order_acquire) != 2 * i + 2) {
      }
    }
    const double ns = seconds_since(start) * 1e9 / (2.0 * kProbeTrips);
    best = b == 0 ? ns : std::min(best, ns);
  }
  partner.join();
  pthread_setaffinity_np(pthread_self(), sizeof mask, &mask);
  return pinned ? best : 0;
}

// probe_cpu_pair on rank 0 while the other ranks sleep (barrier_sleeping: a rank polling in MPI
// would take a probed CPU), broadcast to every rank. Collective. The placement it sees is that
// of rank 0's node.
double cpu_pair_ns() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const NodeShape& node = node_shape();  // collective on its first call
  double ns = rank == 0 ? probe_cpu_pair(node.cpu_set) : 0;
  Communicator::world().barrier_sleeping(100);
  MPI_Bcast(&ns, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return ns;
}

// Runs `work` for about `seconds` in up to 5 trials and returns the best trial's repetitions per
// second (as STREAM reports its best of 10): a floor must not rise because the machine was busy
// for a moment. `together`: every rank runs it the same number of times at once, each trial
// timed from the first rank's start to the last rank's end, so that ranks sharing cores
// (oversubscribed) are not timed one at a time (a collective: every rank calls it). Otherwise
// the calling rank alone, with no communication.
// `runs` false (with `together`): this rank takes part in every agreement but does no work.
template <class Work>
double best_rate(Work&& work, double seconds, bool together, bool runs = true) {
  // Ranks that are done, or that do not run (concurrent_rate), wait asleep (barrier_sleeping):
  // MPI's polling barrier takes turns on the cores from the ranks still running.
  const auto sync = [&] {
    if (together) Communicator::world().barrier_sleeping(100);
  };
  const auto agreed = [&](double v, MPI_Op op) { return together ? allreduce(v, op) : v; };
  if (runs) work();
  sync();
  auto start = clock_type::now();
  if (runs) {
    for (int i = 0; i < 3; ++i) work();
  }
  const double probe = agreed(runs ? seconds_since(start) : 0.0, MPI_MAX) / 3;
  const double wanted = std::max(3.0, seconds / std::max(probe, 1e-9));
  const auto reps = static_cast<std::int64_t>(agreed(wanted, MPI_MIN));
  const std::int64_t trials = std::min<std::int64_t>(5, reps);
  const std::int64_t per_trial = reps / trials;
  double best = 0;
  for (std::int64_t t = 0; t < trials; ++t) {
    sync();
    start = clock_type::now();
    if (runs) {
      for (std::int64_t i = 0; i < per_trial; ++i) work();
    }
    sync();
    best = std::max(best, static_cast<double>(per_trial) / agreed(seconds_since(start), MPI_MAX));
  }
  return best;
}

// Each rank's share of the repetitions per second its node runs with one rank per CPU running
// `work` at once (the node's first ranks; the others asleep), the smallest share of any node.
// With more ranks than CPUs every rank streaming at once took turns on the cores, each turn
// starting with caches and prefetch streams another rank had left, while the ranks done first
// polled in MPI's barrier, and the node's memory measured below what the step's own streams
// reached (B8 L8 D4096 on 8 ranks of 2 cores, tensor-parallel: floors of 115.1 and 118.7 ms, the
// memory's, against steps of 87.0 and 111.1). With no more ranks than CPUs, every rank runs.
template <class Work>
double concurrent_rate(Work&& work, double seconds) {
  const NodeShape& node = node_shape();
  const double rate = best_rate(work, seconds, true, node.rank < node.running());
  return rate * allreduce(static_cast<double>(node.running()) / node.ranks, MPI_MIN);
}

// The CPUs rank 0 measures a rate alone on, one after the other: every CPU its node's ranks may
// run on, where they are at least as many as those CPUs and the CPUs at most kAloneCpus; none
// otherwise (rank 0 measures where it runs). A core can be slower than its neighbour: on this
// project's 2-CPU virtual machine one CPU ran AVX-512 multiply-adds 15-25% slower than the other
// for minutes at a time, and a 2-rank step then waited for the rank on it (docs/design.md, "Two
// CPUs of unequal speed").
constexpr int kAloneCpus = 8;
std::vector<int> alone_cpus() {
  const NodeShape& node = node_shape();
  std::vector<int> cpus;
  if (node.ranks < node.cpus() || node.cpus() < 2 || node.cpus() > kAloneCpus) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &node.cpu_set)) cpus.push_back(c);
  }
  return cpus;
}

// On rank 0, the CPUs the last rate alone was measured on: cpus.size() where every pinning
// held, else 1 (printed as alone_cpus on the train_step line).
int measured_alone_cpus = 1;

// best_rate of `work` on this thread pinned to each CPU of `cpus` in turn, its affinity restored
// after: their mean. The busiest core's bound charges a node's ranks' work at that rate, as if
// spread evenly over its CPUs: n ranks' work W on CPUs whose rates alone are r_c takes at least
// n W / sum(r_c) however the ranks are placed or moved, and that is n / cpus x W / mean(r_c), the
// bound's ranks_per_core x W / rate. With CPUs alike it is the rate of any one. Empty `cpus`, or a
// pinning that fails: best_rate where the thread runs.
template <class Work>
double rate_over_cpus(Work&& work, double seconds, const std::vector<int>& cpus) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  measured_alone_cpus = 1;
  if (cpus.empty() || pthread_getaffinity_np(pthread_self(), sizeof mask, &mask) != 0) {
    return best_rate(work, seconds, false);
  }
  double sum = 0;
  bool pinned = true;
  for (int cpu : cpus) {
    if (!pin_thread_to(cpu)) {
      pinned = false;
      break;
    }
    sum += best_rate(work, seconds, false);
  }
  pthread_setaffinity_np(pthread_self(), sizeof mask, &mask);
  if (!pinned) return best_rate(work, seconds, false);
  measured_alone_cpus = static_cast<int>(cpus.size());
  return sum / static_cast<double>(cpus.size());
}

// The repetitions per second of `work` on rank 0 alone while every other rank sleeps (in a
// nanosleep loop around MPI_Test, not in MPI's yielding progress loop, so that it takes no time
// from rank 0's core); broadcast to every rank. The most one core gives one rank: the rate of a
// rank whose neighbours are all waiting, on each of the node's CPUs in turn where every CPU holds
// a rank (alone_cpus, rate_over_cpus).
template <class Work>
double alone_rate(Work&& work, double seconds) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::vector<int> cpus = alone_cpus();  // every rank: node_shape is collective on its first call
  double best = rank == 0 ? rate_over_cpus(work, seconds, cpus) : 0;
  Communicator::world().barrier_sleeping(1000);  // across nodes, 1 ms naps
  MPI_Bcast(&best, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return best;
}

// How a rate is measured: every rank at once (each rank's share of the node: concurrent_rate),
// or rank 0 alone.
enum class Measure { all_at_once, alone };

template <class Work>
double rate_of(Work&& work, double seconds, Measure how) {
  return how == Measure::alone ? alone_rate(work, seconds) : concurrent_rate(work, seconds);
}

// FLOP/s per rank of batched_gemm on op(A)[m, k] x op(B)[k, n].
double measure_gemm_rate(std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a, bool trans_b, double seconds,
                         Measure how) {
  Tensor a({1, trans_a ? k : m, trans_a ? m : k}), b({1, trans_b ? n : k, trans_b ? k : n}), c({1, m, n});
  std::fill_n(a.data<float>(), m * k, 0.5f);
  std::fill_n(b.data<float>(), k * n, 0.25f);
  const double rate = rate_of([&] { batched_gemm(a, b, c, 1, m, n, k, trans_a, trans_b); }, seconds, how);
  return 2.0 * m * n * k * rate;
}

// The rates of a layer's three products on one rank, for x[m, k] W[k, n] = y[m, n]: the forward
// (NN), the input gradient g W^T ([m, n] x [k, n]^T, NT) and the weight gradient x^T g
// ([m, k]^T x [m, n], TN). Each runs its own kernel at its own rate (for a small batch the
// weight gradient's, thin in k and writing its result once, is the fastest). The floor charges
// every matrix FLOP at the fastest of them: charging each product its own rate, measured apart
// from the step, came out above the measured step in some runs (ratio 0.99), not a floor.
struct GemmRates {
  double forward = 0, input_grad = 0, weight_grad = 0;
  double best() const { return std::max({forward, input_grad, weight_grad}); }
};
GemmRates measure_gemm_rates(std::int64_t m, std::int64_t n, std::int64_t k, bool all_three, double seconds,
                             Measure how) {
  GemmRates r;
  r.forward = measure_gemm_rate(m, n, k, false, false, seconds, how);
  r.input_grad = all_three ? measure_gemm_rate(m, k, n, false, true, seconds, how) : r.forward;
  r.weight_grad = all_three ? measure_gemm_rate(k, n, m, true, false, seconds, how) : r.forward;
  return r;
}

// The floor's arrays, mapped from the kernel and given back to it whole, laid out as tensor
// storage is (core/buffer_pool.h): page-aligned (64 bytes or more), and from 2 MiB on past a
// 2 MiB boundary by the next colour's offset and advised to transparent huge pages. Through
// std::vector they started 16 bytes past a page, as malloc's large blocks do, and every vector
// access straddled cache lines: Adam's streams ran at 33-34 GB/s on one core against 47-61
// aligned, and the floor was not a lower bound for an optimizer that reads aligned tensors.
// Through malloc, arrays freed before the model's state is allocated would also raise glibc's
// mmap threshold to their size, so the model's tensors below it would come from the heap (the
// peak RSS printed grew 195 -> 227 MB, the transformer on 8 ranks). Until 2026-11-26 (seventh
// session) they were on 4 KiB pages, where the host gives huge pages only where asked, while the
// model's tensors were on huge ones (the two streamed within the noise of each other in a scratch
// program: the layout is the step's).
template <class T>
class MappedArray {
 public:
  MappedArray(std::size_t n, T value) : n_(std::max<std::size_t>(n, 1)) {
    constexpr std::size_t huge = std::size_t{2} << 20;
    const std::size_t bytes = n_ * sizeof(T);
    const bool coloured = bytes >= kColouredBytes;
    mapped_ = (bytes >= huge ? bytes + huge : bytes) + (coloured ? kColourSpan : 0);
    void* at = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (at == MAP_FAILED) throw std::bad_alloc();
    base_ = at;
    if (bytes >= huge) {
      at = reinterpret_cast<void*>((reinterpret_cast<std::uintptr_t>(at) + huge - 1) / huge * huge);
      ::madvise(at, bytes, MADV_HUGEPAGE);  // advice only, as for tensors: failure is harmless
    }
    if (coloured) at = static_cast<char*>(at) + next_colour_offset();
    data_ = static_cast<T*>(at);
    std::fill_n(data_, n_, value);
  }
  ~MappedArray() { munmap(base_, mapped_); }
  MappedArray(const MappedArray&) = delete;
  MappedArray& operator=(const MappedArray&) = delete;
  T* data() { return data_; }
  std::size_t size() const { return n_; }
  T& operator[](std::size_t i) { return data_[i]; }

 private:
  std::size_t n_;
  std::size_t mapped_ = 0;
  void* base_ = nullptr;
  T* data_ = nullptr;
};

// Bytes per second per rank moved by memcpy of a large buffer (read + write).
double measure_copy_bandwidth(std::size_t bytes, double seconds, Measure how) {
  MappedArray<char> src(bytes, 1), dst(bytes, 0);
  std::size_t reps = 0;
  const double rate = rate_of(
      [&] {
        std::memcpy(dst.data(), src.data(), bytes);
        src[reps % bytes] = dst[(reps * 7) % bytes];  // keeps the copies observable
        ++reps;
      },
      seconds, how);
  return 2.0 * static_cast<double>(bytes) * rate;
}

// Adam's moments and step for element i, with gradient gi, with only the arithmetic a
// bandwidth-bound loop needs (no square root or division): reads and writes p, m and v.
inline void adam_moments(float* __restrict p, float gi, float* __restrict m, float* __restrict v, std::size_t i) {
  const float mi = 0.9f * m[i] + 0.1f * gi;
  const float vi = 0.999f * v[i] + 0.001f * gi * gi;
  m[i] = mi;
  v[i] = vi;
  p[i] -= 1e-3f * (mi + vi);
}

// Element i of one fused pass with the streams of Adam's update over f32 arrays: reads p, g, m,
// v and writes p, m, v.
inline void adam_element(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
                         std::size_t i) {
  adam_moments(p, g[i], m, v, i);
}

// The streams of a weight updated in rows (nn::RowUpdate): its gradient never crosses memory (it
// is computed a panel or a strip at a time, in cache), so Adam reads and writes p, m and v only,
// 24 bytes per element (a gradient made from p in registers).
inline void rows_element(float* __restrict p, float* __restrict m, float* __restrict v, std::size_t i) {
  adam_moments(p, 1e-3f * p[i], m, v, i);
}

// Each pattern runs as two loops, and its rate is the faster's: a plain loop, and the same loop a
// cache line at a time with every stream prefetched kStreamAhead elements ahead (as the library's
// own update, thin_rows_adam, prefetches its rows). On the Intel host of docs/design.md the plain
// loops streamed the rank's blocks of the tutorial's model on one rank (96-128 MiB, partly in
// the L3) at 41-47 GB/s (rows) and 36-38 (Adam's), the prefetching ones at 57-59 and 42-50 (a
// scratch program, two rounds); from memory (768 MiB and more) both ran at 28-32. With the plain
// loop alone, one run's median step came to its floor (5.86 ms against 5.84) and another's
// fastest step (5.99 against 5.99). A floor is the fastest the machine streams the pattern, so it
// takes the faster loop.
constexpr std::size_t kStreamAhead = 1024;  // elements: 4 KiB ahead in each stream
constexpr std::size_t kLineElements = 16;   // f32 in a 64-byte line

// One pass of `element` over [0, n): a plain loop, or (Ahead) a cache line at a time with each of
// `streams` prefetched kStreamAhead elements ahead (a read prefetch for every stream: on the Intel
// host a write prefetch of the written ones was no faster).
template <bool Ahead, class Element, class... Streams>
void stream_pass(std::size_t n, Element&& element, const Streams*... streams) {
  std::size_t i = 0;
  if constexpr (Ahead) {
    for (; i + kLineElements <= n; i += kLineElements) {
      const std::size_t at = std::min(i + kStreamAhead, n - 1);
      (__builtin_prefetch(streams + at, 0, 3), ...);
      for (std::size_t j = i; j < i + kLineElements; ++j) element(j);
    }
  }
  for (; i < n; ++i) element(i);
}

// One read of a block's n values, their sum (so that the reads are observable): four vectors of
// a cache line each at a time, in four sums (a read-only loop bound by one sum's add latency reads
// slower than memory gives), as a plain loop or (Ahead) with each line prefetched kStreamAhead
// elements ahead, as stream_pass does. The pattern of the forward's product, which reads each
// weight once and writes only its few rows of output.
template <bool Ahead>
float read_pass(const float* __restrict p, std::size_t n) {
  using Line = float __attribute__((vector_size(kLineElements * sizeof(float))));
  constexpr std::size_t kLines = 4;
  Line sums[kLines] = {};
  std::size_t i = 0;
  for (; i + kLines * kLineElements <= n; i += kLines * kLineElements) {
    for (std::size_t q = 0; q < kLines; ++q) {
      if constexpr (Ahead) __builtin_prefetch(p + std::min(i + q * kLineElements + kStreamAhead, n - 1), 0, 3);
      Line line;
      std::memcpy(&line, p + i + q * kLineElements, sizeof line);
      sums[q] += line;
    }
  }
  float sum = 0;
  for (; i < n; ++i) sum += p[i];
  for (const Line& line : sums) {
    for (std::size_t lane = 0; lane < kLineElements; ++lane) sum += line[lane];
  }
  return sum;
}

// Bytes per second per rank of Adam's streams over blocks of the sizes of the rank's parameter
// blocks, each block's arrays apart and the blocks one after the other, as the optimizer updates
// the parameters one at a time (nn/optim.cpp): with `gradient`, adam_stream's four (28 bytes per
// element), else rows_stream's three (24). Sized as the rank's optimizer state, `footprint` times
// over on the ranks that measure, so caches help it exactly as they help the node's optimizers
// (footprint_copies). One array per stream over all the rank's parameters is not
// the optimizer's pattern, and on a Zen 3 host it streamed at 6-7 GB/s where 16 blocks of the
// same 268 M values streamed at 33-34 (B8 L8 D4096 on one rank, whose optimizer took 215-231 ms a
// step: 33-35 GB/s); the floor it gave was above the measured step (ratio 0.78-0.94). Until
// 2026-11-26 (seventh session) the floor charged a weight updated in rows at the four streams'
// rate; its own three ran faster (8 blocks of 1 Mi elements 3-8%, 4 of 16 Mi 3-9%, a scratch
// program), and B8 L8 D4096 on one rank, its weights updated in one pass, came in under that
// floor (ratio 0.95).
// Eight of this host's 32 MiB L3s: memory's rate beyond it. A constant, not sysconf's
// _SC_LEVEL3_CACHE_SIZE: glibc reports 384 MiB here, the L3s of the host's whole socket, where
// this machine's cores share one of 32 (lscpu, /sys/devices/system/cpu/cpu0/cache/index3/size).
constexpr double kFootprintCap = 256.0 * (1 << 20);

// How many copies of its blocks a measuring rank streams. The node's state is what its caches
// see between two passes over the same block: in the step every rank of the node streams its own
// blocks once, one after the other or at once, so a rank's block comes back to the shared L3
// only after all the node's others went through it. The measuring ranks together therefore
// stream as many bytes as the node's ranks (rank 0 alone: the node's; one rank per CPU at once:
// the node's over the CPUs), each copy its own arrays, up to kFootprintCap bytes a rank (or one
// copy, if larger). Sized as the rank's own state only, rank 0 alone on 8 ranks of 2 cores (the
// tutorial's model, 24 MiB of weights and moments a rank) streamed its rows at 138-141 GB/s, in a
// 32 MiB L3, where with the node's footprint it streams at 57-64, and the floor was 3.96-4.42 ms
// against 6.54-6.86 (docs/design.md, "The footprint of a stream measurement"). Collective.
int footprint_copies(const std::vector<std::int64_t>& blocks, double bytes_per_element, Measure how) {
  double elements = 0;
  for (std::int64_t size : blocks) elements += static_cast<double>(std::max<std::int64_t>(size, 0));
  int world_size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  // The nodes of a mesh hold alike states: the node's is its ranks' count times the mean rank's.
  const double mean = allreduce(elements, MPI_SUM) / world_size;
  const NodeShape& node = node_shape();
  const int measuring = how == Measure::alone ? 1 : node.running();
  const double own = std::max(elements, 1.0) * bytes_per_element;
  const double wanted = std::ceil(mean * node.ranks / measuring * bytes_per_element / own - 1e-9);
  const double copies = std::max(1.0, std::min(wanted, std::floor(kFootprintCap / own)));
  // The same count on every rank: each measures the same work.
  return static_cast<int>(allreduce(copies, MPI_MIN));
}

// The copies of each stream measurement (footprint_copies), the same for every rank and both
// measurements of a run: found once, with the first. Collective.
struct Footprints {
  int adam_alone = 1, adam_all = 1, rows_alone = 1, rows_all = 1, read_alone = 1, read_all = 1;
};
// Adam's and the rows' streams over the blocks of the optimizer's state, the read over the
// weights' blocks.
Footprints footprints(const std::vector<std::int64_t>& state, const std::vector<std::int64_t>& weights) {
  return {footprint_copies(state, 16.0, Measure::alone),  footprint_copies(state, 16.0, Measure::all_at_once),
          footprint_copies(state, 12.0, Measure::alone),  footprint_copies(state, 12.0, Measure::all_at_once),
          footprint_copies(weights, 4.0, Measure::alone), footprint_copies(weights, 4.0, Measure::all_at_once)};
}

// Bytes per second per rank of `pass` over `footprint` copies of the rank's blocks on the ranks
// that measure (one copy elsewhere): make(n) allocates a block of n elements, and pass(ahead,
// blocks) runs the pattern once over them, as a plain loop or (ahead) a prefetching one. The
// rate is the faster loop's, each measured whole (see kStreamAhead), and `bytes_per_element`
// what the pattern moves per element. Collective (rate_of).
template <class Make, class Pass>
double measure_pattern(const std::vector<std::int64_t>& blocks, double bytes_per_element, int footprint,
                       double seconds, Measure how, Make&& make, Pass&& pass) {
  // Ranks that only wait (every rank but 0 alone, a node's ranks past its CPUs at once) need no
  // more than one copy.
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const NodeShape& node = node_shape();
  const bool measures = how == Measure::alone ? world_rank == 0 : node.rank < node.running();
  const int copies = measures ? footprint : 1;
  std::vector<decltype(make(std::size_t{1}))> arrays;
  double elements = 0;
  for (int copy = 0; copy < copies; ++copy) {
    for (std::int64_t size : blocks) {
      if (size < 1) continue;
      arrays.push_back(make(static_cast<std::size_t>(size)));
      elements += static_cast<double>(size);
    }
  }
  if (arrays.empty()) {
    arrays.push_back(make(1));
    elements = 1;
  }
  const auto rate_with = [&](auto ahead) { return rate_of([&] { pass(ahead, arrays); }, seconds, how); };
  const double rate = std::max(rate_with(std::false_type{}), rate_with(std::true_type{}));
  // The measuring ranks' elements: a rank that only waited received their rate.
  return bytes_per_element * elements / copies * footprint * rate;
}

// Bytes per second per rank of one read of each of the rank's parameter blocks, one after the
// other (read_stream: 4 bytes per element, nothing written), `footprint` copies of them on the
// ranks that measure: the pattern of the forward's product, which reads each weight once from
// memory or the L3 (docs/design.md, "Performance model"). Its footprint is the weights' alone, a
// third of what the step streams between two reads of a weight (the weights and both moments),
// so caches help it at least as much as they help the forward. The faster of read_pass's plain
// and prefetching loops. Until 2026-11-27 (thirteenth session) the floor charged the forward's
// reads at the copy's or Adam's rate, reads and writes counted together: on the Intel host of
// docs/design.md one rank reads 1 GiB at 14.6 GB/s (a scratch program, 2 MiB pages; 16.7-16.9
// here) and streams Adam's rows pattern at 28.6 GB/s of which 14.3 are reads, so the forward of
// B8 L8 D4096 on one rank was charged 40 ms for reads that take 63-73.
double measure_read_bandwidth(const std::vector<std::int64_t>& blocks, int footprint, double seconds, Measure how) {
  volatile float sink = 0;
  return measure_pattern(
      blocks, 4.0, footprint, seconds, how, [](std::size_t n) { return std::make_unique<MappedArray<float>>(n, 1.0f); },
      [&]<bool Ahead>(std::bool_constant<Ahead>, auto& arrays) {
        float sum = 0;
        for (auto& a : arrays) sum += read_pass<Ahead>(a->data(), a->size());
        sink = sink + sum;
      });
}

double measure_stream_bandwidth(const std::vector<std::int64_t>& blocks, bool gradient, int footprint,
                                double seconds, Measure how) {
  struct Block {
    MappedArray<float> p, m, v;
    std::unique_ptr<MappedArray<float>> g;  // with `gradient` only
    std::size_t n;
    Block(std::size_t size, bool gradient)
        : p(size, 1.0f), m(size, 0.0f), v(size, 0.0f),
          g(gradient ? std::make_unique<MappedArray<float>>(size, 0.5f) : nullptr), n(size) {}
  };
  return measure_pattern(
      blocks, gradient ? 28.0 : 24.0, footprint, seconds, how,
      [&](std::size_t n) { return std::make_unique<Block>(n, gradient); },
      [&]<bool Ahead>(std::bool_constant<Ahead>, auto& arrays) {
        for (auto& b : arrays) {
          float* __restrict p = b->p.data();
          float* __restrict m = b->m.data();
          float* __restrict v = b->v.data();
          if (b->g) {
            const float* __restrict g = b->g->data();
            stream_pass<Ahead>(b->n, [&](std::size_t i) { adam_element(p, g, m, v, i); }, p, g, m, v);
          } else {
            stream_pass<Ahead>(b->n, [&](std::size_t i) { rows_element(p, m, v, i); }, p, m, v);
          }
        }
      });
}

struct Options {
  std::string model = "mlp";
  std::string mesh;
  std::string strategy;
  std::int64_t batch = 8;
  int layers = 4;
  std::int64_t depth = 1024;
  std::int64_t seq_len = 128, d_model = 256, heads = 8, d_ff = 1024;
  bool scan = false;
  std::string opt_state = "replicated";  // lm: Adam's moments replicated like the weights, or sharded
  bool sequence_parallel = true;         // lm: Megatron's sequence parallelism (train_lm's)
  int steps = 20;
  int warmup = 3;
  std::uint64_t seed = 0;
  double measure_seconds = 0.5;
  std::int64_t copy_mib = 64;
};

// What a step measured and what its floor counts, for either model.
struct Measured {
  MeshShape mesh;
  std::vector<double> ms;      // the timed steps, the slowest rank of each
  std::vector<double> step_ns;  // cpu_pair_ns before each timed step, and after the last
  int untimed_steps = 0;        // steps run and not timed: the warmup, and one after each probe
  double comm_bytes = 0;       // bytes one rank sends in one step (CommStats), the most of any rank
  std::vector<double> comm_ms;  // per timed step, the most time a rank spent inside collectives
  // Per timed step, the most time a rank spent inside the optimizer's update outside collectives
  // (StepTimes): with weights updated in one pass, their backward products as well.
  std::vector<double> update_ms;
  // Per timed step, the most and the least time a rank spent outside collectives (its step's time
  // less its comm_ms): where the ranks' shares are alike, their spread is the time the fastest
  // rank waited for the slowest in collectives, a core slower than another (docs/design.md,
  // "Two CPUs of unequal speed") or a rank with more work.
  std::vector<double> work_max_ms, work_min_ms;
  std::vector<nn::RowUpdate> row_updates;  // parameters a step updates in rows, inside their layer's backward
  double flops_per_rank = 0;   // matrix FLOPs of one step on one rank
  // Of them, the forward products' that read a weight (the MLP; 0 for the transformer): each
  // weight's share is in proportion to its block.
  double forward_flops_per_rank = 0;
  double local_params = 0;     // fp32 parameters one rank holds
  std::vector<std::int64_t> local_blocks;  // their blocks' sizes, one per parameter
  // The elements of the optimizer's state one rank updates, and their blocks: the parameters'
  // unless the state is split further than they are (--opt-state sharded, ZeRO's first stage).
  double state_params = 0;
  std::vector<std::int64_t> state_blocks;
  std::int64_t m = 0, n = 0, k = 0;  // the GEMM whose rate the floor uses
  // The MLP: its products' three shapes (forward, input and weight gradient) are measured and
  // the fastest rate counts. False (the transformer): the forward product's rate.
  bool three_products = false;
};

// Called by run_mlp and run_lm, on every rank, once the step's shapes and counts are known and
// before its parameters and optimizer state are allocated.
using BeforeState = std::function<void(const Measured&)>;

// Times o.steps train steps (after o.warmup) of `loss_fn` on `batch` into w.ms; w.comm_bytes
// receives the bytes the busiest rank's collectives send in the last step (the same in every
// step), w.row_updates the parameters that step updated in rows (StepTimes) and w.step_ns where
// the node's CPUs ran around each timed step. Each probe of the CPUs (cpu_pair_ns) is followed
// by one untimed step, then the timed one: the probe leaves the cores to its two threads while
// the other ranks sleep, and the step right after it ran slower than a step right after another
// (on the Intel host of docs/design.md, 2 ranks at depth 1024: 3.32-3.75 ms against 3.09-3.12
// with no probe, and 3.16-3.19 with the untimed step between, three interleaved rounds). A
// timed step so starts as a training run's steps do, right after the one before it.
void time_steps(const Options& o, nn::TrainState& state, const nn::Optimizer& optimizer, const nn::LossFn& loss_fn,
                const nn::Batch& batch, nn::StepOptions options, Measured& w) {
  nn::StepTimes times;
  options.times = &times;
  w.ms.clear();
  w.comm_ms.clear();
  w.update_ms.clear();
  w.work_max_ms.clear();
  w.work_min_ms.clear();
  w.step_ns.clear();
  const std::int64_t first_step = state.step;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    const bool timed = i >= o.warmup;
    if (timed) {
      w.step_ns.push_back(cpu_pair_ns());
      nn::train_step(state, optimizer, loss_fn, batch, options);  // untimed: see above
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const CommScope scope;
    const double comm_before = CommStats::global().seconds();
    const auto start = clock_type::now();
    nn::train_step(state, optimizer, loss_fn, batch, options);
    // A step ends when its slowest rank ends; its time in collectives is the most any rank spent.
    // The least time a rank worked outside collectives is the most of its negation.
    const double step_ms = seconds_since(start) * 1e3;
    const double comm_ms = (CommStats::global().seconds() - comm_before) * 1e3;
    const double work_ms = std::max(0.0, step_ms - comm_ms);
    double ms[5] = {step_ms, comm_ms, std::max(0.0, times.optimizer_seconds - times.optimizer_comm_seconds) * 1e3,
                    work_ms, -work_ms};
    MPI_Allreduce(MPI_IN_PLACE, ms, 5, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (timed) {
      w.ms.push_back(ms[0]);
      w.comm_ms.push_back(ms[1]);
      w.update_ms.push_back(ms[2]);
      w.work_max_ms.push_back(ms[3]);
      w.work_min_ms.push_back(-ms[4]);
    }
    if (i == o.warmup + o.steps - 1) w.comm_bytes = allreduce(static_cast<double>(scope.total_bytes()), MPI_MAX);
  }
  w.step_ns.push_back(cpu_pair_ns());
  // The steps the state took (train_step counts them) less the timed ones.
  w.untimed_steps = static_cast<int>(state.step - first_step) - o.steps;
  w.row_updates = std::move(times.row_updates);
}

// The elements of each parameter's largest block on `mesh`, and their sum.
std::vector<std::int64_t> local_block_sizes(const nn::ParamInfos& infos, const MeshShape& mesh) {
  std::vector<std::int64_t> sizes;
  for (const auto& info : infos) sizes.push_back(numel(max_local_shape(info.spec, mesh, info.shape)));
  return sizes;
}
// In double (apps::elements): it runs before the memory check, where an absurd --depth or
// --d-model must be refused by that check's message (until the forty-fifth session an int64 count
// overflowed first: "element count overflows: 4294967296 * 2147483648").
double local_param_count(const nn::ParamInfos& infos, const MeshShape& mesh) {
  double total = 0;
  for (const auto& info : infos) total += apps::elements(max_local_shape(info.spec, mesh, info.shape));
  return total;
}

// Bytes a rank's train state holds per fp32 parameter at its peak: the parameter, Adam's two
// moments and the gradient (16), and part of a gradient-sized buffer more while a reduction or
// the optimizer writes its result. Measured (peak_rss_mb over params_per_rank, B8 L8 D4096, the
// model's own peak since 2026-11-25): 16.1 on one rank, 16.2 for tp on 2, 16.7 for fsdp on 2
// (its weight gradients exist whole before their reduce-scatter). Until then the peak printed
// was the process's, the floor's arrays (and, before them, the model's cached buffers) included:
// 17.9, 20.0 and 22.5.
constexpr double kPeakBytesPerParam = 20.0;

Measured run_mlp(const Options& o, int world_size, const BeforeState& before_state) {
  const Strategy strategy = o.strategy.empty() ? Strategy{o.mesh.empty() ? default_mesh(world_size) : o.mesh}
                                               : strategy_for(o.strategy, world_size);
  const MeshShape mesh_shape = MeshShape::parse(strategy.mesh);
  const Rules rules = models::tutorial_rules();
  models::MLP model{o.layers, o.depth, o.scan, false};
  model.w1_spec = strategy.w1;
  model.w2_spec = strategy.w2;
  const nn::ParamInfos infos = nn::abstract_init(model, mesh_shape, rules, {o.batch, o.depth});
  for (const auto& info : infos) validate_spec(info.spec, mesh_shape, info.shape, info.path);
  // The batch's split (data) and the hidden dimension's (model).
  const std::int64_t data_size = shard_count(parse_spec("P(data)"), mesh_shape, 0);
  const std::int64_t model_size = shard_count(parse_spec("P(model)"), mesh_shape, 0);
  const double local_params = local_param_count(infos, mesh_shape);
  // Refused on every rank before anything is allocated ("needs N GiB per rank, this machine has
  // M GiB"): the train state (a data-parallel copy of a large model on each of many ranks), and
  // what grows with the batch: the step's activations (train_mlp's estimate) and the floor's
  // products measured on the whole batch, x[B, d] W[d, n] = y[B, n] in f32 (n = d / model).
  // Until the forty-fourth session only the state was checked, and a --batch of 2^28 at depth 8
  // went on to allocate 8 GiB for the floor's products on a machine of 23.5.
  const double b = static_cast<double>(o.batch), d = static_cast<double>(o.depth);
  const double n = d / static_cast<double>(model_size);
  apps::check_memory(std::max({kPeakBytesPerParam * local_params,
                               apps::mlp_bytes_per_rank({o.batch, o.layers, o.depth, false, false}, infos, mesh_shape,
                                                        parse_spec("P(data)")),
                               4.0 * (b * d + d * n + b * n)}));

  // What each rank must compute and move. Each layer has 2 matmuls of 2*B*d*d FLOPs forward and
  // 4 backward (a weight and an input gradient each), less the input gradient of layer 0, which
  // nothing needs. Every one is split over the batch (data) and hidden (model) axes.
  const double matmuls = 6.0 * o.layers - 1.0;
  const double flops_total = matmuls * 2.0 * o.batch * o.depth * o.depth;
  Measured w;
  w.mesh = mesh_shape;
  w.flops_per_rank = flops_total / static_cast<double>(data_size * model_size);
  w.forward_flops_per_rank = w.flops_per_rank * 2.0 * o.layers / matmuls;
  w.local_params = local_params;
  w.local_blocks = local_block_sizes(infos, mesh_shape);
  w.state_params = w.local_params;
  w.state_blocks = w.local_blocks;
  // The GEMM of the step's forward matmul on one rank: [B/data, d] x [d, d/model].
  w.m = o.batch / data_size;
  w.n = o.depth / model_size;
  w.k = o.depth;
  w.three_products = true;
  before_state(w);

  Mesh mesh = Mesh::world(mesh_shape);
  const apps::SyntheticData data({o.batch, o.depth, apps::LossKind::sum, apps::InputKind::ones, o.seed, false}, mesh,
                                 rules);
  const nn::Optimizer optimizer = nn::adam(1e-3);
  nn::TrainState state = nn::create_train_state(nn::init_params(infos, mesh, o.seed), optimizer);
  const models::ApplyContext ctx{rules};
  const nn::LossFn loss_fn = [&](const nn::VarTree& params, const nn::Batch& batch) {
    return data.loss(model.apply(nn::ParamView(params), ctx, nn::Var(batch.x)), batch);
  };
  nn::StepOptions step_options;
  step_options.reduction = nn::StepOptions::Reduction::sum;
  const nn::Batch batch = data.batch(0);
  time_steps(o, state, optimizer, loss_fn, batch, step_options, w);
  return w;
}

// train_lm's default mesh for the rank count: data=2,seq=2,model=2 on 8 ranks, else data only.
std::string default_lm_mesh(int ranks) { return ranks == 8 ? "data=2,seq=2,model=2" : "data=" + std::to_string(ranks); }

Measured run_lm(const Options& o, int world_size, const BeforeState& before_state) {
  const MeshShape mesh_shape = MeshShape::parse(o.mesh.empty() ? default_lm_mesh(world_size) : o.mesh);
  models::TransformerConfig config;
  config.d_model = o.d_model;
  config.heads = o.heads;
  config.d_ff = o.d_ff;
  config.layers = o.layers;
  config.scan = o.scan;
  config.sequence_parallel = o.sequence_parallel;
  const models::Transformer model{config};
  const Shape tokens_shape = {o.batch, o.seq_len};
  model.validate(mesh_shape, tokens_shape);
  const nn::ParamInfos infos = nn::abstract_init(model, mesh_shape, {}, tokens_shape);
  // The train state and, for a long sequence, the activations (train_lm's estimate): before, a
  // --seq-len of 10^8 passed this check on its parameters alone and the step grew each rank past
  // 8 GB.
  apps::check_memory(std::max(kPeakBytesPerParam * local_param_count(infos, mesh_shape),
                              apps::lm_bytes_per_rank({o.batch, o.seq_len, o.d_model, o.heads, o.d_ff, o.layers, false, false},
                                                      infos, mesh_shape)));

  const double d = static_cast<double>(o.d_model), ff = static_cast<double>(o.d_ff), s = static_cast<double>(o.seq_len);
  const double tokens = static_cast<double>(o.batch) * s;
  const double forward = tokens * (o.layers * (8.0 * d * d + 4.0 * d * ff) + 2.0 * d * config.vocab) +
                         static_cast<double>(o.batch) * o.layers * 4.0 * d * s * (s + 1) / 2;
  // The MLP's up projection on one rank: [tokens / (data * seq), d_model] x [d_model, d_ff / model].
  const auto size_of = [&](const char* axis) { return mesh_shape.has_axis(axis) ? mesh_shape.axis_size(axis) : 1; };
  const std::int64_t token_shards = size_of(models::kDataAxis) * size_of(models::kSeqAxis);
  Measured w;
  w.mesh = mesh_shape;
  w.flops_per_rank = 3.0 * forward / static_cast<double>(world_size);
  w.local_params = local_param_count(infos, mesh_shape);
  w.local_blocks = local_block_sizes(infos, mesh_shape);
  const Axes shard_over = o.opt_state == "sharded" ? models::Transformer::batch_axes(mesh_shape) : Axes{};
  for (const auto& info : infos) {
    const Spec state = nn::sharded_state_spec(info.spec, mesh_shape, info.shape, shard_over);
    w.state_blocks.push_back(numel(max_local_shape(state, mesh_shape, info.shape)));
    w.state_params += static_cast<double>(w.state_blocks.back());
  }
  w.m = o.batch * o.seq_len / token_shards;
  w.n = o.d_ff / size_of(models::kModelAxis);
  w.k = o.d_model;
  w.three_products = false;
  before_state(w);

  Mesh mesh = Mesh::world(mesh_shape);
  nn::Optimizer optimizer = nn::adam(1e-3);
  optimizer.shard_state_over = shard_over;
  nn::TrainState state = nn::create_train_state(nn::init_params(infos, mesh, o.seed), optimizer);
  // Bytes drawn from the RNG (the step's time does not depend on the text).
  const RngKey key = rng_key(o.seed, "bench_train/tokens");
  const auto fill = [&](int shift) {
    return [&, shift](const std::vector<std::int64_t>& at, const Shape& block) {
      Tensor t(block, DType::i32);
      std::int32_t* out = t.data<std::int32_t>();
      for (std::int64_t r = 0; r < block[0]; ++r) {
        for (std::int64_t c = 0; c < block[1]; ++c) {
          const auto index = static_cast<std::uint64_t>((at[0] + r) * (o.seq_len + 1) + at[1] + c + shift);
          out[r * block[1] + c] = static_cast<std::int32_t>(uniform_f64(key, index) * 256.0) & 255;
        }
      }
      return t;
    };
  };
  const Spec spec = models::Transformer::token_spec(mesh_shape);
  const nn::Batch batch{ShardedTensor::from_block_fn(mesh, spec, tokens_shape, fill(0), "tokens"),
                        ShardedTensor::from_block_fn(mesh, spec, tokens_shape, fill(1), "labels")};
  const nn::LossFn loss_fn = [&](const nn::VarTree& params, const nn::Batch& b) {
    return model.loss(nn::ParamView(params), b.x, *b.y);
  };
  time_steps(o, state, optimizer, loss_fn, batch, nn::StepOptions{}, w);
  return w;
}

// This process's peak resident set in bytes since start or apps::reset_peak_rss (VmHWM), or
// getrusage's maximum where /proc is not readable.
double peak_rss_bytes() {
  const std::int64_t kib = apps::status_kib("VmHWM");
  if (kib >= 0) return static_cast<double>(kib) * 1024.0;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;  // ru_maxrss: KiB
}

// cpu_pair_ns just before and just after a measurement.
struct Placement {
  double before = 0, after = 0;
  bool in(double ns, const Placements& seen) const { return seen.same(before, ns) && seen.same(after, ns); }
};

// The rates the floor charges (docs/design.md, "Performance model"): the busiest core's ranks'
// GEMMs and streams one after the other at the rates of a rank alone, and the node's memory
// traffic at the bandwidth all ranks get at once.
struct FloorRates {
  GemmRates rates;  // the step's product on this rank's rows
  GemmRates whole;  // the same products on the whole batch's rows (the MLP), else `rates`
  double copy_alone = 0, stream_alone = 0, copy_all = 0, stream_all = 0;
  double rows_alone = 0, rows_all = 0;  // rows_stream's
  double read_alone = 0, read_all = 0;  // read_stream's
  // Where the node's CPUs ran while each all-at-once rate was measured: every core streams, so
  // those rates follow the placement (a rank alone streams as fast on either).
  Placement copy_all_at, stream_all_at, rows_all_at, read_all_at;
};

// The all-at-once bandwidths, each between two probes of the CPUs' placement (one probe between
// two measurements: the after of one and the before of the next). Collective.
void measure_all_at_once(const Options& o, const Measured& w, const Footprints& copies, FloorRates& f) {
  const double secs = o.measure_seconds;
  double probe = cpu_pair_ns();
  const auto placed = [&](Placement& at, auto&& measure) {
    at.before = probe;
    const double rate = measure();
    at.after = probe = cpu_pair_ns();
    return rate;
  };
  const std::size_t copy_bytes = static_cast<std::size_t>(o.copy_mib) << 20;
  f.copy_all = placed(f.copy_all_at, [&] { return measure_copy_bandwidth(copy_bytes, secs, Measure::all_at_once); });
  f.stream_all = placed(f.stream_all_at, [&] {
    return measure_stream_bandwidth(w.state_blocks, true, copies.adam_all, secs, Measure::all_at_once);
  });
  f.rows_all = placed(f.rows_all_at, [&] {
    return measure_stream_bandwidth(w.state_blocks, false, copies.rows_all, secs, Measure::all_at_once);
  });
  f.read_all = placed(f.read_all_at, [&] {
    return measure_read_bandwidth(w.local_blocks, copies.read_all, secs, Measure::all_at_once);
  });
}

// Collective: every rank measures (rank 0 alone, or all at once) and receives the rates.
FloorRates measure_floor_rates(const Options& o, const Measured& w, const Footprints& copies) {
  FloorRates f;
  const double secs = o.measure_seconds;
  f.rates = measure_gemm_rates(w.m, w.n, w.k, w.three_products, secs, Measure::alone);
  // The MLP's weight gradients (and FSDP's products) may run on the whole batch's rows, gathered
  // over data (nn/einsum.h, einsum_toward): a thin product with more rows runs faster, so the
  // same three products on the whole batch are measured too and the fastest of all six counts.
  const bool whole_batch = w.three_products && o.batch != w.m;
  f.whole = whole_batch ? measure_gemm_rates(o.batch, w.n, w.k, true, secs, Measure::alone) : f.rates;
  const std::size_t copy_bytes = static_cast<std::size_t>(o.copy_mib) << 20;
  f.copy_alone = measure_copy_bandwidth(copy_bytes, secs, Measure::alone);
  f.stream_alone = measure_stream_bandwidth(w.state_blocks, true, copies.adam_alone, secs, Measure::alone);
  f.rows_alone = measure_stream_bandwidth(w.state_blocks, false, copies.rows_alone, secs, Measure::alone);
  f.read_alone = measure_read_bandwidth(w.local_blocks, copies.read_alone, secs, Measure::alone);
  measure_all_at_once(o, w, copies, f);
  return f;
}

// Each rate at the faster (pick std::max) or the slower (std::min) of two measurements.
template <class Pick>
FloorRates pick_rates(const FloorRates& a, const FloorRates& b, Pick pick) {
  const auto gemm = [&](const GemmRates& x, const GemmRates& y) {
    return GemmRates{pick(x.forward, y.forward), pick(x.input_grad, y.input_grad), pick(x.weight_grad, y.weight_grad)};
  };
  return {gemm(a.rates, b.rates),
          gemm(a.whole, b.whole),
          pick(a.copy_alone, b.copy_alone),
          pick(a.stream_alone, b.stream_alone),
          pick(a.copy_all, b.copy_all),
          pick(a.stream_all, b.stream_all),
          pick(a.rows_alone, b.rows_alone),
          pick(a.rows_all, b.rows_all),
          pick(a.read_alone, b.read_alone),
          pick(a.read_all, b.read_all),
          {},  // a rate picked from two measurements has no one placement
          {},
          {},
          {}};
}
FloorRates faster(const FloorRates& a, const FloorRates& b) {
  return pick_rates(a, b, [](double x, double y) { return std::max(x, y); });
}
FloorRates slower(const FloorRates& a, const FloorRates& b) {
  return pick_rates(a, b, [](double x, double y) { return std::min(x, y); });
}

// Where every node holds one rank, "alone" (rank 0 while the others sleep) and "all at once" (each
// node's one rank) stream on the same configuration: one rank, its core and its node's memory to
// itself. The two are then two measurements of one rate, and both count at the faster: the floor
// of one rank took the node's bound at the slower all-at-once measurement before (2026-11-29,
// B8 L4 D1024 on one rank: rows_stream 36.1 GB/s alone, 32.2 at once, floor 6.25 ms against the
// 5.80 of the core's bound).
void merge_lone_rank_rates(FloorRates& f) {
  for (auto [alone, all] : {std::pair{&f.copy_alone, &f.copy_all}, std::pair{&f.stream_alone, &f.stream_all},
                            std::pair{&f.rows_alone, &f.rows_all}, std::pair{&f.read_alone, &f.read_all}}) {
    *alone = *all = std::max(*alone, *all);
  }
}

// Each all-at-once rate at its fastest among the measurements whose probes, before and after,
// both saw the placement `ns`; 0 where none did.
struct PlacedRates {
  double copy_all = 0, stream_all = 0, rows_all = 0, read_all = 0;
  bool complete() const { return copy_all > 0 && stream_all > 0 && rows_all > 0 && read_all > 0; }
};
PlacedRates rates_placed(const std::vector<FloorRates>& sets, double ns, const Placements& seen) {
  PlacedRates r;
  for (const FloorRates& f : sets) {
    if (f.copy_all_at.in(ns, seen)) r.copy_all = std::max(r.copy_all, f.copy_all);
    if (f.stream_all_at.in(ns, seen)) r.stream_all = std::max(r.stream_all, f.stream_all);
    if (f.rows_all_at.in(ns, seen)) r.rows_all = std::max(r.rows_all, f.rows_all);
    if (f.read_all_at.in(ns, seen)) r.read_all = std::max(r.read_all, f.read_all);
  }
  return r;
}

// Every probe of a run: around its steps and around each all-at-once measurement.
Placements placements_seen(const std::vector<double>& step_ns, const std::vector<FloorRates>& sets) {
  std::vector<double> probes = step_ns;
  for (const FloorRates& f : sets) {
    for (const Placement* at : {&f.copy_all_at, &f.stream_all_at, &f.rows_all_at, &f.read_all_at}) {
      probes.push_back(at->before);
      probes.push_back(at->after);
    }
  }
  return Placements(std::move(probes));
}

// How many times more the all-at-once rates are measured, after the steps, where neither of
// their two measurements saw the steps' placement: the host moved the CPUs every few seconds
// to every half minute (docs/design.md), and the three rates take 2-3 s.
constexpr int kPlacementTries = 4;

// The step's floor at the rates `f` for a rank that moves `bytes_per_rank` (docs/design.md,
// "Performance model"). Collective (the row overlap and the parameters in rows are the busiest
// rank's).
struct Floor {
  double compute_ms = 0, memory_ms = 0, row_overlap_ms = 0, forward_overlap_ms = 0;
  double row_params = 0;  // parameters updated in rows, whose Adam streams are rows_stream's
  // The one-pass updates' bound on one rank computing alone (each the longer of its products and
  // its streams): compute_ms holds it times the core's share. NaN unless every parameter is
  // updated in one pass.
  double update_ms = std::nan("");
  double ms() const { return std::max(compute_ms, memory_ms); }
};
Floor floor_at(const FloorRates& f, const Measured& w, double bytes_per_rank, double share) {
  const double gemm_rate = std::max(f.rates.best(), f.whole.best());
  const double bw_alone = std::max(f.copy_alone, f.stream_alone);
  const double bw_all = std::max(f.copy_all, f.stream_all);
  // A weight updated in rows streams p, m and v only (24 of its 28 bytes): those are charged at
  // the fastest of the three patterns' rates, the rest at the faster of the copy's and Adam's.
  const double rows_alone = std::max(bw_alone, f.rows_alone), rows_all = std::max(bw_all, f.rows_all);
  // A weight updated in rows is read once in the backward, by its input gradient's product, and
  // Adam reads each panel from cache: that product and that read are one pass, charged the longer
  // of the two instead of both. A weight updated in one pass with both its products
  // (RowUpdate::one_pass) streams Adam's state (24 bytes a parameter: no gradient crosses memory)
  // while it computes them: that pass is charged the longer of its products and its streams
  // (docs/design.md, "Performance model").
  double row_overlap = 0, own_row_params = 0, one_pass_update = 0;
  bool all_one_pass = !w.row_updates.empty();
  for (const nn::RowUpdate& u : w.row_updates) {
    const double elements = static_cast<double>(u.elements);
    own_row_params += elements;
    const double products = (u.input_grad_flops + u.weight_grad_flops) / gemm_rate;
    const double streams = 24.0 * elements / rows_alone;
    row_overlap += u.one_pass ? std::min(products, streams)
                              : std::min(u.input_grad_flops / gemm_rate, 4.0 * elements / bw_alone);
    one_pass_update += std::max(products, streams);
    all_one_pass = all_one_pass && u.one_pass;
  }
  row_overlap = allreduce(row_overlap, MPI_MAX);
  const double row_params = allreduce(own_row_params, MPI_MAX);
  one_pass_update = allreduce(one_pass_update, MPI_MAX);
  // Defined where every rank updates all of its parameters in one pass (agreed, so that no rank's
  // answer is its own).
  all_one_pass = all_one_pass && own_row_params == w.local_params;
  all_one_pass = allreduce(all_one_pass ? 1.0 : 0.0, MPI_MIN) > 0;
  // The other 4 bytes of a weight updated in rows are its forward product's read of it: nothing
  // written, charged at read_stream's rate (a read-only pass over the rank's weights).
  // The forward's product reads its weight from memory while it computes (skinny_rows prefetches
  // the next panel into L2 as it goes): each weight's read and its forward FLOPs are one pass,
  // charged the longer of the two. Both scale with the weight's block (its share of the forward
  // FLOPs is its share of the parameters), so the sum over the weights is one minimum; the read of
  // a weight not updated in rows is charged at the bandwidth, as its 28 bytes are.
  const double forward_read =
      4.0 * own_row_params / f.read_alone + 4.0 * (static_cast<double>(w.local_params) - own_row_params) / bw_alone;
  const double forward_overlap = allreduce(std::min(w.forward_flops_per_rank / gemm_rate, forward_read), MPI_MAX);
  const double row_bytes = 24.0 * row_params, read_bytes = 4.0 * row_params;
  const double other_bytes = bytes_per_rank - row_bytes - read_bytes;
  Floor out;
  out.compute_ms = 1e3 * share *
                   (w.flops_per_rank / gemm_rate + other_bytes / bw_alone + read_bytes / f.read_alone +
                    row_bytes / rows_alone - row_overlap - forward_overlap);
  out.memory_ms = 1e3 * (other_bytes / bw_all + read_bytes / f.read_all + row_bytes / rows_all);
  out.row_overlap_ms = 1e3 * row_overlap;
  out.forward_overlap_ms = 1e3 * forward_overlap;
  out.row_params = row_params;
  if (all_one_pass) out.update_ms = 1e3 * one_pass_update;
  return out;
}

int run(const Options& o, int world_rank, int world_size) {
  const bool root = world_rank == 0;
  if (o.batch < 1 || o.depth < 1 || o.layers < 1) throw UsageError("--batch, --depth and --layers must be >= 1");
  // As train_mlp and train_lm: a model's layers are objects of their own, made before any check of
  // memory could refuse them (10^5 layers of depth 1 ran on with no output).
  if (o.layers > 10000) throw UsageError("--layers must be <= 10000, got " + std::to_string(o.layers));
  // The copy measurement indexes its buffer modulo its size and runs for --measure-seconds.
  if (o.copy_mib < 1 || o.copy_mib > 65536) {
    throw UsageError("--copy-mib must be between 1 and 65536, got " + std::to_string(o.copy_mib));
  }
  // The copy measurement's two buffers (collective: every rank checks the smallest share).
  apps::check_memory(2.0 * static_cast<double>(o.copy_mib) * 1048576.0,
                     "--copy-mib " + std::to_string(o.copy_mib) + ": the copy measurement ");
  if (!(o.measure_seconds > 0 && o.measure_seconds <= 3600)) {
    throw UsageError("--measure-seconds must be > 0 and <= 3600, got " + apps::number_text(o.measure_seconds));
  }
  if (o.steps < 1 || o.warmup < 0) throw UsageError("--steps must be >= 1 and --warmup >= 0");
  // Their sum counts the steps run (an int: 2^31 - 1 steps and one of warmup wrapped, no step ran,
  // and the median of no times crashed).
  if (o.steps > 1000000 || o.warmup > 1000000) {
    throw UsageError("--steps and --warmup must be <= 1000000, got " + std::to_string(o.steps) + " and " +
                     std::to_string(o.warmup));
  }
  if (o.model != "mlp" && o.model != "lm") throw UsageError("--model must be mlp or lm, got '" + o.model + "'");
  if (o.seq_len < 1 || o.d_model < 1 || o.heads < 1 || o.d_ff < 1) {
    throw UsageError("--seq-len, --d-model, --heads and --d-ff must be >= 1");
  }
  if (!o.strategy.empty() && o.model != "mlp") throw UsageError("--strategy applies to --model mlp only");
  if (o.opt_state != "replicated" && o.model != "lm") throw UsageError("--opt-state applies to --model lm only");
  if (!o.sequence_parallel && o.model != "lm") throw UsageError("--no-sequence-parallel applies to --model lm only");
  if (!o.strategy.empty() && !o.mesh.empty()) throw UsageError("--strategy and --mesh exclude each other");
  // The floor's rates are measured twice, before the model's state exists and after its steps
  // (the all-at-once rates up to kPlacementTries times more), and each counts at its fastest: a
  // floor must not rise because the machine was slow for a while (docs/design.md, "Performance
  // model").
  FloorRates before;
  Footprints copies;
  const BeforeState measure_before = [&](const Measured& plan) {
    copies = footprints(plan.state_blocks, plan.local_blocks);
    before = measure_floor_rates(o, plan, copies);
    apps::reset_peak_rss();  // the peak printed is the model's, not the floor's arrays'
  };
  const Measured w = o.model == "mlp" ? run_mlp(o, world_size, measure_before) : run_lm(o, world_size, measure_before);
  // The most any rank's resident set reached while the model was built and trained.
  const double peak_rss = allreduce(peak_rss_bytes(), MPI_MAX);
  // The model's buffers, freed with it, stay in the tensor cache (core/buffer_pool.h) unless
  // given back: the floor's own arrays below would come on top of them.
  pool_release_cached();
  FloorRates after = measure_floor_rates(o, w, copies);
  // The placement most steps ran in, the steps that began and ended in it, and the all-at-once
  // rates measured in it (again, up to kPlacementTries times, where none was): the floor of the
  // steps in the machine they ran on (docs/design.md, "Where the host runs the CPUs").
  const double step_ns = median(w.step_ns);
  // One rank a node: each rate's two kinds of measurement are of one configuration (collective).
  const bool lone_ranks = allreduce(static_cast<double>(node_shape().ranks), MPI_MAX) == 1.0;
  if (lone_ranks) {
    merge_lone_rank_rates(before);
    merge_lone_rank_rates(after);
  }
  std::vector<FloorRates> sets{before, after};
  Placements seen = placements_seen(w.step_ns, sets);
  PlacedRates placed = rates_placed(sets, step_ns, seen);
  for (int t = 0; step_ns > 0 && !placed.complete() && t < kPlacementTries; ++t) {
    measure_all_at_once(o, w, copies, sets.emplace_back());
    if (lone_ranks) merge_lone_rank_rates(sets.back());
    seen = placements_seen(w.step_ns, sets);
    placed = rates_placed(sets, step_ns, seen);
  }
  // Every measurement counts toward the floor at its fastest rates, wherever the CPUs ran.
  FloorRates f = sets.front();
  for (const FloorRates& set : sets) f = faster(f, set);
  const MeshShape& mesh_shape = w.mesh;
  const std::vector<double>& ms = w.ms;
  const double flops_per_rank = w.flops_per_rank;
  // Adam's 28 bytes an element of the state this rank updates.
  const double bytes_per_rank = 28.0 * w.state_params;
  const std::int64_t m = w.m, n = w.n, k = w.k;
  const double share = std::max(1.0, ranks_per_core());
  const Floor floor = floor_at(f, w, bytes_per_rank, share);
  // The same floor at the slower of each rate's two measurements: how far the machine moved
  // between them, for reading the ratio (not a bound: the floor is the faster's).
  const double slower_floor_ms = floor_at(slower(before, after), w, bytes_per_rank, share).ms();
  const double compute_floor_ms = floor.compute_ms, memory_floor_ms = floor.memory_ms;
  const double floor_ms = floor.ms();
  const double med = median(ms);
  std::vector<double> placed_ms;
  for (std::size_t i = 0; i < ms.size(); ++i) {
    if (seen.same(w.step_ns[i], step_ns) && seen.same(w.step_ns[i + 1], step_ns)) placed_ms.push_back(ms[i]);
  }
  // The floor at the all-at-once rates of the steps' placement, and the median of those steps
  // over it; null (NaN here) where no rate or no step was measured in it.
  double placed_floor_ms = std::nan(""), placed_ratio = std::nan("");
  if (placed.complete()) {
    FloorRates g = f;
    g.copy_all = placed.copy_all;
    g.stream_all = placed.stream_all;
    g.rows_all = placed.rows_all;
    g.read_all = placed.read_all;
    placed_floor_ms = floor_at(g, w, bytes_per_rank, share).ms();
    if (!placed_ms.empty()) placed_ratio = median(placed_ms) / placed_floor_ms;
  }
  // A number for JSON, or null.
  const auto json = [](double v) {
    char text[32] = "null";
    if (std::isfinite(v)) std::snprintf(text, sizeof text, "%.3f", v);
    return std::string(text);
  };
  const auto gbps_placed = [&](double rate) { return json(rate > 0 ? rate / 1e9 : std::nan("")); };
  // MiB of arrays each measuring rank streamed: its state's (or, reading, its weights') blocks'
  // streams, `n` times over.
  const auto footprint_mib = [&](double bytes_per_element, int n, double elements) {
    return bytes_per_element * elements * n / (1 << 20);
  };

  if (root) {
    std::printf("{\"bench\":\"gemm\",\"ranks\":%d,\"m\":%lld,\"n\":%lld,\"k\":%lld,\"gflops_per_rank\":%.3f",
                world_size, static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
                f.rates.forward / 1e9);
    if (w.three_products) {
      std::printf(",\"input_grad_gflops_per_rank\":%.3f,\"weight_grad_gflops_per_rank\":%.3f", f.rates.input_grad / 1e9,
                  f.rates.weight_grad / 1e9);
      std::printf(",\"whole_batch_m\":%lld,\"whole_batch_gflops\":%.3f", static_cast<long long>(o.batch),
                  f.whole.best() / 1e9);
    }
    std::printf("}\n");
    std::printf(
        "{\"bench\":\"copy\",\"ranks\":%d,\"mib\":%lld,\"gb_per_s_per_rank\":%.3f,\"gb_per_s_alone\":%.3f,"
        "\"gb_per_s_per_rank_same_placement\":%s}\n",
        world_size, static_cast<long long>(o.copy_mib), f.copy_all / 1e9, f.copy_alone / 1e9,
        gbps_placed(placed.copy_all).c_str());
    std::printf(
        "{\"bench\":\"adam_stream\",\"ranks\":%d,\"elements\":%lld,\"gb_per_s_per_rank\":%.3f,\"gb_per_s_alone\":%.3f,"
        "\"footprint_mib_per_rank\":%.3f,\"footprint_mib_alone\":%.3f,\"gb_per_s_per_rank_same_placement\":%s}\n",
        world_size, static_cast<long long>(w.state_params), f.stream_all / 1e9, f.stream_alone / 1e9,
        footprint_mib(16, copies.adam_all, w.state_params), footprint_mib(16, copies.adam_alone, w.state_params),
        gbps_placed(placed.stream_all).c_str());
    std::printf(
        "{\"bench\":\"rows_stream\",\"ranks\":%d,\"elements\":%lld,\"gb_per_s_per_rank\":%.3f,\"gb_per_s_alone\":%.3f,"
        "\"footprint_mib_per_rank\":%.3f,\"footprint_mib_alone\":%.3f,\"gb_per_s_per_rank_same_placement\":%s}\n",
        world_size, static_cast<long long>(w.state_params), f.rows_all / 1e9, f.rows_alone / 1e9,
        footprint_mib(12, copies.rows_all, w.state_params), footprint_mib(12, copies.rows_alone, w.state_params),
        gbps_placed(placed.rows_all).c_str());
    std::printf(
        "{\"bench\":\"read_stream\",\"ranks\":%d,\"elements\":%lld,\"gb_per_s_per_rank\":%.3f,\"gb_per_s_alone\":%.3f,"
        "\"footprint_mib_per_rank\":%.3f,\"footprint_mib_alone\":%.3f,\"gb_per_s_per_rank_same_placement\":%s}\n",
        world_size, static_cast<long long>(w.local_params), f.read_all / 1e9, f.read_alone / 1e9,
        footprint_mib(4, copies.read_all, w.local_params), footprint_mib(4, copies.read_alone, w.local_params),
        gbps_placed(placed.read_all).c_str());
    char sizes[160];
    if (o.model == "mlp") {
      std::snprintf(sizes, sizeof sizes, "\"depth\":%lld", static_cast<long long>(o.depth));
    } else {
      std::snprintf(sizes, sizeof sizes,
                    "\"seq_len\":%lld,\"d_model\":%lld,\"heads\":%lld,\"d_ff\":%lld,\"sequence_parallel\":%s",
                    static_cast<long long>(o.seq_len), static_cast<long long>(o.d_model),
                    static_cast<long long>(o.heads), static_cast<long long>(o.d_ff),
                    o.sequence_parallel ? "true" : "false");
    }
    std::printf(
        "{\"bench\":\"train_step\",\"model\":\"%s\",\"mesh\":\"%s\",\"ranks\":%d,\"batch\":%lld,\"layers\":%d,%s,"
        "\"scan\":%s,\"steps\":%d,\"untimed_steps\":%d,\"ms_median\":%.3f,\"ms_min\":%.3f,\"ms_max\":%.3f,\"floor_ms\":%.3f,"
        "\"ratio\":%.3f,\"compute_floor_ms\":%.3f,\"memory_floor_ms\":%.3f,\"ranks_per_core\":%.3f,"
        "\"gflop_per_rank\":%.4f,\"mb_per_rank\":%.3f,\"strategy\":\"%s\",\"opt_state\":\"%s\","
        "\"params_per_rank\":%.0f,\"state_params_per_rank\":%.0f,\"comm_mb_per_rank\":%.3f,\"comm_ms_median\":%.3f,\"row_updates\":%zu,\"one_pass_updates\":%zu,"
        "\"row_overlap_ms\":%.3f,\"forward_overlap_ms\":%.3f,\"row_params_per_rank\":%.0f,\"peak_rss_mb\":%.1f,"
        "\"floor_ms_slower_rates\":%.3f,\"cpu_pair_ns\":%.1f,\"rate_sets\":%zu,\"steps_same_placement\":%zu,"
        "\"floor_ms_same_placement\":%s,\"ratio_same_placement\":%s,\"update_ms_median\":%.3f,"
        "\"update_floor_ms\":%s,\"update_ratio\":%s,\"work_ms_max_median\":%.3f,\"work_ms_min_median\":%.3f,\"alone_cpus\":%d}\n",
        o.model.c_str(), mesh_shape.to_string().c_str(), world_size, static_cast<long long>(o.batch), o.layers,
        sizes, o.scan ? "true" : "false", o.steps, w.untimed_steps, med,
        *std::min_element(ms.begin(), ms.end()), *std::max_element(ms.begin(), ms.end()), floor_ms, med / floor_ms,
        compute_floor_ms, memory_floor_ms, share,
        flops_per_rank / 1e9, bytes_per_rank / 1e6, o.strategy.empty() ? "mesh" : o.strategy.c_str(),
        o.opt_state.c_str(), w.local_params, w.state_params, w.comm_bytes / 1e6, median(w.comm_ms), w.row_updates.size(),
        static_cast<std::size_t>(std::count_if(w.row_updates.begin(), w.row_updates.end(),
                                               [](const nn::RowUpdate& u) { return u.one_pass; })),
        floor.row_overlap_ms, floor.forward_overlap_ms, floor.row_params, peak_rss / 1e6, slower_floor_ms, step_ns,
        sets.size(), placed_ms.size(), json(placed_floor_ms).c_str(), json(placed_ratio).c_str(), median(w.update_ms),
        json(floor.update_ms).c_str(), json(median(w.update_ms) / floor.update_ms).c_str(), median(w.work_max_ms),
        median(w.work_min_ms), measured_alone_cpus);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tessera::Environment env(argc, argv);
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  tessera::apps::CommandLine app{"bench_train: median ms per train step of the tutorial MLP or train_lm's transformer beside its floor"};
  Options o;
  app.add_option("--model", o.model, "mlp (the tutorial's MLP) or lm (train_lm's transformer)").capture_default_str();
  app.add_option("--mesh", o.mesh,
                 "mesh axes name=size,... (default: mlp data=..,model= 4, 2 or 1 by rank count; lm "
                 "data=2,seq=2,model=2 on 8 ranks, else data=<ranks>)");
  app.add_option("--strategy", o.strategy,
                 "mlp: dp (data=<ranks>), tp (model=<ranks>), fsdp (data=<ranks>, weights split over data) or 2d "
                 "(data=2,model=<ranks>/2) (default: none, the mesh of --mesh)");
  app.add_option("--batch", o.batch, "global batch size (lm: sequences)").capture_default_str();
  app.add_option("--layers", o.layers, "number of layers (DotReluDot layers or transformer blocks)")
      .capture_default_str();
  app.add_option("--depth", o.depth, "mlp: width of the layers").capture_default_str();
  app.add_option("--seq-len", o.seq_len, "lm: bytes per sequence").capture_default_str();
  app.add_option("--d-model", o.d_model, "lm: model width").capture_default_str();
  app.add_option("--heads", o.heads, "lm: attention heads").capture_default_str();
  app.add_option("--d-ff", o.d_ff, "lm: MLP width").capture_default_str();
  app.add_flag("--scan", o.scan, "stacked layers run by a scan");
  app.add_flag("--sequence-parallel,!--no-sequence-parallel", o.sequence_parallel,
               "lm: Megatron's sequence parallelism, as train_lm's (on by default)");
  app.add_option("--opt-state", o.opt_state,
                 "lm: Adam's moments replicated like their weights, or sharded over the data and seq axes that "
                 "replicate them (train_lm --opt-state)")
      .one_of({"replicated", "sharded"})
      .capture_default_str();
  app.add_option("--steps", o.steps, "timed steps (median reported)").capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed steps first").capture_default_str();
  app.add_option("--seed", o.seed, "parameter seed").capture_default_str();
  app.add_option("--measure-seconds", o.measure_seconds, "time for each of the GEMM and copy measurements")
      .capture_default_str();
  app.add_option("--copy-mib", o.copy_mib, "buffer size of the copy-bandwidth measurement per rank")
      .capture_default_str();
  return tessera::apps::parse_and_run("bench_train", app, argc, argv, [&](int rank) { return run(o, rank, size); });
}
