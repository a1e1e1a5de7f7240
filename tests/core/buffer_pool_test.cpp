// The tensor buffer cache (core/buffer_pool.h): a freed buffer of any size comes back for the
// next request of its size, a step's buffers are all kept even when they add up to more than
// the cache's 512 MiB floor, the cache never holds more than the program's own high-water mark
// allows, and under AddressSanitizer a cached buffer cannot be read.
// The large buffers are never written, so they cost address space, not memory.
#include "core/buffer_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "core/tensor.h"

namespace tessera {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// A f32 tensor of exactly `bytes` bytes (a multiple of 64).
Tensor of_bytes(std::size_t bytes) { return Tensor::empty({static_cast<std::int64_t>(bytes / 4)}, DType::f32); }

TEST(BufferPool, AFreedBufferComesBackForTheSameSize) {
  pool_release_cached();
  const void* first = nullptr;
  {
    Tensor t = of_bytes(kMiB);
    first = t.raw();
  }
  EXPECT_EQ(pool_cached_bytes(), kMiB);
  Tensor other = of_bytes(2 * kMiB);  // another size: not this buffer
  EXPECT_NE(other.raw(), first);
  EXPECT_EQ(pool_cached_bytes(), kMiB);
  Tensor again = of_bytes(kMiB);
  EXPECT_EQ(again.raw(), first);
  EXPECT_EQ(pool_cached_bytes(), 0u);
}

// Small buffers too (an op's scalars and row statistics), down to one cache line.
TEST(BufferPool, SmallBuffersAreCachedToo) {
  pool_release_cached();
  const void* first = nullptr;
  {
    Tensor one_line = of_bytes(64);
    first = one_line.raw();
  }
  EXPECT_EQ(pool_cached_bytes(), 64u);
  { Tensor other = of_bytes(128); }
  EXPECT_EQ(pool_cached_bytes(), 64u + 128u);
  Tensor again = of_bytes(64);
  EXPECT_EQ(again.raw(), first);
  EXPECT_EQ(pool_cached_bytes(), 128u);
  pool_release_cached();
  EXPECT_EQ(pool_cached_bytes(), 0u);
}

// Tensor::empty and the zeroing constructor take one buffer each, of the tensor's own size
// rounded up to 64 bytes: the peak of live tensor bytes rises by exactly that.
TEST(BufferPool, ATensorTakesOneBuffer) {
  const std::size_t live_before = live_tensor_bytes();
  reset_peak_tensor_bytes();
  { Tensor t = Tensor::empty({100}, DType::f32); }
  EXPECT_EQ(peak_tensor_bytes(), live_before + 448);
  reset_peak_tensor_bytes();
  { Tensor t({3, 5}, DType::f64); }
  EXPECT_EQ(peak_tensor_bytes(), live_before + 128);
  EXPECT_EQ(live_tensor_bytes(), live_before);
}

// A tensor of no bytes (the default tensor, a zero extent, their copies) takes no buffer: the
// live and peak bytes stay where they were and nothing comes back to the cache when it goes.
// Its storage is still a 64-byte aligned address, not null.
TEST(BufferPool, ATensorOfNoBytesTakesNoBuffer) {
  pool_release_cached();
  const std::size_t live_before = live_tensor_bytes();
  reset_peak_tensor_bytes();
  {
    Tensor none;
    Tensor zero_rows({0, 5}, DType::f32);
    Tensor empty = Tensor::empty({3, 0}, DType::f64);
    Tensor copy = zero_rows;
    for (const Tensor* t : {&none, &zero_rows, &empty, &copy}) {
      EXPECT_EQ(t->nbytes(), 0u);
      ASSERT_NE(t->raw(), nullptr);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t->raw()) % 64, 0u);
    }
    EXPECT_EQ(live_tensor_bytes(), live_before);
  }
  EXPECT_EQ(peak_tensor_bytes(), live_before);
  EXPECT_EQ(live_tensor_bytes(), live_before);
  EXPECT_EQ(pool_cached_bytes(), 0u);
  // A tensor of one element takes a buffer of its own again, of one cache line.
  { Tensor one({1}, DType::f32); }
  EXPECT_EQ(peak_tensor_bytes(), live_before + 64);
  EXPECT_EQ(pool_cached_bytes(), 64u);
}

// Buffers of 2 MiB and more are coloured: consecutive ones start at the offsets past a 2 MiB
// boundary that next_colour_offset gives in turn (64 (1 + 21 i mod 64): three in a row pairwise
// at least 1,344 bytes apart mod 4 KiB), every byte of each is usable, and each goes back to the
// system whole (under the sanitizers, a wrong start given back to free or a write past the
// allocation is reported). Smaller buffers are not coloured and take no turn.
TEST(BufferPool, LargeBuffersStartAtColoursTakenInTurn) {
  pool_release_cached();
  const auto offset = [](const Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.raw()) % 4096; };
  ASSERT_EQ(kColouredBytes, 2 * kMiB);
  for (const std::size_t bytes : {kColouredBytes, 3 * kMiB + 64, 4 * kMiB}) {
    std::vector<Tensor> ts;
    std::vector<std::size_t> expected;
    // The offsets the next coloured buffers take are the turns after this call's.
    const std::size_t turn = next_colour_offset() / 64 - 1;
    for (int i = 0; i < 3; ++i) {
      expected.push_back(64 * (1 + (turn + 21 * (i + 1)) % 64));
      ts.push_back(of_bytes(bytes));
      { Tensor small = of_bytes(kColouredBytes - 64); }  // not coloured: takes no turn
    }
    for (int i = 0; i < 3; ++i) {
      SCOPED_TRACE(::testing::Message() << bytes << " bytes, buffer " << i);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(ts[i].raw()) % (2 * kMiB), expected[i]);
      for (int j = 0; j < i; ++j) {
        const std::size_t apart = (offset(ts[i]) + 4096 - offset(ts[j])) % 4096;
        EXPECT_GE(std::min(apart, 4096 - apart), 1344u);
      }
      std::memset(ts[i].raw(), 0xab, bytes);
    }
    ts.clear();
    pool_release_cached();  // each back to the system from its own start
  }
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TESSERA_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(TESSERA_TEST_ASAN)
// A cached buffer is poisoned: reading a tensor's storage after the tensor is gone is reported
// as it would be without the cache.
TEST(BufferPoolDeathTest, ReadingACachedBufferIsReported) {
  EXPECT_DEATH(
      {
        const float* gone = nullptr;
        {
          Tensor t = of_bytes(4096);
          gone = t.data<float>();
        }
        volatile float read = gone[3];
        (void)read;
      },
      "use-after-poison");
}

// Tensors of no bytes share one storage, poisoned: writing an element one of them does not have
// is reported, not absorbed.
TEST(BufferPoolDeathTest, WritingIntoATensorOfNoBytesIsReported) {
  EXPECT_DEATH(
      {
        Tensor none({0}, DType::f32);
        static_cast<volatile float*>(none.raw())[0] = 1.0f;
      },
      "use-after-poison");
}
#endif

// Six buffers of 256 MiB (1.5 GiB, three times the floor), freed together as a step frees its
// gradients, are all kept and all handed back to the next step.
TEST(BufferPool, KeepsAStepsBuffersBeyondTheFloor) {
  pool_release_cached();
  std::vector<Tensor> step;
  std::set<const void*> addresses;
  for (int i = 0; i < 6; ++i) {
    step.push_back(of_bytes(256 * kMiB));
    addresses.insert(step.back().raw());
  }
  step.clear();
  EXPECT_EQ(pool_cached_bytes(), 6 * 256 * kMiB);
  for (int i = 0; i < 6; ++i) {
    step.push_back(of_bytes(256 * kMiB));
    EXPECT_EQ(addresses.count(step.back().raw()), 1u) << "buffer " << i << " was allocated afresh";
  }
  EXPECT_EQ(pool_cached_bytes(), 0u);
}

// The high-water mark of live tensor bytes is now 1.5 GiB (the test above, or this one's own
// buffers). With 1.5 GiB cached, a 1 GiB buffer of a new size raises the live bytes to 1 GiB:
// the cache may then hold max(512 MiB, 1.5 GiB - 1 GiB) and gives back four of its six buffers,
// keeping 512 MiB. Freeing the 1 GiB buffer brings the live bytes back down, and the
// cache keeps it too (1.5 GiB in all, the mark).
TEST(BufferPool, HoldsNoMoreThanTheHighWaterMarkAllows) {
  pool_release_cached();
  const std::size_t live_before = live_tensor_bytes();
  {
    std::vector<Tensor> step;
    for (int i = 0; i < 6; ++i) step.push_back(of_bytes(256 * kMiB));
  }
  ASSERT_EQ(pool_cached_bytes(), 6 * 256 * kMiB);
  {
    Tensor big = of_bytes(1024 * kMiB);
    EXPECT_EQ(live_tensor_bytes(), live_before + 1024 * kMiB);
    EXPECT_EQ(pool_cached_bytes(), 2 * 256 * kMiB);
  }
  EXPECT_EQ(pool_cached_bytes(), 2 * 256 * kMiB + 1024 * kMiB);
  pool_release_cached();
  EXPECT_EQ(pool_cached_bytes(), 0u);
  EXPECT_EQ(live_tensor_bytes(), live_before);
}

// The cache gives back its largest buffers first: with a 1 MiB buffer cached beside 256 MiB ones,
// an eviction takes 256 MiB buffers and keeps the small one (the cache's floor is 512 MiB).
TEST(BufferPool, EvictsTheLargestBuffersFirst) {
  pool_release_cached();
  {
    std::vector<Tensor> step;
    for (int i = 0; i < 6; ++i) step.push_back(of_bytes(256 * kMiB));
    step.push_back(of_bytes(kMiB));
  }
  ASSERT_EQ(pool_cached_bytes(), 6 * 256 * kMiB + kMiB);
  {
    Tensor big = of_bytes(1024 * kMiB);
    ASSERT_LT(pool_cached_bytes(), 6 * 256 * kMiB + kMiB) << "no eviction";
    EXPECT_EQ(pool_cached_bytes() % (256 * kMiB), kMiB) << "the 1 MiB buffer was given back before a 256 MiB one";
  }
  pool_release_cached();
}

}  // namespace
}  // namespace tessera
