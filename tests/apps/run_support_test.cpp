// The config a checkpoint stores: apps::json_string writes what a user gave as one JSON string,
// and apps::config_value reads each key back as written, whatever the user's text held.
#include "apps/run_support.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tessera::apps {
namespace {

TEST(ConfigJson, StringsAreEscaped) {
  EXPECT_EQ(json_string("batch=data"), "\"batch=data\"");
  EXPECT_EQ(json_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(json_string(std::string("x\ny\x01", 4)), "\"x\\u000ay\\u0001\"");
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

}  // namespace
}  // namespace tessera::apps
