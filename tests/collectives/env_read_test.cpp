// The settings that the collectives read themselves, once, on first use (TESSERA_PACK in
// pack_method(), TESSERA_COLLECTIVE_CHECK in collective_check_enabled()), in a process that never
// made a mesh: Mesh::create refuses a bad value on every rank first (mesh_test), so only a program
// that calls these before any mesh reaches the reads' own checks. A value outside the list is
// refused there too, never read as the default; the value is taken once, at the first read that
// succeeds. One process runs this file alone: each read's cache starts empty.
#include <gtest/gtest.h>

#include <cstdlib>

#include "collectives/collective_check.h"
#include "collectives/collectives.h"
#include "core/error.h"
#include "tests/collectives/expect_error.h"

namespace tessera {
namespace {

using testing_support::expect_error;

TEST(EnvRead, PackMethodRefusesAValueOutsideItsListThenReadsOnce) {
  ASSERT_EQ(setenv("TESSERA_PACK", "fast", 1), 0);
  expect_error<UsageError>([] { (void)pack_method(); },
                           "TESSERA_PACK must be unset, datatype or memcpy, got 'fast'");
  // Nothing was cached by the refusal: the next read takes the value set now.
  ASSERT_EQ(setenv("TESSERA_PACK", "memcpy", 1), 0);
  EXPECT_EQ(pack_method(), PackMethod::memcpy);
  // Read once: the variable is not consulted again.
  ASSERT_EQ(setenv("TESSERA_PACK", "fast", 1), 0);
  EXPECT_EQ(pack_method(), PackMethod::memcpy);
  ASSERT_EQ(unsetenv("TESSERA_PACK"), 0);
  EXPECT_EQ(pack_method(), PackMethod::memcpy);
  set_pack_method(PackMethod::datatype);
  EXPECT_EQ(pack_method(), PackMethod::datatype);
}

TEST(EnvRead, CollectiveCheckRefusesAValueOutsideItsListThenReadsOnce) {
  ASSERT_EQ(setenv("TESSERA_COLLECTIVE_CHECK", "yes", 1), 0);
  expect_error<UsageError>([] { (void)collective_check_enabled(); },
                           "TESSERA_COLLECTIVE_CHECK must be unset, 0 or 1, got 'yes'");
  // A second read refuses it again (the refusal cached nothing, not "off").
  expect_error<UsageError>([] { (void)collective_check_enabled(); },
                           "TESSERA_COLLECTIVE_CHECK must be unset, 0 or 1, got 'yes'");
  ASSERT_EQ(setenv("TESSERA_COLLECTIVE_CHECK", "1", 1), 0);
  EXPECT_TRUE(collective_check_enabled());
  ASSERT_EQ(setenv("TESSERA_COLLECTIVE_CHECK", "yes", 1), 0);
  EXPECT_TRUE(collective_check_enabled());
  ASSERT_EQ(unsetenv("TESSERA_COLLECTIVE_CHECK"), 0);
  EXPECT_TRUE(collective_check_enabled());
  set_collective_check(false);
  EXPECT_FALSE(collective_check_enabled());
}

}  // namespace
}  // namespace tessera
