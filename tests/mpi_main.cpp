// GoogleTest main for MPI suites. Every rank runs every test. A failing rank prints each failure
// to stderr at once as "[rank R] file:line: message": a failure on one rank is often followed by
// a hang (the other ranks wait in a collective it skips), and then nothing printed after the test
// would ever be seen. After each test the ranks' failure messages are also gathered on rank 0,
// which prints them with the rank that raised them, so a failure on ANY rank fails the test and
// the process (exit code 1 on every rank).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "mesh/environment.h"
#include "file_filter.h"

namespace {

class RankFailureListener : public testing::EmptyTestEventListener {
 public:
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (result.failed()) {
      std::ostringstream out;
      out << (result.file_name() ? result.file_name() : "?") << ':' << result.line_number() << ": "
          << result.summary() << '\n';
      messages_ += out.str();
      int rank = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      // One write per message so that lines of different ranks do not interleave.
      std::string line = "[rank " + std::to_string(rank) + "] " + out.str();
      std::fwrite(line.data(), 1, line.size(), stderr);
      std::fflush(stderr);
    }
  }

  void OnTestEnd(const testing::TestInfo& info) override {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int length = static_cast<int>(messages_.size());
    std::vector<int> lengths(size);
    MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::vector<int> displs(size, 0);
    int total = 0;
    for (int r = 0; r < size; ++r) {
      displs[r] = total;
      total += lengths[r];
    }
    std::string all(rank == 0 ? total : 0, '\0');
    MPI_Gatherv(messages_.data(), length, MPI_CHAR, all.data(), lengths.data(), displs.data(), MPI_CHAR, 0,
                MPI_COMM_WORLD);
    if (rank == 0) {
      for (int r = 0; r < size; ++r) {
        if (r == 0 || lengths[r] == 0) continue;  // rank 0's failures are printed by gtest itself
        std::fprintf(stderr, "[  FAILED  ] %s.%s on rank %d of %d:\n%s", info.test_suite_name(), info.name(), r, size,
                     all.substr(displs[r], lengths[r]).c_str());
      }
    }
    any_failure_ |= !messages_.empty();
    messages_.clear();
  }

  bool any_failure() const { return any_failure_; }

 private:
  std::string messages_;
  bool any_failure_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  tessera::Environment env(argc, argv);
  testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // The same registered tests and arguments on every rank: every rank ends here together.
  if (std::string error = tessera::test::select_test_file(argc, argv); !error.empty()) {
    if (rank == 0) std::fprintf(stderr, "%s: %s\n", argv[0], error.c_str());
    return 2;
  }
  auto& listeners = testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) delete listeners.Release(listeners.default_result_printer());
  auto* failures = new RankFailureListener;
  listeners.Append(failures);
  int local = RUN_ALL_TESTS() != 0 || failures->any_failure() ? 1 : 0;
  int global = 0;
  MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && global && !local) std::fprintf(stderr, "tests failed on another rank (see above)\n");
  return global;
}
