// Step profiles: the slowest rank's time split, rank 0's bytes by collective and axes.
#include "apps/step_profile.h"

#include <algorithm>
#include <cstdio>

#include "mesh/mpi_check.h"

namespace tessera::apps {

std::string bytes_key(const CommRecord& record) {
  std::string axes;
  for (std::size_t i = 0; i < record.axes.size(); ++i) axes += (i ? "+" : "") + record.axes[i];
  return std::string(to_string(record.op)) + "/" + (axes.empty() ? "-" : axes);
}

StepProfile profile_step(MPI_Comm comm, const StepMeasure& m, const std::vector<CommRecord>& records) {
  StepProfile p;
  // This rank's spans: compute is what is neither communication nor the optimizer's own work.
  const double optimizer = std::max(0.0, m.optimizer_seconds - m.optimizer_comm_seconds);
  double spans[3] = {m.comm_seconds * 1e3, optimizer * 1e3, 0};
  spans[2] = std::max(0.0, m.step_seconds * 1e3 - spans[0] - spans[1]);
  struct {
    double value;
    int rank;
  } mine{m.step_seconds * 1e3, 0}, slowest{0, 0};
  MPI_Comm_rank(comm, &mine.rank);
  check_mpi(MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE_INT, MPI_MAXLOC, comm), "MPI_Allreduce (step profile)");
  check_mpi(MPI_Bcast(spans, 3, MPI_DOUBLE, slowest.rank, comm), "MPI_Bcast (step profile)");
  p.slowest_rank = slowest.rank;
  p.comm_ms = spans[0];
  p.optimizer_ms = spans[1];
  p.compute_ms = spans[2];
  p.step_ms = p.comm_ms + p.optimizer_ms + p.compute_ms;
  for (const CommRecord& r : records) {
    p.bytes[bytes_key(r)] += r.bytes;
    p.calls[bytes_key(r)] += 1;
  }
  return p;
}

std::string metrics_fields(const StepProfile& p) {
  char head[256];
  std::snprintf(head, sizeof head, ",\"compute_ms\":%.3f,\"comm_ms\":%.3f,\"optimizer_ms\":%.3f,\"slowest_rank\":%d",
                p.compute_ms, p.comm_ms, p.optimizer_ms, p.slowest_rank);
  std::string out = head;
  out += ",\"comm_bytes\":{";
  bool first = true;
  for (const auto& [key, bytes] : p.bytes) {
    out += (first ? "\"" : ",\"") + key + "\":" + std::to_string(bytes);
    first = false;
  }
  return out + "}";
}

void RunProfile::add(const StepProfile& s) {
  ++steps_;
  step_ms_ += s.step_ms;
  compute_ms_ += s.compute_ms;
  comm_ms_ += s.comm_ms;
  optimizer_ms_ += s.optimizer_ms;
  for (const auto& [key, bytes] : s.bytes) bytes_[key] += bytes;
  for (const auto& [key, calls] : s.calls) calls_[key] += calls;
}

std::string RunProfile::table() const {
  if (steps_ == 0) return "";
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "where the time went (%d steps, the slowest rank of each step):\n", steps_);
  out += line;
  const double total = step_ms_ > 0 ? step_ms_ : 1;
  const std::pair<const char*, double> rows[] = {
      {"compute", compute_ms_}, {"communication", comm_ms_}, {"optimizer", optimizer_ms_}};
  for (const auto& [name, ms] : rows) {
    std::snprintf(line, sizeof line, "  %-15s %12.1f ms  %5.1f%%  %10.2f ms/step\n", name, ms, 100 * ms / total,
                  ms / steps_);
    out += line;
  }
  std::snprintf(line, sizeof line, "  %-15s %12.1f ms  100.0%%  %10.2f ms/step\n", "step", step_ms_,
                step_ms_ / steps_);
  out += line;
  out += "communication by collective and mesh axes (rank 0):\n";
  std::snprintf(line, sizeof line, "  %-32s %10s %14s %14s\n", "collective/axes", "calls/step", "bytes/step",
                "MiB/step");
  out += line;
  std::int64_t all = 0;
  for (const auto& [key, bytes] : bytes_) {
    const auto calls = calls_.count(key) ? calls_.at(key) : 0;
    std::snprintf(line, sizeof line, "  %-32s %10.1f %14lld %14.3f\n", key.c_str(),
                  static_cast<double>(calls) / steps_, static_cast<long long>(bytes / steps_),
                  static_cast<double>(bytes) / steps_ / (1 << 20));
    out += line;
    all += bytes;
  }
  std::snprintf(line, sizeof line, "  %-32s %10s %14lld %14.3f\n", "total", "", static_cast<long long>(all / steps_),
                static_cast<double>(all) / steps_ / (1 << 20));
  out += line;
  return out;
}

}  // namespace tessera::apps
