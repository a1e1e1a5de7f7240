// The node channel (mesh/node_channel.h) and the collectives through it
// (collectives/node_collectives.h): which communicators get one, that its barrier orders every
// phase and lets a long wait sleep, and that every collective through it gives, bit for bit, the
// combination in rank order that each rank recomputes from every rank's input. The public
// collectives' suites (collectives_test, bf16_collectives_test) run through the channel too, and
// once more without it (TESSERA_SHM_COLLECTIVES=0, tests/collectives/CMakeLists.txt).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <time.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/layout.h"
#include "collectives/node_collectives.h"
#include "collectives/ordered_reduce.h"
#include "core/bfloat16.h"
#include "core/error.h"
#include "mesh/communicator.h"

namespace tessera {
namespace {

// Rank r's `count` elements of `dtype`: random values (integers below 2^20 for i32, bf16-exact
// values for bf16) from a seed of (r, salt), so every rank can rebuild every rank's input.
Tensor input_of(int r, std::int64_t count, DType dtype, int salt) {
  std::mt19937 gen(static_cast<unsigned>(r * 7919 + salt));
  std::uniform_real_distribution<float> real(-4.0f, 4.0f);
  Tensor t({count}, dtype);
  for (std::int64_t i = 0; i < count; ++i) {
    const float x = real(gen);
    switch (dtype) {
      case DType::f32: t.data<float>()[i] = x; break;
      case DType::f64: t.data<double>()[i] = static_cast<double>(x) / 3.0; break;
      case DType::i32: t.data<std::int32_t>()[i] = static_cast<std::int32_t>(gen() % (1u << 20)) - (1 << 19); break;
      case DType::bf16: t.data<bfloat16>()[i] = bfloat16(x); break;
    }
  }
  return t;
}

// The n inputs side by side ([n][count]), combined in rank order by the same routine as every
// ordered reduction.
Tensor expected_combination(int n, std::int64_t count, DType dtype, int salt, ReduceOp op) {
  const auto item = static_cast<std::int64_t>(dtype_size(dtype));
  Tensor all({n * count}, dtype), out({count}, dtype);
  for (int r = 0; r < n; ++r) {
    std::memcpy(static_cast<std::byte*>(all.raw()) + r * count * item, input_of(r, count, dtype, salt).raw(),
                static_cast<std::size_t>(count * item));
  }
  detail::combine_pieces(all.raw(), count, out.raw(), count, n, dtype, op);
  return out;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

// combine_pieces, the routine every ordered reduction and the channel's reductions share (and the
// reference of the tests below), against a plain loop over each element in rank order: every
// dtype, sum and maximum, 1-5 pieces apart by more than their length, and counts around its
// block of 2048 elements. bf16 sums in f32 and rounds once; i32 sums wrap.
TEST(NodeChannel, CombinePiecesCombinesEachElementInRankOrder) {
  for (const DType dtype : {DType::f32, DType::f64, DType::i32, DType::bf16}) {
    for (const ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
      for (const int n : {1, 2, 3, 5}) {
        for (const std::int64_t count : {1, 7, 2047, 2048, 2049, 5000}) {
          const std::int64_t stride = count + 5;
          const auto item = static_cast<std::int64_t>(dtype_size(dtype));
          Tensor all({n * stride}, dtype), out({count}, dtype);
          for (int r = 0; r < n; ++r) {
            std::memset(static_cast<std::byte*>(all.raw()) + r * stride * item, 0xff, static_cast<std::size_t>(stride * item));
            std::memcpy(static_cast<std::byte*>(all.raw()) + r * stride * item, input_of(r, count, dtype, 11).raw(),
                        static_cast<std::size_t>(count * item));
          }
          detail::combine_pieces(all.raw(), stride, out.raw(), count, n, dtype, op);
          for (std::int64_t i = 0; i < count; ++i) {
            const auto at = [&](int r) { return r * stride + i; };
            bool same = false;
            switch (dtype) {
              case DType::f32: case DType::f64: {
                double acc = all.at(at(0));
                for (int r = 1; r < n; ++r) {
                  const double v = all.at(at(r));
                  if (dtype == DType::f32) acc = op == ReduceOp::sum ? double(float(acc) + float(v)) : std::max(acc, v);
                  else acc = op == ReduceOp::sum ? acc + v : std::max(acc, v);
                }
                same = out.at(i) == acc;
                break;
              }
              case DType::i32: {
                const std::int32_t* p = all.data<std::int32_t>();
                std::uint32_t sum = static_cast<std::uint32_t>(p[at(0)]);
                std::int32_t max = p[at(0)];
                for (int r = 1; r < n; ++r) {
                  sum += static_cast<std::uint32_t>(p[at(r)]);
                  max = std::max(max, p[at(r)]);
                }
                same = out.data<std::int32_t>()[i] ==
                       (op == ReduceOp::sum ? static_cast<std::int32_t>(sum) : max);
                break;
              }
              case DType::bf16: {
                const bfloat16* p = all.data<bfloat16>();
                float acc = float(p[at(0)]);
                for (int r = 1; r < n; ++r) acc = op == ReduceOp::sum ? acc + float(p[at(r)]) : std::max(acc, float(p[at(r)]));
                same = float(out.data<bfloat16>()[i]) == float(bfloat16(acc));
                break;
              }
            }
            ASSERT_TRUE(same) << dtype_name(dtype) << " op " << static_cast<int>(op) << " n " << n << " count " << count
                              << " element " << i;
          }
        }
      }
    }
  }
}

TEST(NodeChannel, CommunicatorsOfOneNodeHaveOneAndASingleRankHasNone) {
  const Communicator comm = Communicator::world().dup();
  NodeChannel* channel = comm.node_channel();
  if (comm.size() == 1) {
    EXPECT_EQ(channel, nullptr);
    return;
  }
  ASSERT_NE(channel, nullptr);
  EXPECT_EQ(channel->size(), comm.size());
  EXPECT_EQ(channel->rank(), comm.rank());
  EXPECT_EQ(comm.node_channel(), channel);  // made once
  // A communicator of this rank alone has none.
  const Communicator alone = comm.split(comm.rank(), 0);
  EXPECT_EQ(alone.node_channel(), nullptr);
}

// A segment holds two buffers of one slot per rank: 1 MiB slots up to 16 ranks, then halved
// until the segment fits 32 MiB, never below 64 KiB.
TEST(NodeChannel, SlotsShrinkOnNodesOfManyRanks) {
  EXPECT_EQ(NodeChannel::slot_bytes_for(2), std::int64_t{1} << 20);
  EXPECT_EQ(NodeChannel::slot_bytes_for(16), std::int64_t{1} << 20);
  EXPECT_EQ(NodeChannel::slot_bytes_for(17), std::int64_t{512} << 10);
  EXPECT_EQ(NodeChannel::slot_bytes_for(64), std::int64_t{256} << 10);
  EXPECT_EQ(NodeChannel::slot_bytes_for(256), std::int64_t{64} << 10);
  EXPECT_EQ(NodeChannel::slot_bytes_for(4096), std::int64_t{64} << 10);
}

TEST(NodeChannel, TurnedOffByTheEnvironment) {
  setenv("TESSERA_SHM_COLLECTIVES", "0", 1);
  const Communicator comm = Communicator::world().dup();
  EXPECT_EQ(comm.node_channel(), nullptr);
  unsetenv("TESSERA_SHM_COLLECTIVES");
  const Communicator again = Communicator::world().dup();
  EXPECT_EQ(again.node_channel() != nullptr, again.size() > 1);
  setenv("TESSERA_SHM_COLLECTIVES", "1", 1);
  const Communicator on = Communicator::world().dup();
  EXPECT_EQ(on.node_channel() != nullptr, on.size() > 1);
  unsetenv("TESSERA_SHM_COLLECTIVES");
}

// Any value but 0 and 1 is refused on every rank, even where only one rank has it.
TEST(NodeChannel, AnotherValueOfTheSettingIsRefusedOnEveryRank) {
  const Communicator comm = Communicator::world().dup();
  if (comm.size() == 1) GTEST_SKIP() << "one rank: no channel is opened";
  for (const bool everywhere : {true, false}) {
    if (everywhere || comm.rank() == comm.size() - 1) setenv("TESSERA_SHM_COLLECTIVES", "off", 1);
    const Communicator fresh = Communicator::world().dup();
    const bool mine = everywhere || comm.rank() == comm.size() - 1;
    try {
      fresh.node_channel();
      ADD_FAILURE() << "no error";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()), mine ? "TESSERA_SHM_COLLECTIVES must be unset, 0 or 1, got 'off'"
                                            : "TESSERA_SHM_COLLECTIVES must be unset, 0 or 1 on every rank");
    }
    unsetenv("TESSERA_SHM_COLLECTIVES");
  }
}

// Every phase, each rank writes its phase number into the first and last word of its slot and
// then reads every rank's: all of them, from the phase just ended, never one from the phase
// before or the one after. Ranks take turns lagging behind the others.
TEST(NodeChannel, TheBarrierOrdersEveryPhase) {
  const Communicator comm = Communicator::world().dup();
  NodeChannel* channel = comm.node_channel();
  if (channel == nullptr) GTEST_SKIP() << "one rank";
  const int n = channel->size(), me = channel->rank();
  const std::int64_t last = channel->slot_bytes() / 8 - 1;
  int wrong = 0;
  for (std::int64_t phase = 1; phase <= 3000; ++phase) {
    auto* mine = reinterpret_cast<std::int64_t*>(channel->slot());
    mine[0] = phase * n + me;
    mine[last] = -(phase * n + me);
    if (phase % 97 == me) {
      const timespec pause{0, 200'000};
      nanosleep(&pause, nullptr);
    }
    channel->barrier();
    const std::byte* region = channel->previous_region();
    for (int k = 0; k < n; ++k) {
      const auto* theirs = reinterpret_cast<const std::int64_t*>(region + k * channel->slot_bytes());
      wrong += theirs[0] != phase * n + k || theirs[last] != -(phase * n + k);
    }
  }
  EXPECT_EQ(wrong, 0);
}

// Seconds on the steady clock, which every rank of one node reads alike.
double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Rank 0's arrival (`arrived` on rank 0, ignored elsewhere), broadcast to every rank. Tests of a
// long wait compare each rank's departure with it, not each rank's own wait with rank 0's pause:
// on more ranks than cores a rank can leave the barrier before the pause tens of milliseconds
// after rank 0, and its own clock then times less than the pause (0.268 s of 0.3 in one run of
// the test command, 2026-11-30), though the barrier held it until rank 0 came.
double rank0_arrival(const Communicator& comm, double arrived) {
  MPI_Bcast(&arrived, 1, MPI_DOUBLE, 0, comm.handle());
  return arrived;
}

// Ranks that wait for one rank's long work sleep on the futex after the spin, and wake when it
// arrives: their CPU time stays well below the wait, and none leaves before rank 0 arrives.
TEST(NodeChannel, ALongWaitSleepsAndWakes) {
  const Communicator comm = Communicator::world().dup();
  NodeChannel* channel = comm.node_channel();
  if (channel == nullptr) GTEST_SKIP() << "one rank";
  channel->barrier();
  const double cpu_before = cpu_seconds();
  const double start = steady_seconds();
  if (channel->rank() == 0) {
    const timespec pause{0, 300'000'000};
    nanosleep(&pause, nullptr);
  }
  const double arrived = steady_seconds();
  channel->barrier();
  const double left = steady_seconds();
  const double cpu = cpu_seconds() - cpu_before;
  EXPECT_GE(left, rank0_arrival(comm, arrived));
  if (channel->rank() != 0) {
    EXPECT_LT(cpu, 0.1) << "waited " << left - start << " s";
  }
}

// This thread's voluntary context switches so far (each sleep that ends, each wait for the kernel).
long voluntary_switches() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_nvcsw;
}

// Communicator::barrier_sleeping on a communicator with a channel sleeps on the channel's futex
// at once: over a 300 ms wait for rank 0, a waiting rank's thread sleeps a few times (the futex's
// 50 ms timeouts), where naps of 100 us between tests of an MPI_Ibarrier sleep once a nap (with
// them, as until the thirty-fifth session, this test fails).
TEST(NodeChannel, BarrierSleepingSleepsOnTheChannelUntilTheLastRankComes) {
  const Communicator comm = Communicator::world().dup();
  NodeChannel* channel = comm.node_channel();
  if (channel == nullptr) GTEST_SKIP() << "one rank";
  comm.barrier_sleeping();
  const long switches_before = voluntary_switches();
  const double start = steady_seconds();
  if (comm.rank() == 0) {
    const timespec pause{0, 300'000'000};
    nanosleep(&pause, nullptr);
  }
  const double arrived = steady_seconds();
  comm.barrier_sleeping();
  const double left = steady_seconds();
  const long switches = voluntary_switches() - switches_before;
  EXPECT_GE(left, rank0_arrival(comm, arrived));
  if (comm.rank() != 0) {
    EXPECT_LT(switches, 40) << "waited " << left - start << " s";
  }
}

// barrier_sleeping is a barrier with a channel and without one (TESSERA_SHM_COLLECTIVES=0: an
// MPI_Ibarrier and naps): no rank leaves before the last has come. Rank r comes 15 r ms late;
// each rank's arrival is gathered afterwards and compared with every rank's departure (one node:
// one steady clock).
TEST(NodeChannel, BarrierSleepingLetsNoRankLeaveBeforeTheLastComes) {
  for (const bool channel : {true, false}) {
    if (!channel) setenv("TESSERA_SHM_COLLECTIVES", "0", 1);
    const Communicator comm = Communicator::world().dup();
    EXPECT_EQ(comm.node_channel() != nullptr, channel && comm.size() > 1);  // the setting read here
    unsetenv("TESSERA_SHM_COLLECTIVES");
    comm.barrier_sleeping();
    const timespec pause{0, 15'000'000L * comm.rank()};
    nanosleep(&pause, nullptr);
    const double arrived = steady_seconds();
    comm.barrier_sleeping();
    const double left = steady_seconds();
    std::vector<double> arrivals(static_cast<std::size_t>(comm.size()));
    MPI_Allgather(&arrived, 1, MPI_DOUBLE, arrivals.data(), 1, MPI_DOUBLE, comm.handle());
    for (int r = 0; r < comm.size(); ++r) {
      EXPECT_GE(left, arrivals[static_cast<std::size_t>(r)]) << "rank " << r << (channel ? ", channel" : ", naps");
    }
  }
}

struct Case {
  DType dtype;
  ReduceOp op;
};

TEST(NodeCollectives, AllReduceIsTheCombinationInRankOrderBitForBit) {
  const Communicator comm = Communicator::world().dup();
  const int n = comm.size(), me = comm.rank();
  if (n == 1) GTEST_SKIP() << "one rank";
  const Case cases[] = {{DType::f32, ReduceOp::sum}, {DType::f32, ReduceOp::max}, {DType::f64, ReduceOp::sum},
                        {DType::i32, ReduceOp::sum}, {DType::i32, ReduceOp::max}, {DType::bf16, ReduceOp::sum}};
  int salt = 0;
  for (const Case& c : cases) {
    const auto item = static_cast<std::int64_t>(dtype_size(c.dtype));
    // One element; one round (up to 16 KiB); two rounds; a whole slot; fewer elements than ranks
    // is covered by count 1.
    for (const std::int64_t count : {std::int64_t{1}, std::int64_t{1001}, 16384 / item + 3, (std::int64_t{1} << 20) / item}) {
      ++salt;
      const Tensor in = input_of(me, count, c.dtype, salt);
      Tensor out({count}, c.dtype);
      ASSERT_TRUE(detail::node_all_reduce(in.raw(), out.raw(), count, c.dtype, comm, c.op));
      EXPECT_TRUE(same_bytes(out, expected_combination(n, count, c.dtype, salt, c.op)))
          << dtype_name(c.dtype) << " count " << count;
      // In place.
      Tensor inout = in;  // a copy (Tensor copies its storage)
      ASSERT_TRUE(detail::node_all_reduce(inout.raw(), inout.raw(), count, c.dtype, comm, c.op));
      EXPECT_TRUE(same_bytes(inout, out)) << dtype_name(c.dtype) << " count " << count << " in place";
    }
  }
  // A block larger than a slot is not carried, on every rank.
  const std::int64_t over = (std::int64_t{1} << 20) / 4 + 1;
  Tensor big({over}, DType::f32);
  EXPECT_FALSE(detail::node_all_reduce(big.raw(), big.raw(), over, DType::f32, comm, ReduceOp::sum));
}

TEST(NodeCollectives, ReduceScatterEvenAndUnevenIsTheCombinationInRankOrder) {
  const Communicator comm = Communicator::world().dup();
  const int n = comm.size(), me = comm.rank();
  if (n == 1) GTEST_SKIP() << "one rank";
  int salt = 100;
  for (const DType dtype : {DType::f32, DType::bf16, DType::i32}) {
    for (const bool even : {true, false}) {
      std::vector<int> counts(n);
      std::int64_t total = 0, offset = 0;
      for (int k = 0; k < n; ++k) {
        counts[k] = even ? 300 : 17 * k + (k % 2);  // uneven: rank 0 gets none
        if (k == me) offset = total;
        total += counts[k];
      }
      ++salt;
      const Tensor in = input_of(me, total, dtype, salt);
      Tensor out({counts[me]}, dtype);
      ASSERT_TRUE(detail::node_reduce_scatter(in.raw(), out.raw(), counts, dtype, comm));
      const Tensor all = expected_combination(n, total, dtype, salt, ReduceOp::sum);
      const auto item = static_cast<std::int64_t>(dtype_size(dtype));
      EXPECT_EQ(std::memcmp(out.raw(), static_cast<const std::byte*>(all.raw()) + offset * item,
                            static_cast<std::size_t>(counts[me] * item)),
                0)
          << dtype_name(dtype) << (even ? " even" : " uneven");
    }
  }
}

// all_gather and all_to_all along an inner dimension of [outer][n * run] blocks: rank r's block
// holds r * 1000 + its index, and every element arrives where the layout puts it.
TEST(NodeCollectives, AllGatherAndAllToAllFollowTheLayout) {
  const Communicator comm = Communicator::world().dup();
  const int n = comm.size(), me = comm.rank();
  if (n == 1) GTEST_SKIP() << "one rank";
  for (const std::int64_t outer : {std::int64_t{1}, std::int64_t{3}}) {
    const std::int64_t per = 5;  // elements of one outer index of one block
    detail::BlockLayout layout{outer, per * 4, n};
    std::vector<std::int32_t> block(static_cast<std::size_t>(outer * per));
    for (std::size_t i = 0; i < block.size(); ++i) block[i] = me * 1000 + static_cast<std::int32_t>(i);
    std::vector<std::int32_t> gathered(static_cast<std::size_t>(n * outer * per));
    ASSERT_TRUE(detail::node_all_gather(block.data(), gathered.data(), layout, comm));
    int wrong = 0;
    for (std::int64_t o = 0; o < outer; ++o) {
      for (int k = 0; k < n; ++k) {
        for (std::int64_t j = 0; j < per; ++j) {
          wrong += gathered[static_cast<std::size_t>((o * n + k) * per + j)] != k * 1000 + o * per + j;
        }
      }
    }
    EXPECT_EQ(wrong, 0) << "all_gather, outer " << outer;

    // all_to_all: this rank's [outer][n][per] send; block k (its runs) goes to rank k.
    std::vector<std::int32_t> send(static_cast<std::size_t>(outer * n * per)), recv(send.size());
    for (std::size_t i = 0; i < send.size(); ++i) send[i] = me * 100000 + static_cast<std::int32_t>(i);
    ASSERT_TRUE(detail::node_all_to_all(send.data(), layout, recv.data(), layout, comm));
    wrong = 0;
    for (std::int64_t o = 0; o < outer; ++o) {
      for (int k = 0; k < n; ++k) {
        for (std::int64_t j = 0; j < per; ++j) {
          // From rank k: its element at [o][me][j].
          const std::int64_t at = (o * n + k) * per + j;
          wrong += recv[static_cast<std::size_t>(at)] != k * 100000 + (o * n + me) * per + j;
        }
      }
    }
    EXPECT_EQ(wrong, 0) << "all_to_all, outer " << outer;
  }
}

}  // namespace
}  // namespace tessera
