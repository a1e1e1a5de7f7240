// Tests of the shape-checking scope: binding on first use, exact mismatch messages, nesting and
// isolation, explicit sizes, local shards of sharded dimensions, rank and axis errors.

#include "core/shape_scope.h"

#include <gtest/gtest.h>

#include <thread>

#include "core/error.h"

namespace tessera {
namespace {

template <class E>
std::string error_of(const auto& call) {
  try {
    call();
  } catch (const E& e) {
    return e.what();
  }
  return "no error of the expected type";
}

ShapeString ss(std::string_view text) { return parse_shape_string(text); }

const MeshShape& mesh_2x4() {
  static const MeshShape mesh({"data", "model"}, {2, 4});
  return mesh;
}

TEST(ShapeScope, FirstUseBindsLaterUsesMustMatch) {
  ShapeScope scope;
  EXPECT_EQ(bound_size("batch"), std::nullopt);
  check_global(ss("batch embed"), {8, 4}, "x");
  EXPECT_EQ(bound_size("batch"), 8);
  EXPECT_EQ(bound_size("embed"), 4);
  EXPECT_NO_THROW(check_global(ss("embed hidden"), {4, 16}, "w"));
  EXPECT_EQ(bound_size("hidden"), 16);
  EXPECT_THROW(check_global(ss("batch hidden"), {8, 12}, "y"), ShapeError);
}

TEST(ShapeScope, MismatchMessageIsExact) {
  ShapeScope scope;
  check_global(ss("batch embed"), {8, 4}, "w");
  EXPECT_EQ(error_of<ShapeError>([] { check_global(ss("batch embed"), {16, 4}, "x"); }),
            "'x' (\"batch embed\", global shape [16, 4]): dimension batch: expected 8, got 16; batch was bound by 'w'");
  bind("len", 5);
  EXPECT_EQ(error_of<ShapeError>([] { check_global(ss("len"), {6}); }),
            "(\"len\", global shape [6]): dimension len: expected 5, got 6");
}

TEST(ShapeScope, FailedCheckBindsNothing) {
  ShapeScope scope;
  bind("embed", 4);
  EXPECT_THROW(check_global(ss("batch embed"), {8, 5}, "x"), ShapeError);
  EXPECT_EQ(bound_size("batch"), std::nullopt);
  check_global(ss("batch embed"), {16, 4}, "x");
  EXPECT_EQ(bound_size("batch"), 16);
}

TEST(ShapeScope, SameNameTwiceInOneShape) {
  ShapeScope scope;
  EXPECT_NO_THROW(check_global(ss("n n"), {3, 3}, "square"));
  EXPECT_EQ(error_of<ShapeError>([] { check_global(ss("m m"), {3, 4}, "a"); }),
            "'a' (\"m m\", global shape [3, 4]): dimension m: expected 3, got 4");
  EXPECT_EQ(bound_size("m"), std::nullopt);
}

TEST(ShapeScope, NestedScopesSeeOuterBindingsAndDropTheirOwn) {
  ShapeScope outer;
  check_global(ss("batch embed"), {8, 4}, "x");
  {
    ShapeScope inner;
    EXPECT_EQ(shape_scope_depth(), 2);
    EXPECT_EQ(bound_size("batch"), 8);
    EXPECT_THROW(check_global(ss("batch"), {16}, "y"), ShapeError);
    check_global(ss("batch hidden"), {8, 32}, "h");
    EXPECT_EQ(bound_size("hidden"), 32);
  }
  EXPECT_EQ(shape_scope_depth(), 1);
  EXPECT_EQ(bound_size("hidden"), std::nullopt);
  EXPECT_EQ(bound_size("batch"), 8);
  EXPECT_NO_THROW(check_global(ss("hidden"), {7}, "z"));
  EXPECT_EQ(bound_size("hidden"), 7);
}

TEST(ShapeScope, IsolatedScopeHidesOuterBindings) {
  ShapeScope outer;
  bind("n", 8);
  {
    ShapeScope callee(ShapeScope::Visibility::isolated);
    EXPECT_EQ(bound_size("n"), std::nullopt);
    EXPECT_NO_THROW(check_global(ss("n"), {3}, "arg"));
    EXPECT_EQ(bound_size("n"), 3);
    {
      ShapeScope nested;
      EXPECT_EQ(bound_size("n"), 3);  // stops at the isolated scope, not before it
    }
  }
  EXPECT_EQ(bound_size("n"), 8);
}

TEST(ShapeScope, WithoutAnOpenScopeChecksUseATemporaryScope) {
  ASSERT_EQ(shape_scope_depth(), 0);
  EXPECT_NO_THROW(check_global(ss("batch embed"), {8, 4}, "x"));
  EXPECT_EQ(bound_size("batch"), std::nullopt);
  EXPECT_NO_THROW(check_global(ss("batch embed"), {16, 4}, "x"));
  // Within one check the names still have to agree, and explicit sizes still count.
  EXPECT_THROW(check_global(ss("n n"), {2, 3}, "x"), ShapeError);
  EXPECT_THROW(check_global(ss("batch 4"), {2, 3}, "x"), ShapeError);
  EXPECT_EQ(error_of<ShapeError>([] { bind("batch", 8); }),
            "bind: dimension batch: no shape scope is open (open a ShapeScope first)");
}

TEST(ShapeScope, ScopesArePerThread) {
  ShapeScope scope;
  bind("batch", 8);
  std::optional<std::int64_t> seen = 1;
  int depth = -1;
  std::thread([&] {
    seen = bound_size("batch");
    depth = shape_scope_depth();
  }).join();
  EXPECT_EQ(seen, std::nullopt);
  EXPECT_EQ(depth, 0);
}

TEST(ShapeScope, Bind) {
  ShapeScope scope;
  bind("batch", 8, "config");
  EXPECT_EQ(bound_size("batch"), 8);
  EXPECT_NO_THROW(bind("batch", 8));
  EXPECT_EQ(error_of<ShapeError>([] { bind("batch", 4, "cli"); }),
            "bind 'cli': dimension batch: expected 8, got 4; batch was bound by 'config'");
  EXPECT_EQ(error_of<ShapeError>([] { check_global(ss("batch"), {4}, "x"); }),
            "'x' (\"batch\", global shape [4]): dimension batch: expected 8, got 4; batch was bound by 'config'");
  EXPECT_THROW(bind("", 3), ShapeError);
  EXPECT_THROW(bind("len", -1), ShapeError);
}

TEST(ShapeScope, ExplicitSizes) {
  ShapeScope scope;
  EXPECT_NO_THROW(check_global(ss("batch 3"), {8, 3}, "rgb"));
  EXPECT_EQ(error_of<ShapeError>([] { check_global(ss("batch 3"), {8, 4}, "rgb"); }),
            "'rgb' (\"batch 3\", global shape [8, 4]): dimension 1: expected 3, got 4");
  EXPECT_NO_THROW(check_local(ss("batch/data 8/model"), {4, 2}, mesh_2x4(), "t"));
  EXPECT_THROW(check_local(ss("batch/data 8/model"), {4, 8}, mesh_2x4(), "t"), ShapeError);
}

TEST(ShapeScope, RankMismatch) {
  ShapeScope scope;
  EXPECT_EQ(error_of<ShapeError>([] { check_global(ss("batch embed"), {8, 4, 2}, "x"); }),
            "'x' (\"batch embed\", global shape [8, 4, 2]): rank 3 does not match the shape string's rank 2");
  EXPECT_THROW(check_local(ss("batch/data embed"), {8}, mesh_2x4(), "x"), ShapeError);
  EXPECT_EQ(bound_size("batch"), std::nullopt);
}

TEST(ShapeScope, LocalShardsBindGlobalSizes) {
  ShapeScope scope;
  // 2x4 mesh: batch/data is local 4 -> global 8; hidden/model local 8 -> global 32.
  check_local(ss("batch/data hidden/model"), {4, 8}, mesh_2x4(), "h");
  EXPECT_EQ(bound_size("batch"), 8);
  EXPECT_EQ(bound_size("hidden"), 32);
  EXPECT_NO_THROW(check_global(ss("batch hidden"), {8, 32}, "g"));
  // Several axes multiply: (data, model) has size 8.
  check_local(ss("tokens/data/model embed"), {3, 16}, mesh_2x4(), "e");
  EXPECT_EQ(bound_size("tokens"), 24);
  EXPECT_EQ(bound_size("embed"), 16);
  // The same global size seen through another split.
  EXPECT_NO_THROW(check_local(ss("hidden/data/model"), {4}, mesh_2x4(), "w"));
  EXPECT_NO_THROW(check_local(ss("hidden"), {32}, mesh_2x4(), "r"));
}

TEST(ShapeScope, LocalMismatchMessages) {
  ShapeScope scope;
  bind("batch", 8, "data");
  EXPECT_EQ(error_of<ShapeError>([] { check_local(ss("batch/model embed"), {4, 4}, mesh_2x4(), "x"); }),
            "'x' (\"batch/model embed\", local shape [4, 4] on mesh " + mesh_2x4().to_string() +
                "): dimension batch: expected 8, got 16 (local 4 times 4 over axes (model)); batch was bound by "
                "'data'");
  bind("vocab", 10);
  // 10 does not divide over model (4): no local size can match, and the message says why.
  EXPECT_EQ(error_of<ShapeError>([] { check_local(ss("vocab/model"), {3}, mesh_2x4(), "logits"); }),
            "'logits' (\"vocab/model\", local shape [3] on mesh " + mesh_2x4().to_string() +
                "): dimension vocab: expected 10, got 12 (local 3 times 4 over axes (model)); 10 does not divide "
                "over axes (model) of size 4");
}

TEST(ShapeScope, GlobalWithMeshFollowsTheBlockRule) {
  ShapeScope scope;
  EXPECT_NO_THROW(check_global(ss("batch/data hidden/model"), {8, 32}, mesh_2x4(), "h"));
  // 12 over (data, model) = 8: blocks of 2, the last two empty; any size is valid.
  EXPECT_NO_THROW(check_global(ss("vocab/data/model"), {12}, mesh_2x4(), "logits"));
  EXPECT_EQ(bound_size("vocab"), 12);
  // The axes are still checked.
  EXPECT_EQ(error_of<SpecError>([] { check_global(ss("vocab/tensor"), {12}, mesh_2x4(), "logits"); }),
            "'logits' (\"vocab/tensor\", global shape [12] on mesh " + mesh_2x4().to_string() +
                "): mesh axis 'tensor' of dimension vocab is not in the mesh");
}

TEST(ShapeScope, UnknownOrRepeatedAxes) {
  ShapeScope scope;
  EXPECT_EQ(error_of<SpecError>([] { check_local(ss("batch/pipe"), {4}, mesh_2x4(), "x"); }),
            "'x' (\"batch/pipe\", local shape [4] on mesh " + mesh_2x4().to_string() +
                "): mesh axis 'pipe' of dimension batch is not in the mesh");
  EXPECT_THROW(check_local(ss("batch/data embed/data"), {4, 4}, mesh_2x4(), "x"), SpecError);
  EXPECT_THROW(check_global(ss("batch/data/data"), {8}, mesh_2x4(), "x"), SpecError);
  EXPECT_EQ(bound_size("batch"), std::nullopt);
}

}  // namespace
}  // namespace tessera
