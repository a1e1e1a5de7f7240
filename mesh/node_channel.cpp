// Shared memory among the ranks of one node's communicator (node_channel.h).
#include "mesh/node_channel.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <random>
#include <string>

#include "core/env_settings.h"
#include "core/error.h"
#include "mesh/communicator.h"
#include "mesh/mpi_check.h"

namespace tessera {

struct NodeChannel::Header {
  std::uint64_t token = 0;  // rank 0's random number: the others check they mapped its segment
  alignas(64) std::atomic<std::uint32_t> arrived{0};
  alignas(64) std::atomic<std::uint32_t> generation{0};  // the futex word
  std::atomic<std::uint32_t> sleepers{0};
};

namespace {

constexpr std::size_t kHeaderBytes = 4096;
static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));

// A waiting rank sleeps on the futex after this long. Measured on 8 ranks of 2 cores
// (bench_train, B8 L4 D1024, 5 interleaved pairs of 200 steps): sleeping at once gave 15.6-20.5
// ms per step, after 1 ms 14.7-19.2 ms; sleeping at once was no better.
constexpr auto kSleepAfter = std::chrono::microseconds(1000);

// What rank 0 tells the others about the segment it made.
struct Made {
  std::uint64_t token = 0;
  int ok = 0;
  int yield = 0;
  char name[64] = {};
};

int env_int(const char* name) {
  const char* env = std::getenv(name);
  return env == nullptr ? -1 : std::atoi(env);
}

// Whether every rank of `comm` shares memory with every other. In a job on one node (Open MPI's
// local size is the world size: the same answer on every rank) without a collective; otherwise
// by MPI's own grouping, which is what decides whether ranks can map one segment.
bool on_one_node(MPI_Comm comm, int size) {
  if (job_on_one_node()) return true;
  return Communicator(comm, false).split_shared().size() == size;
}

// Whether this job runs as many ranks on this node as this process has cores or more (then a
// spinning rank takes the core from one it waits for: the launchers' mpi_yield_when_idle rule).
bool ranks_fill_cores(int comm_size) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  const int local = env_int("OMPI_COMM_WORLD_LOCAL_SIZE");
  return (local > 0 ? local : comm_size) >= cores;
}

std::size_t segment_bytes(int size) {
  return kHeaderBytes + 2 * static_cast<std::size_t>(size) * static_cast<std::size_t>(NodeChannel::slot_bytes_for(size));
}

void* map_segment(int fd, std::size_t bytes) {
  void* at = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return at == MAP_FAILED ? nullptr : at;
}

long futex(std::atomic<std::uint32_t>* word, int op, std::uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, value, timeout, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

std::int64_t NodeChannel::slot_bytes_for(int size) {
  std::int64_t slot = kSlotBytes;
  while (slot > kMinSlotBytes && 2 * static_cast<std::int64_t>(size) * slot > kSegmentCap) slot /= 2;
  return slot;
}

std::unique_ptr<NodeChannel> NodeChannel::open(MPI_Comm comm) {
  int size = 0, rank = 0;
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  if (size < 2) return nullptr;
  // TESSERA_SHM_COLLECTIVES (core/env_settings.h): 1 or unset turns the channel on, 0 off.
  const EnvSetting& setting = env_setting("TESSERA_SHM_COLLECTIVES");
  const int choice = env_choice(setting);
  const bool wanted = on_one_node(comm, size) && choice == 1;

  // Rank 0 makes the segment: a POSIX shared-memory object with its pages reserved up front
  // (posix_fallocate: a full /dev/shm fails here, not as SIGBUS on first touch), unlinked once
  // every rank has mapped it.
  Made made;
  void* at = nullptr;
  if (rank == 0 && wanted) {
    made.yield = ranks_fill_cores(size) ? 1 : 0;
    std::random_device random;
    made.token = (static_cast<std::uint64_t>(random()) << 32) ^ random() ^ static_cast<std::uint64_t>(getpid());
    std::snprintf(made.name, sizeof(made.name), "/tessera.%d.%016llx", static_cast<int>(getpid()),
                  static_cast<unsigned long long>(made.token));
    const int fd = shm_open(made.name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0) {
      const std::size_t bytes = segment_bytes(size);
      if (posix_fallocate(fd, 0, static_cast<off_t>(bytes)) == 0) at = map_segment(fd, bytes);
      close(fd);
      if (at == nullptr) shm_unlink(made.name);
    }
    if (at != nullptr) {
      new (at) Header{};
      static_cast<Header*>(at)->token = made.token;
      made.ok = 1;
    }
  }
  check_mpi(MPI_Bcast(&made, sizeof(made), MPI_BYTE, 0, comm), "MPI_Bcast (node channel)");
  if (rank != 0 && made.ok && wanted) {
    const int fd = shm_open(made.name, O_RDWR, 0600);
    if (fd >= 0) {
      at = map_segment(fd, segment_bytes(size));
      close(fd);
    }
    if (at != nullptr && static_cast<Header*>(at)->token != made.token) {
      munmap(at, segment_bytes(size));
      at = nullptr;
    }
  }
  // Agreed: whether any rank lacks the mapping, and whether any rank has a bad setting.
  int failed[2] = {at == nullptr ? 1 : 0, choice < 0 ? 1 : 0};
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, failed, 2, MPI_INT, MPI_MAX, comm), "MPI_Allreduce (node channel)");
  if (rank == 0 && made.ok) shm_unlink(made.name);
  if (failed[0] != 0 || failed[1] != 0) {
    if (at != nullptr) munmap(at, segment_bytes(size));
    if (failed[1] != 0) {
      throw UsageError(env_setting_error(setting, choice < 0));
    }
    return nullptr;
  }
  std::unique_ptr<NodeChannel> channel(new NodeChannel());
  channel->header_ = static_cast<Header*>(at);
  channel->base_ = static_cast<std::byte*>(at) + kHeaderBytes;
  channel->mapped_bytes_ = segment_bytes(size);
  channel->size_ = size;
  channel->rank_ = rank;
  channel->yield_ = made.yield != 0;
  channel->slot_bytes_ = slot_bytes_for(size);
  return channel;
}

NodeChannel::~NodeChannel() { munmap(header_, mapped_bytes_); }

std::byte* NodeChannel::buffer(std::uint64_t which) const {
  return base_ + which * static_cast<std::size_t>(size_) * static_cast<std::size_t>(slot_bytes_);
}

void NodeChannel::barrier(bool asleep) {
  ++phase_;
  Header& h = *header_;
  const std::uint32_t generation = h.generation.load(std::memory_order_acquire);
  if (h.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<std::uint32_t>(size_)) {
    // The last to arrive: reset the count before the others can arrive at the next barrier.
    h.arrived.store(0, std::memory_order_relaxed);
    h.generation.store(generation + 1, std::memory_order_seq_cst);
    if (h.sleepers.load(std::memory_order_seq_cst) > 0) futex(&h.generation, FUTEX_WAKE, INT_MAX, nullptr);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  for (unsigned i = 1; !asleep; ++i) {
    if (h.generation.load(std::memory_order_acquire) != generation) return;
    if (yield_) {
      sched_yield();
    } else {
      cpu_relax();
    }
    if (i % 64 == 0 && std::chrono::steady_clock::now() - start > kSleepAfter) break;
  }
  // Sleep until the last rank advances the generation. The count of sleepers is raised before
  // the futex rechecks the generation, so a rank that advances it after that check sees a
  // sleeper and wakes it; the timeout only bounds a wait the kernel might miss.
  h.sleepers.fetch_add(1, std::memory_order_seq_cst);
  const timespec timeout{0, 50'000'000};
  while (h.generation.load(std::memory_order_seq_cst) == generation) {
    futex(&h.generation, FUTEX_WAIT, generation, &timeout);
  }
  h.sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace tessera
