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
// Softmax over the last dimension: each row's exp(x - max) over its sum, one vectorized exp
// per element (Eigen's). Exponents below -87 (f32) or -708 (f64), where the vectorized exp
// clamps its argument, give 0, so masked (-inf) entries are exactly 0. bf16 runs in f32.
Tensor softmax_last(const Tensor& x);
// Its derivative: given the softmax y and the output gradient g, y * (g - sum(g * y)) per row.
Tensor softmax_last_grad(const Tensor& y, const Tensor& g);
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
