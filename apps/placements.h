// Where a virtual machine's host ran its CPUs, told from probes of the time a cache line takes
// between two of them (bench_train's cpu_pair_ns; docs/design.md, "Where the host runs the CPUs").
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace tessera::apps {

// The placements a run's probes saw: one, or two split at the widest gap between the probes in
// order, where the larger side of that gap is kPlacementGap times the smaller or more. On this
// project's machine one die gave probes of 26-77 ns and two dies 187-239 ns, a gap of 2.4 or
// more; on one die the probes spread with no gap over 1.4 (26-41 and 56-67 ns, some between), and
// both cores streamed at the same rates across that spread.
constexpr double kPlacementGap = 1.6;
class Placements {
 public:
  explicit Placements(std::vector<double> probes) {
    std::erase(probes, 0.0);  // not taken
    std::sort(probes.begin(), probes.end());
    double widest = kPlacementGap;
    for (std::size_t i = 1; i < probes.size(); ++i) {
      if (probes[i] >= widest * probes[i - 1]) {
        widest = probes[i] / probes[i - 1];
        boundary_ = std::sqrt(probes[i] * probes[i - 1]);
      }
    }
  }
  // Whether two probes saw the same placement: both taken, and on the same side of the gap.
  bool same(double a, double b) const {
    return a > 0 && b > 0 && (boundary_ == 0 || (a < boundary_) == (b < boundary_));
  }

 private:
  double boundary_ = 0;  // 0: one placement
};

}  // namespace tessera::apps
