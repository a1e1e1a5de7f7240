// Owned and borrowed MPI communicators.
#include "mesh/communicator.h"

#include <cstdlib>

#include <time.h>

#include <utility>

#include "mesh/mpi_check.h"

namespace tessera {

Communicator Communicator::world() { return Communicator(MPI_COMM_WORLD, false); }

Communicator::Communicator(Communicator&& other) noexcept
    : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
      owned_(std::exchange(other.owned_, false)),
      channel_opened_(std::exchange(other.channel_opened_, false)),
      channel_(std::move(other.channel_)) {}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    release();
    comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
    owned_ = std::exchange(other.owned_, false);
    channel_opened_ = std::exchange(other.channel_opened_, false);
    channel_ = std::move(other.channel_);
  }
  return *this;
}

Communicator::~Communicator() { release(); }

void Communicator::release() noexcept {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owned_ && comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
  comm_ = MPI_COMM_NULL;
  owned_ = false;
  channel_.reset();
  channel_opened_ = false;
}

int Communicator::rank() const {
  int r = 0;
  check_mpi(MPI_Comm_rank(comm_, &r), "MPI_Comm_rank");
  return r;
}

int Communicator::size() const {
  int s = 0;
  check_mpi(MPI_Comm_size(comm_, &s), "MPI_Comm_size");
  return s;
}

Communicator Communicator::dup() const {
  MPI_Comm out;
  check_mpi(MPI_Comm_dup(comm_, &out), "MPI_Comm_dup");
  check_mpi(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  return Communicator(out, true);
}

Communicator Communicator::split(int color, int key) const {
  MPI_Comm out;
  check_mpi(MPI_Comm_split(comm_, color, key, &out), "MPI_Comm_split");
  // MPI_UNDEFINED as color gives MPI_COMM_NULL: a rank outside every part.
  if (out != MPI_COMM_NULL) check_mpi(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  return Communicator(out, true);
}

bool job_on_one_node() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const char* world = std::getenv("OMPI_COMM_WORLD_SIZE");
  return local != nullptr && world != nullptr && std::atoi(local) > 0 && std::atoi(local) == std::atoi(world);
}

Communicator Communicator::split_shared() const {
  MPI_Comm out;
  check_mpi(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank(), MPI_INFO_NULL, &out), "MPI_Comm_split_type");
  check_mpi(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  return Communicator(out, true);
}

void Communicator::barrier() const { check_mpi(MPI_Barrier(comm_), "MPI_Barrier"); }

void Communicator::barrier_sleeping(long pause_us) const {
  // One node: the channel's barrier, asleep on its futex until the last rank wakes the others
  // (no naps: no wake-ups that take the CPU from the ranks still working, and no nap's delay).
  if (NodeChannel* channel = node_channel()) {
    channel->barrier(/*asleep=*/true);
    return;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier");
  const timespec pause{pause_us / 1000000, (pause_us % 1000000) * 1000};
  for (int done = 0;;) {
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    nanosleep(&pause, nullptr);
  }
}

NodeChannel* Communicator::node_channel() const {
  if (!channel_opened_) {
    channel_ = NodeChannel::open(comm_);
    channel_opened_ = true;
  }
  return channel_.get();
}

}  // namespace tessera
