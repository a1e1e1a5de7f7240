// apps::Placements: a run's probes of the CPUs' placement split at their widest gap of 1.6 or
// more (apps/placements.h), with probes as this project's machine gave them.
#include "apps/placements.h"

#include <gtest/gtest.h>

namespace tessera::apps {
namespace {

TEST(Placements, OneDieIsOnePlacementAcrossItsSpread) {
  // One die: probes of 26-41 and 56-67 ns, some between, no gap of 1.6.
  const Placements seen({26, 35, 38, 41, 47, 53, 56, 61, 67});
  EXPECT_TRUE(seen.same(26, 67));
  EXPECT_TRUE(seen.same(38, 56));
}

TEST(Placements, OneDieAndTwoDiesSplitAtTheGap) {
  const Placements seen({39, 41, 44, 62, 77, 187, 201, 215, 239});
  EXPECT_TRUE(seen.same(39, 77));
  EXPECT_TRUE(seen.same(187, 239));
  EXPECT_FALSE(seen.same(77, 187));
  EXPECT_FALSE(seen.same(41, 201));
  // The boundary is the gap's geometric middle, sqrt(77 * 187) = 120: a probe is placed by it.
  EXPECT_TRUE(seen.same(119, 77));
  EXPECT_TRUE(seen.same(121, 187));
}

TEST(Placements, TheWidestGapSplitsWhereThereAreTwo) {
  // Gaps of 1.7 (40 -> 68) and 3 (68 -> 204): the split is at the wider one.
  const Placements seen({40, 68, 204});
  EXPECT_TRUE(seen.same(40, 68));
  EXPECT_FALSE(seen.same(68, 204));
}

TEST(Placements, AGapUnderTheFactorIsNoSplit) {
  const Placements seen({40, 63});  // 1.575
  EXPECT_TRUE(seen.same(40, 63));
  const Placements split({40, 64});  // 1.6
  EXPECT_FALSE(split.same(40, 64));
}

TEST(Placements, AProbeNotTakenIsNoPlacement) {
  const Placements none({0, 0});
  EXPECT_FALSE(none.same(0, 0));
  const Placements seen({0, 40, 41});  // the 0 is not a probe: no gap from it
  EXPECT_TRUE(seen.same(40, 41));
  EXPECT_FALSE(seen.same(0, 40));
  EXPECT_FALSE(seen.same(40, 0));
}

// A probe of 0 (not taken) is dropped before the gaps are looked for: kept, it sorted first and
// its "gap" to the next probe (infinite) hid the real one.
TEST(Placements, AProbeNotTakenHidesNoGap) {
  const Placements seen({0, 40, 41, 100, 0});
  EXPECT_TRUE(seen.same(40, 41));
  EXPECT_FALSE(seen.same(41, 100));
  EXPECT_FALSE(seen.same(40, 100));
}

// The widest gap wins wherever it lies: here the first (3 from 40 to 120) before a narrower one
// (1.7 from 120 to 204), so 120 and 204 share a placement.
TEST(Placements, TheWidestGapWinsWhenItComesFirst) {
  const Placements seen({40, 120, 204});
  EXPECT_FALSE(seen.same(40, 120));
  EXPECT_TRUE(seen.same(120, 204));
}

// The probes come in the order they were taken; the gaps are those of the sorted probes (40, 70,
// 120, 200: 1.75, 1.71 and 1.67, the widest the first), not of the order given (40 to 200 is 5).
TEST(Placements, ProbesInAnyOrder) {
  const Placements seen({70, 40, 200, 120});
  EXPECT_FALSE(seen.same(40, 70));
  EXPECT_TRUE(seen.same(70, 120));
  EXPECT_TRUE(seen.same(70, 200));
}

// A probe at the boundary itself (sqrt(16 x 64) = 32, exact) is on the upper side.
TEST(Placements, AProbeAtTheBoundaryIsOnTheUpperSide) {
  const Placements seen({16, 64});
  EXPECT_TRUE(seen.same(32, 64));
  EXPECT_FALSE(seen.same(32, 31.9));
}

}  // namespace
}  // namespace tessera::apps
