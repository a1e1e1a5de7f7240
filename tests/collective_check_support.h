// For the tests of TESSERA_COLLECTIVE_CHECK (collectives/collective_check.h): the check turned on
// in-process for one test, and the Error a call throws with the check on.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "collectives/collective_check.h"
#include "core/error.h"
#include "tests/test_meshes.h"

namespace tessera::testing_support {

// The check on for one test (every rank alike), off after it, with its warning interval reset.
struct CheckOn {
  CheckOn() { set_collective_check(true); }
  ~CheckOn() {
    set_collective_check(false);
    set_collective_check_warn_seconds(60.0);
  }
};

// The message of the Error `f` threw on this rank; a failure where it threw none.
template <class F>
std::string check_error(F&& f) {
  std::string message;
  try {
    f();
    ADD_FAILURE() << "no error on rank " << world_rank();
  } catch (const Error& e) {
    message = e.what();
  }
  return message;
}

}  // namespace tessera::testing_support
