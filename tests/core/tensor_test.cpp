// Tensor storage, dtype access and the block copies sharding is built on.
#include "core/tensor.h"

#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

namespace tessera {
namespace {

Tensor iota(Shape shape) {
  Tensor t(std::move(shape), DType::f32);
  auto v = t.values<float>();
  std::iota(v.begin(), v.end(), 0.0f);
  return t;
}

TEST(Tensor, ZeroFilledAlignedAndSized) {
  Tensor t({3, 5}, DType::f64);
  EXPECT_EQ(t.numel(), 15);
  EXPECT_EQ(t.nbytes(), 120u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.raw()) % 64, 0u);
  for (double x : t.values<double>()) EXPECT_EQ(x, 0.0);
}

TEST(Tensor, CopyIsDeepMoveIsCheap) {
  Tensor a = iota({4});
  Tensor b = a;
  b.data<float>()[0] = 42;
  EXPECT_EQ(a.data<float>()[0], 0.0f);
  const void* storage = b.raw();
  Tensor c = std::move(b);
  EXPECT_EQ(c.raw(), storage);
  EXPECT_EQ(b.numel(), 0);
}

TEST(Tensor, WrongDtypeAccessThrows) {
  Tensor t({2}, DType::f32);
  try {
    t.data<double>();
    FAIL() << "expected DTypeError";
  } catch (const DTypeError& e) {
    EXPECT_STREQ(e.what(), "Tensor: accessed a f32 tensor as f64");
  }
}

TEST(Tensor, FromVectorChecksCount) {
  EXPECT_THROW(Tensor::from_vector<float>({2, 2}, {1, 2, 3}), ShapeError);
  Tensor t = Tensor::from_vector<std::int32_t>({3}, {1, 2, 3});
  EXPECT_EQ(t.dtype(), DType::i32);
  EXPECT_EQ(t.at(2), 3.0);
  // at() checks its index against both ends: one past the last element is refused, not read.
  EXPECT_THROW((void)t.at(3), ShapeError);
  EXPECT_THROW((void)t.at(-1), ShapeError);
}

TEST(Tensor, ExtractInsertRoundTrip3d) {
  Tensor whole = iota({4, 6, 8});
  for (std::int64_t a : {0, 2})
    for (std::int64_t b : {0, 3})
      for (std::int64_t c : {0, 4}) {
        Tensor block = extract_block(whole, {a, b, c}, {2, 3, 4});
        auto v = block.values<float>();
        // First element of the block is whole[a, b, c]; last is whole[a+1, b+2, c+3].
        EXPECT_EQ(v.front(), static_cast<float>(a * 48 + b * 8 + c));
        EXPECT_EQ(v.back(), static_cast<float>((a + 1) * 48 + (b + 2) * 8 + (c + 3)));
      }
  Tensor rebuilt({4, 6, 8});
  for (std::int64_t a : {0, 2})
    for (std::int64_t b : {0, 3})
      for (std::int64_t c : {0, 4}) insert_block(rebuilt, extract_block(whole, {a, b, c}, {2, 3, 4}), {a, b, c});
  EXPECT_TRUE(rebuilt.bit_equal(whole));
}

TEST(Tensor, AddBlockAccumulates) {
  Tensor whole({2, 2});
  Tensor ones = Tensor::full({1, 2}, 1.0);
  add_block(whole, ones, {1, 0});
  add_block(whole, ones, {1, 0});
  EXPECT_EQ(whole.at(0), 0.0);
  EXPECT_EQ(whole.at(2), 2.0);
  EXPECT_EQ(whole.at(3), 2.0);
}

// add_to_slab adds into one slab of dimension 0 and touches no other element, copy_to_slab
// writes one; a slab of the wrong shape or dtype, or an index past dimension 0, is refused.
TEST(Tensor, AddToSlabAddsIntoOneSlab) {
  Tensor whole = iota({3, 2, 4});
  const Tensor before = whole;
  Tensor slab = iota({2, 4});
  add_to_slab(whole, 1, slab);
  add_to_slab(whole, 1, slab);
  for (std::int64_t i = 0; i < whole.numel(); ++i) {
    const double want = before.at(i) + (i / 8 == 1 ? 2.0 * static_cast<double>(i % 8) : 0.0);
    EXPECT_EQ(whole.at(i), want) << "element " << i;
  }
  try {
    add_to_slab(whole, 0, iota({4, 2}));
    FAIL() << "a [4, 2] slab of [3, 2, 4] was taken";
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "add_to_slab: slab [4, 2] is not a slab of [3, 2, 4]");
  }
  EXPECT_THROW(add_to_slab(whole, 3, slab), ShapeError);
  EXPECT_THROW(add_to_slab(whole, 0, slab.astype(DType::f64)), DTypeError);
  // copy_to_slab overwrites the slab, and only it.
  Tensor copied = before;
  copy_to_slab(copied, 2, slab);
  for (std::int64_t i = 0; i < copied.numel(); ++i) {
    EXPECT_EQ(copied.at(i), i / 8 == 2 ? static_cast<double>(i % 8) : before.at(i)) << "element " << i;
  }
  EXPECT_THROW(copy_to_slab(copied, 0, iota({4, 2})), ShapeError);
}

TEST(Tensor, BlockOutOfRangeThrows) {
  Tensor whole({4, 4});
  EXPECT_THROW(extract_block(whole, {3, 0}, {2, 4}), ShapeError);
}

TEST(Tensor, ReshapeAndAstype) {
  Tensor t = iota({2, 3});
  Tensor r = t.reshaped({3, 2});
  EXPECT_EQ(r.shape(), (Shape{3, 2}));
  EXPECT_THROW(t.reshaped({4}), ShapeError);
  // Bit equality covers the shape: the same bytes viewed as [3, 2] are not the [2, 3] tensor.
  EXPECT_FALSE(r.bit_equal(t));
  EXPECT_TRUE(r.reshaped({2, 3}).bit_equal(t));
  // Negative extents whose product matches were taken as a shape.
  try {
    (void)t.reshaped({-2, -3});
    ADD_FAILURE() << "a shape of negative extents was taken";
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "Tensor::reshaped: cannot view [2, 3] as [-2, -3]");
  }
  Tensor d = t.astype(DType::f64);
  EXPECT_EQ(d.at(5), 5.0);
}

// Extents are >= 0: an empty dimension makes an empty tensor (no bytes), a negative one is
// refused before any size is computed, also where the negatives' product is positive ([-1, -1]
// would otherwise be a tensor of one element).
TEST(Tensor, NegativeExtentsAreRefusedAndZeroIsEmpty) {
  for (const Shape& shape : {Shape{-1, -1}, Shape{2, -3}, Shape{-1}}) {
    try {
      (void)Tensor(shape, DType::f32);
      ADD_FAILURE() << "a tensor of shape " << shape_to_string(shape) << " was made";
    } catch (const ShapeError& e) {
      EXPECT_EQ(std::string(e.what()), "Tensor: negative extent in shape " + shape_to_string(shape));
    }
  }
  EXPECT_THROW(Tensor::empty(Shape{-1, -1}, DType::f64), ShapeError);
  const Tensor empty(Shape{0, 3}, DType::f32);
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(empty.nbytes(), 0u);
  EXPECT_EQ(Tensor::empty(Shape{4, 0}, DType::f64).nbytes(), 0u);
}

TEST(Tensor, AstypeToIntegerSaturates) {
  // A floating value beyond i32's range was cast as it was, which is undefined behaviour in C++
  // (x86 gave INT32_MIN for 3e9 and for NaN alike).
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> values = {3e9f, -3e9f, inf, -inf, nan, 2.9f, -2.9f, 2147483520.f, -2147483648.f};
  const std::vector<std::int32_t> expected = {INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, 0, 2, -2, 2147483520,
                                              INT32_MIN};
  Tensor f = Tensor::empty({static_cast<std::int64_t>(values.size())}, DType::f32);
  std::copy(values.begin(), values.end(), f.data<float>());
  for (DType from : {DType::f32, DType::f64, DType::bf16}) {
    Tensor i = f.astype(from).astype(DType::i32);
    ASSERT_EQ(i.dtype(), DType::i32);
    for (std::size_t k = 0; k < values.size(); ++k) {
      if (from == DType::bf16 && (k == 5 || k == 6 || k == 7)) continue;  // bf16 rounds these
      EXPECT_EQ(i.data<std::int32_t>()[k], expected[k]) << dtype_name(from) << " " << values[k];
    }
  }
  Tensor bf = f.astype(DType::bf16).astype(DType::i32);
  EXPECT_EQ(bf.data<std::int32_t>()[5], 2);   // 2.90625 in bf16
  EXPECT_EQ(bf.data<std::int32_t>()[6], -2);
  EXPECT_EQ(bf.data<std::int32_t>()[7], INT32_MAX);  // rounds up to 2^31
}

}  // namespace
}  // namespace tessera
