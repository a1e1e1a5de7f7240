// Expects f() to throw E with exactly `message` (on this rank; the MPI test main fails the test
// when any rank fails, so calling it on every rank checks "the same error on every rank").
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace tessera::testing_support {

template <class E, class F>
void expect_error(F&& f, const std::string& message) {
  try {
    f();
    ADD_FAILURE() << "expected an error: " << message;
  } catch (const E& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

}  // namespace tessera::testing_support
