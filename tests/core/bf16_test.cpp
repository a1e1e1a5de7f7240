// bf16: the scalar and bulk conversions against Eigen::bfloat16 (the reference rounding), the
// dtype's name and size, and the kernels' f32 accumulation with one rounding at the end.
#include <Eigen/Core>
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/bfloat16.h"
#include "core/einsum_local.h"
#include "core/error.h"
#include "core/kernels.h"
#include "core/tensor.h"

namespace tessera {
namespace {

float f32_from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::uint16_t eigen_bits(float f) { return Eigen::bfloat16(f).value; }

TEST(Bf16, DtypeNameSizeParse) {
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_name(DType::bf16), "bf16");
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_TRUE(is_floating(DType::bf16));
  try {
    parse_dtype("bfloat16");
    FAIL() << "no error";
  } catch (const SpecError& e) {
    EXPECT_STREQ(e.what(), "unknown dtype 'bfloat16' (expected f32, f64, i32 or bf16)");
  }
}

// Every sign/exponent/upper-mantissa pattern with the low 16 bits that decide the rounding: exact,
// just below, at and just above the tie, and the all-ones tail; plus random patterns. NaNs,
// infinities and subnormals are among them.
TEST(Bf16, ScalarRoundingMatchesEigen) {
  const std::uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xc000, 0xffff};
  for (std::uint32_t high = 0; high < 0x10000; ++high) {
    for (std::uint32_t low : lows) {
      const float f = f32_from_bits(high << 16 | low);
      ASSERT_EQ(bf16_bits_from_f32(f), eigen_bits(f)) << std::hex << (high << 16 | low);
      ASSERT_EQ(bfloat16(f).bits, eigen_bits(f));
    }
  }
  std::mt19937 gen(7);
  for (int i = 0; i < 1000000; ++i) {
    const float f = f32_from_bits(gen());
    ASSERT_EQ(bf16_bits_from_f32(f), eigen_bits(f));
  }
}

TEST(Bf16, BulkConversionsMatchScalar) {
  std::vector<float> in;
  std::mt19937 gen(11);
  for (int i = 0; i < 100003; ++i) in.push_back(f32_from_bits(gen()));
  in.push_back(f32_from_bits(0x7f800000u));  // +inf
  in.push_back(f32_from_bits(0xff800001u));  // a negative signalling NaN
  in.push_back(f32_from_bits(0x00000001u));  // the smallest subnormal
  in.push_back(f32_from_bits(0x7f7fffffu));  // the largest float: rounds to +inf
  std::vector<bfloat16> out(in.size());
  convert_f32_to_bf16(in.data(), out.data(), in.size());
  std::vector<float> back(in.size());
  convert_bf16_to_f32(out.data(), back.data(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(out[i].bits, eigen_bits(in[i])) << i;
    ASSERT_EQ(out[i].bits, bf16_bits_from_f32(in[i]));
    std::uint32_t u;
    std::memcpy(&u, &back[i], 4);
    ASSERT_EQ(u, static_cast<std::uint32_t>(out[i].bits) << 16);  // widening is exact
  }
  EXPECT_EQ(out[in.size() - 4].bits, 0x7f80u);
  EXPECT_EQ(out[in.size() - 3].bits, 0xffc0u);  // quiet, sign kept, never infinity
  EXPECT_EQ(out[in.size() - 2].bits, 0x0000u);
  EXPECT_EQ(out[in.size() - 1].bits, 0x7f80u);
}

// The bulk conversion on the patterns of ScalarRoundingMatchesEigen: every sign/exponent/upper
// mantissa with the low 16 bits at, around and past the tie. Random bits alone reach an exact tie
// with an odd last bit about once in 2^17 values (the 100003 above may hold none), so a bulk
// rounding of ties away from even passed them.
TEST(Bf16, BulkConversionRoundsTiesToEven) {
  const std::uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xc000, 0xffff};
  std::vector<float> in;
  for (std::uint32_t high = 0; high < 0x10000; ++high) {
    for (std::uint32_t low : lows) in.push_back(f32_from_bits(high << 16 | low));
  }
  std::vector<bfloat16> out(in.size());
  convert_f32_to_bf16(in.data(), out.data(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    std::uint32_t u;
    std::memcpy(&u, &in[i], 4);
    ASSERT_EQ(out[i].bits, eigen_bits(in[i])) << std::hex << u;
  }
  EXPECT_EQ(out[0x3f80 * 7 + 3].bits, 0x3f80u);  // 1 + 2^-8, a tie: down to the even 1
  EXPECT_EQ(out[0x3f81 * 7 + 3].bits, 0x3f82u);  // a tie above the odd 1 + 2^-7: up to even
}

// A double is rounded once: 1 + 2^-8 + 2^-30 lies above the tie between 1 and 1 + 2^-7, so it
// rounds up; rounding to f32 first would land on the tie and round to even (1).
TEST(Bf16, DoubleRoundsOnce) {
  const double v = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  EXPECT_EQ(bf16_bits_from_f32(static_cast<float>(v)), 0x3f80u);  // the double rounding
  EXPECT_EQ(bf16_bits_from_f64(v), 0x3f81u);
  EXPECT_EQ(bfloat16(v).bits, 0x3f81u);
  EXPECT_EQ(bfloat16(1.0 + std::ldexp(1.0, -8)).bits, 0x3f80u);  // an exact tie: to even
  EXPECT_EQ(bfloat16(-1e300).bits, 0xff80u);                     // overflow: -inf
  EXPECT_EQ(float(bfloat16(3.0)), 3.0f);
}

TEST(Bf16, TensorAstypeFullAt) {
  Tensor x = Tensor::from_vector<float>({4}, {1.0f, 1.00390625f, -2.5f, 1e-3f});
  Tensor b = x.astype(DType::bf16);
  EXPECT_EQ(b.dtype(), DType::bf16);
  EXPECT_EQ(b.nbytes(), 8u);
  EXPECT_EQ(b.data<bfloat16>()[1].bits, 0x3f80u);  // 1 + 2^-8: the tie rounds to even
  EXPECT_EQ(b.at(2), -2.5);
  EXPECT_EQ(b.at(3), static_cast<double>(f32_from_bf16_bits(bf16_bits_from_f32(1e-3f))));
  Tensor back = b.astype(DType::f32);
  EXPECT_EQ(back.data<float>()[0], 1.0f);
  Tensor f = Tensor::full({3}, 0.1, DType::bf16);
  EXPECT_EQ(f.data<bfloat16>()[2].bits, bf16_bits_from_f64(0.1));
  EXPECT_EQ(b.astype(DType::f64).at(2), -2.5);
}

Tensor random_bf16(const Shape& shape, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  Tensor t(shape, DType::f32);
  for (auto& v : t.values<float>()) v = normal(gen);
  return t.astype(DType::bf16);
}

// bf16 operands: the product is the f32 GEMM of the widened operands, rounded once.
TEST(Bf16, EinsumComputesInF32AndRoundsOnce) {
  Tensor a = random_bf16({3, 8, 64}, 1);
  Tensor b = random_bf16({3, 64, 5}, 2);
  Tensor c = einsum_local(EinsumSubscripts::parse("bmk,bkn->bmn"), a, b);
  ASSERT_EQ(c.dtype(), DType::bf16);
  Tensor reference = einsum_local(EinsumSubscripts::parse("bmk,bkn->bmn"), a.astype(DType::f32), b.astype(DType::f32));
  EXPECT_TRUE(c.bit_equal(reference.astype(DType::bf16)));
  // Transposed operand layouts take the same path.
  Tensor ct = einsum_local(EinsumSubscripts::parse("bkm,bkn->bnm"), a.reshaped({3, 64, 8}), b);
  Tensor rt = einsum_local(EinsumSubscripts::parse("bkm,bkn->bnm"), a.reshaped({3, 64, 8}).astype(DType::f32),
                           b.astype(DType::f32));
  EXPECT_TRUE(ct.bit_equal(rt.astype(DType::bf16)));
}

// 4096 ones summed: 4096 in an f32 accumulator; a bf16 accumulator stops at 256 (256 + 1 rounds
// back to 256 with 8 significant bits).
TEST(Bf16, AccumulationIsF32) {
  Tensor ones = Tensor::full({1, 4096}, 1.0, DType::bf16);
  Tensor col = Tensor::full({4096, 1}, 1.0, DType::bf16);
  EXPECT_EQ(einsum_local(EinsumSubscripts::parse("mk,kn->mn"), ones, col).at(0), 4096.0);
  EXPECT_EQ(reduce_sum(ones, {1}).at(0), 4096.0);
  EXPECT_EQ(reduce_sum(ones, {1}).dtype(), DType::bf16);
  EXPECT_EQ(sum_all(ones), 4096.0);
  bfloat16 acc(0.0f);
  for (int i = 0; i < 4096; ++i) acc += bfloat16(1.0f);
  EXPECT_EQ(float(acc), 256.0f);  // what a bf16 accumulator would give
}

TEST(Bf16, ElementwiseRoundsOncePerElement) {
  Tensor a = random_bf16({4, 33}, 3);
  Tensor b = random_bf16({33}, 4);
  for (BinaryOp op : {BinaryOp::add, BinaryOp::mul, BinaryOp::div, BinaryOp::max}) {
    Tensor r = binary(op, a, b);
    ASSERT_EQ(r.dtype(), DType::bf16);
    EXPECT_TRUE(r.bit_equal(binary(op, a.astype(DType::f32), b.astype(DType::f32)).astype(DType::bf16)));
  }
  EXPECT_TRUE(unary(UnaryOp::exp, a).bit_equal(unary(UnaryOp::exp, a.astype(DType::f32)).astype(DType::bf16)));
  Tensor c = a;
  add_inplace(c, a);
  EXPECT_TRUE(c.bit_equal(binary(BinaryOp::add, a, a)));
  EXPECT_TRUE(permute_dims(a, {1, 0}).astype(DType::f32).bit_equal(permute_dims(a.astype(DType::f32), {1, 0})));
  EXPECT_THROW(binary(BinaryOp::add, a, b.astype(DType::f32)), DTypeError);
}

}  // namespace
}  // namespace tessera
