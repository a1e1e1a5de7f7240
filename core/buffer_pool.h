// A cache of freed tensor buffers, keyed by size. A train step allocates the same sizes every
// step; reusing them avoids the page faults and kernel zeroing of fresh allocations (a quarter
// of a step's time without it). Only buffers of at least 64 KiB are cached, at most 512 MiB in all.
#pragma once

#include <cstddef>

namespace tessera {

// 64-byte aligned storage of `bytes` (a multiple of 64), from the cache when it has one.
void* pool_allocate(std::size_t bytes);
// Returns storage to the cache, or to the system when the cache is full. Never throws.
void pool_free(void* p, std::size_t bytes) noexcept;
// Bytes held by the cache now.
std::size_t pool_cached_bytes();

}  // namespace tessera
