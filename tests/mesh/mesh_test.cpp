// Mesh construction, coordinates, axis-subset communicators and error agreement.
#include "mesh/mesh.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <string>
#include <tuple>
#include <typeinfo>
#include <utility>
#include <vector>

#include "core/checked.h"
#include "core/denormals.h"
#include "core/env_settings.h"
#include "core/error.h"
#include "mesh/agree.h"
#include "mesh/mpi_check.h"
#include "tests/test_meshes.h"

namespace tessera {
namespace {

using testing_support::meshes_of_size;
using testing_support::world_rank;
using testing_support::world_size;

TEST(Mesh, SizeMismatchIsAnErrorOnEveryRank) {
  const int n = world_size();
  MeshShape wrong({"data", "model"}, {2, n + 1});
  try {
    Mesh::world(wrong);
    FAIL() << "expected MeshError";
  } catch (const MeshError& e) {
    EXPECT_EQ(std::string(e.what()), "mesh (data: 2, model: " + std::to_string(n + 1) + ") has " +
                                         std::to_string(2 * (n + 1)) + " ranks but the communicator has " +
                                         std::to_string(n));
  }
}

TEST(Mesh, RowMajorCoordinatesOnOneNode) {
  for (const auto& shape : meshes_of_size(world_size())) {
    Mesh mesh = Mesh::world(shape);
    // On one node the topology-aware mesh is the plain row-major one.
    EXPECT_EQ(mesh.rank(), world_rank()) << shape.to_string();
    EXPECT_EQ(mesh.coords(), shape.coords_of(world_rank())) << shape.to_string();
    EXPECT_EQ(mesh.to_string(), "mesh(" + shape.to_string() + ")");
  }
}

TEST(Mesh, AxesCommunicatorsFollowMixedRadixOrder) {
  for (const auto& shape : meshes_of_size(world_size())) {
    Mesh mesh = Mesh::world(shape);
    std::vector<Axes> subsets = {{}};
    for (const auto& a : shape.names()) subsets.push_back({a});
    if (shape.ndim() >= 2) {
      subsets.push_back({shape.names()[0], shape.names()[1]});
      subsets.push_back({shape.names()[1], shape.names()[0]});
    }
    if (shape.ndim() == 3) subsets.push_back({shape.names()[2], shape.names()[0], shape.names()[1]});
    for (const auto& axes : subsets) {
      const Communicator& comm = mesh.axes_comm(axes);
      ASSERT_EQ(comm.size(), shape.axes_size(axes));
      EXPECT_EQ(comm.rank(), mesh.axes_rank(axes));
      // Member i of the communicator is the mesh rank whose coordinates on `axes` have mixed
      // radix i and whose other coordinates equal ours.
      std::vector<int> members(comm.size());
      int me = mesh.rank();
      check_mpi(MPI_Allgather(&me, 1, MPI_INT, members.data(), 1, MPI_INT, comm.handle()), "MPI_Allgather");
      for (int i = 0; i < comm.size(); ++i) {
        auto coords = mesh.coords();
        int rest = i;
        for (int k = static_cast<int>(axes.size()) - 1; k >= 0; --k) {
          int a = shape.axis_index(axes[k]);
          coords[a] = rest % shape.sizes()[a];
          rest /= shape.sizes()[a];
        }
        EXPECT_EQ(members[i], shape.rank_of(coords));
      }
      // Cached: the same object comes back.
      EXPECT_EQ(&mesh.axes_comm(axes), &comm);
    }
  }
}

TEST(Mesh, UnknownAxisInSubsetIsAnError) {
  Mesh mesh = Mesh::world(MeshShape({"data"}, {world_size()}));
  try {
    mesh.axes_comm({"model"});
    FAIL();
  } catch (const SpecError& e) {
    EXPECT_EQ(std::string(e.what()), "unknown mesh axis 'model' (mesh has data: " + std::to_string(world_size()) + ")");
  }
}

TEST(Agree, EveryRankThrowsTheFirstFailingRanksMessage) {
  Communicator world = Communicator::world();
  const int n = world.size();
  std::optional<std::string> mine;
  if (world.rank() == n - 1) mine = "cannot open /nowhere";
  if (n > 2 && world.rank() == n - 2) mine = "other";
  std::string expected = n > 2 ? "rank " + std::to_string(n - 2) + ": other"
                               : (n > 1 ? "rank " + std::to_string(n - 1) + ": " : "") + "cannot open /nowhere";
  try {
    agree_or_throw<IoError>(world, mine);
    FAIL();
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), expected);
  }
  EXPECT_NO_THROW(agree_or_throw<IoError>(world, std::nullopt));
}

// rethrow_first_error keeps the type of the error the first failing rank caught, on every rank:
// each of tessera's error types thrown on the last rank alone (rank 0 passes none) arrives as
// that exact type, with its message, on every rank.
TEST(Agree, EveryRankRethrowsTheFirstFailingRanksErrorType) {
  Communicator world = Communicator::world();
  const int n = world.size();
  const int last = n - 1;
  const std::string prefix = n > 1 ? "rank " + std::to_string(last) + ": " : "";
  const std::vector<std::exception_ptr> errors = {
      std::make_exception_ptr(Error("e")),          std::make_exception_ptr(SpecError("e")),
      std::make_exception_ptr(ShapeError("e")),     std::make_exception_ptr(DTypeError("e")),
      std::make_exception_ptr(RuleError("e")),      std::make_exception_ptr(MeshError("e")),
      std::make_exception_ptr(MpiError("e")),       std::make_exception_ptr(IoError("e")),
      std::make_exception_ptr(IntegrityError("e")), std::make_exception_ptr(UsageError("e")),
      std::make_exception_ptr(OverflowError("e"))};
  for (const std::exception_ptr& error : errors) {
    std::string thrown_type;
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      thrown_type = typeid(e).name();
    }
    try {
      rethrow_first_error(world, world.rank() == last ? error : nullptr);
      ADD_FAILURE() << "no error for " << thrown_type;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(typeid(e).name()), thrown_type);
      EXPECT_EQ(std::string(e.what()), prefix + "e");
    }
  }
  EXPECT_NO_THROW(rethrow_first_error(world, nullptr));
}

// The test's Environment (tests/mpi_main.cpp) flushes subnormals on this thread: TESSERA_DENORMALS
// is unset in the tests' environment.
TEST(MeshSettings, TheEnvironmentFlushesSubnormals) {
  ASSERT_EQ(std::getenv("TESSERA_DENORMALS"), nullptr);
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
  EXPECT_TRUE(denormals_flushed());
  volatile float tiny = 0x1p-100f, scale = 0x1p-30f;
  EXPECT_EQ(tiny * scale, 0.0f);
#endif
}

// The environment settings (core/env_settings.h): a value outside a setting's list is refused by
// every rank at Mesh::create, also when one rank alone has it; a setting that must be alike is
// refused when the ranks differ; TESSERA_PACK may differ (each rank packs its own blocks).
TEST(MeshSettings, AValueOutsideTheListFailsEveryRank) {
  const int n = world_size();
  const int last = n - 1;
  for (const auto& [name, value, expected] :
       {std::tuple<std::string, std::string, std::string>{"TESSERA_PACK", "fast", "TESSERA_PACK must be unset, datatype or memcpy"},
        {"TESSERA_SHARD_MAP_CHECK", "yes", "TESSERA_SHARD_MAP_CHECK must be unset, 0 or 1"},
        {"TESSERA_SHM_COLLECTIVES", "off", "TESSERA_SHM_COLLECTIVES must be unset, 0 or 1"},
        {"TESSERA_DENORMALS", "ftz", "TESSERA_DENORMALS must be unset, flush or keep"},
        {"TESSERA_COLLECTIVE_CHECK", "on", "TESSERA_COLLECTIVE_CHECK must be unset, 0 or 1"},
        {"TESSERA_FAILED_RANK_WAIT", "2", "TESSERA_FAILED_RANK_WAIT must be unset, 1, 3, 10, 30 or 100"}}) {
    for (const bool everywhere : {true, false}) {
      const bool mine = everywhere || world_rank() == last;
      if (mine) setenv(name.c_str(), value.c_str(), 1);
      try {
        Mesh::world(MeshShape({"x"}, {n}));
        ADD_FAILURE() << name << ": no error";
      } catch (const UsageError& e) {
        EXPECT_EQ(std::string(e.what()), mine ? expected + ", got '" + value + "'" : expected + " on every rank");
      }
      unsetenv(name.c_str());
    }
  }
  // The local reader refuses the value too (a mesh made without Mesh::create never agreed).
  setenv("TESSERA_PACK", "", 1);
  EXPECT_THROW(checked_env_choice(env_setting("TESSERA_PACK")), UsageError);
  unsetenv("TESSERA_PACK");
  EXPECT_EQ(checked_env_choice(env_setting("TESSERA_PACK")), 0);
}

// TESSERA_FAILED_RANK_WAIT (mesh/agree.h): 3 s unset, the listed seconds, and 3 for a value
// outside the list where it is read without Mesh::create (a program's error path before its mesh).
TEST(MeshSettings, FailedRankWaitSeconds) {
  ASSERT_EQ(std::getenv("TESSERA_FAILED_RANK_WAIT"), nullptr);
  EXPECT_EQ(failed_rank_wait_seconds(), 3);
  for (const auto& [value, seconds] : {std::pair<std::string, int>{"1", 1}, {"3", 3}, {"10", 10}, {"30", 30},
                                       {"100", 100}, {"2", 3}, {"", 3}, {"1.5", 3}}) {
    setenv("TESSERA_FAILED_RANK_WAIT", value.c_str(), 1);
    EXPECT_EQ(failed_rank_wait_seconds(), seconds) << "'" << value << "'";
  }
  unsetenv("TESSERA_FAILED_RANK_WAIT");
}

TEST(MeshSettings, ShardMapCheckAndDenormalsMustBeAlikeOnEveryRank) {
  const int n = world_size();
  for (const auto& [name, value, expected] :
       {std::tuple<std::string, std::string, std::string>{
            "TESSERA_SHARD_MAP_CHECK", "1",
            "TESSERA_SHARD_MAP_CHECK must be alike on every rank (0 on some ranks, 1 on others)"},
        {"TESSERA_DENORMALS", "keep", "TESSERA_DENORMALS must be alike on every rank (flush on some ranks, keep on others)"},
        {"TESSERA_COLLECTIVE_CHECK", "1",
         "TESSERA_COLLECTIVE_CHECK must be alike on every rank (0 on some ranks, 1 on others)"}}) {
    if (world_rank() == n - 1) setenv(name.c_str(), value.c_str(), 1);
    if (n == 1) {
      EXPECT_NO_THROW(Mesh::world(MeshShape({"x"}, {n})));
    } else {
      try {
        Mesh::world(MeshShape({"x"}, {n}));
        ADD_FAILURE() << name << ": no error";
      } catch (const UsageError& e) {
        EXPECT_EQ(std::string(e.what()), expected);
      }
    }
    unsetenv(name.c_str());
  }
  // The pack method may differ between ranks.
  if (world_rank() == n - 1) setenv("TESSERA_PACK", "memcpy", 1);
  EXPECT_NO_THROW(Mesh::world(MeshShape({"x"}, {n})));
  unsetenv("TESSERA_PACK");
}

}  // namespace
}  // namespace tessera
