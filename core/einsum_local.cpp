// Local einsum: letters are grouped into batch (a, b, out), m (a, out), n (b, out) and
// contracted k (a, b); a is viewed as [batch, m, k], b as [batch, k, n], c as [batch, m, n].
#include "core/einsum_local.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "core/error.h"
#include "core/kernels.h"

namespace tessera {

namespace {

bool has(const std::string& s, char c) { return s.find(c) != std::string::npos; }

std::vector<int> positions(const std::string& letters, const std::string& in) {
  std::vector<int> out;
  for (char c : letters) out.push_back(static_cast<int>(in.find(c)));
  return out;
}

bool is_identity(const std::vector<int>& perm) {
  for (int i = 0; i < static_cast<int>(perm.size()); ++i) {
    if (perm[i] != i) return false;
  }
  return true;
}

std::vector<int> concat(std::initializer_list<std::vector<int>> parts) {
  std::vector<int> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
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
  std::map<char, std::int64_t> extent;
  for (int i = 0; i < a.ndim(); ++i) extent[sub.a[i]] = a.shape()[i];
  for (int i = 0; i < b.ndim(); ++i) {
    auto it = extent.find(sub.b[i]);
    if (it != extent.end() && it->second != b.shape()[i]) {
      throw ShapeError("einsum '" + sub.to_string() + "': letter '" + std::string(1, sub.b[i]) + "' has extent " +
                       std::to_string(it->second) + " in the first operand and " + std::to_string(b.shape()[i]) +
                       " in the second");
    }
    extent[sub.b[i]] = b.shape()[i];
  }
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
    for (char c : letters) p *= extent[c];
    return p;
  };
  const std::int64_t B = product(batch), M = product(m), N = product(n), K = product(k);
  // An output in [batch, n, m] order is the product with the operands swapped (C^T = B^T A^T):
  // the GEMM then writes it in place instead of a [batch, m, n] result permuted afterwards (a
  // weight gradient's einsum wrote the whole [d, h] block twice).
  if (!m.empty() && !n.empty() && sub.out == batch + n + m) return einsum_local({sub.b, sub.a, sub.out}, b, a);
  // a as [batch, m, k] or [batch, k, m]; b as [batch, k, n] or [batch, n, k].
  bool trans_a = false, trans_b = false;
  Tensor a_view, b_view;
  const Tensor* pa = &a;
  const Tensor* pb = &b;
  auto a_mk = concat({positions(batch, sub.a), positions(m, sub.a), positions(k, sub.a)});
  auto a_km = concat({positions(batch, sub.a), positions(k, sub.a), positions(m, sub.a)});
  if (is_identity(a_km) && !is_identity(a_mk)) {
    trans_a = true;
  } else if (!is_identity(a_mk)) {
    a_view = permute_dims(a, a_mk);
    pa = &a_view;
  }
  auto b_kn = concat({positions(batch, sub.b), positions(k, sub.b), positions(n, sub.b)});
  auto b_nk = concat({positions(batch, sub.b), positions(n, sub.b), positions(k, sub.b)});
  if (is_identity(b_nk) && !is_identity(b_kn)) {
    trans_b = true;
  } else if (!is_identity(b_kn)) {
    b_view = permute_dims(b, b_kn);
    pb = &b_view;
  }
  Shape c_shape;
  for (char c : batch + m + n) c_shape.push_back(extent[c]);
  Tensor c = Tensor::empty(c_shape, a.dtype());  // the GEMM overwrites it
  batched_gemm(*pa, *pb, c, B, M, N, K, trans_a, trans_b);
  // c is [batch, m, n]; reorder to the output's letters (returned as it is when they are in that
  // order: permute_dims of a const tensor would copy it).
  std::string c_letters = batch + m + n;
  std::vector<int> perm = positions(sub.out, c_letters);
  if (is_identity(perm)) return c;
  return permute_dims(c, perm);
}

}  // namespace tessera
