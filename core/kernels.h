// Local compute kernels on dense tensors (f32 and f64): the per-rank work of the global-view
// ops. Eigen lives in kernels.cpp only, so that headers stay light to compile.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"

namespace tessera {

// C = op(A) * op(B) for row-major matrices, batched over a leading dimension of `batch`
// matrices. A is [batch, m, k] (or [batch, k, m] when trans_a), B is [batch, k, n] (or
// [batch, n, k] when trans_b); C is [batch, m, n]. Shapes are given explicitly; a, b, c are
// contiguous. Accumulates into C when `accumulate`.
void batched_gemm(const Tensor& a, const Tensor& b, Tensor& c, std::int64_t batch, std::int64_t m, std::int64_t n,
                  std::int64_t k, bool trans_a, bool trans_b, bool accumulate = false);

// The thin products of batched_gemm (one side of at most 16: a batch of rows against a weight)
// on raw f32 rows, one matrix: C[m, n] = op(A) op(B), with batched_gemm's shapes and layouts.
// thin_gemm_shape says whether batched_gemm takes these kernels for a shape; thin_gemm runs them
// (and refuses another shape). Every element of C is summed in an order that does not depend on
// the other rows and columns of the product, so a product taken in panels here (a weight's rows
// [r0, r1) at a time: C's rows with trans_a, its columns with trans_b) gives each element the
// bits batched_gemm gives it in the whole product.
bool thin_gemm_shape(std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a, bool trans_b);
// The thin side's largest size for these kernels.
inline constexpr std::int64_t kThinGemmRows = 16;
void thin_gemm(const float* a, const float* b, float* c, std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a,
               bool trans_b);

// One step of Adam (AdamW with decay > 0) on n elements in place, from their gradient g:
// m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2, p -= lr ((m c1) / (sqrt(v c2) + eps) + decay p),
// with c1 = 1 / (1 - b1^t) and c2 = 1 / (1 - b2^t) at step t. Each multiply-add is one fused
// multiply-add where the target has them, so an element gets the same bits wherever it lies in
// the block, here and in thin_rows_adam.
template <class T>
struct AdamConstants {
  T b1, b2, eps, lr, c1, c2, decay;
};
void adam_update(float* p, const float* g, float* m, float* v, std::int64_t n, const AdamConstants<float>& c);
void adam_update(double* p, const double* g, double* m, double* v, std::int64_t n, const AdamConstants<double>& c);

// A weight w [k, n] (row-major f32, with its Adam moments mu and nu) whose gradient is the thin
// product dw = x_dw^T g_dw (x_dw [m_dw, k], g_dw [m_dw, n]) of a layer y = x w, and the input
// gradient's product dx = g_dx w^T (g_dx [m_dx, n], dx [m_dx, k]; m_dx = 0 when x needs none).
struct ThinRowsAdam {
  float* w;
  float* mu;
  float* nu;
  std::int64_t k, n;
  const float* x_dw;
  std::int64_t m_dw;
  const float* g_dw;
  const float* g_dx;
  std::int64_t m_dx;
  float* dx;
};
// Whether thin_rows_adam takes these rows of gradient (at most kThinGemmRows each, on a target
// with AVX-512: where its tiles fit the registers).
bool thin_rows_adam_shape(std::int64_t m_dx, std::int64_t m_dw);
// Rows [begin, end) of w in one pass: each row's input gradient columns dx[:, row] from the row
// as it is, then its weight gradient and Adam's update of the row (adam_update with `c`), a
// strip of columns at a time, the gradient never stored. dx and w get the bits thin_gemm and
// adam_update give them (the products whole, then the update).
void thin_rows_adam(const ThinRowsAdam& rows, std::int64_t begin, std::int64_t end, const AdamConstants<float>& c);

// Reorders dimensions: out.shape[i] = in.shape[perm[i]].
Tensor permute_dims(const Tensor& in, const std::vector<int>& perm);

// Elementwise binary ops with numpy broadcasting (shapes aligned at the trailing end).
enum class BinaryOp { add, sub, mul, div, max, min };
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
// The shape `a` and `b` broadcast to; throws ShapeError naming both.
Shape broadcast_shapes(const Shape& a, const Shape& b);
// Sums `x` down to `shape` (the reverse of broadcasting `shape` to x.shape()).
Tensor sum_to_shape(const Tensor& x, const Shape& shape);
// The dimensions of a tensor of shape `from` that sum_to_shape sums to reach `to`: the leading
// ones `to` lacks and those where `to` has extent 1.
std::vector<int> broadcast_dims(const Shape& from, const Shape& to);

enum class UnaryOp { neg, relu, relu_mask, exp, log, square, sqrt, tanh, abs, sign };
Tensor unary(UnaryOp op, const Tensor& x);
// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), and its derivative, each
// one vectorized pass (Eigen's tanh).
Tensor gelu_tanh(const Tensor& x);
Tensor gelu_tanh_grad(const Tensor& x);
// g * gelu_tanh_grad(x) in one pass (the backward pass of gelu_tanh given its output gradient g,
// of x's shape and dtype): each element the bits of the two calls (bf16 runs in f32 and rounds
// once, where the two calls round the derivative too).
Tensor gelu_tanh_backward(const Tensor& x, const Tensor& g);
// Softmax over the last dimension: each row's exp(x - max) over its sum, one vectorized exp
// per element (Eigen's). Exponents below -87 (f32) or -708 (f64), where the vectorized exp
// clamps its argument, give 0, so masked (-inf) entries are exactly 0. bf16 runs in f32.
Tensor softmax_last(const Tensor& x);
// Its derivative: given the softmax y and the output gradient g, y * (g - sum(g * y)) per row.
Tensor softmax_last_grad(const Tensor& y, const Tensor& g);
// Causal scaled dot-product attention of one rank's block, per batch row b and head h:
// P = softmax(scale Q K^T) over the keys each query may see, O = P V. q [B, Sq, H, D] holds the
// queries at global positions q0 .. q0 + Sq - 1; k and v [B, S, H, D] hold every key and value
// (q0 + Sq <= S); query i sees the keys 0 .. q0 + i. Writes out [B, Sq, H, D] and probs
// [B, H, Sq, S] (zero where a query does not see a key), which the backward reuses. Scores are
// computed only for the keys a block of query rows (8 with AVX-512, else 4) sees, to the end of a
// vector, from the [B, S, H, D] layout (each head's keys transposed once, no permutation of the
// tensors). Each element of every product is one chain of fused multiply-adds in the order of its
// contracted index, whatever tile or vector lane computes it. f32 or f64; bf16 operands are
// computed in f32 (probs f32) and out is rounded once.
void causal_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, std::int64_t q0, double scale,
                              Tensor& out, Tensor& probs);
// Its gradients given dout [B, Sq, H, D]: dq [B, Sq, H, D], and dk, dv [B, S, H, D], the share of
// this block's queries (a sum over query blocks gives the whole). bf16 as above: computed in f32,
// each result rounded once.
void causal_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                               const Tensor& dout, std::int64_t q0, double scale, Tensor& dq, Tensor& dk, Tensor& dv);
// Rotary embedding of one block x [B, S, H, D] (D even) into y (x's shape and dtype): the pair
// (x_i, x_{i + D/2}) at position p (along S, from 0) becomes (x_i c - x_{i+D/2} s,
// x_{i+D/2} c + x_i s) with c = cosines[p D/2 + i], s = sign sines[p D/2 + i], in double and
// rounded once to x's dtype (sign -1: the inverse rotation). f32, f64 or bf16.
void rotate_pairs(const Tensor& x, const double* cosines, const double* sines, double sign, Tensor& y);
// RMSNorm over the last dimension d: y = x r w with r = 1 / sqrt(mean(x^2) + eps) per row, w [d].
// Writes y (x's shape and dtype) and r (one per row: x's shape without its last dimension).
// f32 or f64; bf16 x and w are computed in f32 (r f32) and y is rounded once.
void rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, Tensor& y, Tensor& r);
// Its gradients given dy: dx = r (dy w - x r^2 mean(dy w x)) per row, and dw = the sum over the
// rows of dy x r (this block's rows: a sum over blocks gives the whole).
void rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& dy, Tensor& dx, Tensor& dw);
// x * scale + shift
Tensor affine(const Tensor& x, double scale, double shift = 0.0);
// a + scale * b, same shapes
Tensor axpy(const Tensor& a, double scale, const Tensor& b);
// Adds b into a in place (same shape and dtype).
void add_inplace(Tensor& a, const Tensor& b);

// Sum (or max) over the listed dimensions; keepdims keeps them with extent 1.
Tensor reduce_sum(const Tensor& x, const std::vector<int>& dims, bool keepdims = false);
Tensor reduce_max(const Tensor& x, const std::vector<int>& dims, bool keepdims = false);
// Broadcasts x (whose shape broadcasts to `shape`) to `shape`.
Tensor broadcast_to(const Tensor& x, const Shape& shape);

// Sum of all elements in double (deterministic order).
double sum_all(const Tensor& x);

}  // namespace tessera
