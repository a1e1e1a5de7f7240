// Local kernels against plain loops: einsum (every operand layout the GEMM lowering handles),
// broadcasting binary ops, reductions, permutation.
#include "core/kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include <map>

#include "core/einsum_local.h"
#include "core/error.h"

namespace tessera {
namespace {

Tensor values(const Shape& shape, int seed, DType dtype = DType::f64) {
  Tensor t(shape, DType::f64);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = ((i * 37 + seed * 11) % 23) / 8.0 - 1.0;
  return t.astype(dtype);
}

// einsum by enumerating every assignment of the letters.
Tensor naive_einsum(const std::string& spec, const Tensor& a, const Tensor& b) {
  auto sub = EinsumSubscripts::parse(spec);
  std::map<char, std::int64_t> extent;
  for (std::size_t i = 0; i < sub.a.size(); ++i) extent[sub.a[i]] = a.shape()[i];
  for (std::size_t i = 0; i < sub.b.size(); ++i) extent[sub.b[i]] = b.shape()[i];
  std::string letters;
  for (auto& [c, n] : extent) letters += c;
  Shape out_shape;
  for (char c : sub.out) out_shape.push_back(extent[c]);
  Tensor out(out_shape, DType::f64);
  std::map<char, std::int64_t> at;
  for (char c : letters) at[c] = 0;
  auto flat = [&](const std::string& s, const Shape& shape) {
    std::int64_t f = 0;
    for (std::size_t i = 0; i < s.size(); ++i) f = f * shape[i] + at[s[i]];
    return f;
  };
  while (true) {
    out.data<double>()[flat(sub.out, out_shape)] += a.at(flat(sub.a, a.shape())) * b.at(flat(sub.b, b.shape()));
    int k = static_cast<int>(letters.size()) - 1;
    while (k >= 0 && ++at[letters[k]] == extent[letters[k]]) at[letters[k--]] = 0;
    if (k < 0) break;
  }
  return out;
}

TEST(Kernels, EinsumMatchesLoopsForEveryLayout) {
  struct Case {
    std::string spec;
    Shape a, b;
  };
  const std::vector<Case> cases = {
      {"bd,dh->bh", {3, 4}, {4, 5}},        {"db,dh->bh", {4, 3}, {4, 5}},     {"bd,hd->bh", {3, 4}, {5, 4}},
      {"db,hd->bh", {4, 3}, {5, 4}},        {"bd,dh->hb", {3, 4}, {4, 5}},     {"lbd,ldh->lbh", {2, 3, 4}, {2, 4, 5}},
      {"lbd,ldh->lhb", {2, 3, 4}, {2, 4, 5}}, {"bld,dh->lbh", {3, 2, 4}, {4, 5}}, {"a,b->ab", {3}, {4}},
      {"ab,ab->", {3, 4}, {3, 4}},          {"abc,cb->a", {2, 3, 4}, {4, 3}},  {"bd,d->b", {3, 4}, {4}},
  };
  for (const auto& c : cases) {
    for (DType dtype : {DType::f64, DType::f32}) {
      Tensor a = values(c.a, 1, dtype), b = values(c.b, 2, dtype);
      Tensor got = einsum_local(EinsumSubscripts::parse(c.spec), a, b).astype(DType::f64);
      Tensor want = naive_einsum(c.spec, a.astype(DType::f64), b.astype(DType::f64));
      ASSERT_EQ(got.shape(), want.shape()) << c.spec;
      for (std::int64_t i = 0; i < want.numel(); ++i) EXPECT_NEAR(got.at(i), want.at(i), 1e-5) << c.spec << " " << i;
    }
  }
}

// batched_gemm on the shapes of a layer over a small batch (a thin m, or a thin k as in a weight
// gradient), which take their own kernels, and on shapes on either side of their limits (16
// rows; strips of two vectors, 32 f32 columns with AVX-512, 16 with AVX, 8 with SSE; every count
// of rows left after blocks of 8 or 6 and of 4, and of columns after blocks of 4 or 2), every
// transposition, with and without accumulation. With AVX-512, 5-8 rows of A against B^T take
// one tile of up to 8 x 2 (every depth here lets them). Depths of two and more panels: 16 rows
// for rows of B of 2 KiB and more, as n = 520 gives, else 32; the forward's prefetch runs on
// into the next panel's rows when that panel is full. build/ runs it at the machine's width and
// the sanitizer build (no -march=native) at SSE's.
// The operands are multiples of 1/8 with small numerators: every sum is exact in f32, so the
// result must equal the loops' exactly whatever the order of the additions.
TEST(Kernels, GemmOfThinShapesEqualsLoops) {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (std::int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 14, 16, 17, 40}) {
      for (std::int64_t n : {1, 15, 16, 31, 32, 33, 70, 520}) {
        for (std::int64_t k : {1, 5, 16, 17, 40, 64, 70}) {
          // Depths of two panels and more, and rows of 2 KiB (panels of 16 rows, so several
          // panels from k = 17), over a few row counts (one row, a block of 8, 8 and one more,
          // 16; every other count of rows left after blocks of 8 is covered at k = 17 and 40):
          // enough, and the sanitizer build's run stays short.
          const bool few_rows = m == 1 || m == 3 || m == 8 || m == 9 || m == 16;
          if ((k >= 64 && !few_rows) || (n == 520 && (k <= 16 || !few_rows))) continue;
          for (int layout = 0; layout < 8; ++layout) {
            const bool trans_a = (layout & 1) != 0, trans_b = (layout & 2) != 0, accumulate = (layout & 4) != 0;
            const std::int64_t batch = 2;
            Tensor a = values({batch, trans_a ? k : m, trans_a ? m : k}, 1, dtype);
            Tensor b = values({batch, trans_b ? n : k, trans_b ? k : n}, 2, dtype);
            Tensor c = values({batch, m, n}, 3, dtype);
            Tensor a64 = a.astype(DType::f64), b64 = b.astype(DType::f64), c64 = c.astype(DType::f64);
            batched_gemm(a, b, c, batch, m, n, k, trans_a, trans_b, accumulate);
            Tensor got = c.astype(DType::f64);
            for (std::int64_t q = 0; q < batch; ++q) {
              for (std::int64_t i = 0; i < m; ++i) {
                for (std::int64_t j = 0; j < n; ++j) {
                  double want = accumulate ? c64.data<double>()[(q * m + i) * n + j] : 0.0;
                  for (std::int64_t l = 0; l < k; ++l) {
                    const double x = a64.data<double>()[q * m * k + (trans_a ? l * m + i : i * k + l)];
                    const double y = b64.data<double>()[q * k * n + (trans_b ? j * k + l : l * n + j)];
                    want += x * y;
                  }
                  ASSERT_EQ(got.data<double>()[(q * m + i) * n + j], want)
                      << dtype_name(dtype) << " m " << m << " n " << n << " k " << k << " layout " << layout
                      << " at " << q << "," << i << "," << j;
                }
              }
            }
          }
        }
      }
    }
  }
}

// batched_gemm on shapes that take Eigen's GEMM with packing blocks of its own per-thread
// scratch (core/kernels.cpp, ScratchBlocking): a depth of several of Eigen's k-blocks, products
// that grow the scratch and smaller ones after them that reuse it, every transposition, with
// and without accumulation. Exact, as above (sums of at most 600 products of eighths).
TEST(Kernels, GemmOfWideShapesEqualsLoops) {
  struct Dims {
    std::int64_t m, n, k;
  };
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const Dims d : {Dims{20, 24, 600}, Dims{70, 130, 600}, Dims{2, 300, 33}, Dims{33, 2, 300}, Dims{70, 130, 600},
                         Dims{17, 19, 40}}) {
      for (int layout = 0; layout < 8; ++layout) {
        const bool trans_a = (layout & 1) != 0, trans_b = (layout & 2) != 0, accumulate = (layout & 4) != 0;
        const std::int64_t m = d.m, n = d.n, k = d.k;
        Tensor a = values({1, trans_a ? k : m, trans_a ? m : k}, 1, dtype);
        Tensor b = values({1, trans_b ? n : k, trans_b ? k : n}, 2, dtype);
        Tensor c = values({1, m, n}, 3, dtype);
        Tensor a64 = a.astype(DType::f64), b64 = b.astype(DType::f64), c64 = c.astype(DType::f64);
        batched_gemm(a, b, c, 1, m, n, k, trans_a, trans_b, accumulate);
        Tensor got = c.astype(DType::f64);
        for (std::int64_t i = 0; i < m; ++i) {
          for (std::int64_t j = 0; j < n; ++j) {
            double want = accumulate ? c64.data<double>()[i * n + j] : 0.0;
            for (std::int64_t l = 0; l < k; ++l) {
              want += a64.data<double>()[trans_a ? l * m + i : i * k + l] *
                      b64.data<double>()[trans_b ? j * k + l : l * n + j];
            }
            ASSERT_EQ(got.data<double>()[i * n + j], want) << dtype_name(dtype) << " m " << m << " n " << n << " k "
                                                           << k << " layout " << layout << " at " << i << "," << j;
          }
        }
      }
    }
  }
}

TEST(Kernels, EinsumErrorsNameTheProblem) {
  auto message = [](const std::string& spec) {
    try {
      EinsumSubscripts::parse(spec);
    } catch (const ShapeError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("bd,dh"), "einsum 'bd,dh': expected two operands and an output, like 'bd,dh->bh'");
  EXPECT_EQ(message("bb,bh->bh"), "einsum 'bb,bh->bh': letter 'b' repeats in one term");
  EXPECT_EQ(message("bd,dh->b"), "einsum 'bd,dh->b': letter 'h' of the second operand is in neither the first nor the output");
  EXPECT_THROW(einsum_local(EinsumSubscripts::parse("bd,dh->bh"), values({3, 4}, 1), values({5, 2}, 2)), ShapeError);
}

TEST(Kernels, BinaryBroadcastsLikeNumpy) {
  Tensor a = values({2, 3, 4}, 1), b = values({3, 1}, 2);
  Tensor sum = binary(BinaryOp::add, a, b);
  ASSERT_EQ(sum.shape(), (Shape{2, 3, 4}));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) EXPECT_EQ(sum.at((i * 3 + j) * 4 + k), a.at((i * 3 + j) * 4 + k) + b.at(j));
  Tensor q = binary(BinaryOp::div, a, values({4}, 5));
  EXPECT_EQ(q.at(6), a.at(6) / values({4}, 5).at(2));
  EXPECT_THROW(binary(BinaryOp::add, a, values({2}, 1)), ShapeError);
  // Operands of different dtypes are a DTypeError, not a ShapeError.
  try {
    binary(BinaryOp::add, a, a.astype(DType::f32));
    FAIL() << "no error";
  } catch (const DTypeError& e) {
    EXPECT_STREQ(e.what(), "binary op: dtypes f64 and f32 differ");
  }
  // sum_to_shape reverses the broadcast.
  Tensor back = sum_to_shape(binary(BinaryOp::mul, a, Tensor::full({3, 1}, 1.0, DType::f64)), {3, 1});
  for (int j = 0; j < 3; ++j) {
    double s = 0;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) s += a.at((i * 3 + j) * 4 + k);
    EXPECT_NEAR(back.at(j), s, 1e-12);
  }
}

// exp underflows to exactly 0 (a causal mask's -inf must give a probability of 0, whatever the
// vector width the build uses); tanh and GELU saturate exactly; GELU and its derivative match
// the formula in double, and a reduction over a contiguous run matches the element loop.
TEST(Kernels, ElementwiseEdgesAndGelu) {
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor x = Tensor::full({37}, 0.0, dtype);
    for (std::int64_t i = 0; i < 37; ++i) {
      const double v = i == 0 ? -std::numeric_limits<double>::infinity() : i == 1 ? -1000.0 : i == 2 ? 1000.0 : (i - 18) * 0.37;
      if (dtype == DType::f32) x.data<float>()[i] = static_cast<float>(v);
      else x.data<double>()[i] = v;
    }
    const Tensor e = unary(UnaryOp::exp, x);
    EXPECT_EQ(e.at(0), 0.0);
    EXPECT_EQ(e.at(1), 0.0);
    const Tensor t = unary(UnaryOp::tanh, x);
    EXPECT_EQ(t.at(1), -1.0);
    EXPECT_EQ(t.at(2), 1.0);
    const Tensor g = gelu_tanh(x), dg = gelu_tanh_grad(x);
    EXPECT_EQ(g.at(1), 0.0);
    EXPECT_EQ(g.at(2), 1000.0);
    const double tolerance = dtype == DType::f32 ? 4e-6 : 1e-13;
    for (std::int64_t i = 3; i < 37; ++i) {
      const double v = x.at(i);
      const double th = std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v));
      EXPECT_NEAR(g.at(i), 0.5 * v * (1 + th), tolerance * (1 + std::abs(v))) << i;
      const double d = 0.5 * (1 + th) + 0.5 * v * (1 - th * th) * 0.7978845608028654 * (1 + 3 * 0.044715 * v * v);
      EXPECT_NEAR(dg.at(i), d, tolerance * (1 + std::abs(v))) << i;
    }
  }
  // [2, 3, 4] summed over dimension 1 (contiguous run) and over {0, 2} (not contiguous).
  Tensor a = values({2, 3, 4}, 7);
  const Tensor s1 = reduce_sum(a, {1}), m02 = reduce_max(a, {0, 2});
  for (int i = 0; i < 2; ++i) {
    for (int k = 0; k < 4; ++k) {
      double want = 0;
      for (int j = 0; j < 3; ++j) want += a.at((i * 3 + j) * 4 + k);
      EXPECT_DOUBLE_EQ(s1.at(i * 4 + k), want);
    }
  }
  for (int j = 0; j < 3; ++j) {
    double want = -std::numeric_limits<double>::infinity();
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) want = std::max(want, a.at((i * 3 + j) * 4 + k));
    EXPECT_EQ(m02.at(j), want);
  }
}

TEST(Kernels, SoftmaxOverTheLastDimensionAndItsGradient) {
  // Rows of 37 (not a multiple of any vector width): ordinary values, a causal row with -inf
  // entries, a row whose spread underflows the exponential, and bf16 (computed in f32).
  const std::int64_t width = 37;
  Tensor x64({3, width}, DType::f64), g64({3, width}, DType::f64);
  for (std::int64_t j = 0; j < width; ++j) {
    x64.data<double>()[j] = (j * 7 % 11) * 0.61 - 3.0;
    x64.data<double>()[width + j] = j > 5 ? -std::numeric_limits<double>::infinity() : j * 0.25;
    x64.data<double>()[2 * width + j] = j == 3 ? 1000.0 : j == 4 ? 0.0 : -1000.0;
    for (int r = 0; r < 3; ++r) g64.data<double>()[r * width + j] = ((j * 5 + r) % 9) * 0.3 - 1.2;
  }
  for (DType dtype : {DType::f64, DType::f32, DType::bf16}) {
    const Tensor x = x64.astype(dtype), g = g64.astype(dtype);
    const Tensor y = softmax_last(x), dx = softmax_last_grad(y, g);
    ASSERT_EQ(y.dtype(), dtype);
    ASSERT_EQ(dx.dtype(), dtype);
    const double tolerance = dtype == DType::f64 ? 1e-14 : dtype == DType::f32 ? 2e-6 : 1e-2;
    for (int r = 0; r < 3; ++r) {
      double max = -std::numeric_limits<double>::infinity(), total = 0, dot = 0;
      for (std::int64_t j = 0; j < width; ++j) max = std::max(max, x.at(r * width + j));
      for (std::int64_t j = 0; j < width; ++j) total += std::exp(x.at(r * width + j) - max);
      for (std::int64_t j = 0; j < width; ++j) dot += g.at(r * width + j) * std::exp(x.at(r * width + j) - max) / total;
      for (std::int64_t j = 0; j < width; ++j) {
        const double want = std::exp(x.at(r * width + j) - max) / total;
        EXPECT_NEAR(y.at(r * width + j), want, tolerance) << dtype_name(dtype) << " row " << r << " column " << j;
        EXPECT_NEAR(dx.at(r * width + j), want * (g.at(r * width + j) - dot), 4 * tolerance)
            << dtype_name(dtype) << " row " << r << " column " << j;
      }
    }
    // Masked and underflowing entries are exactly 0, the dominant one exactly 1.
    EXPECT_EQ(y.at(width + 6), 0.0) << dtype_name(dtype);
    EXPECT_EQ(y.at(width + width - 1), 0.0) << dtype_name(dtype);
    EXPECT_EQ(y.at(2 * width + 3), 1.0) << dtype_name(dtype);
    EXPECT_EQ(y.at(2 * width + 4), 0.0) << dtype_name(dtype);
    EXPECT_EQ(y.at(2 * width), 0.0) << dtype_name(dtype);
  }
  try {
    softmax_last_grad(Tensor({2, 3}, DType::f32), Tensor({3, 2}, DType::f32));
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "softmax_grad: gradient [3, 2] f32 does not match the softmax [2, 3] f32");
  }
}

TEST(Kernels, ReductionsAndPermutation) {
  Tensor x = values({2, 3, 4}, 3);
  Tensor s = reduce_sum(x, {0, 2});
  Tensor m = reduce_max(x, {1}, true);
  ASSERT_EQ(s.shape(), (Shape{3}));
  ASSERT_EQ(m.shape(), (Shape{2, 1, 4}));
  for (int j = 0; j < 3; ++j) {
    double want = 0;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) want += x.at((i * 3 + j) * 4 + k);
    EXPECT_NEAR(s.at(j), want, 1e-12);
  }
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) {
      double want = -1e300;
      for (int j = 0; j < 3; ++j) want = std::max(want, x.at((i * 3 + j) * 4 + k));
      EXPECT_EQ(m.at(i * 4 + k), want);
    }
  Tensor p = permute_dims(x, {2, 0, 1});
  ASSERT_EQ(p.shape(), (Shape{4, 2, 3}));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) EXPECT_EQ(p.at((k * 2 + i) * 3 + j), x.at((i * 3 + j) * 4 + k));
}

// Causal attention of blocks of queries against plain loops in double: P = softmax(scale q k^T)
// over the keys 0 .. q0 + i that query i sees, O = P V, and the gradients of sum(O * dO). `blocks`
// are the (q0, rows) of each block, which together cover the sequence once; the dK and dV of the
// blocks add up to the whole sequence's.
void expect_causal_attention_equals_loops(std::int64_t B, std::int64_t S, std::int64_t H, std::int64_t D,
                                          const std::vector<std::pair<std::int64_t, std::int64_t>>& blocks) {
  const double scale = 0.37;
  const Tensor q_all = values({B, S, H, D}, 1), k = values({B, S, H, D}, 2), v = values({B, S, H, D}, 3);
  const Tensor dout_all = values({B, S, H, D}, 4);
  // The rows [q0, q0 + n) of a [B, S, H, D] tensor.
  const auto rows = [&](const Tensor& x, std::int64_t q0, std::int64_t n) {
    Tensor out({B, n, H, D}, x.dtype());
    const std::size_t row = static_cast<std::size_t>(H * D) * dtype_size(x.dtype());
    for (std::int64_t b = 0; b < B; ++b) {
      std::memcpy(static_cast<std::byte*>(out.raw()) + (b * n) * row,
                  static_cast<const std::byte*>(x.raw()) + (b * S + q0) * row, static_cast<std::size_t>(n) * row);
    }
    return out;
  };
  // The whole sequence's reference, in double.
  const auto at = [&](const Tensor& x, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
    return x.at(((b * x.shape()[1] + s) * H + h) * D + d);
  };
  std::vector<double> p(static_cast<std::size_t>(B * H * S * S)), out(static_cast<std::size_t>(B * S * H * D));
  std::vector<double> dq(out.size()), dk(out.size()), dv(out.size());
  const auto flat = [&](std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
    return static_cast<std::size_t>(((b * S + s) * H + h) * D + d);
  };
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < H; ++h) {
      for (std::int64_t i = 0; i < S; ++i) {
        double* pi = &p[static_cast<std::size_t>(((b * H + h) * S + i) * S)];
        double max = -1e300, total = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d) dot += at(q_all, b, i, h, d) * at(k, b, j, h, d);
          pi[j] = scale * dot;
          max = std::max(max, pi[j]);
        }
        for (std::int64_t j = 0; j <= i; ++j) total += pi[j] = std::exp(pi[j] - max);
        for (std::int64_t j = 0; j <= i; ++j) pi[j] /= total;
        for (std::int64_t d = 0; d < D; ++d) {
          for (std::int64_t j = 0; j <= i; ++j) out[flat(b, i, h, d)] += pi[j] * at(v, b, j, h, d);
        }
        // dP = dO V^T, dS = P (dP - sum(P dP)) scale; dQ = dS K, dK += dS^T Q, dV += P^T dO.
        std::vector<double> dp(static_cast<std::size_t>(i + 1));
        double sum = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          for (std::int64_t d = 0; d < D; ++d) dp[j] += at(dout_all, b, i, h, d) * at(v, b, j, h, d);
          sum += pi[j] * dp[j];
        }
        for (std::int64_t j = 0; j <= i; ++j) {
          const double ds = pi[j] * (dp[j] - sum) * scale;
          for (std::int64_t d = 0; d < D; ++d) {
            dq[flat(b, i, h, d)] += ds * at(k, b, j, h, d);
            dk[flat(b, j, h, d)] += ds * at(q_all, b, i, h, d);
            dv[flat(b, j, h, d)] += pi[j] * at(dout_all, b, i, h, d);
          }
        }
      }
    }
  }
  for (DType dtype : {DType::f64, DType::f32, DType::bf16}) {
    const double tolerance = dtype == DType::f64 ? 1e-12 : dtype == DType::f32 ? 1e-5 : 0.05;
    const Tensor kt = k.astype(dtype), vt = v.astype(dtype);
    std::vector<double> dk_sum(out.size()), dv_sum(out.size());
    for (const auto& [q0, n] : blocks) {
      const std::string label = std::string(dtype_name(dtype)) + " D " + std::to_string(D) + " queries " +
                                std::to_string(q0) + " + " + std::to_string(n);
      const Tensor q = rows(q_all, q0, n).astype(dtype), dout = rows(dout_all, q0, n).astype(dtype);
      Tensor o, probs, gq, gk, gv;
      causal_attention_forward(q, kt, vt, q0, scale, o, probs);
      ASSERT_EQ(o.shape(), q.shape()) << label;
      ASSERT_EQ(o.dtype(), dtype) << label;
      ASSERT_EQ(probs.shape(), (Shape{B, H, n, S})) << label;
      ASSERT_EQ(probs.dtype(), dtype == DType::f64 ? DType::f64 : DType::f32) << label;
      causal_attention_backward(q, kt, vt, probs, dout, q0, scale, gq, gk, gv);
      ASSERT_EQ(gq.dtype(), dtype) << label;
      ASSERT_EQ(gk.shape(), k.shape()) << label;
      for (std::int64_t b = 0; b < B; ++b) {
        for (std::int64_t h = 0; h < H; ++h) {
          for (std::int64_t i = 0; i < n; ++i) {
            for (std::int64_t j = 0; j < S; ++j) {
              const double want = p[static_cast<std::size_t>(((b * H + h) * S + q0 + i) * S + j)];
              const double got = probs.at(((b * H + h) * n + i) * S + j);
              if (j > q0 + i) {
                ASSERT_EQ(got, 0.0) << label << " a key after the query";
              } else {
                ASSERT_NEAR(got, want, tolerance) << label;
              }
            }
            for (std::int64_t d = 0; d < D; ++d) {
              const std::int64_t local = ((b * n + i) * H + h) * D + d;
              ASSERT_NEAR(o.at(local), out[flat(b, q0 + i, h, d)], tolerance) << label;
              ASSERT_NEAR(gq.at(local), dq[flat(b, q0 + i, h, d)], tolerance) << label;
            }
          }
        }
      }
      for (std::size_t e = 0; e < out.size(); ++e) {
        dk_sum[e] += gk.at(static_cast<std::int64_t>(e));
        dv_sum[e] += gv.at(static_cast<std::int64_t>(e));
      }
    }
    for (std::size_t e = 0; e < out.size(); ++e) {
      ASSERT_NEAR(dk_sum[e], dk[e], 4 * tolerance) << dtype_name(dtype) << " dK element " << e;
      ASSERT_NEAR(dv_sum[e], dv[e], 4 * tolerance) << dtype_name(dtype) << " dV element " << e;
    }
  }
}

// Shapes past the kernel's tiles in every direction: a sequence (77) that spans several blocks of
// query rows and no vector width, d_head 5 (no vector at all), and d_head 34 over 70 keys (f32's
// 16 x 16 blocks of the keys' transpose, with keys and d_head left over). The blocks of queries
// start at 0, inside the sequence and near its end, and an empty block is allowed anywhere.
TEST(Kernels, CausalAttentionEqualsLoops) {
  expect_causal_attention_equals_loops(2, 77, 3, 5, {{0, 33}, {33, 0}, {33, 40}, {73, 4}});
  expect_causal_attention_equals_loops(1, 70, 2, 34, {{0, 17}, {17, 35}, {52, 0}, {52, 18}});
  Tensor o, probs;
  try {
    causal_attention_forward(values({1, 8, 2, 4}, 1), values({1, 8, 2, 4}, 2), values({1, 8, 2, 4}, 3), 1, 1.0, o, probs);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "causal_attention: queries [1, 8, 2, 4] at position 1 do not fit keys [1, 8, 2, 4]");
  }
}

// RMSNorm against loops in double: y = x r w, r = 1 / sqrt(mean(x^2) + eps), and the gradients of
// sum(y * dy); rows of 37 features (no vector width), one of them all zeros (r = 1 / sqrt(eps)).
TEST(Kernels, RmsnormEqualsLoops) {
  const std::int64_t rows = 6, d = 37;
  const double eps = 1e-3;
  Tensor x64 = values({2, 3, d}, 5);
  for (std::int64_t j = 0; j < d; ++j) x64.data<double>()[4 * d + j] = 0.0;
  const Tensor w64 = values({d}, 6), dy64 = values({2, 3, d}, 7);
  for (DType dtype : {DType::f64, DType::f32, DType::bf16}) {
    const double tolerance = dtype == DType::f64 ? 1e-12 : dtype == DType::f32 ? 1e-4 : 0.05;
    const Tensor x = x64.astype(dtype), w = w64.astype(dtype), dy = dy64.astype(dtype);
    Tensor y, r, dx, dw;
    rmsnorm_forward(x, w, eps, y, r);
    rmsnorm_backward(x, w, r, dy, dx, dw);
    ASSERT_EQ(y.dtype(), dtype);
    ASSERT_EQ(r.shape(), (Shape{2, 3}));
    ASSERT_EQ(dx.dtype(), dtype);
    ASSERT_EQ(dw.shape(), (Shape{d}));
    std::vector<double> want_dw(d, 0.0);
    for (std::int64_t i = 0; i < rows; ++i) {
      double squares = 0, gwx = 0;
      for (std::int64_t j = 0; j < d; ++j) {
        squares += x.at(i * d + j) * x.at(i * d + j);
        gwx += dy.at(i * d + j) * w.at(j) * x.at(i * d + j);
      }
      const double inv = 1.0 / std::sqrt(squares / d + eps);
      EXPECT_NEAR(r.at(i), inv, tolerance * inv) << dtype_name(dtype) << " row " << i;
      for (std::int64_t j = 0; j < d; ++j) {
        const double xi = x.at(i * d + j), g = dy.at(i * d + j);
        EXPECT_NEAR(y.at(i * d + j), xi * inv * w.at(j), tolerance) << dtype_name(dtype) << " row " << i;
        EXPECT_NEAR(dx.at(i * d + j), inv * (g * w.at(j) - xi * inv * inv * gwx / d), tolerance)
            << dtype_name(dtype) << " row " << i << " feature " << j;
        want_dw[j] += g * xi * inv;
      }
    }
    for (std::int64_t j = 0; j < d; ++j) EXPECT_NEAR(dw.at(j), want_dw[j], 4 * tolerance) << dtype_name(dtype);
  }
  Tensor y, r;
  try {
    rmsnorm_forward(values({2, 4}, 1, DType::f32), values({3}, 2, DType::f32), eps, y, r);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "rmsnorm: weight [3] f32 does not fit the last dimension of [2, 4] f32");
  }
}

// A thin product whose result is large enough (16 MiB and more) to be stored past the caches
// (core/kernels.cpp, kStreamBytes): the weight gradient x^T g of a deep layer, and the same with
// x untransposed. Exact, as above (sums of 8 products of eighths); the result is written whole,
// whatever it held before.
TEST(Kernels, GemmOfAThinDepthIntoALargeResultEqualsLoops) {
  const std::int64_t m = 2048, n = 2048, k = 8;
  for (const bool trans_a : {true, false}) {
    const Tensor a = values({trans_a ? k : m, trans_a ? m : k}, 1, DType::f32);
    const Tensor b = values({k, n}, 2, DType::f32);
    Tensor c = Tensor::full({m, n}, 123.0, DType::f32);
    batched_gemm(a, b, c, 1, m, n, k, trans_a, false, false);
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double want = 0;
        for (std::int64_t l = 0; l < k; ++l) want += static_cast<double>(pa[trans_a ? l * m + i : i * k + l]) * pb[l * n + j];
        wrong += c.data<float>()[i * n + j] != want;
      }
    }
    EXPECT_EQ(wrong, 0) << (trans_a ? "x^T g" : "x g");
  }
}

// Values in [-1, 1) whose products and sums round (unlike the eighths of `values`), so that a
// kernel summing in another order, or fusing another multiply-add, gives other bits.
std::vector<float> rounding_values(std::int64_t n, std::uint32_t seed, float low = -1.0f) {
  std::vector<float> out(static_cast<std::size_t>(n));
  std::uint32_t x = seed * 2654435761u + 12345u;
  for (float& v : out) {
    x = x * 1664525u + 1013904223u;
    v = low + (1.0f - low) * static_cast<float>(x >> 8) / 16777216.0f;
  }
  return out;
}

// A product into a fresh result (accumulate false) runs Eigen's loop over its blocks written out
// in core/kernels.cpp (gemm_strided), whose kernel stores its first pass over each block of C
// without reading it (FreshResultMapper); an accumulation runs Eigen's own loop. Both give the
// same bits (the fresh result whatever C held, NaN here; the accumulation into zeros), in f32
// and f64, for every transposition, on values whose sums round, and shapes of several of Eigen's
// blocks in each dimension (depths past its k-block among them, rows and columns past the last
// packet) and of a thin side past the thin kernels.
TEST(Kernels, GemmIntoAFreshResultHasTheBitsOfAnAccumulationIntoZeros) {
  struct Dims {
    std::int64_t m, n, k;
  };
  for (const Dims d : {Dims{300, 1100, 700}, Dims{1100, 300, 64}, Dims{40, 37, 2000}, Dims{129, 513, 257}}) {
    for (int layout = 0; layout < 8; ++layout) {
      const bool trans_a = (layout & 1) != 0, trans_b = (layout & 2) != 0;
      const DType dtype = (layout & 4) != 0 ? DType::f64 : DType::f32;
      const Tensor a = Tensor::from_vector({d.m * d.k}, rounding_values(d.m * d.k, 1)).astype(dtype);
      const Tensor b = Tensor::from_vector({d.k * d.n}, rounding_values(d.k * d.n, 2)).astype(dtype);
      Tensor fresh = Tensor::full({d.m * d.n}, std::numeric_limits<double>::quiet_NaN(), dtype);
      Tensor zeros = Tensor::zeros({d.m * d.n}, dtype);
      batched_gemm(a, b, fresh, 1, d.m, d.n, d.k, trans_a, trans_b, false);
      batched_gemm(a, b, zeros, 1, d.m, d.n, d.k, trans_a, trans_b, true);
      EXPECT_EQ(std::memcmp(fresh.raw(), zeros.raw(), fresh.nbytes()), 0)
          << "m " << d.m << " n " << d.n << " k " << d.k << " layout " << layout;
    }
  }
}

// rotate_pairs turns each pair (x_i, x_{i + D/2}) of position p by the table's angle in double
// and rounds once: f32 within half an f32 unit of the rotation in double, over pair counts of a
// vector and more (D = 40: 20 pairs, a vector of 8 doubles twice and a tail), and sign -1 undoes
// it. A shape that is not [B, S, H, even D] is refused, and so is a dtype other than a float.
TEST(Kernels, RotatePairsTurnsEachPairByItsPositionsAngle) {
  const Shape shape{2, 3, 2, 40};
  const std::int64_t half = 20;
  std::vector<double> cosines(3 * half), sines(3 * half);
  for (std::int64_t p = 0; p < 3; ++p) {
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle = (p + 5) * std::pow(100.0, -2.0 * i / 40.0);
      cosines[p * half + i] = std::cos(angle);
      sines[p * half + i] = std::sin(angle);
    }
  }
  const Tensor x = Tensor::from_vector(shape, rounding_values(numel(shape), 9, -1.0f));
  Tensor y = Tensor::empty(shape, DType::f32), back = Tensor::empty(shape, DType::f32);
  rotate_pairs(x, cosines.data(), sines.data(), 1.0, y);
  rotate_pairs(y, cosines.data(), sines.data(), -1.0, back);
  for (std::int64_t row = 0; row < 2 * 3 * 2; ++row) {
    const std::int64_t p = (row / 2) % 3;
    for (std::int64_t i = 0; i < half; ++i) {
      const std::int64_t at = row * 40 + i;
      const double c = cosines[p * half + i], sn = sines[p * half + i], x1 = x.at(at), x2 = x.at(at + half);
      const double want1 = x1 * c - x2 * sn, want2 = x2 * c + x1 * sn;
      EXPECT_NEAR(y.at(at), want1, std::abs(want1) * 0x1p-24 + 1e-12) << row << " " << i;
      EXPECT_NEAR(y.at(at + half), want2, std::abs(want2) * 0x1p-24 + 1e-12) << row << " " << i;
      EXPECT_NEAR(back.at(at), x1, 1e-6) << row << " " << i;
      EXPECT_NEAR(back.at(at + half), x2, 1e-6) << row << " " << i;
    }
  }
  Tensor odd = Tensor::zeros({1, 1, 1, 3}, DType::f32);
  try {
    rotate_pairs(odd, cosines.data(), sines.data(), 1.0, odd);
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(),
                 "rotate_pairs: x [1, 1, 1, 3] f32 and y [1, 1, 1, 3] f32 are not one [batch, seq, heads, even d_head] "
                 "shape and dtype");
  }
  Tensor ints = Tensor::zeros({1, 1, 1, 2}, DType::i32);
  try {
    rotate_pairs(ints, cosines.data(), sines.data(), 1.0, ints);
    FAIL() << "no error";
  } catch (const DTypeError& e) {
    EXPECT_STREQ(e.what(), "rotate_pairs: dtype i32 is not f32, f64 or bf16");
  }
}

// gelu_tanh_backward (the derivative times the gradient in one pass) gives the bits of the two
// calls it replaces, gelu_tanh_grad then binary mul, in f32 and f64, over more elements than one
// of its blocks of 4096 (a block boundary and a short last block); in bf16 it rounds once where
// the two calls round twice, so each element lies within one bf16 rounding of theirs. A
// gradient of another shape or dtype is refused with both named.
TEST(Kernels, GeluBackwardHasTheBitsOfTheDerivativeTimesTheGradient) {
  const std::int64_t n = 4096 + 1000;
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    Tensor x = Tensor::from_vector({n}, rounding_values(n, 5, -1.0f)).astype(dtype);
    Tensor g = Tensor::from_vector({n}, rounding_values(n, 6, -1.0f)).astype(dtype);
    for (std::int64_t i = 0; i < n; i += 7) {  // some inputs far out, where tanh saturates
      Tensor big = Tensor::full({1}, (i % 2 == 0 ? 1.0 : -1.0) * (4.0 + i % 50), dtype);
      std::memcpy(static_cast<std::byte*>(x.raw()) + i * dtype_size(dtype), big.raw(), dtype_size(dtype));
    }
    const Tensor fused = gelu_tanh_backward(x, g);
    const Tensor two = binary(BinaryOp::mul, g, gelu_tanh_grad(x));
    ASSERT_EQ(fused.shape(), x.shape());
    ASSERT_EQ(fused.dtype(), dtype);
    if (dtype != DType::bf16) {
      EXPECT_EQ(std::memcmp(fused.raw(), two.raw(), fused.nbytes()), 0) << dtype_name(dtype);
      continue;
    }
    for (std::int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(fused.at(i), two.at(i), std::abs(two.at(i)) * (1.0 / 128)) << i;
    }
  }
  const Tensor x = Tensor::zeros({4}, DType::f32);
  try {
    gelu_tanh_backward(x, Tensor::zeros({5}, DType::f32));
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "gelu_tanh_backward: gradient [5] f32 does not match the input [4] f32");
  }
}

// adam_update gives an element the same bits whether the vector loop or the scalar tail updates
// it: a block of 37 f32 (two vectors of 16 and a tail of 5) against each element alone.
TEST(Kernels, AdamUpdateGivesAnElementTheSameBitsAnywhereInTheBlock) {
  const std::int64_t n = 37;
  const AdamConstants<float> c{0.9f, 0.999f, 1e-8f, 1e-2f, 3.69f, 334.f, 0.1f};
  std::vector<float> p = rounding_values(n, 1), g = rounding_values(n, 2), m = rounding_values(n, 3),
                     v = rounding_values(n, 4, 0.0f);
  std::vector<float> p1 = p, m1 = m, v1 = v;
  adam_update(p.data(), g.data(), m.data(), v.data(), n, c);
  for (std::int64_t i = 0; i < n; ++i) {
    adam_update(&p1[i], &g[i], &m1[i], &v1[i], 1, c);
    ASSERT_EQ(std::memcmp(&p[i], &p1[i], 4), 0) << i;
    ASSERT_EQ(std::memcmp(&m[i], &m1[i], 4), 0) << i;
    ASSERT_EQ(std::memcmp(&v[i], &v1[i], 4), 0) << i;
  }
  // The update itself, in double from the same f32 inputs: within a few f32 roundings.
  const std::vector<float> p0 = rounding_values(n, 1), m0 = rounding_values(n, 3), v0 = rounding_values(n, 4, 0.0f);
  for (std::int64_t i = 0; i < n; ++i) {
    const double mi = 0.9 * m0[i] + (1 - 0.9f) * static_cast<double>(g[i]);
    const double vi = 0.999 * v0[i] + (1 - 0.999f) * static_cast<double>(g[i]) * g[i];
    const double pi = p0[i] - 1e-2 * ((mi * 3.69) / (std::sqrt(vi * 334.0) + 1e-8) + 0.1 * p0[i]);
    EXPECT_NEAR(m[i], mi, 1e-6) << i;
    EXPECT_NEAR(v[i], vi, 1e-6) << i;
    EXPECT_NEAR(p[i], pi, 1e-6) << i;
  }
}

// thin_rows_adam against its definition: the thin products whole (thin_gemm), then
// adam_update over the whole gradient. Every bit of w, mu, nu and dx equal, over batches of 0-16
// rows for each product (the kernel's tiles of two rows and one, by 1-16 accumulators), row widths
// around one and two vectors, rows taken in two calls that split them anywhere.
TEST(Kernels, ThinRowsAdamHasTheBitsOfTheProductsThenTheUpdate) {
  if (!thin_rows_adam_shape(0, 0)) {
    // A target without AVX-512: the kernel takes no shape, and says so.
    ThinRowsAdam t{nullptr, nullptr, nullptr, 4, 16, nullptr, 8, nullptr, nullptr, 8, nullptr};
    try {
      thin_rows_adam(t, 0, 4, AdamConstants<float>{});
      FAIL() << "no error";
    } catch (const ShapeError& e) {
      EXPECT_STREQ(e.what(), "thin_rows_adam: rows [0, 4) of 4 with 8 and 8 rows of gradient are not a shape it takes");
    }
    return;
  }
  EXPECT_FALSE(thin_rows_adam_shape(17, 8));
  EXPECT_FALSE(thin_rows_adam_shape(8, 17));
  const AdamConstants<float> c{0.9f, 0.999f, 1e-8f, 1e-2f, 3.69f, 334.f, 0.1f};
  std::uint32_t seed = 0;
  for (const std::int64_t m_dx : {0, 1, 3, 8, 9, 16}) {
    for (const std::int64_t m_dw : {0, 1, 5, 8, 16}) {
      // The layer's own gradient g for both products (g_dx == g_dw, as in a layer whose weight
      // gradient takes the rows its input gradient does) or two different ones.
      for (const bool one_g : {false, true}) {
        if (one_g && m_dx != m_dw) continue;
        for (const std::int64_t n : {1, 15, 16, 17, 31, 33, 70, 520}) {
          for (const std::int64_t k : {1, 2, 5, 9}) {
            const std::string label = "m_dx " + std::to_string(m_dx) + " m_dw " + std::to_string(m_dw) + " n " +
                                      std::to_string(n) + " k " + std::to_string(k) + (one_g ? " one g" : "");
            ++seed;
            const std::vector<float> w0 = rounding_values(k * n, seed), mu0 = rounding_values(k * n, seed + 1000),
                                     nu0 = rounding_values(k * n, seed + 2000, 0.0f);
            const std::vector<float> x = rounding_values(m_dw * k, seed + 3000),
                                     g_dw = rounding_values(m_dw * n, seed + 4000),
                                     g_dx = one_g ? g_dw : rounding_values(m_dx * n, seed + 5000);
            // The definition.
            std::vector<float> want_dx(static_cast<std::size_t>(m_dx * k)), dw(static_cast<std::size_t>(k * n));
            if (m_dx > 0) thin_gemm(g_dx.data(), w0.data(), want_dx.data(), m_dx, k, n, false, true);
            thin_gemm(x.data(), g_dw.data(), dw.data(), k, n, m_dw, true, false);
            std::vector<float> want_w = w0, want_mu = mu0, want_nu = nu0;
            adam_update(want_w.data(), dw.data(), want_mu.data(), want_nu.data(), k * n, c);
            for (std::int64_t split = 0; split < k; split += k > 2 ? 2 : 1) {
              std::vector<float> w = w0, mu = mu0, nu = nu0, dx(static_cast<std::size_t>(m_dx * k), -7.0f);
              const float* g_dx_at = m_dx == 0 ? nullptr : one_g ? g_dw.data() : g_dx.data();
              const ThinRowsAdam t{w.data(), mu.data(), nu.data(), k,     n, x.data(), m_dw, g_dw.data(),
                                   g_dx_at,  m_dx,      m_dx > 0 ? dx.data() : nullptr};
              if (split > 0) thin_rows_adam(t, 0, split, c);
              thin_rows_adam(t, split, k, c);
              const std::string at = label + " split " + std::to_string(split);
              ASSERT_EQ(std::memcmp(w.data(), want_w.data(), w.size() * 4), 0) << at;
              ASSERT_EQ(std::memcmp(mu.data(), want_mu.data(), mu.size() * 4), 0) << at;
              ASSERT_EQ(std::memcmp(nu.data(), want_nu.data(), nu.size() * 4), 0) << at;
              ASSERT_EQ(std::memcmp(dx.data(), want_dx.data(), dx.size() * 4), 0) << at;
            }
          }
        }
      }
    }
  }
  ThinRowsAdam t{nullptr, nullptr, nullptr, 4, 16, nullptr, 8, nullptr, nullptr, 17, nullptr};
  try {
    thin_rows_adam(t, 0, 4, c);
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "thin_rows_adam: rows [0, 4) of 4 with 17 and 8 rows of gradient are not a shape it takes");
  }
}

}  // namespace
}  // namespace tessera
