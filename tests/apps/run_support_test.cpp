// The config a checkpoint stores: apps::json_string writes what a user gave as one JSON string,
// and apps::config_value reads each key back as written, whatever the user's text held. The
// divergence checks refuse a loss that is not finite.
#include "apps/run_support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace tessera::apps {
namespace {

TEST(ConfigJson, StringsAreEscaped) {
  EXPECT_EQ(json_string("batch=data"), "\"batch=data\"");
  EXPECT_EQ(json_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(json_string(std::string("x\ny\x01", 4)), "\"x\\u000ay\\u0001\"");
  // Every control character below 0x20 is escaped (JSON allows none raw in a string), not only
  // the first ones: the vertical tab 0x0b and the unit separator 0x1f; DEL (0x7f) stays as it is.
  EXPECT_EQ(json_string("\x0b\x1f"), "\"\\u000b\\u001f\"");
  EXPECT_EQ(json_string("\x7f"), "\"\x7f\"");
  EXPECT_EQ(json_string(""), "\"\"");
}

TEST(ConfigJson, ValuesReadBackAsWritten) {
  const std::vector<std::string> texts = {"batch=data,hidden=model", "a\"b=model", "\\", "x\\\"y",
                                         std::string("t\tn\n\x1f", 5), "\\u0041", ""};
  for (const std::string& rules : texts) {
    const std::string json = "{\"rules\":" + json_string(rules) + ",\"seed\":7}";
    EXPECT_EQ(config_value(json, "rules"), rules) << json;
    EXPECT_EQ(config_value(json, "seed"), "7") << json;
  }
}

// A rule's names that spell a key (until the forty-fourth session written unescaped, so that
// config_value found the user's "seed" before the run's) stay inside their string.
TEST(ConfigJson, AUsersTextAddsNoKey) {
  const std::string rules = "batch=data,\"seed\":0}x=model";
  const std::string json = "{\"program\":\"train_mlp\",\"rules\":" + json_string(rules) + ",\"seed\":7}";
  EXPECT_EQ(config_value(json, "seed"), "7") << json;
  EXPECT_EQ(config_value(json, "rules"), rules) << json;
  EXPECT_EQ(config_value(json, "x"), std::nullopt) << json;
}

// A foreign file's escapes: one that is not json_string's \u00XX reads as the character after
// the backslash, and nothing is thrown.
TEST(ConfigJson, ForeignEscapesReadAsTheCharacter) {
  EXPECT_EQ(config_value("{\"k\":\"\\uzz12\"}", "k"), "uzz12");
  EXPECT_EQ(config_value("{\"k\":\"\\u00e9\"}", "k"), "u00e9");
  EXPECT_EQ(config_value("{\"k\":\"\\u00\"}", "k"), "u00");
  EXPECT_EQ(config_value("{\"k\":\"ab", "k"), std::nullopt);
}

// A training or held-out loss that is not finite stops the run, an infinity as a nan does (the
// divergence the catalogue shows is a nan; an overflowing loss is an infinity first); a large
// finite loss does not.
TEST(FiniteChecks, ALossOfInfinityStopsTheRunAsANanDoes) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_NO_THROW(check_loss_finite(1e300, 3));
  EXPECT_NO_THROW(check_heldout_finite(-1e300, 3));
  for (const auto& [loss, word] : std::vector<std::pair<double, std::string>>{
           {inf, "inf"}, {-inf, "-inf"}, {std::numeric_limits<double>::quiet_NaN(), "nan"}}) {
    try {
      check_loss_finite(loss, 3);
      ADD_FAILURE() << "a loss of " << word << " was taken";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()), "the loss is " + word +
                                           " at step 3: training diverged (a smaller --lr may help); stopped before "
                                           "saving this step");
    }
    try {
      check_heldout_finite(loss, 3);
      ADD_FAILURE() << "a held-out loss of " << word << " was taken";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()), "the held-out loss is " + word +
                                           " after step 3: training diverged (a smaller --lr may help); stopped");
    }
  }
}

}  // namespace
}  // namespace tessera::apps
