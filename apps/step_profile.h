// Where a training step's time and bytes go, for the --metrics lines and the end-of-run table.
//
// Every rank measures its own step: the wall time of the step, the part of it inside tessera's
// collectives (CommStats::seconds) and the part inside the optimizer's update (less the
// collectives it calls). Compute is the rest, so the three spans add up to the step exactly.
// The step is reported as the slowest rank saw it (MAXLOC over ranks of the step time; that
// rank's spans), the bytes as rank 0's CommStats records of the step, summed by
// "<collective>/<axes>" ("all_reduce/data", "all_gather/data+model").
#pragma once

#include <mpi.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "collectives/comm_stats.h"

namespace tessera::apps {

struct StepProfile {
  double step_ms = 0;
  double compute_ms = 0;
  double comm_ms = 0;
  double optimizer_ms = 0;
  int slowest_rank = 0;
  // Bytes rank 0 sent in the step, and how many collectives, by "<collective>/<axes>".
  std::map<std::string, std::int64_t> bytes;
  std::map<std::string, int> calls;
};

// This rank's measurements of one step.
struct StepMeasure {
  double step_seconds = 0;
  double comm_seconds = 0;  // inside collectives, the optimizer's included
  double optimizer_seconds = 0;
  double optimizer_comm_seconds = 0;
};

// Collective over `comm` (every rank calls it after every step): the step as reported.
StepProfile profile_step(MPI_Comm comm, const StepMeasure& measure, const std::vector<CommRecord>& records);

// "<collective>/<axes>" of a record: the op and its axes joined by '+' ("-" for no axes).
std::string bytes_key(const CommRecord& record);

// The JSON fields of a --metrics line after "ms": ,"compute_ms":..,"comm_ms":..,
// "optimizer_ms":..,"slowest_rank":..,"comm_bytes":{"all_reduce/data":n,...}
std::string metrics_fields(const StepProfile& profile);

// Totals over a run's steps, printed at its end like a profiler's summary.
class RunProfile {
 public:
  void add(const StepProfile& step);
  // The table: time split over the steps (sum and share of the slowest rank's spans), then
  // each collective kind and axes with its calls and MiB per step.
  std::string table() const;
  int steps() const { return steps_; }

 private:
  int steps_ = 0;
  double step_ms_ = 0, compute_ms_ = 0, comm_ms_ = 0, optimizer_ms_ = 0;
  std::map<std::string, std::int64_t> bytes_;
  std::map<std::string, std::int64_t> calls_;
};

}  // namespace tessera::apps
