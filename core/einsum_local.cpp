// Local einsum: letters are grouped into batch (a, b, out), m (a, out), n (b, out) and
// contracted k (a, b); a is viewed as [batch, m, k], b as [batch, k, n], c as [batch, m, n].
#include "core/einsum_local.h"

#include <algorithm>
#include <cctype>
#include <array>

#include "core/error.h"
#include "core/kernels.h"

namespace tessera {

namespace {

bool has(const std::string& s, char c) { return s.find(c) != std::string::npos; }

// The position in `in` of each of `letters` (a permutation when they hold the same letters).
std::vector<int> positions(const std::string& letters, const std::string& in) {
  std::vector<int> out;
  for (char c : letters) out.push_back(static_cast<int>(in.find(c)));
  return out;
}

}  // namespace

EinsumSubscripts EinsumSubscripts::parse(std::string_view text) {
  std::string s;
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  }
  auto fail = [&](const std::string& why) -> EinsumSubscripts {
    throw ShapeError("einsum '" + std::string(text) + "': " + why);
  };
  auto arrow = s.find("->");
  auto comma = s.find(',');
  if (arrow == std::string::npos || comma == std::string::npos || comma > arrow) {
    return fail("expected two operands and an output, like 'bd,dh->bh'");
  }
  EinsumSubscripts out{s.substr(0, comma), s.substr(comma + 1, arrow - comma - 1), s.substr(arrow + 2)};
  for (const auto* part : {&out.a, &out.b, &out.out}) {
    for (std::size_t i = 0; i < part->size(); ++i) {
      char c = (*part)[i];
      if (!std::isalpha(static_cast<unsigned char>(c))) return fail(std::string("'") + c + "' is not a letter");
      if (part->find(c, i + 1) != std::string::npos) return fail(std::string("letter '") + c + "' repeats in one term");
    }
  }
  for (char c : out.a) {
    if (!has(out.b, c) && !has(out.out, c)) return fail(std::string("letter '") + c + "' of the first operand is in neither the second nor the output");
  }
  for (char c : out.b) {
    if (!has(out.a, c) && !has(out.out, c)) return fail(std::string("letter '") + c + "' of the second operand is in neither the first nor the output");
  }
  for (char c : out.out) {
    if (!has(out.a, c) && !has(out.b, c)) return fail(std::string("output letter '") + c + "' is in no operand");
  }
  return out;
}

Tensor einsum_local(const EinsumSubscripts& sub, const Tensor& a, const Tensor& b) {
  if (a.ndim() != static_cast<int>(sub.a.size()) || b.ndim() != static_cast<int>(sub.b.size())) {
    throw ShapeError("einsum '" + sub.to_string() + "': operands of shapes " + shape_to_string(a.shape()) + " and " +
                     shape_to_string(b.shape()) + " do not match the subscripts");
  }
  // Each letter's extent, by its character (letters are ASCII: parse checked them).
  std::array<std::int64_t, 128> extent{};
  std::array<bool, 128> seen{};
  auto at = [](char c) { return static_cast<std::size_t>(static_cast<unsigned char>(c)) & 127; };
  for (int i = 0; i < a.ndim(); ++i) {
    extent[at(sub.a[i])] = a.shape()[i];
    seen[at(sub.a[i])] = true;
  }
  for (int i = 0; i < b.ndim(); ++i) {
    const std::size_t c = at(sub.b[i]);
    if (seen[c] && extent[c] != b.shape()[i]) {
      throw ShapeError("einsum '" + sub.to_string() + "': letter '" + std::string(1, sub.b[i]) + "' has extent " +
                       std::to_string(extent[c]) + " in the first operand and " + std::to_string(b.shape()[i]) +
                       " in the second");
    }
    extent[c] = b.shape()[i];
  }
  // The letter groups (a handful of letters each: no allocation, short strings stay in place).
  std::string batch, m, n, k;
  for (char c : sub.a) {
    if (has(sub.b, c) && has(sub.out, c)) batch += c;
    else if (has(sub.b, c)) k += c;
    else m += c;
  }
  for (char c : sub.b) {
    if (!has(sub.a, c)) n += c;
  }
  auto product = [&](const std::string& letters) {
    std::int64_t p = 1;
    for (char c : letters) p *= extent[at(c)];
    return p;
  };
  const std::int64_t B = product(batch), M = product(m), N = product(n), K = product(k);
  // An output in [batch, n, m] order is the product with the operands swapped (C^T = B^T A^T):
  // the GEMM then writes it in place instead of a [batch, m, n] result permuted afterwards (a
  // weight gradient's einsum wrote the whole [d, h] block twice).
  if (!m.empty() && !n.empty() && sub.out == batch + n + m) return einsum_local({sub.b, sub.a, sub.out}, b, a);
  // a as [batch, m, k] or [batch, k, m]; b as [batch, k, n] or [batch, n, k]: stored so when
  // its letters are in that order, else permuted into [batch, m, k] / [batch, k, n].
  bool trans_a = false, trans_b = false;
  Tensor a_view, b_view;
  const Tensor* pa = &a;
  const Tensor* pb = &b;
  const std::string a_mk = batch + m + k, b_kn = batch + k + n;
  if (sub.a != a_mk && sub.a == batch + k + m) {
    trans_a = true;
  } else if (sub.a != a_mk) {
    a_view = permute_dims(a, positions(a_mk, sub.a));
    pa = &a_view;
  }
  if (sub.b != b_kn && sub.b == batch + n + k) {
    trans_b = true;
  } else if (sub.b != b_kn) {
    b_view = permute_dims(b, positions(b_kn, sub.b));
    pb = &b_view;
  }
  const std::string c_letters = batch + m + n;
  Shape c_shape;
  c_shape.reserve(c_letters.size());
  for (char c : c_letters) c_shape.push_back(extent[at(c)]);
  Tensor c = Tensor::empty(std::move(c_shape), a.dtype());  // the GEMM overwrites it
  batched_gemm(*pa, *pb, c, B, M, N, K, trans_a, trans_b);
  // c is [batch, m, n]; reorder to the output's letters (returned as it is when they are in that
  // order: permute_dims of a const tensor would copy it).
  if (sub.out == c_letters) return c;
  return permute_dims(c, positions(sub.out, c_letters));
}

}  // namespace tessera
