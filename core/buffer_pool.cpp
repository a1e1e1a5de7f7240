// Size-keyed free lists with a byte cap.
#include "core/buffer_pool.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace tessera {

namespace {

constexpr std::size_t kAlignment = 64;
constexpr std::size_t kMinCached = std::size_t{64} << 10;
constexpr std::size_t kMaxCachedTotal = std::size_t{512} << 20;
// Buffers of 2 MiB and more are 2 MiB aligned and asked to be backed by transparent huge pages:
// on these machines a first touch costs a page fault per 4 KiB page, and faulting in 2.4 GB
// took 9.1 s with 4 KiB pages, 1.1 s with huge ones (tests/collectives/large_transfer_test.cpp).
constexpr std::size_t kHugePage = std::size_t{2} << 20;

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

}  // namespace

void count_tensor_allocation(std::size_t bytes) noexcept {
  const std::size_t now = live_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::size_t peak = peak_bytes.load(std::memory_order_relaxed);
  while (now > peak && !peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void count_tensor_free(std::size_t bytes) noexcept { live_bytes.fetch_sub(bytes, std::memory_order_relaxed); }

std::size_t live_tensor_bytes() { return live_bytes.load(std::memory_order_relaxed); }
std::size_t peak_tensor_bytes() { return peak_bytes.load(std::memory_order_relaxed); }
void reset_peak_tensor_bytes() { peak_bytes.store(live_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed); }

void* pool_allocate(std::size_t bytes) {
  if (bytes >= kMinCached) {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mutex);
    auto it = p.free_lists.find(bytes);
    if (it != p.free_lists.end() && !it->second.empty()) {
      void* out = it->second.back();
      it->second.pop_back();
      p.cached -= bytes;
      return out;
    }
  }
  if (bytes >= kHugePage) {
    const std::size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* out = std::aligned_alloc(kHugePage, rounded);
    if (out != nullptr) ::madvise(out, rounded, MADV_HUGEPAGE);  // advice only: failure is harmless
    return out;
  }
  return std::aligned_alloc(kAlignment, bytes);
}

void pool_free(void* ptr, std::size_t bytes) noexcept {
  if (ptr == nullptr) return;
  if (bytes >= kMinCached) {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mutex);
    if (p.cached + bytes <= kMaxCachedTotal) {
      try {
        p.free_lists[bytes].push_back(ptr);
        p.cached += bytes;
        return;
      } catch (...) {
        // no memory for the list entry: fall through and free
      }
    }
  }
  std::free(ptr);
}

std::size_t pool_cached_bytes() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mutex);
  return p.cached;
}

}  // namespace tessera
