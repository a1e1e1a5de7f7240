// TESSERA_COLLECTIVE_CHECK: every collective and reshard first agrees on its description.
#include "collectives/collective_check.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>

#include "core/env_settings.h"
#include "core/error.h"
#include "core/rng.h"
#include "mesh/agree.h"
#include "mesh/mpi_check.h"

namespace tessera {

namespace {

// -1: not read yet; 0 off; 1 on.
std::atomic<int> check_state{-1};
std::atomic<double> warn_seconds{60.0};

}  // namespace

bool collective_check_enabled() {
  int state = check_state.load(std::memory_order_relaxed);
  if (state < 0) {
    state = checked_env_choice(env_setting("TESSERA_COLLECTIVE_CHECK"));
    check_state.store(state, std::memory_order_relaxed);
  }
  return state == 1;
}

void set_collective_check(bool on) { check_state.store(on ? 1 : 0, std::memory_order_relaxed); }

double collective_check_warn_seconds() { return warn_seconds.load(std::memory_order_relaxed); }

void set_collective_check_warn_seconds(double seconds) { warn_seconds.store(seconds, std::memory_order_relaxed); }

namespace detail {

int& collective_check_depth() {
  thread_local int depth = 0;
  return depth;
}

std::string blocks_text(const Tensor& local) {
  return std::string(dtype_name(local.dtype())) + " rank-" + std::to_string(local.ndim()) + " blocks";
}

void check_same_collective(const Mesh& mesh, const std::string& description) {
  // Numbered per mesh: each check is one all-reduce on the mesh's check communicator, so the
  // ranks' checks pair in order, and the number names the pair in the messages.
  const std::uint64_t index = mesh.count_collective();
  const Communicator& comm = mesh.check_comm();
  if (comm.size() == 1) return;
  const std::uint64_t hash = stream_id(description);  // FNV-1a 64 (core/rng.h)
  std::uint64_t most[2] = {hash, ~hash};
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, most, 2, MPI_UINT64_T, MPI_MAX, comm.handle(), &request), "MPI_Iallreduce");
  // Polled (mesh/agree.h), saying so every collective_check_warn_seconds() that it waits on.
  const auto start = std::chrono::steady_clock::now();
  while (!wait_until_done(request, collective_check_warn_seconds())) {
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");  // an MPI error throws
    if (done) break;
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    std::cerr << "tessera: rank " << mesh.rank() << ": TESSERA_COLLECTIVE_CHECK: waited " << seconds
              << " s at collective " << index << " on " << mesh.to_string() << " (" << description
              << ") for the other ranks; a rank that never comes is in another collective, or has ended" << std::endl;
  }
  if (most[0] == ~most[1]) return;  // the largest hash is the smallest: all alike
  // They differ: rank 0's description to every rank; the lowest rank whose own differs names both.
  const std::string first = broadcast_string(comm, description, 0);
  std::optional<std::string> error;
  if (description != first) {
    error = "TESSERA_COLLECTIVE_CHECK: collective " + std::to_string(index) + " on " + mesh.to_string() +
            " differs from rank 0's: " + description + " here, " + first +
            " on rank 0; every rank runs the same collectives in the same order with the same arguments";
  }
  agree_or_throw<Error>(comm, error);
}

}  // namespace detail
}  // namespace tessera
