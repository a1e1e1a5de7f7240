// One test file's tests out of a test program that holds several (tests/CMakeLists.txt: the test
// files of a folder build into one program, and each file keeps its own ctest entries).
#pragma once

#include <string>

namespace tessera::test {

// Call after testing::InitGoogleTest. Takes --tessera_test_file=NAME out of argv. Where it was
// given, narrows GoogleTest's filter to the tests defined in the file NAME (a name without folders,
// such as tensor_test.cpp), keeping any --gtest_filter given as well, and returns "". Returns an
// error message, for the program to print and exit on, where the flag is given twice or without a
// file name, or where no test of the program is defined in NAME.
std::string select_test_file(int& argc, char** argv);

}  // namespace tessera::test
