// A cache of freed tensor buffers, keyed by size. A train step allocates the same sizes every
// step; reusing them avoids the page faults and kernel zeroing of fresh allocations (a quarter
// of a step's time without it) and, for the small ones, the C library's aligned allocation,
// which takes its slow path for every 64-byte aligned request (the transformer's step on 8
// ranks of 2 cores spent a tenth of its CPU time in it at a model width of 16). Buffers of every
// size are cached; under AddressSanitizer a cached buffer is poisoned until it is reused.
//
// The cache holds at most 512 MiB, or more where the program itself once held more: with L live
// bytes of tensors, at most max(512 MiB, H - L), H the highest L so far. So the tensor memory a
// process keeps (live + cached) never exceeds the larger of its own high-water mark and
// L + 512 MiB. A miss that raises L gives back (largest sizes first) what no longer fits; an
// allocation the system refuses gives back the whole cache and is tried once more.
//
// Buffers of 2 MiB and more are coloured: each starts 64 to 4,096 bytes (a multiple of 64) past
// a 2 MiB boundary, the offsets taken in turn (next_colour_offset), and the 2 MiB pages it would
// take uncoloured are advised to transparent huge pages. Until 2026-11-29 every such buffer began
// on the boundary, and the rows of a weight and of its two Adam moments, 4 KiB long in a block of
// depth 1024 and streamed together by the one-pass update (core/kernels.h, thin_rows_adam), fell
// in one set of the 12-way L1 with the gradient's rows the update keeps there: the two-rank step
// of the tutorial's MLP at depth 1024 ran 6-9% faster in seven of nine interleaved pairs with the
// arrays apart (docs/design.md, "The step today").
#pragma once

#include <cstddef>

namespace tessera {

// 64-byte aligned storage of `bytes` (a multiple of 64), from the cache when it has one.
void* pool_allocate(std::size_t bytes);
// Returns storage to the cache, or to the system when the cache is full. Never throws.
void pool_free(void* p, std::size_t bytes) noexcept;
// Bytes held by the cache now.
std::size_t pool_cached_bytes();
// Returns every cached buffer to the system (the live ones are untouched).
void pool_release_cached() noexcept;
// The offset from a 4 KiB page's start at which the next coloured buffer begins: 64 to 4,096
// bytes, the 64 multiples of 64 in turn with a stride of 21 (the i-th call: 64 (1 + 21 i mod 64)).
// Also for arrays laid out as tensors are outside the pool (bench_train's floor).
std::size_t next_colour_offset();
// The smallest buffer that is coloured.
inline constexpr std::size_t kColouredBytes = std::size_t{2} << 20;
// The most a coloured buffer starts past its boundary: what colouring adds to an allocation.
inline constexpr std::size_t kColourSpan = 4096;

// Tensor storage accounting: the bytes of every Tensor buffer allocated and not yet freed in
// this process (each rounded up to 64 bytes; the cache above is not counted), and the highest
// value it has reached since reset_peak_tensor_bytes() (which sets the peak to the live bytes).
// A function of the program alone, not of the allocator or the machine, so tests can assert it
// (remat's peak memory, tests/nn/remat_test.cpp).
std::size_t live_tensor_bytes();
std::size_t peak_tensor_bytes();
void reset_peak_tensor_bytes();
// Called by Tensor for every buffer it allocates and frees.
void count_tensor_allocation(std::size_t bytes) noexcept;
void count_tensor_free(std::size_t bytes) noexcept;

// The bytes Tensor's copy constructor and copy assignment have copied in this process (deep
// copies) since reset_tensor_copy_bytes(): a function of the program alone, so tests can assert
// which ops copy a block and which hand it on (tests/nn/lm_ops_test.cpp).
std::size_t tensor_copy_bytes();
void reset_tensor_copy_bytes();
void count_tensor_copy(std::size_t bytes) noexcept;

}  // namespace tessera
