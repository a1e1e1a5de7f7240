// Spec text forms, validation messages and block layout (docs/design.md semantics 1 and 2).
#include "core/spec.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "core/error.h"

namespace tessera {
namespace {

std::string spec_error(std::string_view text) {
  try {
    parse_spec(text);
  } catch (const SpecError& e) {
    return e.what();
  }
  return "no error";
}

std::string shape_string_error(std::string_view text) {
  try {
    parse_shape_string(text);
  } catch (const SpecError& e) {
    return e.what();
  }
  return "no error";
}

std::string validate_error(const Spec& spec, const MeshShape& mesh, const Shape& shape, std::string_view name) {
  try {
    validate_spec(spec, mesh, shape, name);
  } catch (const Error& e) {  // SpecError, or ShapeError for a negative extent
    return e.what();
  }
  return "no error";
}

const MeshShape kMesh({"data", "model"}, {2, 4});

TEST(Spec, JaxTextRoundTrips) {
  for (const char* text : {"P()", "P(data)", "P(data, None)", "P(None, model)", "P((data, model), None)",
                           "P(None, (model, data), None)", "P(data, None; partial=model)",
                           "P(None; partial=(data, model))", "P(; partial=model)"}) {
    EXPECT_EQ(parse_spec(text).to_string(), text);
  }
}

TEST(Spec, ParseAcceptsSpacingAndTrailingComma) {
  Spec s = parse_spec("  P( (data,model,) ,None )");
  EXPECT_EQ(s.to_string(), "P((data, model), None)");
  EXPECT_EQ(s.dims[0], (Axes{"data", "model"}));
}

TEST(Spec, MalformedTextPointsAtToken) {
  EXPECT_EQ(spec_error("P(data,, None)"),
            "spec 'P(data,, None)': expected a mesh axis, '(' or None, found ',' at column 8\n"
            "  P(data,, None)\n"
            "         ^");
  EXPECT_EQ(spec_error("Q(data)"),
            "spec 'Q(data)': expected 'P(', found 'Q' at column 1\n  Q(data)\n  ^");
  EXPECT_EQ(spec_error("P(data"), "spec 'P(data': expected ',', ';' or ')', found end of text at column 7\n  P(data\n        ^");
  EXPECT_EQ(spec_error("P(data) x"),
            "spec 'P(data) x': unexpected text after the spec, found 'x' at column 9\n  P(data) x\n          ^");
  EXPECT_EQ(spec_error("P(data; parts=model)"),
            "spec 'P(data; parts=model)': expected 'partial=', found 'p' at column 9\n"
            "  P(data; parts=model)\n"
            "          ^");
  EXPECT_EQ(spec_error("P((data, 3))"),
            "spec 'P((data, 3))': expected a mesh axis name, found '3' at column 10\n  P((data, 3))\n           ^");
}

// "partial=" names at least one axis: None and () name none (a spec that is partial over nothing
// would read as the replicated one).
TEST(Spec, PartialOverNoAxisIsAnError) {
  EXPECT_EQ(spec_error("P(x; partial=None)"),
            "spec 'P(x; partial=None)': expected at least one partial axis, found 'N' at column 14\n"
            "  P(x; partial=None)\n"
            "               ^");
  EXPECT_EQ(spec_error("P(x; partial=())"),
            "spec 'P(x; partial=())': expected at least one partial axis, found '(' at column 14\n"
            "  P(x; partial=())\n"
            "               ^");
}

TEST(Spec, EqualityPadsAndIgnoresPartialOrder) {
  EXPECT_EQ(parse_spec("P(data)"), parse_spec("P(data, None, None)"));
  EXPECT_EQ(parse_spec("P(; partial=(data, model))"), parse_spec("P(None; partial=(model, data))"));
  EXPECT_FALSE(parse_spec("P((data, model))") == parse_spec("P((model, data))"));
  EXPECT_FALSE(parse_spec("P(data)") == parse_spec("P(None, data)"));
}

TEST(Spec, UnusedAxesAreTheMeshAxesNeitherSplitNorPartial) {
  const MeshShape mesh({"data", "seq", "model"}, {2, 1, 4});
  EXPECT_EQ(unused_axes(parse_spec("P(None, model)"), mesh), (Axes{"data", "seq"}));
  EXPECT_EQ(unused_axes(parse_spec("P((model, data), None)"), mesh), (Axes{"seq"}));
  EXPECT_EQ(unused_axes(Spec(std::vector<Axes>{{}, {"model"}}, Axes{"data"}), mesh), (Axes{"seq"}));
  EXPECT_EQ(unused_axes(Spec(), mesh), (Axes{"data", "seq", "model"}));
  EXPECT_EQ(unused_axes(parse_spec("P(data, seq, model)"), mesh), Axes{});
}

TEST(Spec, ValidateUnknownAxis) {
  EXPECT_EQ(validate_error(parse_spec("P(data, expert)"), kMesh, {8, 8}, "W1"),
            "spec P(data, expert) of 'W1': unknown mesh axis 'expert' (mesh has data: 2, model: 4)");
}

TEST(Spec, ValidateAxisTwice) {
  EXPECT_EQ(validate_error(parse_spec("P(data, data)"), kMesh, {8, 8}, "W1"),
            "spec P(data, data) of 'W1': mesh axis 'data' is used more than once");
  EXPECT_EQ(validate_error(parse_spec("P(model; partial=model)"), kMesh, {8}, "y"),
            "spec P(model; partial=model) of 'y': mesh axis 'model' is used more than once");
  // The first offending axis in written order (dimensions, then partial) is the one named.
  EXPECT_EQ(validate_error(parse_spec("P((data, model), None; partial=data)"), kMesh, {8, 8}, "z"),
            "spec P((data, model), None; partial=data) of 'z': mesh axis 'data' is used more than once");
  EXPECT_EQ(validate_error(parse_spec("P(model, model, expert)"), kMesh, {8, 8, 8}, "z"),
            "spec P(model, model, expert) of 'z': mesh axis 'model' is used more than once");
  EXPECT_EQ(validate_error(parse_spec("P(expert, expert)"), kMesh, {8, 8}, ""),
            "spec P(expert, expert): unknown mesh axis 'expert' (mesh has data: 2, model: 4)");
  EXPECT_EQ(validate_error(Spec(std::vector<Axes>{{}}, Axes{"model", "model"}), kMesh, {8}, "p"),
            "spec P(None; partial=(model, model)) of 'p': mesh axis 'model' is used more than once");
}

TEST(Spec, UnevenDimensionsAreValid) {
  // Only unknown axes, an axis twice and too many dimensions are errors; sizes need not divide.
  EXPECT_EQ(validate_error(parse_spec("P(None, (data, model))"), kMesh, {8, 1004}, "W2"), "no error");
  EXPECT_EQ(validate_error(parse_spec("P(None, model)"), MeshShape({"data", "model"}, {2, 3}), {8, 1000}, "W2"), "no error");
  EXPECT_EQ(validate_error(parse_spec("P((data, model))"), kMesh, {3}, "b"), "no error");
}

TEST(Spec, BlockRuleIsCeilDivision) {
  // [i*c, min(n, (i+1)*c)), c = ceil(n/s): JAX's and torch.chunk's rule.
  EXPECT_EQ(block_extents(10, 4), (std::vector<std::int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(block_extents(7, 4), (std::vector<std::int64_t>{2, 2, 2, 1}));
  EXPECT_EQ(block_extents(13, 8), (std::vector<std::int64_t>{2, 2, 2, 2, 2, 2, 1, 0}));
  EXPECT_EQ(block_extents(3, 8), (std::vector<std::int64_t>{1, 1, 1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(block_extents(1000, 3), (std::vector<std::int64_t>{334, 334, 332}));
  EXPECT_EQ(block_extents(0, 2), (std::vector<std::int64_t>{0, 0}));
  // A count below 1 is refused (-1 asked for a vector of 2^64 - 1 extents: std::length_error).
  for (std::int64_t s : {0, -1}) {
    try {
      (void)block_extents(5, s);
      ADD_FAILURE() << "block_extents(5, " << s << ") returned";
    } catch (const SpecError& e) {
      EXPECT_EQ(std::string(e.what()), "block_extents: a dimension splits into 1 block or more, not " + std::to_string(s));
    }
  }
  EXPECT_EQ(block_begin(10, 4, 3), 9);
  EXPECT_EQ(block_begin(3, 8, 7), 3);
  // Near 2^63 the rule holds without wrapping (n + s - 1 did: a negative block).
  constexpr std::int64_t big = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(block_chunk(big, 2), big / 2 + 1);
  EXPECT_EQ(block_extents(big, 2), (std::vector<std::int64_t>{big / 2 + 1, big / 2}));
  EXPECT_EQ(block_begin(big, 2, 2), big);
  EXPECT_EQ(block_extents(big, 3), (std::vector<std::int64_t>{big / 3 + 1, big / 3 + 1, big / 3 - 1}));
  // Nesting: the blocks of 7 over 2x2 tile the blocks of 7 over 2; those of 10 do not
  // (over 2: [0,5) [5,10); over 4: [0,3) [3,6) [6,9) [9,10)).
  EXPECT_TRUE(blocks_nest(7, 2, 2));
  EXPECT_FALSE(blocks_nest(10, 2, 2));
  EXPECT_TRUE(blocks_nest(10, 1, 4));
  EXPECT_TRUE(blocks_nest(16, 2, 4));
}

TEST(Spec, UnevenLocalShapeAndOffsets) {
  const MeshShape mesh({"data", "model"}, {2, 3});
  Spec s = parse_spec("P(data, model)");
  EXPECT_FALSE(splits_evenly(s, mesh, {5, 1000}));
  EXPECT_TRUE(splits_evenly(s, mesh, {4, 999}));
  EXPECT_EQ(local_shape(s, mesh, {5, 1000}, {0, 0}), (Shape{3, 334}));
  EXPECT_EQ(local_shape(s, mesh, {5, 1000}, {1, 2}), (Shape{2, 332}));
  // is_local_shape answers local_shape(...) == block: each rank's own block, no other.
  EXPECT_TRUE(is_local_shape({3, 334}, s, mesh, {5, 1000}, {0, 0}));
  EXPECT_TRUE(is_local_shape({2, 332}, s, mesh, {5, 1000}, {1, 2}));
  EXPECT_FALSE(is_local_shape({3, 334}, s, mesh, {5, 1000}, {1, 2}));
  EXPECT_FALSE(is_local_shape({2, 334}, s, mesh, {5, 1000}, {1, 2}));
  EXPECT_FALSE(is_local_shape({3}, s, mesh, {5, 1000}, {0, 0}));
  EXPECT_FALSE(is_local_shape({3, 334, 1}, s, mesh, {5, 1000}, {0, 0}));
  EXPECT_TRUE(is_local_shape({}, Spec(), mesh, {}, {1, 2}));
  EXPECT_EQ(block_offsets(s, mesh, {5, 1000}, {1, 2}), (std::vector<std::int64_t>{3, 668}));
  EXPECT_EQ(max_local_shape(s, mesh, {5, 1000}), (Shape{3, 334}));
  // The group over (model) through coords (1, 0), in communicator order.
  EXPECT_EQ(group_block_extents(s, mesh, {5, 1000}, 1, {"model"}, {1, 0}), (std::vector<std::int64_t>{334, 334, 332}));
  EXPECT_EQ(group_block_extents(parse_spec("P((data, model))"), mesh, {7}, 0, {"data", "model"}, {0, 0}),
            (std::vector<std::int64_t>{2, 2, 2, 1, 0, 0}));
}

TEST(Spec, ValidateTooManyDimensions) {
  EXPECT_EQ(validate_error(parse_spec("P(data, None, None)"), kMesh, {8, 8}, "x"),
            "spec P(data, None, None) of 'x' has 3 dimensions but the tensor has shape [8, 8]");
}

TEST(Spec, BlockIndexIsMixedRadixMajorFirst) {
  Spec s = parse_spec("P((data, model))");
  // coords (d, m) -> block d * 4 + m
  for (int d = 0; d < 2; ++d)
    for (int m = 0; m < 4; ++m) EXPECT_EQ(block_index(s, kMesh, 0, {d, m}), d * 4 + m);
  Spec t = parse_spec("P((model, data))");
  for (int d = 0; d < 2; ++d)
    for (int m = 0; m < 4; ++m) EXPECT_EQ(block_index(t, kMesh, 0, {d, m}), m * 2 + d);
}

TEST(Spec, LocalShapeAndOffsets) {
  Spec s = parse_spec("P(data, model)");
  EXPECT_EQ(local_shape(s, kMesh, {8, 16}, {1, 2}), (Shape{4, 4}));
  EXPECT_EQ(block_offsets(s, kMesh, {8, 16}, {1, 2}), (std::vector<std::int64_t>{4, 8}));
  // Padding: a short spec leaves later dimensions whole.
  EXPECT_EQ(local_shape(parse_spec("P(model)"), kMesh, {8, 16, 3}, {0, 3}), (Shape{2, 16, 3}));
}

TEST(ShapeString, RoundTripsAndGivesSpec) {
  for (const char* text : {"batch/data embed/model", "batch/data/model 8 hidden", "layer embed hidden/model", ""}) {
    EXPECT_EQ(parse_shape_string(text).to_string(), text);
  }
  ShapeString s = parse_shape_string("batch/data 8 hidden/model/data2");
  EXPECT_EQ(s.spec().to_string(), "P(data, None, (model, data2))");
  EXPECT_EQ(s.names(), (std::vector<std::string>{"batch", "", "hidden"}));
  EXPECT_EQ(*s.dims[1].size, 8);
}

TEST(ShapeString, MalformedPointsAtToken) {
  EXPECT_EQ(shape_string_error("batch/ embed"),
            "shape string 'batch/ embed': expected a mesh axis name after '/', found ' ' at column 7\n"
            "  batch/ embed\n"
            "        ^");
  EXPECT_EQ(shape_string_error("batch/data emb-ed"),
            "shape string 'batch/data emb-ed': expected a space, '/' or the end, found '-' at column 15\n"
            "  batch/data emb-ed\n"
            "                ^");
  EXPECT_EQ(shape_string_error("batch/8"),
            "shape string 'batch/8': expected a mesh axis name after '/', found '8' at column 7\n  batch/8\n        ^");
}

// A size is at most 18 digits, so that it fits int64 (std::stoll throws std::out_of_range, not
// a tessera error, past it).
TEST(ShapeString, SizeOfMoreThan18DigitsIsAnError) {
  EXPECT_EQ(*parse_shape_string("batch 999999999999999999").dims[1].size, 999999999999999999);
  EXPECT_EQ(shape_string_error("batch 9999999999999999999"),
            "shape string 'batch 9999999999999999999': expected a dimension name or size, found '9' at column 7\n"
            "  batch 9999999999999999999\n"
            "        ^");
}

TEST(MeshShape, ParseAndCoordinates) {
  MeshShape m = MeshShape::parse("data=2,model=4");
  EXPECT_EQ(m, kMesh);
  EXPECT_EQ(MeshShape::parse("data: 2, model: 4"), kMesh);
  EXPECT_EQ(m.to_string(), "data: 2, model: 4");
  EXPECT_EQ(m.coords_of(6), (std::vector<int>{1, 2}));
  EXPECT_EQ(m.rank_of({1, 2}), 6);
  // Position 5 of a communicator over (model, data) through (1, 2): model 2, data 1.
  EXPECT_EQ(m.group_member({1, 2}, {"model", "data"}, 5), (std::vector<int>{1, 2}));
  EXPECT_EQ(m.group_member({1, 2}, {"model"}, 3), (std::vector<int>{1, 3}));
  EXPECT_EQ(m.group_member({1, 2}, {"data", "model"}, 3), (std::vector<int>{0, 3}));
  try {
    MeshShape::parse("data=2,model=x");
    FAIL();
  } catch (const MeshError& e) {
    EXPECT_STREQ(e.what(), "mesh 'data=2,model=x': size of axis 'model' is not a positive integer: 'x'");
  }
  try {
    MeshShape::parse("data=2,data=4");
    FAIL();
  } catch (const MeshError& e) {
    EXPECT_STREQ(e.what(), "mesh 'data=2,data=4': axis name 'data' appears twice");
  }
  // An empty item (a trailing, doubled or leading comma) is not skipped.
  for (const char* text : {"data=2,", "data=2,,model=4", ",data=2"}) {
    try {
      MeshShape::parse(text);
      FAIL() << text;
    } catch (const MeshError& e) {
      EXPECT_EQ(std::string(e.what()), std::string("mesh '") + text + "': expected name=size, got ''");
    }
  }
  // Found by the mesh_shape_parse fuzz target: size() overflowed int.
  try {
    MeshShape::parse("a=2048,b=2048,c=2048");
    FAIL();
  } catch (const MeshError& e) {
    EXPECT_STREQ(e.what(), "mesh 'a=2048,b=2048,c=2048': the axis sizes multiply to more than 2147483647 ranks");
  }
  EXPECT_EQ(MeshShape::parse("a=2048,b=1024,c=1023").size(), 2048 * 1024 * 1023);
  try {
    kMesh.axis_index("expert");
    FAIL();
  } catch (const SpecError& e) {
    EXPECT_STREQ(e.what(), "unknown mesh axis 'expert' (mesh has data: 2, model: 4)");
  }
}

// Ranks and coordinates outside the mesh (rank_of read past the coordinates it was given).
TEST(MeshShape, RanksAndCoordinatesOutsideTheMeshAreErrors) {
  EXPECT_THROW(kMesh.coords_of(8), MeshError);
  EXPECT_THROW(kMesh.coords_of(-1), MeshError);
  try {
    kMesh.rank_of({1});
    FAIL() << "no error";
  } catch (const MeshError& e) {
    EXPECT_STREQ(e.what(), "mesh (data: 2, model: 4): coordinates (1) are not a position in it");
  }
  EXPECT_THROW(kMesh.rank_of({1, 4}), MeshError);
  EXPECT_THROW(kMesh.group_member({1, 2}, {"model"}, 9), MeshError);
  EXPECT_EQ(kMesh.rank_of({1, 3}), 7);
}

// A negative extent (the blocks came out empty, and later failures misled).
TEST(Spec, NegativeExtentIsAnError) {
  EXPECT_EQ(validate_error(parse_spec("P(data)"), kMesh, {-4, 4}, "x"), "shape [-4, 4] of 'x' has a negative extent");
}

TEST(MeshShape, AxisSizePastTheLimitIsNamedAsSuch) {
  try {
    MeshShape::parse("data=2147483648");
    FAIL() << "no error";
  } catch (const MeshError& e) {
    EXPECT_STREQ(e.what(), "mesh 'data=2147483648': size of axis 'data' is 2147483648, past the 999999 ranks an axis may have");
  }
}

// Leading zeros are the number's, as the programs' integer flags read them: until the forty-fifth
// session "data=0000001" was refused as past 999999.
TEST(MeshShape, AxisSizeWithLeadingZerosIsItsNumber) {
  const MeshShape mesh = MeshShape::parse("data=0000001,model=00000000004");
  EXPECT_EQ(mesh.sizes(), (std::vector<int>{1, 4}));
  try {
    MeshShape::parse("data=0001000000");
    FAIL() << "no error";
  } catch (const MeshError& e) {
    EXPECT_STREQ(e.what(), "mesh 'data=0001000000': size of axis 'data' is 1000000, past the 999999 ranks an axis may have");
  }
  try {
    MeshShape::parse("data=000");
    FAIL() << "no error";
  } catch (const MeshError& e) {
    EXPECT_STREQ(e.what(), "mesh 'data=000': axis 'data' has size 0 (must be >= 1)");
  }
}

}  // namespace
}  // namespace tessera
