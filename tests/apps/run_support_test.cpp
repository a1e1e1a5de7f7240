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

// Every printable character stays as it is, the ones at the edges of the escaped range too: the
// space (0x20, the first after the control characters), '!' and '#' around '"', '[' and ']'
// around '\\', '~'; and so do bytes from 0x80 (UTF-8's, a char below 0 where char is signed).
TEST(ConfigJson, PrintableCharactersStayAsTheyAre) {
  std::string printable;
  for (int c = 0x20; c < 0x7f; ++c) {
    if (c != '"' && c != '\\') printable += static_cast<char>(c);
  }
  EXPECT_EQ(json_string(printable), "\"" + printable + "\"");
  EXPECT_EQ(json_string(" !#[]~"), "\" !#[]~\"");
  EXPECT_EQ(json_string("\x80\xc3\xa9\xff"), "\"\x80\xc3\xa9\xff\"");
  for (const std::string& text : {printable, std::string("caf\xc3\xa9 \x80\xff")}) {
    EXPECT_EQ(config_value("{\"k\":" + json_string(text) + "}", "k"), text);
  }
  // A foreign \u0080 is no escape of json_string's (those are of control characters): it reads as
  // the characters after the backslash.
  EXPECT_EQ(config_value("{\"k\":\"\\u0080\"}", "k"), "u0080");
  EXPECT_EQ(config_value("{\"k\":\"\\u007f\"}", "k"), "\x7f");
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

// The smallest learning rate taken is the smallest normal float (the optimizer's constants are
// f32 and subnormals flush to zero); the double just below it is refused, naming it.
TEST(FiniteChecks, TheSmallestNormalFloatIsTheSmallestRate) {
  const double smallest = std::numeric_limits<float>::min();
  EXPECT_NO_THROW(check_learning_rate(smallest));
  EXPECT_NO_THROW(check_learning_rate(1e300));
  const double below = std::nextafter(smallest, 0.0);
  try {
    check_learning_rate(below);
    ADD_FAILURE() << "a rate below the smallest normal float was taken";
  } catch (const UsageError& e) {
    // The bound's six digits are the refused rate's too: it is printed with the digits that tell
    // it apart (the shortest that read back as the same double).
    EXPECT_EQ(std::string(e.what()),
              "--lr must be at least 1.17549e-38, the smallest normal float, got 1.1754943508222874e-38");
  }
  for (const auto& [lr, text] : std::vector<std::pair<double, std::string>>{
           {0.0, "0"}, {-0.0, "-0"}, {-1e-3, "-0.001"}, {std::numeric_limits<double>::infinity(), "inf"}}) {
    try {
      check_learning_rate(lr);
      ADD_FAILURE() << "a rate of " << text << " was taken";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()), "--lr must be a finite number > 0, got " + text);
    }
  }
}

}  // namespace
}  // namespace tessera::apps
