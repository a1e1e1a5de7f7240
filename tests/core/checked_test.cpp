// Overflow-checked size arithmetic: exact results in range, OverflowError naming the quantity
// outside it, and the users (numel, tensor byte sizes, mesh sizes) refuse instead of wrapping.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "core/checked.h"
#include "core/mesh_shape.h"
#include "core/tensor.h"

namespace tessera {
namespace {

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

std::string message_of(auto&& f) {
  try {
    f();
  } catch (const OverflowError& e) {
    return e.what();
  }
  return "(no OverflowError)";
}

TEST(Checked, InRangeIsExact) {
  EXPECT_EQ(checked_mul<std::int64_t>(1 << 20, 1 << 20, "x"), std::int64_t{1} << 40);
  EXPECT_EQ(checked_mul<std::int64_t>(kMax, 1, "x"), kMax);
  EXPECT_EQ(checked_add<std::int64_t>(kMax - 1, 1, "x"), kMax);
  EXPECT_EQ(checked_mul<int>(-3, 7, "x"), -21);
  EXPECT_EQ((checked_cast<std::size_t, std::int64_t>(5, "x")), 5u);
}

TEST(Checked, OverflowNamesTheQuantity) {
  EXPECT_EQ(message_of([] { checked_mul<std::int64_t>(std::int64_t{1} << 32, std::int64_t{1} << 31, "byte count"); }),
            "byte count overflows: 4294967296 * 2147483648");
  EXPECT_EQ(message_of([] { checked_add<std::int64_t>(kMax, 1, "file offset"); }),
            "file offset overflows: 9223372036854775807 + 1");
  EXPECT_EQ(message_of([] { checked_mul<int>(65536, 65536, "mesh size"); }), "mesh size overflows: 65536 * 65536");
  EXPECT_EQ(message_of([] { checked_cast<std::size_t, std::int64_t>(-1, "block offset"); }),
            "block offset -1 does not fit its type");
  EXPECT_TRUE((std::is_base_of_v<Error, OverflowError>));
}

TEST(Checked, NumelRefusesToWrap) {
  EXPECT_EQ(numel({2147483648, 2147483648}), std::int64_t{1} << 62);
  EXPECT_EQ(message_of([] { numel({2147483648, 2147483648, 4}); }),
            "element count overflows: 4611686018427387904 * 4");
}

TEST(Checked, TensorByteSizeRefusesToWrap) {
  // 2^62 f32 elements are 2^64 bytes: refused before any allocation.
  EXPECT_EQ(message_of([] { Tensor(Shape{std::int64_t{1} << 31, std::int64_t{1} << 31}, DType::f32); }),
            "byte size of a tensor overflows: 4611686018427387904 * 4");
  EXPECT_EQ(message_of([] { Tensor(Shape{std::int64_t{1} << 32, std::int64_t{1} << 31, 2}, DType::f32); }),
            "element count overflows: 4294967296 * 2147483648");
  EXPECT_THROW(Tensor::empty(Shape{std::int64_t{1} << 61}, DType::f32), OverflowError);
}

TEST(Checked, MeshSizeRefusesToWrap) {
  // A mesh of more than INT_MAX ranks is refused when it is made, so size() never wraps.
  try {
    (void)MeshShape({"a", "b", "c", "d"}, {1000, 1000, 1000, 1000});
    ADD_FAILURE() << "no error";
  } catch (const MeshError& e) {
    EXPECT_STREQ(e.what(), "mesh: the axis sizes multiply to more than 2147483647 ranks");
  }
  const MeshShape mesh({"a", "b", "c"}, {1000, 1000, 2000});
  EXPECT_EQ(mesh.size(), 2000000000);
  EXPECT_EQ(mesh.axes_size({"a", "b", "c"}), 2000000000);
}

// The bound of a mesh's size is INT_MAX itself (a communicator's size is an int): a mesh of
// exactly 2^31 - 1 ranks (a prime, so one axis) is made, twice as many are refused.
TEST(Checked, MeshSizeUpToIntMaxIsTaken) {
  const MeshShape mesh({"a"}, {std::numeric_limits<int>::max()});
  EXPECT_EQ(mesh.size(), std::numeric_limits<int>::max());
  EXPECT_EQ(mesh.axes_size({"a"}), std::numeric_limits<int>::max());
  try {
    (void)MeshShape({"a", "b"}, {std::numeric_limits<int>::max(), 2});
    ADD_FAILURE() << "no error";
  } catch (const MeshError& e) {
    EXPECT_STREQ(e.what(), "mesh: the axis sizes multiply to more than 2147483647 ranks");
  }
}

}  // namespace
}  // namespace tessera
