// Byte counters of the collectives: every collective this rank calls appends one record of what
// this rank sends, so tests and benchmarks can read the communication of any piece of code.
//
// Byte convention (computed in one place, send_bytes in collectives/comm_op.h): the bytes this
// rank sends under the bandwidth-optimal algorithm of the collective, with n = the product of
// the sizes of the collective's axes and B = the bytes of this rank's input block (the same
// figures nccl-tests uses for its bus bandwidth):
//   all_gather      (n - 1) * B
//   reduce_scatter  (n - 1) * B / n
//   all_to_all      (n - 1) * B / n
//   all_reduce      2 * (n - 1) * B / n        (rounded down to a whole byte)
//   broadcast       B on every rank when n > 1 (a pipelined chain forwards the whole message;
//                   nccl-tests' bus factor 1)
//   permute         B when this rank sends to another rank, 0 when it keeps its block or sends
//                   nothing
//   redistribute    the bytes of the pieces this rank sends to other ranks (reshard's general
//                   relayout: every element moves at most once)
// A collective over axes of total size 1 records 0 bytes.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "collectives/comm_op.h"
#include "core/spec.h"

namespace tessera {

struct CommRecord {
  CommOp op = CommOp::all_gather;  // a collective (communicates(op))
  Axes axes;          // the mesh axes of the collective's communicator, in block order
  int dim = -1;       // the tensor dimension (all_gather, reduce_scatter: the dimension;
                      // all_to_all: the split dimension); -1 when none
  std::int64_t bytes = 0;  // bytes this rank sends, by the convention above

  bool operator==(const CommRecord&) const = default;
};

// "all_reduce over (data, model): 448 bytes"
std::string to_string(const CommRecord& record);

class CommStats {
 public:
  // The process-wide counters (one MPI rank per process).
  static CommStats& global();

  // Forgets every record; open CommScopes then see only records made after the reset.
  void reset();
  std::int64_t total_bytes() const;
  const std::vector<CommRecord>& records() const { return records_; }
  void record(CommRecord r);
  // Incremented by reset(), so a scope can tell that its start index no longer applies.
  std::uint64_t generation() const { return generation_; }

  // Wall-clock seconds this rank has spent inside tessera's collectives (packing, the MPI call,
  // unpacking; a collective called inside another counts once). reset() does not clear it:
  // callers take differences.
  double seconds() const { return seconds_; }
  void add_seconds(double s) { seconds_ += s; }

 private:
  std::vector<CommRecord> records_;
  std::uint64_t generation_ = 0;
  double seconds_ = 0;
};

// RAII: adds its lifetime to CommStats::global().seconds() unless another CommTimer is open
// (reshard's relayout calls collectives of its own). Every collective opens one.
class CommTimer {
 public:
  CommTimer();
  ~CommTimer();
  CommTimer(const CommTimer&) = delete;
  CommTimer& operator=(const CommTimer&) = delete;

 private:
  bool outermost_;
  std::chrono::steady_clock::time_point start_;
};

// RAII: the records made (on this rank) during its lifetime.
//   CommScope scope; y = reshard(x, spec); scope.records(); scope.total_bytes();
class CommScope {
 public:
  CommScope();
  CommScope(const CommScope&) = delete;
  CommScope& operator=(const CommScope&) = delete;

  std::vector<CommRecord> records() const;
  std::int64_t total_bytes() const;
  // The number of records whose op is `op`.
  int count(CommOp op) const;

 private:
  std::size_t begin_ = 0;
  std::uint64_t generation_ = 0;
};

}  // namespace tessera
