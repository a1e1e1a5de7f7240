// FlushDenormals: subnormal operands read as zero and subnormal results written as zero on this
// thread while a guard flushes, the previous mode back when it ends; Adam's kernel, whose moments
// are what decays into the subnormal range in training, gives the flushed bits under it.
#include "core/denormals.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <vector>

#include "core/kernels.h"

namespace tessera {
namespace {

std::uint32_t bits(float x) { return std::bit_cast<std::uint32_t>(x); }

// Through volatile operands, so that the compiler cannot fold the product at compile time (where
// the thread's mode does not apply).
float product(float a, float b) {
  volatile float x = a, y = b;
  return x * y;
}

const float kSubnormal = std::bit_cast<float>(std::uint32_t{0x00000100});  // 256 x 2^-149

// Adam's update of 37 elements (vector lanes and a scalar tail) whose gradient is zero and whose
// moments are kSubnormal: p stays 0.5, each moment decays by its beta.
struct AdamOnSubnormals {
  std::vector<float> p = std::vector<float>(37, 0.5f), m = std::vector<float>(37, kSubnormal),
                     v = std::vector<float>(37, kSubnormal);
  AdamOnSubnormals() {
    const AdamConstants<float> c{0.9f, 0.999f, 1e-8f, 1e-3f, 1.0f, 1.0f, 0.0f};
    const std::vector<float> g(37, 0.0f);
    adam_update(p.data(), g.data(), m.data(), v.data(), 37, c);
  }
};

#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)

TEST(Denormals, AGuardFlushesOperandsAndResultsAndRestoresTheMode) {
  ASSERT_FALSE(denormals_flushed());  // a core test has no Environment: the thread's IEEE default
  EXPECT_EQ(bits(product(kSubnormal, 1.0f)), 0x00000100u);
  EXPECT_EQ(bits(product(0x1p-100f, 0x1p-30f)), bits(0x1p-130f));
  {
    FlushDenormals flush;
    EXPECT_TRUE(denormals_flushed());
    EXPECT_EQ(bits(product(kSubnormal, 1.0f)), 0u);               // the operand read as zero
    EXPECT_EQ(bits(product(-kSubnormal, 1.0f)), 0x80000000u);     // with its sign
    EXPECT_EQ(bits(product(0x1p-100f, 0x1p-30f)), 0u);            // the result written as zero
    EXPECT_EQ(bits(product(0x1p-100f, 0x1p-26f)), bits(0x1p-126f));  // the smallest normal stays
    {
      FlushDenormals keep(false);
      EXPECT_FALSE(denormals_flushed());
      EXPECT_EQ(bits(product(kSubnormal, 1.0f)), 0x00000100u);
    }
    EXPECT_TRUE(denormals_flushed());
    // The first moment of an element whose gradient is zero decays by beta1 a step: 0.9 times a
    // subnormal is a subnormal kept, zero flushed; the second moment alike.
    const AdamOnSubnormals flushed;
    for (int i = 0; i < 37; ++i) {
      EXPECT_EQ(bits(flushed.m[i]), 0u) << i;
      EXPECT_EQ(bits(flushed.v[i]), 0u) << i;
      EXPECT_EQ(flushed.p[i], 0.5f) << i;
    }
  }
  EXPECT_FALSE(denormals_flushed());
  const AdamOnSubnormals kept;
  for (int i = 0; i < 37; ++i) {
    EXPECT_EQ(bits(kept.m[i]), bits(product(0.9f, kSubnormal))) << i;
    EXPECT_NE(bits(kept.m[i]), 0u) << i;
  }
}

#endif

}  // namespace
}  // namespace tessera
