// The process-wide communication records and scoped views of them.
#include "collectives/comm_stats.h"

namespace tessera {

std::string to_string(const CommRecord& record) {
  std::string out = std::string(to_string(record.op)) + " over (";
  for (std::size_t i = 0; i < record.axes.size(); ++i) out += (i ? ", " : "") + record.axes[i];
  out += ")";
  if (record.dim >= 0) out += " dim " + std::to_string(record.dim);
  return out + ": " + std::to_string(record.bytes) + " bytes";
}

CommStats& CommStats::global() {
  static CommStats stats;
  return stats;
}

void CommStats::reset() {
  records_.clear();
  ++generation_;
}

std::int64_t CommStats::total_bytes() const {
  std::int64_t total = 0;
  for (const auto& r : records_) total += r.bytes;
  return total;
}

void CommStats::record(CommRecord r) { records_.push_back(std::move(r)); }

namespace {
thread_local int open_timers = 0;
}  // namespace

CommTimer::CommTimer() : outermost_(open_timers++ == 0), start_(std::chrono::steady_clock::now()) {}

CommTimer::~CommTimer() {
  --open_timers;
  if (outermost_) {
    CommStats::global().add_seconds(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
}

CommScope::CommScope()
    : begin_(CommStats::global().records().size()), generation_(CommStats::global().generation()) {}

std::vector<CommRecord> CommScope::records() const {
  const auto& all = CommStats::global().records();
  // After a reset every surviving record was made during this scope.
  std::size_t begin = CommStats::global().generation() == generation_ ? begin_ : 0;
  if (begin > all.size()) begin = all.size();
  return std::vector<CommRecord>(all.begin() + static_cast<std::ptrdiff_t>(begin), all.end());
}

std::int64_t CommScope::total_bytes() const {
  std::int64_t total = 0;
  for (const auto& r : records()) total += r.bytes;
  return total;
}

int CommScope::count(CommOp op) const {
  int n = 0;
  for (const auto& r : records()) n += r.op == op;
  return n;
}

}  // namespace tessera
