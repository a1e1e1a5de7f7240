// Size-keyed free lists, bounded by the program's own high-water mark (buffer_pool.h).
#include "core/buffer_pool.h"

#include <sanitizer/asan_interface.h>  // poisoning: no-ops unless built with AddressSanitizer
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace tessera {

namespace {

constexpr std::size_t kAlignment = 64;
// The cache may always hold this much; beyond it, only up to the program's own high-water mark
// of live tensor bytes (pool_allocate).
constexpr std::size_t kCacheFloor = std::size_t{512} << 20;
// Buffers of 2 MiB and more are 2 MiB aligned and asked to be backed by transparent huge pages:
// on these machines a first touch costs a page fault per 4 KiB page, and faulting in 2.4 GB
// took 9.1 s with 4 KiB pages, 1.1 s with huge ones (tests/collectives/large_transfer_test.cpp).
constexpr std::size_t kHugePage = std::size_t{2} << 20;
// Buffers of kColouredBytes and more start a colour (next_colour_offset) past their allocation's
// 2 MiB aligned start (buffer_pool.h); the allocation's own start is kept in the 8 bytes just
// before the buffer. The stride of 21 lines puts consecutive buffers (a weight and its two
// moments) about a third of an L1 way apart.
std::atomic<std::size_t> colours_taken{0};

struct Pool {
  std::mutex mutex;
  std::unordered_map<std::size_t, std::vector<void*>> free_lists;
  std::size_t cached = 0;
};

Pool& pool() {
  static Pool* instance = new Pool;  // never destroyed: buffers may be freed during static teardown
  return *instance;
}

std::atomic<std::size_t> live_bytes{0};
std::atomic<std::size_t> peak_bytes{0};
std::atomic<std::size_t> high_water{0};  // peak_bytes without its resets: the cache's bound

void raise_to(std::atomic<std::size_t>& mark, std::size_t now) {
  std::size_t seen = mark.load(std::memory_order_relaxed);
  while (now > seen && !mark.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
}

// The most the cache may hold while `live` bytes of tensors are live: kCacheFloor, or what the
// program once held above `live` at its high-water mark. So live + cached never exceeds the
// larger of that mark and live + kCacheFloor: a train step whose buffers add up to more than
// kCacheFloor still gets every one of them back the next step (1-rank B8 L8 D4096: 1 GiB of
// gradients, of which 512 MiB were faulted in afresh, and zeroed by the kernel, every step).
std::size_t cache_allowance(std::size_t live) {
  const std::size_t mark = high_water.load(std::memory_order_relaxed);
  return std::max(kCacheFloor, mark > live ? mark - live : 0);
}

void release(void* p, std::size_t bytes) noexcept;

// Frees cached buffers (the largest sizes first) until the cache holds at most `allowed` bytes.
// Called with the pool's mutex held.
void evict_to(Pool& p, std::size_t allowed) {
  while (p.cached > allowed) {
    auto largest = p.free_lists.end();
    for (auto it = p.free_lists.begin(); it != p.free_lists.end(); ++it) {
      if (!it->second.empty() && (largest == p.free_lists.end() || it->first > largest->first)) largest = it;
    }
    if (largest == p.free_lists.end()) return;
    ASAN_UNPOISON_MEMORY_REGION(largest->second.back(), largest->first);
    release(largest->second.back(), largest->first);
    largest->second.pop_back();
    p.cached -= largest->first;
  }
}

}  // namespace

void count_tensor_allocation(std::size_t bytes) noexcept {
  const std::size_t now = live_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  raise_to(peak_bytes, now);
  raise_to(high_water, now);
}

void count_tensor_free(std::size_t bytes) noexcept { live_bytes.fetch_sub(bytes, std::memory_order_relaxed); }

namespace {
std::atomic<std::size_t> copied_bytes{0};
}  // namespace

void count_tensor_copy(std::size_t bytes) noexcept { copied_bytes.fetch_add(bytes, std::memory_order_relaxed); }
std::size_t tensor_copy_bytes() { return copied_bytes.load(std::memory_order_relaxed); }
void reset_tensor_copy_bytes() { copied_bytes.store(0, std::memory_order_relaxed); }

std::size_t live_tensor_bytes() { return live_bytes.load(std::memory_order_relaxed); }
std::size_t peak_tensor_bytes() { return peak_bytes.load(std::memory_order_relaxed); }
void reset_peak_tensor_bytes() { peak_bytes.store(live_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed); }

namespace {

void* fresh_allocation(std::size_t bytes) {
  if (bytes < kColouredBytes) return std::aligned_alloc(kAlignment, bytes);
  const std::size_t offset = next_colour_offset();
  // The 2 MiB pages the buffer would take uncoloured are advised to huge pages; the bytes its
  // colour pushes into the page after them stay on 4 KiB pages (no 2 MiB page for 4 KiB).
  const std::size_t pages = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* start = std::aligned_alloc(kHugePage, (bytes + kColourSpan + kHugePage - 1) / kHugePage * kHugePage);
  if (start == nullptr) return nullptr;
  ::madvise(start, pages, MADV_HUGEPAGE);  // advice only: failure is harmless
  auto* out = static_cast<std::byte*>(start) + offset;
  std::memcpy(out - sizeof(void*), &start, sizeof(void*));
  return out;
}

// Gives a buffer of `bytes` from fresh_allocation back to the system.
void release(void* p, std::size_t bytes) noexcept {
  if (bytes >= kColouredBytes) {
    void* start;
    std::memcpy(&start, static_cast<std::byte*>(p) - sizeof(void*), sizeof(void*));
    std::free(start);
  } else {
    std::free(p);
  }
}

}  // namespace

void* pool_allocate(std::size_t bytes) {
  if (bytes > 0) {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mutex);
    auto it = p.free_lists.find(bytes);
    if (it != p.free_lists.end() && !it->second.empty()) {
      void* out = it->second.back();
      it->second.pop_back();
      p.cached -= bytes;
      ASAN_UNPOISON_MEMORY_REGION(out, bytes);
      return out;
    }
    // A miss: the buffer comes from the system, and the live bytes grow by it, so the cache gives
    // back what no longer fits under its allowance.
    evict_to(p, cache_allowance(live_bytes.load(std::memory_order_relaxed) + bytes));
  }
  if (void* out = fresh_allocation(bytes)) return out;
  // Out of memory: the cached buffers go back to the system and the allocation is tried again.
  pool_release_cached();
  return fresh_allocation(bytes);
}

void pool_free(void* ptr, std::size_t bytes) noexcept {
  if (ptr == nullptr) return;
  if (bytes > 0) {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mutex);
    // Tensor counts the free before it hands the buffer here: live no longer includes it.
    if (p.cached + bytes <= cache_allowance(live_bytes.load(std::memory_order_relaxed))) {
      try {
        p.free_lists[bytes].push_back(ptr);
        p.cached += bytes;
        // Under AddressSanitizer a cached buffer is poisoned until it is handed out again, so a
        // tensor read or written after its free is reported as it would be without the cache.
        ASAN_POISON_MEMORY_REGION(ptr, bytes);
        return;
      } catch (...) {
        // no memory for the list entry: fall through and free
      }
    }
  }
  release(ptr, bytes);
}

std::size_t next_colour_offset() {
  const std::size_t lines = kColourSpan / kAlignment;
  return (1 + colours_taken.fetch_add(1, std::memory_order_relaxed) * 21 % lines) * kAlignment;
}

void pool_release_cached() noexcept {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mutex);
  evict_to(p, 0);
}

std::size_t pool_cached_bytes() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mutex);
  return p.cached;
}

}  // namespace tessera
