#include "core/denormals.h"

namespace tessera {

namespace {

#if defined(__x86_64__) || defined(__i386__)
// MXCSR: DAZ (bit 6) reads subnormal operands as zero, FTZ (bit 15) writes subnormal results as
// zero. Both apply to SSE, AVX and AVX-512 arithmetic, the only floating point the kernels use.
constexpr std::uint64_t kFlushBits = (1u << 6) | (1u << 15);
std::uint64_t read_mode() {
  unsigned mxcsr = 0;
  __asm__ __volatile__("stmxcsr %0" : "=m"(mxcsr));
  return mxcsr;
}
void write_mode(std::uint64_t mode) {
  unsigned mxcsr = static_cast<unsigned>(mode);
  __asm__ __volatile__("ldmxcsr %0" : : "m"(mxcsr));
}
#elif defined(__aarch64__)
// FPCR.FZ (bit 24) flushes subnormal operands and results of single and double precision.
constexpr std::uint64_t kFlushBits = std::uint64_t{1} << 24;
std::uint64_t read_mode() {
  std::uint64_t fpcr = 0;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
  return fpcr;
}
void write_mode(std::uint64_t mode) { __asm__ __volatile__("msr fpcr, %0" : : "r"(mode)); }
#else
constexpr std::uint64_t kFlushBits = 0;
std::uint64_t read_mode() { return 0; }
void write_mode(std::uint64_t) {}
#endif

}  // namespace

FlushDenormals::FlushDenormals(bool flush) : saved_(read_mode()) {
  if (kFlushBits == 0) return;
  write_mode(flush ? saved_ | kFlushBits : saved_ & ~kFlushBits);
}

FlushDenormals::~FlushDenormals() {
  if (kFlushBits != 0) write_mode(saved_);
}

bool denormals_flushed() { return kFlushBits != 0 && (read_mode() & kFlushBits) == kFlushBits; }

}  // namespace tessera
