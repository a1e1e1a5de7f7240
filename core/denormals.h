// Subnormal floating-point numbers flushed to zero on the calling thread, as XLA:CPU runs every
// computation (and so JAX on a CPU): an operand below the smallest normal number is read as zero
// and a result below it is written as zero (x86: MXCSR's DAZ and FTZ bits; AArch64: FPCR's FZ).
//
// Why: a core that meets a subnormal operand or result takes a microcode assist of about a
// hundred cycles for that vector. Adam's moments of a weight whose gradient is zero or tiny decay
// into the subnormal range (the first moment after about 800 steps at beta1 0.9), and from then
// on every step pays the assist on those elements: the tutorial's MLP on one rank went from 7.1 to
// 69.7 ms a step after about step 800 (docs/design.md, semantics 12).
//
// tessera::Environment flushes on the thread that makes it for the environment's lifetime,
// unless TESSERA_DENORMALS=keep (core/env_settings.h). A program that uses the core's kernels
// without an Environment can hold a FlushDenormals itself. Only the arithmetic changes: loads,
// stores, copies, integer work (checksums, bf16 rounding) and comparisons of stored bits do not.
#pragma once

#include <cstdint>

namespace tessera {

// RAII: flushes (flush == true) or keeps subnormals on this thread, and restores the thread's
// previous mode on destruction. On a CPU with neither control it does nothing, and
// denormals_flushed() stays false.
class FlushDenormals {
 public:
  explicit FlushDenormals(bool flush = true);
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;
  ~FlushDenormals();

 private:
  std::uint64_t saved_;
};

// Whether this thread now flushes subnormals to zero (both operands and results).
bool denormals_flushed();

}  // namespace tessera
