// Overflow-checked size arithmetic. Element counts, byte sizes, mesh sizes and offsets are
// products of user input (flags, specs, file metadata); a wrapped product would allocate or
// address the wrong number of bytes, so overflow is an error naming the quantity, never a wrap.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "core/error.h"

namespace tessera {

// A size (element count, byte count, mesh size, offset) that does not fit its type.
class OverflowError : public Error {
 public:
  using Error::Error;
};

// a * b, or OverflowError("<what> overflows: a * b"). `what` names the quantity (e.g. "numel of
// tensor 'x'"); it is only built when the product overflows.
template <class T>
T checked_mul(T a, T b, const char* what) {
  static_assert(std::is_integral_v<T>);
  T r;
  if (__builtin_mul_overflow(a, b, &r)) {
    throw OverflowError(std::string(what) + " overflows: " + std::to_string(a) + " * " + std::to_string(b));
  }
  return r;
}

template <class T>
T checked_add(T a, T b, const char* what) {
  static_assert(std::is_integral_v<T>);
  T r;
  if (__builtin_add_overflow(a, b, &r)) {
    throw OverflowError(std::string(what) + " overflows: " + std::to_string(a) + " + " + std::to_string(b));
  }
  return r;
}

// `v` converted to To, or OverflowError when it does not fit (e.g. int64 -> size_t of a negative).
template <class To, class From>
To checked_cast(From v, const char* what) {
  static_assert(std::is_integral_v<To> && std::is_integral_v<From>);
  To r;
  if (__builtin_add_overflow(v, From{0}, &r)) {
    throw OverflowError(std::string(what) + " " + std::to_string(v) + " does not fit its type");
  }
  return r;
}

}  // namespace tessera
