// Shared memory among the ranks of one communicator that all run on one node, for collectives of
// small and middling blocks. Open MPI's shared-memory collectives take several rounds of
// messages (a handshake, fragments through a FIFO, log2(n) steps of recursive doubling), and on
// more ranks than cores every round waits until the rank it needs is scheduled. Here a
// collective is one or two rounds: every rank writes its block into its slot, all meet at a
// barrier, and every rank reads what it needs straight from the others' slots.
//
// Layout of the segment: a header page (the barrier's counters), then two buffers of `size()`
// slots of `slot_bytes()` each (slot_bytes_for: at most kSegmentCap in all). Phases alternate between the two buffers: a phase writes
// region() and reads the region of the phase before (previous_region()). A buffer written in
// phase p is read in phase p + 1 and written again only in phase p + 2, after the barrier that
// every reader of phase p + 1 has passed, so one barrier per phase suffices.
//
// Barrier: a rank arrives by incrementing a shared counter; the last to arrive advances the
// generation. Waiting ranks spin (fewer ranks than cores) or yield the core (as many ranks as
// cores or more, so the rank they wait for runs), and after kSleepAfter of waiting sleep on a futex of
// the generation, which the last rank wakes: a rank waiting on another's long computation or
// file I/O takes no CPU. barrier(true) sleeps at once (Communicator::barrier_sleeping).
//
// Created (collectively) by Communicator::node_channel; internal to the collectives layer.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace tessera {

class NodeChannel {
 public:
  // Collective over `comm`. A channel when every rank of `comm` shares memory with every other
  // (one node) and TESSERA_SHM_COLLECTIVES is unset or "1"; nullptr when it is "0", when the
  // ranks span nodes, or when a rank could not create or map the segment (all ranks agree on the
  // outcome). Throws UsageError on every rank when any rank has another value.
  static std::unique_ptr<NodeChannel> open(MPI_Comm comm);
  ~NodeChannel();
  NodeChannel(const NodeChannel&) = delete;
  NodeChannel& operator=(const NodeChannel&) = delete;

  int size() const { return size_; }
  int rank() const { return rank_; }
  // Bytes of one rank's slot: the largest block per rank the collectives send through the
  // channel; larger ones take MPI. Measured with bench_collectives (f32, outermost dimension):
  // on 8 ranks of 2 cores the channel is 1.3-2.7x faster than the raw MPI call from 16 KiB to
  // 1 MiB; on 2 ranks within 10% of it or faster up to 1 MiB (all_reduce 108 against 104 us),
  // where MPI's pipelined copies through cache-sized fragments catch up.
  // Slots shrink on nodes of many ranks so that a segment stays within kSegmentCap: 1 MiB up to
  // 16 ranks, 256 KiB at 64, 64 KiB at 256 (a power of two, at least kMinSlotBytes).
  static constexpr std::int64_t kSlotBytes = std::int64_t{1} << 20;
  static constexpr std::int64_t kMinSlotBytes = std::int64_t{64} << 10;
  static constexpr std::int64_t kSegmentCap = std::int64_t{32} << 20;
  static std::int64_t slot_bytes_for(int size);
  std::int64_t slot_bytes() const { return slot_bytes_; }
  bool carries(std::int64_t bytes_per_rank) const { return bytes_per_rank <= slot_bytes_; }

  // The buffer this phase writes (size() slots; slot k at k * slot_bytes()).
  std::byte* region() { return buffer(phase_ & 1); }
  std::byte* slot() { return region() + rank_ * slot_bytes_; }
  // The buffer the phase before wrote, readable until the next barrier.
  const std::byte* previous_region() const { return buffer((phase_ + 1) & 1); }
  // Ends this phase on every rank: returns once every rank has called it. With `asleep`, a rank
  // that waits sleeps on the futex at once, without spinning or yielding first: for ranks done
  // long before the others (Communicator::barrier_sleeping).
  void barrier(bool asleep = false);

 private:
  struct Header;
  NodeChannel() = default;
  std::byte* buffer(std::uint64_t which) const;

  Header* header_ = nullptr;
  std::byte* base_ = nullptr;
  std::size_t mapped_bytes_ = 0;
  int size_ = 0;
  int rank_ = 0;
  bool yield_ = false;  // as many ranks as cores or more: waiting ranks yield instead of spinning
  std::int64_t slot_bytes_ = 0;
  std::uint64_t phase_ = 0;
};

}  // namespace tessera
