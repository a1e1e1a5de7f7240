// Helper for harness.failure_shown_before_hang: rank 1 fails an assertion and returns, skipping
// the barrier the other ranks wait in, so the job hangs. The harness must have printed rank 1's
// message before the launcher is killed.
#include <gtest/gtest.h>
#include <mpi.h>

TEST(Harness, FailOnRankOneThenHang) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 1) {
    ASSERT_EQ(rank, -1) << "rank 1 fails on purpose";
  }
  MPI_Barrier(MPI_COMM_WORLD);
}
