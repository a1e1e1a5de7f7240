// GoogleTest main for the test programs without MPI: GoogleTest's own, with --tessera_test_file
// (file_filter.h).
#include <gtest/gtest.h>

#include <cstdio>

#include "file_filter.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (std::string error = tessera::test::select_test_file(argc, argv); !error.empty()) {
    std::fprintf(stderr, "%s: %s\n", argv[0], error.c_str());
    return 2;
  }
  return RUN_ALL_TESTS();
}
