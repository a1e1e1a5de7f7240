// Local compute kernels. The matrix product goes through Eigen's GEMM on row-major maps (no
// copies for transposed operands), except products with a thin side (a small batch through a
// layer), which have their own kernels below; the rest are plain loops the compiler
// vectorizes. bf16 operands are converted to f32, computed in f32 and the result rounded once
// (f32 accumulation in GEMMs and reductions, one rounding per element for elementwise ops).
#include "core/kernels.h"

#include <Eigen/Core>
#if defined(__SSE2__)
#include <immintrin.h>
#endif
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include "core/error.h"

namespace tessera {

namespace {

template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ConstMap = Eigen::Map<const RowMatrix<T>>;
template <class T>
using MutMap = Eigen::Map<RowMatrix<T>>;

void require_float(const Tensor& x, const char* what) {
  if (!is_floating(x.dtype())) {
    throw DTypeError(std::string(what) + ": expected a f32, f64 or bf16 tensor, got " + std::string(dtype_name(x.dtype())));
  }
}

bool is_bf16(const Tensor& x) { return x.dtype() == DType::bf16; }
Tensor to_f32(const Tensor& x) { return x.astype(DType::f32); }
Tensor to_bf16(const Tensor& x) { return x.astype(DType::bf16); }

template <class T>
using ArrayIn = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using ArrayOut = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;

template <class F>
decltype(auto) dispatch_float(DType dtype, F&& f) {
  if (dtype == DType::f64) return f(double{});
  return f(float{});
}

// Strides of `shape` seen as broadcast to `out` rank (0 for broadcast dimensions).
std::vector<std::int64_t> broadcast_strides(const Shape& shape, const Shape& out) {
  const int r = static_cast<int>(out.size());
  const int offset = r - static_cast<int>(shape.size());
  auto own = row_major_strides(shape);
  std::vector<std::int64_t> strides(r, 0);
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) strides[d + offset] = shape[d] == 1 ? 0 : own[d];
  return strides;
}

// Eigen's GEMM packs blocks of both operands into scratch space it allocates on every call
// when they exceed 128 KiB (aligned_malloc). Under glibc's default mmap threshold (128 KiB,
// raised only after the program frees a larger mapped block) each such call maps fresh pages
// and faults every one in: 256 x 512 x 256 on one core ran at 33-42 GFLOP/s in a new process
// against 140-148 later in the same one. So the blocks live in one buffer per thread, grown
// to the largest product's and kept.
template <class T>
class ScratchBlocking : public Eigen::internal::level3_blocking<T, T> {
 public:
  // The blocking of a column-major product rows x depth by depth x cols, as Eigen computes it
  // for one thread with blocking over the L3 cache (gemm_blocking_space).
  ScratchBlocking(Eigen::Index rows, Eigen::Index cols, Eigen::Index depth) {
    this->m_mc = rows;
    this->m_nc = cols;
    this->m_kc = depth;
    Eigen::internal::computeProductBlockingSizes<T, T, 1, Eigen::Index>(this->m_kc, this->m_mc, this->m_nc, 1);
    constexpr std::size_t kAlign = 64 / sizeof(T);  // the blocks start on cache lines
    const auto size_a = static_cast<std::size_t>(this->m_mc * this->m_kc);
    const auto size_b = static_cast<std::size_t>(this->m_kc * this->m_nc);
    const std::size_t offset_b = (size_a + kAlign - 1) / kAlign * kAlign;
    T* scratch = space(offset_b + size_b);
    this->m_blockA = scratch;
    this->m_blockB = scratch + offset_b;
  }

 private:
  static T* space(std::size_t n) {
    struct Free {
      void operator()(T* p) const { std::free(p); }
    };
    thread_local std::unique_ptr<T, Free> buffer;
    thread_local std::size_t capacity = 0;
    if (n > capacity) {
      const std::size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
      buffer.reset(static_cast<T*>(std::aligned_alloc(64, bytes)));
      if (!buffer) {
        capacity = 0;
        throw std::bad_alloc();
      }
      capacity = n;
    }
    return buffer.get();
  }
};

#if defined(__AVX512F__)
// Eigen's gemm_pack_rhs for a row-major f32 block (element (k, j) at in[k * ld + j]) and nr = 4:
// the same bytes (panels of 4 columns, each depth rows of 4 values, then the columns past the last
// panel one at a time), written from 16 columns of 4 rows at a time. Eigen's loop reads one
// 16-byte piece of a row per row and panel, so each row's cache line is read once per panel;
// rows 1 or 4 KiB apart fall in a few sets of L1, which then holds fewer of them than a panel
// spans. Here each 64-byte piece of a row is read once and the 4 x 4 blocks of 4 values are
// transposed in registers.
void pack_rhs_rows(float* __restrict out, const float* __restrict in, Eigen::Index ld, Eigen::Index depth,
                   Eigen::Index cols) {
  using Index = Eigen::Index;
  const Index cols4 = cols / 4 * 4, cols16 = cols / 16 * 16;
  Index j = 0;
  for (; j < cols16; j += 16) {
    float* o = out + j * depth;  // panel j / 4 starts at (j / 4) * 4 * depth
    const Index panel = 4 * depth;
    Index k = 0;
    for (; k + 4 <= depth; k += 4) {
      const __m512 r0 = _mm512_loadu_ps(in + k * ld + j), r1 = _mm512_loadu_ps(in + (k + 1) * ld + j);
      const __m512 r2 = _mm512_loadu_ps(in + (k + 2) * ld + j), r3 = _mm512_loadu_ps(in + (k + 3) * ld + j);
      const __m512 t0 = _mm512_shuffle_f32x4(r0, r1, 0x44), t1 = _mm512_shuffle_f32x4(r0, r1, 0xEE);
      const __m512 t2 = _mm512_shuffle_f32x4(r2, r3, 0x44), t3 = _mm512_shuffle_f32x4(r2, r3, 0xEE);
      _mm512_storeu_ps(o + 4 * k, _mm512_shuffle_f32x4(t0, t2, 0x88));
      _mm512_storeu_ps(o + panel + 4 * k, _mm512_shuffle_f32x4(t0, t2, 0xDD));
      _mm512_storeu_ps(o + 2 * panel + 4 * k, _mm512_shuffle_f32x4(t1, t3, 0x88));
      _mm512_storeu_ps(o + 3 * panel + 4 * k, _mm512_shuffle_f32x4(t1, t3, 0xDD));
    }
    for (; k < depth; ++k) {
      for (Index p = 0; p < 4; ++p) _mm_storeu_ps(o + p * panel + 4 * k, _mm_loadu_ps(in + k * ld + j + 4 * p));
    }
  }
  for (; j < cols4; j += 4) {
    for (Index k = 0; k < depth; ++k) _mm_storeu_ps(out + j * depth + 4 * k, _mm_loadu_ps(in + k * ld + j));
  }
  for (; j < cols; ++j) {
    for (Index k = 0; k < depth; ++k) out[j * depth + k] = in[k * ld + j];
  }
}
#endif

// The result mapper of Eigen's GEBP kernel for its first pass over a block of a fresh result:
// the kernel reads each element of C once, adds its product to it and stores it (blas_data_mapper
// in Eigen's BlasUtil.h, the interface gebp_kernel uses); here every read gives +0, so the kernel
// stores 0 + product, the bits an accumulation into a zeroed block gives, without the block being
// zeroed first. A scalar `+=` (the rows past the last packet) stores 0 + its term alike.
template <class T, class Index>
class FreshResultMapper {
 public:
  class LinearMapper {
   public:
    explicit LinearMapper(T* data) : data_(data) {}
    void prefetch(int i) const { Eigen::internal::prefetch(data_ + i); }
    template <class Packet>
    Packet loadPacket(Index) const {
      return Eigen::internal::pset1<Packet>(T(0));
    }
    template <class Packet>
    void storePacket(Index i, const Packet& p) const {
      Eigen::internal::pstoreu<T>(data_ + i, p);
    }

   private:
    T* data_;
  };
  // What `res(i, j) += x` writes: 0 + x.
  struct Element {
    T* at;
    void operator+=(T x) const { *at = T(0) + x; }
  };

  FreshResultMapper(T* data, Index stride) : data_(data), stride_(stride) {}
  FreshResultMapper getSubMapper(Index i, Index j) const { return FreshResultMapper(at(i, j), stride_); }
  LinearMapper getLinearMapper(Index i, Index j) const { return LinearMapper(at(i, j)); }
  Element operator()(Index i, Index j) const { return {at(i, j)}; }
  template <class Packet>
  Packet gatherPacket(Index, Index) const {
    return Eigen::internal::pset1<Packet>(T(0));
  }
  template <class Packet>
  void scatterPacket(Index i, Index j, const Packet& p) const {
    Eigen::internal::pscatter<T, Packet>(at(i, j), p, stride_);
  }

 private:
  T* at(Index i, Index j) const { return data_ + i + j * stride_; }  // column-major
  T* data_;
  Index stride_;
};

// C[m, n] (row-major) += op(A) op(B) through Eigen's GEMM with the blocks of ScratchBlocking: the
// same kernel, blocking and order of operations as `C.noalias() += op(A) * op(B)` where that
// takes its GEMM path (not for a vector side or a sum of sides under 20, which keep Eigen's own
// path: see batched_gemm). With `zero`, C = op(A) op(B), whatever C held.
// C's rows are ldc elements apart (ldc >= n): gemm_strided; n apart: gemm_with_scratch.
//
// With `zero` the loop is Eigen's sequential GEMM (GeneralMatrixMatrix.h, for the column-major
// product C^T = op(B)^T op(A)^T that a row-major result is computed as) written out here, with
// one change: the kernel's first pass over each block of C (its first k-block) reads +0 in place
// of C and stores 0 + its sums (FreshResultMapper), so C is neither zeroed nor read before it is
// written. Zeroing the whole of C first (`C.setZero()`) wrote it once more than the kernel's read
// and write, and a C larger than L2 was read back from L3 or memory; zeroing each block just
// before the kernel (the eleventh session's way) still wrote it twice and read it once
// (docs/design-log.md, "Sixteenth session"). The same blocks, packing and kernel calls in the same
// order as Eigen's own loop, which accumulates: the same bits (kernels_test,
// GemmIntoAFreshResultHasTheBitsOfAnAccumulationIntoZeros).
template <class T, int OrderA, int OrderB>
void gemm_strided(const T* pa, Eigen::Index lda, const T* pb, Eigen::Index ldb, T* pc, Eigen::Index ldc,
                  Eigen::Index m, Eigen::Index n, Eigen::Index k, bool zero = false) {
  if (!zero) {
    ScratchBlocking<T> blocking(n, m, k);
    Eigen::internal::general_matrix_matrix_product<Eigen::Index, T, OrderA, false, T, OrderB, false, Eigen::RowMajor,
                                                   1>::run(m, n, k, pa, lda, pb, ldb, pc, 1, ldc, T(1), blocking,
                                                           nullptr);
    return;
  }
  namespace ei = Eigen::internal;
  using Index = Eigen::Index;
  // The column-major view: rows = n (op(B)^T), cols = m (op(A)^T), res = C^T, columns ldc apart.
  constexpr int kLhsOrder = OrderB == Eigen::RowMajor ? Eigen::ColMajor : Eigen::RowMajor;
  constexpr int kRhsOrder = OrderA == Eigen::RowMajor ? Eigen::ColMajor : Eigen::RowMajor;
  using Traits = ei::gebp_traits<T, T>;
  using LhsMapper = ei::const_blas_data_mapper<T, Index, kLhsOrder>;
  using RhsMapper = ei::const_blas_data_mapper<T, Index, kRhsOrder>;
  using ResMapper = ei::blas_data_mapper<T, Index, Eigen::ColMajor, Eigen::Unaligned, 1>;
  const Index rows = n, cols = m, depth = k;
  if (depth == 0) {  // no block for the kernel to add into
    for (Index j = 0; j < cols; ++j) std::memset(pc + j * ldc, 0, static_cast<std::size_t>(rows) * sizeof(T));
    return;
  }
  ScratchBlocking<T> blocking(rows, cols, depth);
  const LhsMapper lhs(pb, ldb);
  const RhsMapper rhs(pa, lda);
  const ResMapper res(pc, ldc, 1);
  const Index kc = blocking.kc();
  const Index mc = std::min(rows, blocking.mc());
  const Index nc = std::min(cols, blocking.nc());
  ei::gemm_pack_lhs<T, Index, LhsMapper, Traits::mr, Traits::LhsProgress, typename Traits::LhsPacket4Packing, kLhsOrder>
      pack_lhs;
  ei::gemm_pack_rhs<T, Index, RhsMapper, Traits::nr, kRhsOrder> pack_rhs;
  ei::gebp_kernel<T, T, Index, ResMapper, Traits::mr, Traits::nr, false, false> gebp;
  // The first pass over each block of C stores the kernel's sums without reading C.
  ei::gebp_kernel<T, T, Index, FreshResultMapper<T, Index>, Traits::mr, Traits::nr, false, false> fresh_gebp;
  const FreshResultMapper<T, Index> fresh(pc, ldc);
  T* block_a = blocking.blockA();
  T* block_b = blocking.blockB();
  const bool pack_rhs_once = mc != rows && kc == depth && nc == cols;
  for (Index i2 = 0; i2 < rows; i2 += mc) {
    const Index actual_mc = std::min(i2 + mc, rows) - i2;
    for (Index k2 = 0; k2 < depth; k2 += kc) {
      const Index actual_kc = std::min(k2 + kc, depth) - k2;
      pack_lhs(block_a, lhs.getSubMapper(i2, k2), actual_kc, actual_mc);
      for (Index j2 = 0; j2 < cols; j2 += nc) {
        const Index actual_nc = std::min(j2 + nc, cols) - j2;
        if (!pack_rhs_once || i2 == 0) {
#if defined(__AVX512F__)
          if constexpr (std::is_same_v<T, float> && kRhsOrder == Eigen::RowMajor && Traits::nr == 4) {
            pack_rhs_rows(block_b, pa + k2 * lda + j2, lda, actual_kc, actual_nc);
          } else {
            pack_rhs(block_b, rhs.getSubMapper(k2, j2), actual_kc, actual_nc);
          }
#else
          pack_rhs(block_b, rhs.getSubMapper(k2, j2), actual_kc, actual_nc);
#endif
        }
        if (k2 == 0) {
          fresh_gebp(fresh.getSubMapper(i2, j2), block_a, block_b, actual_mc, actual_kc, actual_nc, T(1));
        } else {
          gebp(res.getSubMapper(i2, j2), block_a, block_b, actual_mc, actual_kc, actual_nc, T(1));
        }
      }
    }
  }
}

template <class T, int OrderA, int OrderB>
void gemm_with_scratch(const T* pa, Eigen::Index lda, const T* pb, Eigen::Index ldb, T* pc, Eigen::Index m,
                       Eigen::Index n, Eigen::Index k, bool zero) {
  gemm_strided<T, OrderA, OrderB>(pa, lda, pb, ldb, pc, n, m, n, k, zero);
}

// Products with a thin side, the shapes of a layer applied to a small batch: Eigen packs the
// whole large operand before its kernel runs (for x[8, d] @ W[d, d] it copies W, then reads the
// copy: two passes over the weight where one suffices). These kernels read every operand in
// place, once, and write C once (no zeroing pass before an accumulation).
//
// Below, a(i, l) is element (i, l) of op(A) [m, k]: A[i * k + l], or A[l * m + i] when A is
// stored transposed. V lanes of T form one vector (GCC/Clang vector extensions) of the target's
// widest registers: AVX-512, AVX or SSE. A vector wider than the target's registers is not
// lowered to pairs of registers but through the stack: 64-byte vectors on an AVX2 machine ran
// these kernels at 1.6-2 GFLOP/s (x[8, 1024] W[1024, 1024]), against 34 for Eigen at 17 rows.
#if defined(__AVX512F__)
constexpr int kVectorBytes = 64;
#elif defined(__AVX__)
constexpr int kVectorBytes = 32;
#else
constexpr int kVectorBytes = 16;
#endif
// Register tiles, sized so that no accumulator spills (spilled, x[8, 1024] W[1024, 1024] ran at
// 26-28 GFLOP/s on AVX2 against 41-44 in registers). skinny_rows holds 2 accumulators per row of
// C plus 2 vectors of B and one of A: 8 rows in the 32 registers of AVX-512, 6 in the 16 of AVX
// and SSE. skinny_dots holds rows of A x rows of B accumulators plus one vector per row of B and
// one of A: 4 x 4 with AVX-512, 4 x 2 otherwise (the input gradient g W^T, [8, 1024] x
// [1024, 1024]^T: 33-36 GFLOP/s at 4 x 4 on AVX2, 52-58 at 4 x 2).
constexpr int kSkinnyRows = kVectorBytes == 64 ? 8 : 6;
constexpr int kDotRowsOfA = 4;
constexpr int kDotRowsOfB = kVectorBytes == 64 ? 4 : 2;
constexpr std::int64_t kSkinnyLimit = kThinGemmRows;
// With AVX-512's 32 registers, 5-8 rows of A (a batch of 8 on one rank) take one tile of up to 8
// x 2 accumulators instead of two blocks of 4 x 4, when those rows fit in L1 together
// (kWideDotBytes): the two blocks read each row of B twice, the second time from L2.
// [8, 1024] x [1024, 1024]^T: from memory 195-210 -> 150-162 us, from cache 136-139 -> 105 us;
// the two-rank block [8, 1024] x [512, 1024]^T: 104-108 -> 77-85 us from memory. At a depth of
// 4096 the 8 rows of A (128 KiB) no longer fit and the tile ran slower (3.2-3.4 -> 3.9 ms), so
// deeper products keep the 4 x 4 blocks. Each element's sum runs as before (its lanes over the
// depth, then the same tree of lane shuffles): the same bits.
constexpr int kWideDotRows = kVectorBytes == 64 ? 8 : 0;
constexpr std::int64_t kWideDotBytes = std::int64_t{32} << 10;
// How many strips ahead skinny_rows prefetches B's rows (4 strips: 512 bytes of f32).
constexpr std::int64_t kSkinnyPrefetch = 4;

template <class T>
struct Vec {
  static constexpr int lanes = kVectorBytes / sizeof(T);
  typedef T type __attribute__((vector_size(kVectorBytes)));
  // The same vector at any element-aligned address, aliasing the elements it is read from.
  typedef T unaligned __attribute__((vector_size(kVectorBytes), aligned(sizeof(T)), may_alias));
};

// a * b + c for a scalar or a vector (Vec<T>::type), as one fused multiply-add where the target has
// one, else a product and a sum: the one form every multiply-add of the thin kernels, of Adam and
// of the fused row kernel takes, written out rather than left to the compiler's contraction (which
// may fuse either product of x * y + z * w, and not alike in a vector loop and its scalar tail), so
// that an element has the same bits whichever of them computes it and whichever lanes it sits in.
template <class V>
inline V madd(V a, V b, V c) {
#if defined(__FMA__)
  if constexpr (std::is_same_v<V, float>) {
    return __builtin_fmaf(a, b, c);
  } else if constexpr (std::is_same_v<V, double>) {
    return __builtin_fma(a, b, c);
  } else {
    using T = std::remove_cvref_t<decltype(a[0])>;
    if constexpr (sizeof(V) == 64) {
#if defined(__AVX512F__)
      if constexpr (std::is_same_v<T, float>) return (V)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
      else return (V)_mm512_fmadd_pd((__m512d)a, (__m512d)b, (__m512d)c);
#endif
    } else if constexpr (sizeof(V) == 32) {
      if constexpr (std::is_same_v<T, float>) return (V)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
      else return (V)_mm256_fmadd_pd((__m256d)a, (__m256d)b, (__m256d)c);
    } else {
      if constexpr (std::is_same_v<T, float>) return (V)_mm_fmadd_ps((__m128)a, (__m128)b, (__m128)c);
      else return (V)_mm_fmadd_pd((__m128d)a, (__m128d)b, (__m128d)c);
    }
  }
#else
  return a * b + c;  // no fused multiply-add on this target: nothing for the compiler to contract
#endif
}

// x in every lane of V (or x itself, V a scalar). x - 0 is x for every x, -0 included.
template <class V, class T>
inline V splat(T x) {
  return x - V{};
}

// The square root of every lane (correctly rounded, as std::sqrt of each).
template <class V>
inline V lane_sqrt(V x) {
  if constexpr (std::is_floating_point_v<V>) {
    return std::sqrt(x);
  } else {
    using T = std::remove_cvref_t<decltype(x[0])>;
#if defined(__AVX512F__)
    if constexpr (sizeof(V) == 64) {
      // The zero-masked form, every lane kept: GCC 12 warns of the unmasked one's undefined source.
      if constexpr (std::is_same_v<T, float>) return (V)_mm512_maskz_sqrt_ps(0xffff, (__m512)x);
      else return (V)_mm512_maskz_sqrt_pd(0xff, (__m512d)x);
    }
#endif
#if defined(__AVX__)
    if constexpr (sizeof(V) == 32) {
      if constexpr (std::is_same_v<T, float>) return (V)_mm256_sqrt_ps((__m256)x);
      else return (V)_mm256_sqrt_pd((__m256d)x);
    }
#endif
#if defined(__SSE2__)
    if constexpr (sizeof(V) == 16) {
      if constexpr (std::is_same_v<T, float>) return (V)_mm_sqrt_ps((__m128)x);
      else return (V)_mm_sqrt_pd((__m128d)x);
    }
#endif
    V out;
    for (int i = 0; i < static_cast<int>(sizeof(V) / sizeof(T)); ++i) out[i] = std::sqrt(x[i]);
    return out;
  }
}

// A vector loaded from, or stored to, element-aligned memory. Through the may_alias type, not
// memcpy: GCC 12 tuned for Zen 3 expands a 32-byte memcpy into two 16-byte copies through the
// stack, and the 32-byte reload that follows stalls on store forwarding.
template <class T>
inline typename Vec<T>::type load_vector(const T* p) {
  return *reinterpret_cast<const typename Vec<T>::unaligned*>(p);
}
template <class T>
inline void store_vector(T* p, typename Vec<T>::type v) {
  *reinterpret_cast<typename Vec<T>::unaligned*>(p) = v;
}

// A vector stored past the caches (a non-temporal store) at a kVectorBytes-aligned address:
// for an output written once and too large to stay in cache, so that its lines are not read
// from memory first (write-allocate) only to be overwritten. Ordered by stream_fence().
template <class T>
inline void stream_vector(T* p, typename Vec<T>::type v) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) _mm512_stream_ps(p, (__m512)v);
  else _mm512_stream_pd(p, (__m512d)v);
#elif defined(__AVX__)
  if constexpr (std::is_same_v<T, float>) _mm256_stream_ps(p, (__m256)v);
  else _mm256_stream_pd(p, (__m256d)v);
#elif defined(__SSE2__)
  if constexpr (std::is_same_v<T, float>) _mm_stream_ps(p, (__m128)v);
  else _mm_stream_pd(p, (__m128d)v);
#else
  store_vector(p, v);
#endif
}

inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// Calls block(std::integral_constant<int, R>{}, i) over the rows [0, m) in blocks of R = Max
// rows, then once for the R < Max rows left, if any: the kernels' register tiles take their
// row count as a compile-time size.
template <int Max, class Block>
void for_row_blocks(std::int64_t m, Block&& block) {
  std::int64_t i = 0;
  for (; i + Max <= m; i += Max) block(std::integral_constant<int, Max>{}, i);
  [&]<int... R>(std::integer_sequence<int, R...>) {
    ((m - i == R + 1 ? block(std::integral_constant<int, R + 1>{}, i) : void()), ...);
  }(std::make_integer_sequence<int, Max - 1>{});
}

enum class RowPrefetch {
  none,
  nta_next_panel,  // prefetchnta ahead in each row, and the next panel's rows into L2 (Zen)
  t0,              // prefetcht0 ahead in each row (Intel)
};

// The forward's prefetch for the CPU this process runs on (see skinny_rows below).
RowPrefetch forward_prefetch() {
#if defined(__x86_64__) || defined(__i386__)
  // __builtin_cpu_init first: a static initializer of another file may call this before
  // libgcc's own constructor has read the CPU.
  static const RowPrefetch kind = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("intel") ? RowPrefetch::t0 : RowPrefetch::nta_next_panel;
  }();
  return kind;
#else
  return RowPrefetch::nta_next_panel;
#endif
}

// C[m, n] (+)= op(A)[m, k] B[k, n], B row-major and not transposed, over the rows [l0, l1) of B
// (the columns of op(A)). Rows of C in blocks of R (<= 8), columns in strips of two vectors:
// R x 2 accumulators stay in registers over the panel's rows, so each element of B is loaded
// once per row block (once in all when m <= 8). With a Prefetch, each of the panel's rows is
// prefetched kSkinnyPrefetch strips ahead of the strip being read: a panel reads its rows side by
// side, more streams than the hardware prefetcher follows (B [4096, 4096] from memory, m = 8:
// 4.5 ms without, 3.3-3.5 with; a summing loop reads its 64 MiB in 1.55 ms). Near a
// row's end the prefetch runs on into the next panel's row (x[4, 1024] W[1024, 256] from
// memory: 59 -> 26 us). Each step also prefetches the same strip of the next panel's row into L2
// (one panel below), so that the next panel is in L2 by the time it is read: the read from memory
// runs under the arithmetic instead of before it (16 weights of [1024, 1024] from memory, m = 8:
// 217-257 -> 146-181 us each; [2048, 2048] 875-883 -> 574-615; [4096, 4096] 2.92 -> 2.57-2.66 ms).
// In cache the extra prefetches cost (one weight from L3: the forward measured 154-156 -> 125-129
// GFLOP/s in bench_train), which a weight read after its update never is.
// Those figures are a Zen host's. On an Intel host (a Xeon with AVX-512 and 2 MiB of L2 a core,
// 2026-11-26) the same prefetches made the forward 1.6 times as slow as it need be: a
// [4096, 4096] weight from memory took 7.0 ms, 4.5 with the rows' prefetches into L1 as
// prefetcht0 and no prefetch of the next panel (likely because prefetchnta there fills L1 and
// not L2, so a line L1 drops before its strip comes is read from memory again, and the next
// panel's rows are 16 more streams than the L2's prefetcher keeps going). The kind is chosen
// once per process by the CPU's vendor (forward_prefetch()); the sums, and so the bits, are the
// same.
// With Stream, C's strips are stored past the caches (stream_vector; C aligned to a vector, n a
// multiple of one).
template <class T, int R, RowPrefetch Prefetch, bool Stream = false>
void skinny_rows(const T* A, const T* B, T* C, std::int64_t row0, std::int64_t m, std::int64_t n, std::int64_t k,
                 std::int64_t l0, std::int64_t l1, bool trans_a, bool accumulate) {
  using V = typename Vec<T>::type;
  constexpr std::int64_t L = Vec<T>::lanes;
  constexpr std::int64_t ahead = kSkinnyPrefetch * 2 * L;  // elements
  const std::int64_t a_row = trans_a ? 1 : k, a_col = trans_a ? m : 1;  // a(i, l) = A[i * a_row + l * a_col]
  const T* a = A + row0 * a_row;
  T* c = C + row0 * n;
  // Where the prefetch of column `column` of row l lies, as an offset from row l: past the row's
  // end, at the start of the same row of the next panel when that panel is as tall as this one
  // (so a panel's first strips are not read cold: with rows of 1 KiB, half of each row was),
  // else the row's last element (already fetched: harmless).
  const std::int64_t next_panel = l1 + (l1 - l0) <= k ? (l1 - l0) * n : -1;
  const auto prefetch_column = [&](std::int64_t column) {
    return column < n ? column : next_panel >= 0 ? next_panel + std::min(column - n, n - 1) : n - 1;
  };
  const std::int64_t below = l1 - l0;  // rows from a row to the same row of the next panel
  std::int64_t j = 0;
  for (; j + 2 * L <= n; j += 2 * L) {
    V acc[R][2];
    for (int r = 0; r < R; ++r) {
      for (int h = 0; h < 2; ++h) {
        if (accumulate) {
          acc[r][h] = load_vector(c + r * n + j + h * L);
        } else {
          acc[r][h] = V{};
        }
      }
    }
    // Where this strip's prefetches land, from each row of the panel (prefetch_column).
    const std::int64_t p0 = prefetch_column(j + ahead), p1 = prefetch_column(j + ahead + L);
    for (std::int64_t l = l0; l < l1; ++l) {
      V b0, b1;
      if constexpr (Prefetch == RowPrefetch::t0) {
        __builtin_prefetch(B + l * n + p0, 0, 3);
        __builtin_prefetch(B + l * n + p1, 0, 3);
      } else if constexpr (Prefetch == RowPrefetch::nta_next_panel) {
        __builtin_prefetch(B + l * n + p0, 0, 0);
        __builtin_prefetch(B + l * n + p1, 0, 0);
        if (l + below < k) {  // the same strip of the next panel's row, into L2
          __builtin_prefetch(B + (l + below) * n + j, 0, 2);
          __builtin_prefetch(B + (l + below) * n + j + L, 0, 2);
        }
      }
      b0 = load_vector(B + l * n + j);
      b1 = load_vector(B + l * n + j + L);
      for (int r = 0; r < R; ++r) {
        const V s = splat<V>(a[r * a_row + l * a_col]);
        acc[r][0] = madd(s, b0, acc[r][0]);
        acc[r][1] = madd(s, b1, acc[r][1]);
      }
    }
    for (int r = 0; r < R; ++r) {
      if constexpr (Stream) {
        stream_vector(c + r * n + j, acc[r][0]);
        stream_vector(c + r * n + j + L, acc[r][1]);
      } else {
        store_vector(c + r * n + j, acc[r][0]);
        store_vector(c + r * n + j + L, acc[r][1]);
      }
    }
  }
  for (; j < n; ++j) {  // the last columns, fewer than a strip
    for (int r = 0; r < R; ++r) {
      T sum = accumulate ? c[r * n + j] : T{0};
      for (std::int64_t l = l0; l < l1; ++l) sum = madd(a[r * a_row + l * a_col], B[l * n + j], sum);
      c[r * n + j] = sum;
    }
  }
}

// B is taken in panels of a few rows: a strip of two vectors across all k rows of B would touch
// a new row (a new page, for a wide B) at every step, where a panel reads a few rows front to
// back, prefetched ahead; C (m <= 16 rows, or a small k: one panel) is reread once per panel,
// from cache. 16 rows when a row is 2 KiB or more, else 32: 32 rows of 4-16 KiB are more streams
// than the memory system keeps going (B from memory, m = 8: [1024, 1024] 200 -> 170-178 us at 16
// rows, [4096, 4096] 3.41-3.43 -> 3.10-3.14 ms), while rows of 1 KiB want the longer panel
// (x[4, 1024] W[1024, 256]: 26-27 us at 32 rows, 30-31 at 16).
template <class T>
constexpr std::int64_t skinny_panel_rows(std::int64_t n) {
  return n * static_cast<std::int64_t>(sizeof(T)) >= 2048 ? 16 : 32;
}

// A product written in one pass (no accumulation, k within one panel) with a C of this many bytes
// or more stores C past the caches: the weight gradient x^T g of a layer of depth 4096 (64 MiB on
// one rank) would otherwise read every line of C from memory before overwriting it, and leave the
// caches full of it. Smaller results (depth 1024: 4 MiB) stay in cache, where Adam reads them next.
constexpr std::size_t kStreamBytes = std::size_t{16} << 20;

template <class T>
void skinny_nn(const T* A, const T* B, T* C, std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a,
               bool accumulate) {
  const std::int64_t panel = skinny_panel_rows<T>(n);
  const RowPrefetch prefetch = forward_prefetch();
  // C written once (one panel, nothing to add to), large, and aligned for vector stores.
  const bool stream = !accumulate && k <= panel &&
                      static_cast<std::size_t>(m * n) * sizeof(T) >= kStreamBytes &&
                      reinterpret_cast<std::uintptr_t>(C) % kVectorBytes == 0 && (n * sizeof(T)) % kVectorBytes == 0;
  // At least one panel, so that k = 0 still writes C (zeros, or C as it was).
  std::int64_t l0 = 0;
  do {
    const std::int64_t l1 = std::min(k, l0 + panel);
    const bool add = accumulate || l0 > 0;
    for_row_blocks<kSkinnyRows>(m, [&](auto rows, std::int64_t i) {
      constexpr int R = decltype(rows)::value;
      // B is the large operand (a weight, read from memory) unless k is the thin side.
      const auto run = [&]<RowPrefetch P>(std::integral_constant<RowPrefetch, P>) {
        if (stream) skinny_rows<T, R, P, true>(A, B, C, i, m, n, k, l0, l1, trans_a, add);
        else skinny_rows<T, R, P>(A, B, C, i, m, n, k, l0, l1, trans_a, add);
      };
      if (k <= kSkinnyLimit) run(std::integral_constant<RowPrefetch, RowPrefetch::none>{});
      else if (prefetch == RowPrefetch::t0) run(std::integral_constant<RowPrefetch, RowPrefetch::t0>{});
      else run(std::integral_constant<RowPrefetch, RowPrefetch::nta_next_panel>{});
    });
    l0 = l1;
  } while (l0 < k);
  if (stream) stream_fence();
}

// The lane sums of N vectors, without a scalar pass over each: the vectors (padded with zero
// vectors to P, a power of two and at least one vector's lanes L) are added in pairs, each pair
// by two shuffles that take the low and the high halves of every group of lanes of both, so that
// each level halves both the vectors and the lanes each sum is spread over. After log2(L) levels
// P / L vectors hold one sum per lane. skinny_dots ends every R x J tile this way: summing each
// accumulator's 16 lanes one after another (AVX-512, f32) took about half as long as the tile's
// multiply-adds at k = 1024.
template <class V, int L, int G, int... J>
inline V add_group_halves(V a, V b, std::integer_sequence<int, J...>) {
  // Output group q (of G / 2 lanes) holds group q / 2 of a (q even) or of b (q odd), halves added.
  constexpr int H = G / 2;
  return __builtin_shufflevector(a, b, ((J / H) % 2 * L + (J / H) / 2 * G + J % H)...) +
         __builtin_shufflevector(a, b, ((J / H) % 2 * L + (J / H) / 2 * G + J % H + H)...);
}

// The input vector whose sum lane `lane` of vector c holds after `levels` levels.
constexpr int summed_vector(int levels, int c, int lane) {
  return levels == 0 ? c : summed_vector(levels - 1, 2 * c + lane % 2, lane / 2);
}

constexpr int log2_of(int n) { return n <= 1 ? 0 : 1 + log2_of(n / 2); }

template <class T, int N>
inline void lane_sums(const typename Vec<T>::type* in, T* out) {
  using V = typename Vec<T>::type;
  constexpr int L = Vec<T>::lanes;
  constexpr int P = std::max(L, 1 << log2_of(2 * N - 1));
  V x[P];
  for (int i = 0; i < P; ++i) x[i] = i < N ? in[i] : V{};
  const auto level = [&](auto group, auto count) {
    constexpr int G = decltype(group)::value;
    for (int i = 0; i < decltype(count)::value / 2; ++i) {
      x[i] = add_group_halves<V, L, G>(x[2 * i], x[2 * i + 1], std::make_integer_sequence<int, L>{});
    }
  };
  [&]<int... Level>(std::integer_sequence<int, Level...>) {
    (level(std::integral_constant<int, (L >> Level)>{}, std::integral_constant<int, (P >> Level)>{}), ...);
  }(std::make_integer_sequence<int, log2_of(L)>{});
  for (int c = 0; c < P / L; ++c) {
    for (int lane = 0; lane < L; ++lane) {
      const int from = summed_vector(log2_of(L), c, lane);
      if (from < N) out[from] = x[c][lane];
    }
  }
}

// C[m, n] (+)= A[m, k] B[n, k]^T with m <= 16, A row-major: each element a dot product of a row
// of A with a row of B. Blocks of R rows of A by J rows of B: R x J accumulators, R + J vector
// loads for R x J multiply-adds, and J rows of B read side by side (J streams from memory, where
// one row after another is a single stream); A (at most 16 rows) stays in cache. With Prefetch
// (the first block of rows of A, when J more rows of B follow), each step also prefetches the
// same columns of the next J rows of B, so that they are in cache when their turn comes: the
// input gradient g W^T, [8, 1024] x [1024, 1024]^T with W from memory, took 218-232 us at 18-19
// GB/s without, 169-182 with (a summing loop reads W in 95-101 us); from cache, 113-118 -> 125-130.
template <class T, int R, int J, bool Prefetch>
void skinny_dots(const T* A, const T* B, T* C, std::int64_t row0, std::int64_t j0, std::int64_t n, std::int64_t k,
                 bool accumulate) {
  using V = typename Vec<T>::type;
  constexpr std::int64_t L = Vec<T>::lanes;
  const T* a = A + row0 * k;
  const T* b = B + j0 * k;
  const T* next = b + J * k;  // with Prefetch: the next J rows of B, which exist
  V acc[R][J];
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < J; ++q) acc[r][q] = V{};
  }
  std::int64_t l = 0;
  for (; l + L <= k; l += L) {
    V bv[J];
    if constexpr (Prefetch) {
      for (int q = 0; q < J; ++q) __builtin_prefetch(next + q * k + l, 0, 3);
    }
    for (int q = 0; q < J; ++q) bv[q] = load_vector(b + q * k + l);
    for (int r = 0; r < R; ++r) {
      const V av = load_vector(a + r * k + l);
      for (int q = 0; q < J; ++q) acc[r][q] = madd(av, bv[q], acc[r][q]);
    }
  }
  T sums[R * J];
  lane_sums<T, R * J>(&acc[0][0], sums);
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < J; ++q) {
      T sum = sums[r * J + q];
      for (std::int64_t t = l; t < k; ++t) sum = madd(a[r * k + t], b[q * k + t], sum);
      T& out = C[(row0 + r) * n + j0 + q];
      out = accumulate ? out + sum : sum;
    }
  }
}

template <class T>
void skinny_nt(const T* A, const T* B, T* C, std::int64_t m, std::int64_t n, std::int64_t k, bool accumulate) {
  // Rows of B in blocks of kDotRowsOfB (then one at a time), each against the rows of A in blocks
  // of kDotRowsOfA.
  auto columns = [&](auto rows_of_b, std::int64_t j) {
    constexpr int J = decltype(rows_of_b)::value;
    // The first block of rows of A prefetches the next J rows of B (see skinny_dots).
    const bool ahead = J == kDotRowsOfB && j + 2 * J <= n;
    for_row_blocks<kDotRowsOfA>(m, [&](auto rows_of_a, std::int64_t i) {
      constexpr int R = decltype(rows_of_a)::value;
      if (ahead && i == 0) skinny_dots<T, R, J, true>(A, B, C, i, j, n, k, accumulate);
      else skinny_dots<T, R, J, false>(A, B, C, i, j, n, k, accumulate);
    });
  };
  std::int64_t j = 0;
  if constexpr (kWideDotRows > 0) {
    // 5-8 rows of A whose rows fit in L1 together: all of them against 2 rows of B at a time, so
    // B is read once instead of once per block of 4 rows of A (see kWideDotRows). Its own loop
    // over B's rows, with the one block of A's rows chosen once outside it: the same loop through
    // `columns` (the block chosen again for every 2 rows of B) took 150-174 us from memory for
    // [8, 1024] x [1024, 1024]^T against 133-146 for this one.
    if (m > kDotRowsOfA && m <= kWideDotRows && m * k * static_cast<std::int64_t>(sizeof(T)) <= kWideDotBytes) {
      for_row_blocks<kWideDotRows>(m, [&](auto rows_of_a, std::int64_t) {
        constexpr int R = decltype(rows_of_a)::value;
        for (; j + 2 <= n; j += 2) {
          if (j + 4 <= n) skinny_dots<T, R, 2, true>(A, B, C, 0, j, n, k, accumulate);
          else skinny_dots<T, R, 2, false>(A, B, C, 0, j, n, k, accumulate);
        }
        for (; j < n; ++j) skinny_dots<T, R, 1, false>(A, B, C, 0, j, n, k, accumulate);
      });
      return;
    }
  }
  for (; j + kDotRowsOfB <= n; j += kDotRowsOfB) columns(std::integral_constant<int, kDotRowsOfB>{}, j);
  for (; j < n; ++j) columns(std::integral_constant<int, 1>{}, j);
}

bool skinny_shape(std::int64_t m, std::int64_t k, bool trans_a, bool trans_b) {
  return trans_b ? !trans_a && m <= kSkinnyLimit : m <= kSkinnyLimit || k <= kSkinnyLimit;
}

// One product by the thin kernels when its shape is one of theirs; false otherwise.
template <class T>
bool skinny_gemm(const T* A, const T* B, T* C, std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a,
                 bool trans_b, bool accumulate) {
  if (!skinny_shape(m, k, trans_a, trans_b)) return false;
  if (trans_b) skinny_nt(A, B, C, m, n, k, accumulate);
  else skinny_nn(A, B, C, m, n, k, trans_a, accumulate);
  return true;
}

}  // namespace

bool thin_gemm_shape(std::int64_t m, std::int64_t, std::int64_t k, bool trans_a, bool trans_b) {
  return skinny_shape(m, k, trans_a, trans_b);
}

void thin_gemm(const float* a, const float* b, float* c, std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a,
               bool trans_b) {
  if (!skinny_gemm(a, b, c, m, n, k, trans_a, trans_b, false)) {
    throw ShapeError("thin_gemm: [" + std::to_string(m) + ", " + std::to_string(n) + ", " + std::to_string(k) +
                     "] is not a thin product");
  }
}

namespace {

// Adam's update of one element, or of every lane of a vector (see AdamConstants), with the
// multiply-adds of madd: the same bits for an element whether a vector loop or a scalar tail
// updates it, in adam_update or in thin_rows_adam. Always inlined: called out of line from a
// strip's loop (GCC's choice for rows_adam<0, 2> once its constants were a local copy) it took
// that loop from 0.30 to 0.44 ns an element.
template <class V, class T>
[[gnu::always_inline]] inline void adam_lanes(V& p, V g, V& m, V& v, const AdamConstants<T>& c) {
  m = madd(splat<V>(c.b1), m, splat<V>(T(1) - c.b1) * g);
  v = madd(splat<V>(c.b2), v, (splat<V>(T(1) - c.b2) * g) * g);
  const V u = (m * splat<V>(c.c1)) / (lane_sqrt(v * splat<V>(c.c2)) + splat<V>(c.eps));
  p = madd(splat<V>(-c.lr), madd(splat<V>(c.decay), p, u), p);
}

template <class T>
void adam_update_typed(T* p, const T* g, T* m, T* v, std::int64_t n, const AdamConstants<T>& c) {
  using V = typename Vec<T>::type;
  constexpr std::int64_t L = Vec<T>::lanes;
  std::int64_t i = 0;
  for (; i + L <= n; i += L) {
    V pv = load_vector(p + i), mv = load_vector(m + i), vv = load_vector(v + i);
    adam_lanes(pv, load_vector(g + i), mv, vv, c);
    store_vector(p + i, pv);
    store_vector(m + i, mv);
    store_vector(v + i, vv);
  }
  for (; i < n; ++i) adam_lanes(p[i], g[i], m[i], v[i], c);
}

// How far ahead of the strip it updates thin_rows_adam prefetches the weight's and the moments'
// rows, in elements (2 KiB of f32): the three streams it reads and writes, which the hardware
// prefetcher alone kept at 27-35 GB/s there against 60-80 for Adam's own loop. In the step
// (`train_mlp`, steps alternating between two distances, the optimizer's median time a step):
// 2 KiB against 4, depth 4096 one rank 124.9 against 139.5 ms, on 1x2 109.3 and 109.1 against
// 111.3 and 110.9; 1 KiB against 4 at depth 1024, 1-3% faster in six runs on one rank and 1x2;
// 1 KiB against 2 level; 512 bytes and none slower (one rank 4.09 and 5.13 ms against 3.65 and
// 3.71 at 1 KiB).
constexpr std::int64_t kRowsAdamAhead = 512;

// thin_rows_adam over Rows rows from row i, with the input gradient's R rows of accumulators
// (R x Rows vectors) in registers: each strip of the rows is loaded once for the input gradient's
// dots, its weight gradient is summed from the R_dw rows of g_dw, and Adam updates it. Where both
// products take the same rows of g (g_dx == g_dw and m_dw == R: a layer whose weight gradient
// runs on the rows its input gradient does), each row's strip is loaded once for both, the sums
// in the same order. The constants are copied first: the stores to the rows could otherwise
// alias them, and each strip read them again and rebuilt their vectors. A depth-1024 weight's
// panel in cache (m_dx = m_dw = 8, a scratch program of 2026-11-26, seventh session): 0.39 ns an
// element before, 0.34 with g loaded once, 0.33 with the copy.
template <int R, int Rows>
void rows_adam(const ThinRowsAdam& t, std::int64_t i, std::int64_t end, const AdamConstants<float>& constants) {
  const AdamConstants<float> c = constants;
  using V = typename Vec<float>::type;
  constexpr std::int64_t L = Vec<float>::lanes;
  const std::int64_t n = t.n, k = t.k, m_dw = t.m_dw;
  float* w = t.w + i * n;
  float* mu = t.mu + i * n;
  float* nu = t.nu + i * n;
  const std::int64_t last = (end - i) * n - 1;  // the last element of the rows left (prefetches)
  float s[Rows][kThinGemmRows];  // the weight gradient's factors x_dw[:, i + q]
  for (int q = 0; q < Rows; ++q) {
    for (std::int64_t l = 0; l < m_dw; ++l) s[q][l] = t.x_dw[l * k + i + q];
  }
  const bool shared = R > 0 && t.g_dx == t.g_dw && m_dw == R;
  V acc[Rows][R > 0 ? R : 1];
  for (int q = 0; q < Rows; ++q) {
    for (int b = 0; b < R; ++b) acc[q][b] = V{};
  }
  std::int64_t j = 0;
  for (; j + L <= n; j += L) {
    // Past a row's end, the same columns of the rows after this block.
    std::int64_t ahead = j + kRowsAdamAhead;
    if (ahead >= n) ahead += (Rows - 1) * n;
    for (int q = 0; q < Rows; ++q) {
      const std::int64_t at = std::min(q * n + ahead, last);
      __builtin_prefetch(w + at, 1, 3);
      __builtin_prefetch(mu + at, 1, 3);
      __builtin_prefetch(nu + at, 1, 3);
    }
    V wv[Rows], gv[Rows];
    for (int q = 0; q < Rows; ++q) {
      wv[q] = load_vector(w + q * n + j);
      gv[q] = V{};
    }
    // Fewer loads (docs/design-log.md, "Fifty-second session"). The factors' address is laundered
    // each strip, so that each factor is broadcast by its multiply-add from L1 (a 4-byte load)
    // rather than hoisted out of the loop as a whole vector: 16 of them do not fit in the
    // registers beside the 16 accumulators, and GCC spilled them and reloaded 64 bytes each from
    // the stack at every strip. Each strip of g is loaded once into a register, where GCC had
    // folded it into its multiply-adds and loaded it once per row. Of the 44 loads a strip of
    // both rows makes, those of 64 bytes went from 33 to 16 (the factors' 16 are broadcasts of 4
    // bytes now). On the Zen 5 host the update of the step at depth 1024 ran about 11% faster
    // (train_mlp, interleaved pairs, optimizer's median ms a step: one rank pinned 5.84 -> 5.19,
    // faster in 12 of 12; 1x2 3.10 -> 2.69, 8 of 8; 2x4 1.45 -> 1.29, 6 of 6); depth 4096 level.
    // The sums run in the same order: the same bits.
    const float* sp = &s[0][0];
    asm("" : "+r"(sp));
    for (int b = 0; b < R; ++b) {
      V gb = load_vector(t.g_dx + b * n + j);
      asm("" : "+v"(gb));  // held in a register for all its uses
      for (int q = 0; q < Rows; ++q) acc[q][b] = madd(gb, wv[q], acc[q][b]);
      if (shared) {
        for (int q = 0; q < Rows; ++q) gv[q] = madd(splat<V>(sp[q * kThinGemmRows + b]), gb, gv[q]);
      }
    }
    if (!shared) {
      for (std::int64_t l = 0; l < m_dw; ++l) {
        V gl = load_vector(t.g_dw + l * n + j);
        asm("" : "+v"(gl));
        for (int q = 0; q < Rows; ++q) gv[q] = madd(splat<V>(sp[q * kThinGemmRows + l]), gl, gv[q]);
      }
    }
    for (int q = 0; q < Rows; ++q) {
      V mv = load_vector(mu + q * n + j), vv = load_vector(nu + q * n + j);
      adam_lanes(wv[q], gv[q], mv, vv, c);
      store_vector(w + q * n + j, wv[q]);
      store_vector(mu + q * n + j, mv);
      store_vector(nu + q * n + j, vv);
    }
  }
  for (int q = 0; q < Rows; ++q) {
    // The input gradient from the row before its last columns are updated: the lanes' sums as
    // skinny_dots takes them, then the columns past the last strip one at a time.
    if constexpr (R > 0) {
      float sums[R];
      lane_sums<float, R>(acc[q], sums);
      for (int b = 0; b < R; ++b) {
        float sum = sums[b];
        for (std::int64_t col = j; col < n; ++col) sum = madd(t.g_dx[b * n + col], w[q * n + col], sum);
        t.dx[b * k + i + q] = sum;
      }
    }
    for (std::int64_t col = j; col < n; ++col) {
      float g = 0;
      for (std::int64_t l = 0; l < m_dw; ++l) g = madd(s[q][l], t.g_dw[l * n + col], g);
      adam_lanes(w[q * n + col], g, mu[q * n + col], nu[q * n + col], c);
    }
  }
}

// Two rows at a time where their accumulators fit AVX-512's 32 registers with room for the
// strips (8 rows of the input gradient: 16), one otherwise: the rows of g_dx and g_dw each strip
// reads (from L1 or L2) serve two rows of the weight. Depth 4096 on one rank (g's rows 128 KiB):
// 21.2 ms a row at a time, 19.6 two at a time, for two weights (a scratch program).
constexpr int rows_adam_rows(int r) { return r <= 8 ? 2 : 1; }

}  // namespace

void adam_update(float* p, const float* g, float* m, float* v, std::int64_t n, const AdamConstants<float>& c) {
  adam_update_typed(p, g, m, v, n, c);
}

void adam_update(double* p, const double* g, double* m, double* v, std::int64_t n, const AdamConstants<double>& c) {
  adam_update_typed(p, g, m, v, n, c);
}

bool thin_rows_adam_shape(std::int64_t m_dx, std::int64_t m_dw) {
  return kVectorBytes == 64 && m_dx >= 0 && m_dx <= kThinGemmRows && m_dw >= 0 && m_dw <= kThinGemmRows;
}

void thin_rows_adam(const ThinRowsAdam& t, std::int64_t begin, std::int64_t end, const AdamConstants<float>& c) {
  if (!thin_rows_adam_shape(t.m_dx, t.m_dw) || begin < 0 || end > t.k || begin > end || (t.m_dx > 0 && !t.dx)) {
    throw ShapeError("thin_rows_adam: rows [" + std::to_string(begin) + ", " + std::to_string(end) + ") of " +
                     std::to_string(t.k) + " with " + std::to_string(t.m_dx) + " and " + std::to_string(t.m_dw) +
                     " rows of gradient are not a shape it takes");
  }
  [&]<int... R>(std::integer_sequence<int, R...>) {
    ((t.m_dx == R ? [&] {
       constexpr int Rows = rows_adam_rows(R);
       std::int64_t i = begin;
       for (; i + Rows <= end; i += Rows) rows_adam<R, Rows>(t, i, end, c);
       for (; i < end; ++i) rows_adam<R, 1>(t, i, end, c);
     }()
                  : void()),
     ...);
  }(std::make_integer_sequence<int, kThinGemmRows + 1>{});
}

void batched_gemm(const Tensor& a, const Tensor& b, Tensor& c, std::int64_t batch, std::int64_t m, std::int64_t n,
                  std::int64_t k, bool trans_a, bool trans_b, bool accumulate) {
  require_float(a, "gemm");
  if (a.dtype() != b.dtype() || a.dtype() != c.dtype()) throw DTypeError("gemm: operands of different dtypes");
  if (a.numel() != batch * m * k || b.numel() != batch * k * n || c.numel() != batch * m * n) {
    throw ShapeError("gemm: element counts do not match [" + std::to_string(batch) + ", " + std::to_string(m) + ", " +
                     std::to_string(n) + ", " + std::to_string(k) + "]");
  }
  if (is_bf16(a)) {
    // f32 operands and accumulator; the product is rounded to bf16 once, at the end.
    Tensor c32 = accumulate ? to_f32(c) : Tensor::empty(c.shape(), DType::f32);
    batched_gemm(to_f32(a), to_f32(b), c32, batch, m, n, k, trans_a, trans_b, accumulate);
    convert_f32_to_bf16(c32.data<float>(), c.data<bfloat16>(), static_cast<std::size_t>(c.numel()));
    return;
  }
  dispatch_float(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    for (std::int64_t i = 0; i < batch; ++i) {
      const T* pa = a.data<T>() + i * m * k;
      const T* pb = b.data<T>() + i * k * n;
      T* pc = c.data<T>() + i * m * n;
      if (skinny_gemm(pa, pb, pc, m, n, k, trans_a, trans_b, accumulate)) continue;
      if (m > 1 && n > 1 && k > 0 && m + n + k >= 20) {
        constexpr int row = Eigen::RowMajor, col = Eigen::ColMajor;
        const bool fresh = !accumulate;  // C zeroed block by block first
        if (!trans_a && !trans_b) {
          gemm_with_scratch<T, row, row>(pa, k, pb, n, pc, m, n, k, fresh);
        } else if (trans_a && !trans_b) {
          gemm_with_scratch<T, col, row>(pa, m, pb, n, pc, m, n, k, fresh);
        } else if (!trans_a && trans_b) {
          gemm_with_scratch<T, row, col>(pa, k, pb, k, pc, m, n, k, fresh);
        } else {
          gemm_with_scratch<T, col, col>(pa, m, pb, k, pc, m, n, k, fresh);
        }
        continue;
      }
      MutMap<T> C(pc, m, n);
      if (!accumulate) C.setZero();
      if (!trans_a && !trans_b) {
        C.noalias() += ConstMap<T>(pa, m, k) * ConstMap<T>(pb, k, n);
      } else if (trans_a && !trans_b) {
        C.noalias() += ConstMap<T>(pa, k, m).transpose() * ConstMap<T>(pb, k, n);
      } else if (!trans_a && trans_b) {
        C.noalias() += ConstMap<T>(pa, m, k) * ConstMap<T>(pb, n, k).transpose();
      } else {
        C.noalias() += ConstMap<T>(pa, k, m).transpose() * ConstMap<T>(pb, n, k).transpose();
      }
    }
  });
}

Tensor permute_dims(const Tensor& in, const std::vector<int>& perm) {
  const int r = in.ndim();
  if (static_cast<int>(perm.size()) != r) throw ShapeError("permute_dims: permutation of the wrong length");
  bool identity = true;
  for (int i = 0; i < r; ++i) identity &= perm[i] == i;
  if (identity) return in;
  Shape out_shape(r);
  for (int i = 0; i < r; ++i) out_shape[i] = in.shape()[perm[i]];
  Tensor out = Tensor::empty(out_shape, in.dtype());
  if (in.numel() == 0) return out;
  auto in_strides = row_major_strides(in.shape());
  std::vector<std::int64_t> strides(r);  // input stride of each output dimension
  for (int i = 0; i < r; ++i) strides[i] = in_strides[perm[i]];
  const std::size_t elem = dtype_size(in.dtype());
  auto* src = static_cast<const std::byte*>(in.raw());
  auto* dst = static_cast<std::byte*>(out.raw());
  std::vector<std::int64_t> index(r, 0);
  const std::int64_t inner = out_shape[r - 1];
  const std::int64_t inner_stride = strides[r - 1];
  std::int64_t pos = 0;
  for (std::int64_t o = 0; o < out.numel(); o += inner) {
    std::int64_t base = 0;
    for (int d = 0; d < r - 1; ++d) base += index[d] * strides[d];
    if (elem == 2) {
      auto* s = reinterpret_cast<const std::uint16_t*>(src);
      auto* t = reinterpret_cast<std::uint16_t*>(dst) + pos;
      for (std::int64_t j = 0; j < inner; ++j) t[j] = s[base + j * inner_stride];
    } else if (elem == 4) {
      auto* s = reinterpret_cast<const std::uint32_t*>(src);
      auto* t = reinterpret_cast<std::uint32_t*>(dst) + pos;
      for (std::int64_t j = 0; j < inner; ++j) t[j] = s[base + j * inner_stride];
    } else {
      auto* s = reinterpret_cast<const std::uint64_t*>(src);
      auto* t = reinterpret_cast<std::uint64_t*>(dst) + pos;
      for (std::int64_t j = 0; j < inner; ++j) t[j] = s[base + j * inner_stride];
    }
    pos += inner;
    for (int d = r - 2; d >= 0; --d) {
      if (++index[d] < out_shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const std::size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (std::size_t i = 0; i < r; ++i) {
    std::int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    std::int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw ShapeError("shapes " + shape_to_string(a) + " and " + shape_to_string(b) + " do not broadcast");
    }
    out[i] = da == 1 ? db : da;  // numpy: 1 broadcasts to any extent, 0 included
  }
  return out;
}

namespace {

// out = f(a, b) with a and b broadcast to out_shape (strides 0 along broadcast dimensions), row
// by row of the last dimension; a row whose operand is broadcast along it reads one element.
template <class T, class F>
void broadcast_loop(F f, const Shape& out_shape, const T* pa, const std::vector<std::int64_t>& sa, const T* pb,
                    const std::vector<std::int64_t>& sb, T* po) {
  const int r = static_cast<int>(out_shape.size());
  const std::int64_t n = numel(out_shape);
  std::vector<std::int64_t> index(r, 0);
  const std::int64_t inner = r ? out_shape[r - 1] : 1;
  const std::int64_t ia = r ? sa[r - 1] : 0, ib = r ? sb[r - 1] : 0;
  for (std::int64_t o = 0; o < n; o += inner) {
    std::int64_t oa = 0, ob = 0;
    for (int d = 0; d < r - 1; ++d) {
      oa += index[d] * sa[d];
      ob += index[d] * sb[d];
    }
    const T* ra = pa + oa;
    const T* rb = pb + ob;
    T* ro = po + o;
    if (ia == 1 && ib == 1) {
      for (std::int64_t j = 0; j < inner; ++j) ro[j] = f(ra[j], rb[j]);
    } else if (ia == 1 && ib == 0) {
      const T y = rb[0];
      for (std::int64_t j = 0; j < inner; ++j) ro[j] = f(ra[j], y);
    } else if (ia == 0 && ib == 1) {
      const T x = ra[0];
      for (std::int64_t j = 0; j < inner; ++j) ro[j] = f(x, rb[j]);
    } else {
      for (std::int64_t j = 0; j < inner; ++j) ro[j] = f(ra[j * ia], rb[j * ib]);
    }
    for (int d = r - 2; d >= 0; --d) {
      if (++index[d] < out_shape[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  require_float(a, "binary op");
  if (a.dtype() != b.dtype()) {
    throw DTypeError("binary op: dtypes " + std::string(dtype_name(a.dtype())) + " and " +
                     std::string(dtype_name(b.dtype())) + " differ");
  }
  if (is_bf16(a)) return to_bf16(binary(op, to_f32(a), to_f32(b)));
  Shape out_shape = broadcast_shapes(a.shape(), b.shape());
  Tensor out = Tensor::empty(out_shape, a.dtype());
  dispatch_float(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    auto apply = [op](T x, T y) -> T {
      switch (op) {
        case BinaryOp::add:
          return x + y;
        case BinaryOp::sub:
          return x - y;
        case BinaryOp::mul:
          return x * y;
        case BinaryOp::div:
          return x / y;
        case BinaryOp::max:
          return std::max(x, y);
        case BinaryOp::min:
          return std::min(x, y);
      }
      return x;
    };
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    const std::int64_t n = out.numel();
    if (a.shape() == b.shape()) {
      switch (op) {  // the common case, written so the loops vectorize
        case BinaryOp::add:
          for (std::int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
          return;
        case BinaryOp::sub:
          for (std::int64_t i = 0; i < n; ++i) po[i] = pa[i] - pb[i];
          return;
        case BinaryOp::mul:
          for (std::int64_t i = 0; i < n; ++i) po[i] = pa[i] * pb[i];
          return;
        default:
          for (std::int64_t i = 0; i < n; ++i) po[i] = apply(pa[i], pb[i]);
          return;
      }
    }
    if (n == 0) return;
    const auto sa = broadcast_strides(a.shape(), out_shape);
    const auto sb = broadcast_strides(b.shape(), out_shape);
    switch (op) {  // one loop per op, so the inner loops inline the op and vectorize
      case BinaryOp::add:
        return broadcast_loop<T>([](T x, T y) { return x + y; }, out_shape, pa, sa, pb, sb, po);
      case BinaryOp::sub:
        return broadcast_loop<T>([](T x, T y) { return x - y; }, out_shape, pa, sa, pb, sb, po);
      case BinaryOp::mul:
        return broadcast_loop<T>([](T x, T y) { return x * y; }, out_shape, pa, sa, pb, sb, po);
      default:
        return broadcast_loop<T>(apply, out_shape, pa, sa, pb, sb, po);
    }
  });
  return out;
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  if (broadcast_shapes(x.shape(), shape) != shape) {
    throw ShapeError("cannot broadcast " + shape_to_string(x.shape()) + " to " + shape_to_string(shape));
  }
  return binary(BinaryOp::add, Tensor(shape, x.dtype()), x);
}

std::vector<int> broadcast_dims(const Shape& from, const Shape& to) {
  const int r = static_cast<int>(from.size());
  const int offset = r - static_cast<int>(to.size());
  std::vector<int> dims;
  for (int d = 0; d < r; ++d) {
    if (d < offset || (to[d - offset] == 1 && from[d] != 1)) dims.push_back(d);
  }
  return dims;
}

Tensor sum_to_shape(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  Tensor summed = reduce_sum(x, broadcast_dims(x.shape(), shape), true);
  return std::move(summed).reshaped(shape);
}

Tensor unary(UnaryOp op, const Tensor& x) {
  require_float(x, "unary op");
  if (is_bf16(x)) return to_bf16(unary(op, to_f32(x)));
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = x.data<T>();
    T* o = out.data<T>();
    const std::int64_t n = x.numel();
    switch (op) {
      case UnaryOp::neg:
        for (std::int64_t i = 0; i < n; ++i) o[i] = -p[i];
        break;
      case UnaryOp::relu:
        for (std::int64_t i = 0; i < n; ++i) o[i] = p[i] > T(0) ? p[i] : T(0);
        break;
      case UnaryOp::relu_mask:
        for (std::int64_t i = 0; i < n; ++i) o[i] = p[i] > T(0) ? T(1) : T(0);
        break;
      case UnaryOp::exp:  // std::exp: Eigen's vectorized exp clamps its argument, so exp(-inf) would not be 0
        for (std::int64_t i = 0; i < n; ++i) o[i] = std::exp(p[i]);
        break;
      case UnaryOp::log:
        for (std::int64_t i = 0; i < n; ++i) o[i] = std::log(p[i]);
        break;
      case UnaryOp::square:
        for (std::int64_t i = 0; i < n; ++i) o[i] = p[i] * p[i];
        break;
      case UnaryOp::sqrt:
        for (std::int64_t i = 0; i < n; ++i) o[i] = std::sqrt(p[i]);
        break;
      case UnaryOp::tanh:  // Eigen's vectorized tanh
        ArrayOut<T>(o, n) = ArrayIn<T>(p, n).tanh();
        break;
      case UnaryOp::abs:
        for (std::int64_t i = 0; i < n; ++i) o[i] = std::abs(p[i]);
        break;
      case UnaryOp::sign:
        for (std::int64_t i = 0; i < n; ++i) o[i] = T((p[i] > T(0)) - (p[i] < T(0)));
        break;
    }
  });
  return out;
}

namespace {

constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluCubic = 0.044715;

// gelu_tanh (grad = false) or its derivative (grad = true), in blocks that stay in cache; with
// g, the derivative times g (the backward pass in one pass: the derivative is not written out
// and read back).
Tensor gelu_tanh_kernel(const Tensor& x, bool grad, const char* what, const Tensor* g = nullptr) {
  require_float(x, what);
  if (is_bf16(x)) {
    if (g == nullptr) return to_bf16(gelu_tanh_kernel(to_f32(x), grad, what));
    const Tensor g32 = to_f32(*g);
    return to_bf16(gelu_tanh_kernel(to_f32(x), grad, what, &g32));
  }
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
    const T c = static_cast<T>(kSqrt2OverPi), cubic = static_cast<T>(kGeluCubic);
    constexpr std::int64_t block = 4096;
    const std::int64_t n = x.numel();
    Array t(block);
    for (std::int64_t start = 0; start < n; start += block) {
      const std::int64_t len = std::min(block, n - start);
      const auto v = ArrayIn<T>(x.data<T>() + start, len);
      auto o = ArrayOut<T>(out.data<T>() + start, len);
      auto th = t.head(len);
      th = (c * (v + cubic * v * v * v)).tanh();
      if (!grad) {
        o = T(0.5) * v * (T(1) + th);
      } else if (g == nullptr) {
        o = T(0.5) * (T(1) + th) + T(0.5) * v * (T(1) - th * th) * c * (T(1) + T(3) * cubic * v * v);
      } else {
        o = ArrayIn<T>(g->data<T>() + start, len) *
            (T(0.5) * (T(1) + th) + T(0.5) * v * (T(1) - th * th) * c * (T(1) + T(3) * cubic * v * v));
      }
    }
  });
  return out;
}

}  // namespace

Tensor gelu_tanh(const Tensor& x) { return gelu_tanh_kernel(x, false, "gelu_tanh"); }
Tensor gelu_tanh_grad(const Tensor& x) { return gelu_tanh_kernel(x, true, "gelu_tanh_grad"); }
Tensor gelu_tanh_backward(const Tensor& x, const Tensor& g) {
  if (g.shape() != x.shape() || g.dtype() != x.dtype()) {
    throw ShapeError("gelu_tanh_backward: gradient " + shape_to_string(g.shape()) + " " +
                     std::string(dtype_name(g.dtype())) + " does not match the input " + shape_to_string(x.shape()) +
                     " " + std::string(dtype_name(x.dtype())));
  }
  return gelu_tanh_kernel(x, true, "gelu_tanh_backward", &g);
}

namespace {

// The exponent below which softmax_last writes 0: Eigen's vectorized exp clamps its argument
// near -88 (f32) and -709 (f64), where std::exp gives a subnormal or 0.
template <class T>
constexpr T softmax_exp_floor() {
  return std::is_same_v<T, float> ? T(-87) : T(-708);
}

// The row width of a softmax over the last dimension (plain variables, not a structured
// binding: clang does not let the dtype lambdas capture one).
std::int64_t softmax_width(const Tensor& x) { return x.shape().empty() ? 1 : x.shape().back(); }

}  // namespace

Tensor softmax_last(const Tensor& x) {
  require_float(x, "softmax");
  if (is_bf16(x)) return to_bf16(softmax_last(to_f32(x)));
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  const std::int64_t width = softmax_width(x), rows = width == 0 ? 0 : x.numel() / width;
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* in = x.data<T>() + r * width;
      T* row = out.data<T>() + r * width;
      auto o = ArrayOut<T>(row, width);
      const T max = ArrayIn<T>(in, width).maxCoeff();
      o = (ArrayIn<T>(in, width) - max).exp();  // vectorized; an Eigen select() around it is not
      for (std::int64_t j = 0; j < width; ++j) row[j] = in[j] - max < softmax_exp_floor<T>() ? T(0) : row[j];
      o /= o.sum();
    }
  });
  return out;
}

Tensor softmax_last_grad(const Tensor& y, const Tensor& g) {
  require_float(y, "softmax_grad");
  if (g.shape() != y.shape() || g.dtype() != y.dtype()) {
    throw ShapeError("softmax_grad: gradient " + shape_to_string(g.shape()) + " " + std::string(dtype_name(g.dtype())) +
                     " does not match the softmax " + shape_to_string(y.shape()) + " " +
                     std::string(dtype_name(y.dtype())));
  }
  if (is_bf16(y)) return to_bf16(softmax_last_grad(to_f32(y), to_f32(g)));
  Tensor out = Tensor::empty(y.shape(), y.dtype());
  const std::int64_t width = softmax_width(y), rows = width == 0 ? 0 : y.numel() / width;
  dispatch_float(y.dtype(), [&](auto zero) {
    using T = decltype(zero);
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto p = ArrayIn<T>(y.data<T>() + r * width, width);
      const auto d = ArrayIn<T>(g.data<T>() + r * width, width);
      const T dot = (p * d).sum();
      ArrayOut<T>(out.data<T>() + r * width, width) = p * (d - dot);
    }
  });
  return out;
}

namespace {

// Causal attention's products go through register tiles of their own (attention_product), not
// Eigen's GEMM. Each has a side of d_head (16-128 in practice) and one of at most the sequence:
// Eigen packed both operands of every product, the keys and values again for each block of query
// rows, for a few multiply-adds per packed element, and ran them at about a third of the rate of
// the transformer's other products (docs/design-log.md, "Seventeenth session").

// The keys query i of a block at global position q0 sees: 0 .. q0 + i, at most S.
inline std::int64_t keys_seen(std::int64_t q0, std::int64_t i, std::int64_t S) { return std::min(S, q0 + i + 1); }

// Rows of a product per register tile: R rows x 2 vectors of accumulators, plus 2 vectors of the
// right-hand side and one of the left (19 of AVX-512's 32 registers; 11 of the 16 of AVX and SSE).
constexpr int kAttentionTileRows = kVectorBytes == 64 ? 8 : 4;
constexpr int kAttentionTileVectors = 2;

// C[r, j] = sum over k < depth of a(r, k) b[k * ldb + j] for r < R and the NV vectors of columns
// from j = 0; each element's sum is one chain of fused multiply-adds from +0 in k order.
template <class T, int R, int NV, class A>
inline void attention_tile(const A& a, const T* b, std::int64_t ldb, std::int64_t depth, T* c, std::int64_t ldc) {
  using V = typename Vec<T>::type;
  constexpr int L = Vec<T>::lanes;
  V acc[R][NV];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < NV; ++v) acc[r][v] = V{};
  }
  for (std::int64_t k = 0; k < depth; ++k) {
    V bk[NV];
    for (int v = 0; v < NV; ++v) bk[v] = load_vector(b + k * ldb + v * L);
    for (int r = 0; r < R; ++r) {
      const V ar = splat<V>(a(r, k));
      for (int v = 0; v < NV; ++v) acc[r][v] = madd(ar, bk[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < NV; ++v) store_vector(c + r * ldc + v * L, acc[r][v]);
  }
}

// C[i, j] = sum over k < depth of a(i, k) b[k * ldb + j] for i < m, j < n (C's rows ldc apart):
// tiles of kAttentionTileRows rows (then single rows) by 2 vectors of columns (then one, then
// single columns). Every element is the same chain of fused multiply-adds (attention_tile's), in
// a vector's lane or alone, so its bits do not depend on m, n or where it lies in C. A zero term
// adds +0 to the chain: extra keys whose probabilities are 0 leave an element's bits alone.
template <class T, class A>
void attention_product(const A& a, const T* b, std::int64_t ldb, std::int64_t m, std::int64_t n, std::int64_t depth,
                       T* c, std::int64_t ldc) {
  constexpr int L = Vec<T>::lanes, NV = kAttentionTileVectors;
  const std::int64_t wide = n / (NV * L) * (NV * L), vectors = n / L * L;
  const auto rows = [&]<int R>(std::integral_constant<int, R>, std::int64_t i0) {
    const auto ai = [&](int r, std::int64_t k) { return a(i0 + r, k); };
    T* ci = c + i0 * ldc;
    std::int64_t j = 0;
    for (; j < wide; j += NV * L) attention_tile<T, R, NV>(ai, b + j, ldb, depth, ci + j, ldc);
    for (; j < vectors; j += L) attention_tile<T, R, 1>(ai, b + j, ldb, depth, ci + j, ldc);
    for (; j < n; ++j) {
      for (int r = 0; r < R; ++r) {
        T sum = T(0);
        for (std::int64_t k = 0; k < depth; ++k) sum = madd(ai(r, k), b[k * ldb + j], sum);
        ci[r * ldc + j] = sum;
      }
    }
  };
  std::int64_t i = 0;
  for (; i + kAttentionTileRows <= m; i += kAttentionTileRows) {
    rows(std::integral_constant<int, kAttentionTileRows>{}, i);
  }
  for (; i < m; ++i) rows(std::integral_constant<int, 1>{}, i);
}

#if defined(__AVX512F__)
// out[c * ldo + r] = in[r * ld + c] for r, c < 16: a 16 x 16 block of f32 transposed in registers
// (pairs of rows interleaved, then pairs of pairs, then 128-bit lanes twice). The zero-masked
// forms, every lane kept: GCC 12 warns of the unmasked ones' undefined source.
inline void transpose_16x16(const float* in, std::int64_t ld, float* out, std::int64_t ldo) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(in + i * ld);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_ps(0xffff, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_ps(0xffff, r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
    const __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
    r[i] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(0xff, a, c));
    r[i + 1] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(0xff, a, c));
    r[i + 2] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(0xff, b, d));
    r[i + 3] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(0xff, b, d));
  }
  for (int h = 0; h < 16; h += 8) {
    for (int i = 0; i < 4; ++i) {
      t[h + i] = _mm512_maskz_shuffle_f32x4(0xffff, r[h + i], r[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_maskz_shuffle_f32x4(0xffff, r[h + i], r[h + i + 4], 0xdd);
    }
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_maskz_shuffle_f32x4(0xffff, t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_maskz_shuffle_f32x4(0xffff, t[i], t[i + 8], 0xdd);
  }
  for (int i = 0; i < 16; ++i) _mm512_storeu_ps(out + i * ldo, r[i]);
}
#endif

// The keys' columns of a transposed head (transpose_head): n rounded up to whole vectors.
template <class T>
std::int64_t padded_keys(std::int64_t n) {
  constexpr std::int64_t L = Vec<T>::lanes;
  return (n + L - 1) / L * L;
}

// out[e, j] = x[j * ld + e] for j < n, e < D, and 0 for n <= j < padded_keys(n): a head's [n, D]
// rows transposed to [D, padded_keys(n)], so that the scores' products take whole vectors of keys.
// Kept out of line: inlined into the attention's loops it lost its registers (the strides reloaded
// from the stack at every element).
template <class T>
[[gnu::noinline]] void transpose_head(const T* __restrict x, std::int64_t ld, std::int64_t n, std::int64_t D,
                                     T* __restrict out) {
  const std::int64_t width = padded_keys<T>(n);
  std::int64_t j = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    for (; j + 16 <= n; j += 16) {
      std::int64_t e = 0;
      for (; e + 16 <= D; e += 16) transpose_16x16(x + j * ld + e, ld, out + e * width + j, width);
      for (; e < D; ++e) {
        for (std::int64_t jj = j; jj < j + 16; ++jj) out[e * width + jj] = x[jj * ld + e];
      }
    }
  }
#endif
  for (; j < n; ++j) {
    const T* row = x + j * ld;
    for (std::int64_t e = 0; e < D; ++e) out[e * width + j] = row[e];
  }
  for (std::int64_t e = 0; e < D; ++e) std::fill(out + e * width + n, out + (e + 1) * width, T(0));
}

struct AttentionDims {
  std::int64_t B, Sq, S, H, D;
  std::int64_t ld() const { return H * D; }  // the row stride of one head's [seq, D] matrix
};

AttentionDims attention_dims(const Tensor& q, const Tensor& k, const Tensor& v, std::int64_t q0, const char* what) {
  require_float(q, what);
  if (q.ndim() != 4 || k.ndim() != 4 || v.shape() != k.shape() || q.dtype() != k.dtype() || q.dtype() != v.dtype()) {
    throw ShapeError(std::string(what) + ": q " + shape_to_string(q.shape()) + ", k " + shape_to_string(k.shape()) +
                     " and v " + shape_to_string(v.shape()) + " are not [B, Sq, H, D], [B, S, H, D] of one dtype");
  }
  const AttentionDims d{q.shape()[0], q.shape()[1], k.shape()[1], q.shape()[2], q.shape()[3]};
  if (k.shape()[0] != d.B || k.shape()[2] != d.H || k.shape()[3] != d.D ||
      (d.Sq > 0 && (q0 < 0 || q0 + d.Sq > d.S))) {
    throw ShapeError(std::string(what) + ": queries " + shape_to_string(q.shape()) + " at position " +
                     std::to_string(q0) + " do not fit keys " + shape_to_string(k.shape()));
  }
  return d;
}

// Calls f(r0, r1, w) for the blocks of query rows [r0, r1) of [0, Sq) that the products take at a
// time (one register tile's rows) and the keys w the block's last row sees.
template <class F>
void for_query_blocks(std::int64_t Sq, std::int64_t S, std::int64_t q0, F&& f) {
  for (std::int64_t r0 = 0; r0 < Sq; r0 += kAttentionTileRows) {
    const std::int64_t r1 = std::min<std::int64_t>(Sq, r0 + kAttentionTileRows);
    f(r0, r1, keys_seen(q0, r1 - 1, S));
  }
}

// Calls f(j0, j1, i0) for the blocks of keys [j0, j1) of [0, seen) and the first query row i0 that
// sees key j0 (rows before it have probability 0 for every key of the block).
template <class F>
void for_key_blocks(std::int64_t seen, std::int64_t q0, F&& f) {
  for (std::int64_t j0 = 0; j0 < seen; j0 += kAttentionTileRows) {
    f(j0, std::min<std::int64_t>(seen, j0 + kAttentionTileRows), std::max<std::int64_t>(0, j0 - q0));
  }
}

// The three products of attention, each in the two places that take it. x, out and y are one
// head's [rows, D] with rows d.ld() apart; p [Sq, S] holds one row per query.

// out [Sq, S] = x y^T (x [Sq, D], y [S, D]) for the keys each block of query rows sees, in whole
// vectors of keys (y transposed once into yt [D, S], scratch, padded with zeros): the scores
// Q K^T, and dO V^T. A row's keys past those it sees, to the end of its block's last vector, hold
// products too; the caller sets them to 0.
template <class T>
void block_scores(const T* x, const T* y, T* yt, T* out, const AttentionDims& d, std::int64_t q0) {
  const std::int64_t S = d.S, ld = d.ld(), seen = keys_seen(q0, d.Sq - 1, S);
  transpose_head(y, ld, seen, d.D, yt);
  for_query_blocks(d.Sq, S, q0, [&](std::int64_t r0, std::int64_t r1, std::int64_t w) {
    const auto xa = [&](std::int64_t i, std::int64_t e) { return x[(r0 + i) * ld + e]; };
    attention_product<T>(xa, yt, padded_keys<T>(seen), r1 - r0, std::min(S, padded_keys<T>(w)), d.D, out + r0 * S, S);
  });
}

// out [Sq, D] = p y (y [S, D]) over the keys each block of query rows sees: P V, and dS K.
template <class T>
void block_mix(const T* p, const T* y, T* out, const AttentionDims& d, std::int64_t q0) {
  const std::int64_t S = d.S, ld = d.ld();
  for_query_blocks(d.Sq, S, q0, [&](std::int64_t r0, std::int64_t r1, std::int64_t w) {
    const auto pa = [&](std::int64_t i, std::int64_t j) { return p[(r0 + i) * S + j]; };
    attention_product<T>(pa, y, ld, r1 - r0, d.D, w, out + r0 * ld, ld);
  });
}

// out [S, D] = p^T x (x [Sq, D]) for the keys any query sees, each from the first query that sees
// it, and 0 for the keys no query sees: P^T dO, and dS^T Q.
template <class T>
void key_gradient(const T* p, const T* x, T* out, const AttentionDims& d, std::int64_t q0) {
  const std::int64_t S = d.S, Sq = d.Sq, D = d.D, ld = d.ld(), seen = keys_seen(q0, Sq - 1, S);
  for_key_blocks(seen, q0, [&](std::int64_t j0, std::int64_t j1, std::int64_t i0) {
    const auto pt = [&](std::int64_t j, std::int64_t i) { return p[(i0 + i) * S + j0 + j]; };
    attention_product<T>(pt, x + i0 * ld, ld, j1 - j0, D, Sq - i0, out + j0 * ld, ld);
  });
  for (std::int64_t j = seen; j < S; ++j) std::fill(out + j * ld, out + j * ld + D, T(0));
}

// One batch row and head: q, out [Sq, D] and k, v [S, D] with rows d.ld() apart, p [Sq, S];
// shifted [S] and kt [D, S] are scratch. Each block of query rows gets its scores for the keys its
// last row sees, each row its softmax over the keys it sees (0 past them), and out = P V.
template <class T>
void attention_forward_head(const T* q, const T* k, const T* v, T* out, T* p, T* shifted, T* kt,
                            const AttentionDims& d, std::int64_t q0, T scale) {
  const std::int64_t Sq = d.Sq, S = d.S;
  block_scores(q, k, kt, p, d, q0);
  // Each row's softmax over the keys it sees, its passes taken over whole vectors (the keys past
  // those to the vector's end, which the products computed, then set to 0 before the sum).
  using V = typename Vec<T>::type;
  constexpr std::int64_t L = Vec<T>::lanes;
  const V floor = splat<V>(softmax_exp_floor<T>()), none = V{};
  for (std::int64_t i = 0; i < Sq; ++i) {
    const std::int64_t width = keys_seen(q0, i, S), whole = std::min(S, padded_keys<T>(width));
    T* r = p + i * S;
    auto x = ArrayOut<T>(r, whole);
    auto t = ArrayOut<T>(shifted, whole);
    x *= scale;
    t = x - ArrayOut<T>(r, width).maxCoeff();
    x = t.exp();
    // Below softmax_last's floor the vectorized exp clamps; those entries are 0, as there.
    std::int64_t j = 0;
    for (; j + L <= width; j += L) {
      store_vector(r + j, load_vector(shifted + j) < floor ? none : load_vector(r + j));
    }
    for (; j < width; ++j) r[j] = shifted[j] < softmax_exp_floor<T>() ? T(0) : r[j];
    std::fill(r + width, r + S, T(0));
    x /= x.sum();
  }
  block_mix(p, v, out, d, q0);
}

// Its backward; dq [Sq, D] and dk, dv [S, D] (rows d.ld() apart) are written whole, the keys no
// query sees 0; dp [Sq, S] and vt [D, S] are scratch.
template <class T>
void attention_backward_head(const T* q, const T* k, const T* v, const T* p, const T* dout, T* dq, T* dk, T* dv,
                             T* dp, T* vt, const AttentionDims& d, std::int64_t q0, T scale) {
  const std::int64_t Sq = d.Sq, S = d.S;
  key_gradient(p, dout, dv, d, q0);  // dV = P^T dO
  // dP = dO V^T, then dS = scale P (dP - rowsum(P dP)).
  block_scores(dout, v, vt, dp, d, q0);
  for (std::int64_t i = 0; i < Sq; ++i) {
    const std::int64_t width = keys_seen(q0, i, S);
    const auto pi = ArrayIn<T>(p + i * S, width);
    auto g = ArrayOut<T>(dp + i * S, width);
    const T dot = (pi * g).sum();
    g = scale * (pi * (g - dot));
    std::fill(dp + i * S + width, dp + (i + 1) * S, T(0));
  }
  block_mix(dp, k, dq, d, q0);       // dQ = dS K
  key_gradient(dp, q, dk, d, q0);    // dK = dS^T Q
}

// Calls f(q_at, k_at, p_at) for every batch row and head: the offsets of its first element in q
// (and out, dq, dout), in k (and v, dk, dv), and of its [Sq, S] probabilities.
template <class F>
void for_each_head(const AttentionDims& d, F&& f) {
  for (std::int64_t b = 0; b < d.B; ++b) {
    for (std::int64_t h = 0; h < d.H; ++h) {
      f((b * d.Sq * d.H + h) * d.D, (b * d.S * d.H + h) * d.D, (b * d.H + h) * d.Sq * d.S);
    }
  }
}

template <class T>
void attention_forward_typed(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionDims& d,
                             std::int64_t q0, double scale, Tensor& out, Tensor& probs) {
  std::vector<T> shifted(static_cast<std::size_t>(d.S)), kt(static_cast<std::size_t>(d.D * padded_keys<T>(d.S)));
  for_each_head(d, [&](std::int64_t at_q, std::int64_t at_k, std::int64_t at_p) {
    attention_forward_head<T>(q.data<T>() + at_q, k.data<T>() + at_k, v.data<T>() + at_k, out.data<T>() + at_q,
                              probs.data<T>() + at_p, shifted.data(), kt.data(), d, q0, static_cast<T>(scale));
  });
}

template <class T>
void attention_backward_typed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                              const Tensor& dout, const AttentionDims& d, std::int64_t q0, double scale, Tensor& dq,
                              Tensor& dk, Tensor& dv) {
  std::vector<T> dp(static_cast<std::size_t>(d.Sq * d.S)), vt(static_cast<std::size_t>(d.D * padded_keys<T>(d.S)));
  for_each_head(d, [&](std::int64_t at_q, std::int64_t at_k, std::int64_t at_p) {
    attention_backward_head<T>(q.data<T>() + at_q, k.data<T>() + at_k, v.data<T>() + at_k, probs.data<T>() + at_p,
                               dout.data<T>() + at_q, dq.data<T>() + at_q, dk.data<T>() + at_k, dv.data<T>() + at_k,
                               dp.data(), vt.data(), d, q0, static_cast<T>(scale));
  });
}

}  // namespace

void causal_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, std::int64_t q0, double scale,
                              Tensor& out, Tensor& probs) {
  const AttentionDims d = attention_dims(q, k, v, q0, "causal_attention");
  if (is_bf16(q)) {
    Tensor out32;
    causal_attention_forward(to_f32(q), to_f32(k), to_f32(v), q0, scale, out32, probs);
    out = to_bf16(out32);
    return;
  }
  out = Tensor::empty(q.shape(), q.dtype());
  probs = Tensor::empty({d.B, d.H, d.Sq, d.S}, q.dtype());
  if (d.Sq == 0) return;
  dispatch_float(q.dtype(), [&](auto zero) {
    attention_forward_typed<decltype(zero)>(q, k, v, d, q0, scale, out, probs);
  });
}

void causal_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                               const Tensor& dout, std::int64_t q0, double scale, Tensor& dq, Tensor& dk, Tensor& dv) {
  const AttentionDims d = attention_dims(q, k, v, q0, "causal_attention_grad");
  if (dout.shape() != q.shape() || dout.dtype() != q.dtype() ||
      probs.shape() != Shape{d.B, d.H, d.Sq, d.S} || probs.dtype() != (is_bf16(q) ? DType::f32 : q.dtype())) {
    throw ShapeError("causal_attention_grad: gradient " + shape_to_string(dout.shape()) + " or probabilities " +
                     shape_to_string(probs.shape()) + " do not fit q " + shape_to_string(q.shape()));
  }
  if (is_bf16(q)) {
    Tensor dq32, dk32, dv32;
    causal_attention_backward(to_f32(q), to_f32(k), to_f32(v), probs, to_f32(dout), q0, scale, dq32, dk32, dv32);
    dq = to_bf16(dq32);
    dk = to_bf16(dk32);
    dv = to_bf16(dv32);
    return;
  }
  dq = Tensor::empty(q.shape(), q.dtype());
  if (d.Sq == 0) {  // no query: no share of the keys' gradients
    dk = Tensor(k.shape(), k.dtype());
    dv = Tensor(v.shape(), v.dtype());
    return;
  }
  dk = Tensor::empty(k.shape(), k.dtype());
  dv = Tensor::empty(v.shape(), v.dtype());
  dispatch_float(q.dtype(), [&](auto zero) {
    attention_backward_typed<decltype(zero)>(q, k, v, probs, dout, d, q0, scale, dq, dk, dv);
  });
}

namespace {

// rows x d of x, after checking w is [d] of x's dtype.
std::pair<std::int64_t, std::int64_t> rmsnorm_dims(const Tensor& x, const Tensor& w, const char* what) {
  require_float(x, what);
  if (x.ndim() < 1 || w.ndim() != 1 || w.shape()[0] != x.shape().back() || w.dtype() != x.dtype()) {
    throw ShapeError(std::string(what) + ": weight " + shape_to_string(w.shape()) + " " +
                     std::string(dtype_name(w.dtype())) + " does not fit the last dimension of " +
                     shape_to_string(x.shape()) + " " + std::string(dtype_name(x.dtype())));
  }
  const std::int64_t d = x.shape().back();
  return {d == 0 ? 0 : x.numel() / d, d};
}

Shape rows_shape(const Tensor& x) { return Shape(x.shape().begin(), x.shape().end() - 1); }

}  // namespace

namespace {

// rotate_pairs on one dtype's storage. In -O3 the pair loop is vectorized (f32 widened to
// double 8 lanes at a time); in nn/attention.cpp at -O2 it ran one element at a time, 2% of the
// transformer's step on one rank.
template <class T>
void rotate_pairs_typed(const T* __restrict x, T* __restrict y, const Shape& s, const double* cosines,
                        const double* sines, double sign) {
  const std::int64_t batch = s[0], seq = s[1], heads = s[2], dh = s[3], half = dh / 2;
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t p = 0; p < seq; ++p) {
      const double* c = cosines + p * half;
      const double* sn = sines + p * half;
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::int64_t at = ((b * seq + p) * heads + h) * dh;
        const T* x1 = x + at;
        const T* x2 = x1 + half;
        T* y1 = y + at;
        T* y2 = y1 + half;
        for (std::int64_t i = 0; i < half; ++i) {
          const double si = sign * sn[i];
          const double a = static_cast<double>(x1[i]), b2 = static_cast<double>(x2[i]);
          y1[i] = static_cast<T>(a * c[i] - b2 * si);
          y2[i] = static_cast<T>(b2 * c[i] + a * si);
        }
      }
    }
  }
}

}  // namespace

void rotate_pairs(const Tensor& x, const double* cosines, const double* sines, double sign, Tensor& y) {
  const Shape& s = x.shape();
  if (s.size() != 4 || s[3] % 2 != 0 || y.shape() != s || y.dtype() != x.dtype()) {
    throw ShapeError("rotate_pairs: x " + shape_to_string(s) + " " + std::string(dtype_name(x.dtype())) + " and y " +
                     shape_to_string(y.shape()) + " " + std::string(dtype_name(y.dtype())) +
                     " are not one [batch, seq, heads, even d_head] shape and dtype");
  }
  switch (x.dtype()) {
    case DType::f32:
      rotate_pairs_typed(x.data<float>(), y.data<float>(), s, cosines, sines, sign);
      break;
    case DType::f64:
      rotate_pairs_typed(x.data<double>(), y.data<double>(), s, cosines, sines, sign);
      break;
    case DType::bf16:
      rotate_pairs_typed(x.data<bfloat16>(), y.data<bfloat16>(), s, cosines, sines, sign);
      break;
    default:
      throw DTypeError("rotate_pairs: dtype " + std::string(dtype_name(x.dtype())) + " is not f32, f64 or bf16");
  }
}

void rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, Tensor& y, Tensor& r) {
  // Plain variables, not a structured binding: clang before 16 does not let the dtype lambda
  // capture one (the fuzz build compiles with clang 14).
  const std::pair<std::int64_t, std::int64_t> dims = rmsnorm_dims(x, w, "rmsnorm");
  const std::int64_t rows = dims.first, d = dims.second;
  if (is_bf16(x)) {
    Tensor y32;
    rmsnorm_forward(to_f32(x), to_f32(w), eps, y32, r);
    y = to_bf16(y32);
    return;
  }
  y = Tensor::empty(x.shape(), x.dtype());
  r = Tensor::empty(rows_shape(x), x.dtype());
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const auto weight = ArrayIn<T>(w.data<T>(), d);
    for (std::int64_t i = 0; i < rows; ++i) {
      const auto in = ArrayIn<T>(x.data<T>() + i * d, d);
      const T inv = T(1) / std::sqrt(in.square().sum() / static_cast<T>(d) + static_cast<T>(eps));
      r.data<T>()[i] = inv;
      ArrayOut<T>(y.data<T>() + i * d, d) = in * inv * weight;
    }
  });
}

void rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& dy, Tensor& dx, Tensor& dw) {
  const std::pair<std::int64_t, std::int64_t> dims = rmsnorm_dims(x, w, "rmsnorm_grad");
  const std::int64_t rows = dims.first, d = dims.second;
  if (dy.shape() != x.shape() || dy.dtype() != x.dtype() || r.shape() != rows_shape(x) ||
      r.dtype() != (is_bf16(x) ? DType::f32 : x.dtype())) {
    throw ShapeError("rmsnorm_grad: gradient " + shape_to_string(dy.shape()) + " or statistics " +
                     shape_to_string(r.shape()) + " do not fit " + shape_to_string(x.shape()));
  }
  if (is_bf16(x)) {
    Tensor dx32, dw32;
    rmsnorm_backward(to_f32(x), to_f32(w), r, to_f32(dy), dx32, dw32);
    dx = to_bf16(dx32);
    dw = to_bf16(dw32);
    return;
  }
  dx = Tensor::empty(x.shape(), x.dtype());
  dw = Tensor({d}, x.dtype());
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const auto weight = ArrayIn<T>(w.data<T>(), d);
    auto weight_grad = ArrayOut<T>(dw.data<T>(), d);
    for (std::int64_t i = 0; i < rows; ++i) {
      const auto in = ArrayIn<T>(x.data<T>() + i * d, d);
      const auto g = ArrayIn<T>(dy.data<T>() + i * d, d);
      const T inv = r.data<T>()[i];
      const T mean_gwx = (g * weight * in).sum() / static_cast<T>(d);
      ArrayOut<T>(dx.data<T>() + i * d, d) = inv * (g * weight - in * (inv * inv * mean_gwx));
      weight_grad += g * in * inv;
    }
  });
}

Tensor affine(const Tensor& x, double scale, double shift) {
  require_float(x, "affine");
  if (is_bf16(x)) return to_bf16(affine(to_f32(x), scale, shift));
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = x.data<T>();
    T* o = out.data<T>();
    const T s = static_cast<T>(scale), t = static_cast<T>(shift);
    for (std::int64_t i = 0; i < x.numel(); ++i) o[i] = p[i] * s + t;
  });
  return out;
}

Tensor axpy(const Tensor& a, double scale, const Tensor& b) {
  require_float(a, "axpy");
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) throw ShapeError("axpy: operands differ in shape or dtype");
  if (is_bf16(a)) return to_bf16(axpy(to_f32(a), scale, to_f32(b)));
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  dispatch_float(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* o = out.data<T>();
    const T s = static_cast<T>(scale);
    for (std::int64_t i = 0; i < a.numel(); ++i) o[i] = pa[i] + s * pb[i];
  });
  return out;
}

void add_inplace(Tensor& a, const Tensor& b) {
  require_float(a, "add_inplace");
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) {
    throw ShapeError("add_inplace: " + shape_to_string(a.shape()) + " and " + shape_to_string(b.shape()) + " differ");
  }
  if (is_bf16(a)) {
    bfloat16* pa = a.data<bfloat16>();
    const bfloat16* pb = b.data<bfloat16>();
    for (std::int64_t i = 0; i < a.numel(); ++i) pa[i] = bfloat16(float(pa[i]) + float(pb[i]));
    return;
  }
  dispatch_float(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* pa = a.data<T>();
    const T* pb = b.data<T>();
    for (std::int64_t i = 0; i < a.numel(); ++i) pa[i] += pb[i];
  });
}

namespace {

template <bool IsMax>
Tensor reduce(const Tensor& x, const std::vector<int>& dims, bool keepdims) {
  require_float(x, "reduce");
  if (is_bf16(x)) return to_bf16(reduce<IsMax>(to_f32(x), dims, keepdims));  // f32 accumulators
  const int r = x.ndim();
  std::vector<bool> reduced(r, false);
  for (int d : dims) {
    if (d < 0 || d >= r) throw ShapeError("reduce: dimension " + std::to_string(d) + " out of range for rank " + std::to_string(r));
    reduced[d] = true;
  }
  Shape kept(r);
  for (int d = 0; d < r; ++d) kept[d] = reduced[d] ? 1 : x.shape()[d];
  Tensor out(kept, x.dtype());
  // The reduced dimensions one contiguous run [first, last]: x is [outer, middle, inner] with the
  // middle summed, out [outer, inner]. Each output element accumulates the middle index in
  // increasing order, as the general loop below does, so both give the same bits.
  int first = r, last = -1;
  for (int d = 0; d < r; ++d) {
    if (reduced[d]) first = std::min(first, d), last = d;
  }
  bool contiguous = last >= 0;
  for (int d = first; contiguous && d <= last; ++d) contiguous = reduced[d];
  if (contiguous) {
    std::int64_t outer = 1, middle = 1, inner = 1;
    for (int d = 0; d < first; ++d) outer *= x.shape()[d];
    for (int d = first; d <= last; ++d) middle *= x.shape()[d];
    for (int d = last + 1; d < r; ++d) inner *= x.shape()[d];
    dispatch_float(x.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T* p = x.data<T>();
      T* o = out.data<T>();
      for (std::int64_t a = 0; a < outer; ++a) {
        T* row = o + a * inner;
        if (inner == 1) {
          T acc = IsMax ? -std::numeric_limits<T>::infinity() : T(0);
          const T* in = p + a * middle;
          for (std::int64_t b = 0; b < middle; ++b) acc = IsMax ? std::max(acc, in[b]) : acc + in[b];
          row[0] = acc;
          continue;
        }
        if (IsMax) std::fill_n(row, inner, -std::numeric_limits<T>::infinity());
        for (std::int64_t b = 0; b < middle; ++b) {
          const T* in = p + (a * middle + b) * inner;
          if (IsMax) {
            for (std::int64_t c = 0; c < inner; ++c) row[c] = std::max(row[c], in[c]);
          } else {
            for (std::int64_t c = 0; c < inner; ++c) row[c] += in[c];
          }
        }
      }
    });
  } else {
    dispatch_float(x.dtype(), [&](auto zero) {
      using T = decltype(zero);
      T* o = out.data<T>();
      if (IsMax) std::fill_n(o, out.numel(), -std::numeric_limits<T>::infinity());
      const T* p = x.data<T>();
      auto ostrides = row_major_strides(kept);
      std::vector<std::int64_t> index(r, 0);
      for (std::int64_t i = 0; i < x.numel(); ++i) {
        std::int64_t oi = 0;
        for (int d = 0; d < r; ++d) oi += reduced[d] ? 0 : index[d] * ostrides[d];
        if (IsMax) {
          o[oi] = std::max(o[oi], p[i]);
        } else {
          o[oi] += p[i];
        }
        for (int d = r - 1; d >= 0; --d) {
          if (++index[d] < x.shape()[d]) break;
          index[d] = 0;
        }
      }
    });
  }
  if (keepdims) return out;
  Shape squeezed;
  for (int d = 0; d < r; ++d) {
    if (!reduced[d]) squeezed.push_back(x.shape()[d]);
  }
  return std::move(out).reshaped(squeezed);
}

}  // namespace

Tensor reduce_sum(const Tensor& x, const std::vector<int>& dims, bool keepdims) { return reduce<false>(x, dims, keepdims); }
Tensor reduce_max(const Tensor& x, const std::vector<int>& dims, bool keepdims) { return reduce<true>(x, dims, keepdims); }

double sum_all(const Tensor& x) {
  double s = 0;
  for (std::int64_t i = 0; i < x.numel(); ++i) s += x.at(i);
  return s;
}

}  // namespace tessera
