// apps::profile_step, the figures of train_mlp's and train_lm's --metrics lines and end-of-run
// table (apps/step_profile.h): the step as the slowest rank saw it, that rank's spans on every
// rank (the optimizer's own time less its collectives, compute the rest), and the bytes and calls
// of the records passed in, summed by "<collective>/<axes>". Times in ms that binary fractions
// hold exactly, so the figures compare exactly.
#include "apps/step_profile.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/test_meshes.h"

namespace tessera::apps {
namespace {

using testing_support::world_rank;
using testing_support::world_size;

// Rank r's step: (r + 1) x 250 ms, of which (r + 1) x 62.5 in collectives and (r + 1) x 125 in
// the optimizer, 31.25 of them its collectives'.
StepMeasure step_profile_measure_of(int rank) {
  const double k = rank + 1;
  return {0.25 * k, 0.0625 * k, 0.125 * k, 0.03125 * k};
}

TEST(StepProfile, TheSlowestRanksSpansOnEveryRank) {
  const int n = world_size();
  const StepProfile p = profile_step(MPI_COMM_WORLD, step_profile_measure_of(world_rank()), {});
  // The last rank is the slowest: its spans, whichever rank reports them.
  EXPECT_EQ(p.slowest_rank, n - 1);
  EXPECT_EQ(p.comm_ms, 62.5 * n);
  EXPECT_EQ(p.optimizer_ms, 93.75 * n);                       // 125 less its collectives' 31.25
  EXPECT_EQ(p.compute_ms, (250 - 62.5 - 93.75) * n);          // the rest of the step
  EXPECT_EQ(p.step_ms, 250.0 * n);
  EXPECT_TRUE(p.bytes.empty());
  EXPECT_TRUE(p.calls.empty());
}

TEST(StepProfile, TheSlowestIsTheFirstOfEqualRanks) {
  // Every rank's step takes as long (MAXLOC names the lowest rank); the spans are rank 0's.
  StepMeasure m{0.5, world_rank() == 0 ? 0.125 : 0.25, 0, 0};
  const StepProfile p = profile_step(MPI_COMM_WORLD, m, {});
  EXPECT_EQ(p.slowest_rank, 0);
  EXPECT_EQ(p.comm_ms, 125);
  EXPECT_EQ(p.compute_ms, 375);
  EXPECT_EQ(p.step_ms, 500);
}

TEST(StepProfile, SpansPastTheStepLeaveNoNegativeTime) {
  // The optimizer's collectives measured longer than the optimizer, the collectives longer than
  // the step (clocks read at different points): each span is at least 0, and the step is their sum.
  const StepProfile p = profile_step(MPI_COMM_WORLD, {0.25, 0.5, 0.125, 0.25}, {});
  EXPECT_EQ(p.optimizer_ms, 0);
  EXPECT_EQ(p.comm_ms, 500);
  EXPECT_EQ(p.compute_ms, 0);
  EXPECT_EQ(p.step_ms, 500);
  // The optimizer's own time counts against the step: 250 = 62.5 + 125 + 62.5.
  const StepProfile q = profile_step(MPI_COMM_WORLD, {0.25, 0.0625, 0.1875, 0.0625}, {});
  EXPECT_EQ(q.optimizer_ms, 125);
  EXPECT_EQ(q.compute_ms, 62.5);
  EXPECT_EQ(q.step_ms, 250);
}

TEST(StepProfile, BytesAndCallsByCollectiveAndAxes) {
  const std::vector<CommRecord> records = {{CommOp::all_reduce, {"data"}, -1, 4},
                                           {CommOp::all_gather, {"data", "model"}, 0, 100},
                                           {CommOp::all_reduce, {"data"}, -1, 6},
                                           {CommOp::broadcast, {}, -1, 8}};
  EXPECT_EQ(bytes_key(records[1]), "all_gather/data+model");
  EXPECT_EQ(bytes_key(records[3]), "broadcast/-");
  const StepProfile p = profile_step(MPI_COMM_WORLD, {0.25, 0.0625, 0, 0}, records);
  EXPECT_EQ(p.bytes, (std::map<std::string, std::int64_t>{
                         {"all_gather/data+model", 100}, {"all_reduce/data", 10}, {"broadcast/-", 8}}));
  EXPECT_EQ(p.calls, (std::map<std::string, int>{{"all_gather/data+model", 1}, {"all_reduce/data", 2}, {"broadcast/-", 1}}));
  EXPECT_EQ(metrics_fields(p),
            ",\"compute_ms\":187.500,\"comm_ms\":62.500,\"optimizer_ms\":0.000,\"slowest_rank\":0,"
            "\"comm_bytes\":{\"all_gather/data+model\":100,\"all_reduce/data\":10,\"broadcast/-\":8}");
  EXPECT_EQ(metrics_fields(StepProfile{}),
            ",\"compute_ms\":0.000,\"comm_ms\":0.000,\"optimizer_ms\":0.000,\"slowest_rank\":0,\"comm_bytes\":{}");
}

TEST(StepProfile, TheRunsTableSumsItsSteps) {
  EXPECT_EQ(RunProfile().table(), "");
  RunProfile run;
  StepProfile a;
  a.step_ms = 300, a.compute_ms = 150, a.comm_ms = 90, a.optimizer_ms = 60;
  a.bytes = {{"all_reduce/data", 3 << 20}, {"all_gather/model", 1 << 20}};
  a.calls = {{"all_reduce/data", 2}, {"all_gather/model", 1}};
  StepProfile b;
  b.step_ms = 100, b.compute_ms = 50, b.comm_ms = 30, b.optimizer_ms = 20;
  b.bytes = {{"all_reduce/data", 1 << 20}};
  b.calls = {{"all_reduce/data", 1}};
  run.add(a);
  run.add(b);
  EXPECT_EQ(run.steps(), 2);
  EXPECT_EQ(run.table(),
            "where the time went (2 steps, the slowest rank of each step):\n"
            "  compute                200.0 ms   50.0%      100.00 ms/step\n"
            "  communication          120.0 ms   30.0%       60.00 ms/step\n"
            "  optimizer               80.0 ms   20.0%       40.00 ms/step\n"
            "  step                   400.0 ms  100.0%      200.00 ms/step\n"
            "communication by collective and mesh axes (rank 0):\n"
            "  collective/axes                  calls/step     bytes/step       MiB/step\n"
            "  all_gather/model                        0.5         524288          0.500\n"
            "  all_reduce/data                         1.5        2097152          2.000\n"
            "  total                                              2621440          2.500\n");
}

}  // namespace
}  // namespace tessera::apps
