#include "file_filter.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string_view>
#include <vector>

#include "core/text.h"

namespace tessera::test {

std::string select_test_file(int& argc, char** argv) {
  constexpr std::string_view flag = "--tessera_test_file=";
  std::string file;
  bool given = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.substr(0, flag.size()) != flag) {
      argv[kept++] = argv[i];
      continue;
    }
    if (given) return "--tessera_test_file is given twice";
    file = std::string(arg.substr(flag.size()));
    given = true;
  }
  argc = kept;
  argv[argc] = nullptr;
  if (!given) return "";
  if (file.empty() || file.find('/') != std::string::npos)
    return "--tessera_test_file: expected a file name without folders, such as tensor_test.cpp; got '" + file + "'";

  // The patterns that select the file's tests (mine) and the other files' (others): a whole suite
  // as Suite.* where all its tests stand in one file, each test by its full name otherwise.
  std::vector<std::string> mine, others;
  const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
  for (int s = 0; s < unit.total_test_suite_count(); ++s) {
    const testing::TestSuite& suite = *unit.GetTestSuite(s);
    std::vector<std::string> in, out;
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const testing::TestInfo& info = *suite.GetTestInfo(t);
      std::string name = std::string(suite.name()) + "." + info.name();
      (std::filesystem::path(info.file()).filename() == file ? in : out).push_back(name);
    }
    if (out.empty()) {
      mine.push_back(std::string(suite.name()) + ".*");
    } else if (in.empty()) {
      others.push_back(std::string(suite.name()) + ".*");
    } else {
      mine.insert(mine.end(), in.begin(), in.end());
      others.insert(others.end(), out.begin(), out.end());
    }
  }
  if (mine.empty()) return "--tessera_test_file=" + file + ": no test of this program is defined in that file";

  // With a --gtest_filter of its own (POSITIVE[-NEGATIVE]), the other files' tests join its
  // negative patterns: the tests that run are those of the file that the filter selects.
  std::string filter = GTEST_FLAG_GET(filter);
  if (filter == "*") {
    filter = join(mine, ":");
  } else {
    size_t dash = filter.find('-');
    std::string positive = dash == std::string::npos ? filter : filter.substr(0, dash);
    std::string negative = dash == std::string::npos ? "" : filter.substr(dash + 1);
    if (positive.empty()) positive = "*";
    if (!others.empty()) negative += (negative.empty() ? "" : ":") + join(others, ":");
    filter = negative.empty() ? positive : positive + "-" + negative;
  }
  GTEST_FLAG_SET(filter, filter);
  return "";
}

}  // namespace tessera::test
