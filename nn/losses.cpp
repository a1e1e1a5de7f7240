// Losses: sum, mean squared error, one-hot softmax cross-entropy, and the vocab-parallel
// softmax cross-entropy (two all-reduces of per-row statistics, a local backward).
#include "nn/losses.h"

#include <cmath>
#include <limits>
#include <memory>
#include <optional>

#include "collectives/collectives.h"
#include "collectives/reshard.h"
#include "core/error.h"
#include "mesh/agree.h"
#include "nn/ops.h"
#include "nn/propagation.h"

namespace tessera::nn {

namespace {

// Mesh axes of `dims`, in the mesh's order.
Axes axes_of(const std::vector<Axes>& dims, const Mesh& mesh) {
  Axes out;
  for (const auto& name : mesh.shape().names())
    for (const auto& d : dims)
      for (const auto& a : d)
        if (a == name) out.push_back(name);
  return out;
}

template <class T>
void row_max(const Tensor& logits, std::int64_t width, Tensor& max) {
  const T* x = logits.data<T>();
  double* m = max.data<double>();
  for (std::int64_t r = 0; r < max.numel(); ++r) {
    double best = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j < width; ++j) best = std::max(best, static_cast<double>(x[r * width + j]));
    m[r] = best;
  }
}

// [rows, 2]: sum of exp(x - max), and the label's logit where this slice holds it.
template <class T>
void row_sums(const Tensor& logits, const Tensor& labels, std::int64_t width, std::int64_t v0, const Tensor& max,
              Tensor& sums) {
  const T* x = logits.data<T>();
  const std::int32_t* ids = labels.data<std::int32_t>();
  const double* m = max.data<double>();
  double* s = sums.data<double>();
  for (std::int64_t r = 0; r < max.numel(); ++r) {
    double total = 0;
    for (std::int64_t j = 0; j < width; ++j) total += std::exp(static_cast<double>(x[r * width + j]) - m[r]);
    const std::int64_t col = ids[r] - v0;
    s[2 * r] = total;
    s[2 * r + 1] = col >= 0 && col < width ? static_cast<double>(x[r * width + col]) : 0.0;
  }
}

template <class T>
void softmax_minus_onehot(const Tensor& logits, const Tensor& labels, std::int64_t width, std::int64_t v0,
                          const Tensor& max, const Tensor& sums, double factor, Tensor& out) {
  const T* x = logits.data<T>();
  const std::int32_t* ids = labels.data<std::int32_t>();
  const double* m = max.data<double>();
  const double* s = sums.data<double>();
  T* dx = out.data<T>();
  for (std::int64_t r = 0; r < max.numel(); ++r) {
    const std::int64_t col = ids[r] - v0;
    for (std::int64_t j = 0; j < width; ++j) {
      double p = std::exp(static_cast<double>(x[r * width + j]) - m[r]) / s[2 * r];
      dx[r * width + j] = static_cast<T>(factor * (p - (j == col ? 1.0 : 0.0)));
    }
  }
}

}  // namespace

Var softmax_cross_entropy_with_integer_labels(const Var& logits_var, const ShardedTensor& labels_in) {
  const char* op = "softmax_cross_entropy_with_integer_labels";
  const ShardedTensor& logits_in = logits_var.value();
  check_same_mesh(logits_in, labels_in, op);
  const int last = logits_in.ndim() - 1;
  bool fits = last >= 0 && labels_in.ndim() == last && labels_in.dtype() == DType::i32 &&
              (logits_in.dtype() == DType::f32 || logits_in.dtype() == DType::f64);
  for (int d = 0; fits && d < last; ++d) fits = labels_in.global_shape()[d] == logits_in.global_shape()[d];
  if (!fits) {
    throw ShapeError(std::string(op) + ": labels " + operand_string(labels_in) + " (" +
                     std::string(dtype_name(labels_in.dtype())) + ") do not fit logits " + operand_string(logits_in) + " (" +
                     std::string(dtype_name(logits_in.dtype())) + "): want i32 labels [rows...] for f32 or f64 " +
                     "logits [rows..., V]");
  }
  const Mesh& mesh = logits_in.mesh();
  // The logits the backward pass reads: the input's own block, kept alive with its node (no
  // copy), or the block with its partial axes summed away.
  const std::shared_ptr<const ShardedTensor> held =
      logits_in.spec().is_partial()
          ? std::make_shared<const ShardedTensor>(resolve_partial(logits_in))
          : std::shared_ptr<const ShardedTensor>(logits_var.node(), &logits_var.node()->value);
  const ShardedTensor& logits = *held;
  const Axes vocab = logits.spec().axes(last);
  Spec labels_spec(std::vector<Axes>(logits.spec().dims.begin(), logits.spec().dims.begin() + last));
  ShardedTensor labels_moved;
  const ShardedTensor& labels = on_spec(labels_in, labels_spec, labels_moved);
  const std::int64_t vocabulary = logits.global_shape()[last];
  const std::int64_t width = logits.local().shape()[last];
  const std::int64_t v0 = block_offsets(logits.spec(), mesh.shape(), logits.global_shape(), mesh.coords())[last];
  const std::int64_t rows = labels.local().numel();
  {
    const std::int32_t* ids = labels.local().data<std::int32_t>();
    std::optional<std::string> bad;
    for (std::int64_t r = 0; r < rows && !bad; ++r) {
      if (ids[r] < 0 || ids[r] >= vocabulary) {
        bad = std::string(op) + ": label " + std::to_string(ids[r]) + " in " + operand_string(labels_in) +
              " is outside the vocabulary [0, " + std::to_string(vocabulary) + ") of " + operand_string(logits_in);
      }
    }
    // Agreed on, as embed's token ids are (nn/embedding.h).
    agree_or_throw<ShapeError>(mesh.comm(), bad);
  }
  Tensor max(Shape{rows}, DType::f64);
  if (logits.dtype() == DType::f32) row_max<float>(logits.local(), width, max);
  else row_max<double>(logits.local(), width, max);
  if (!vocab.empty()) max = all_reduce(mesh, std::move(max), vocab, ReduceOp::max);
  Tensor sums(Shape{rows, 2}, DType::f64);
  if (logits.dtype() == DType::f32) row_sums<float>(logits.local(), labels.local(), width, v0, max, sums);
  else row_sums<double>(logits.local(), labels.local(), width, v0, max, sums);
  if (!vocab.empty()) sums = all_reduce(mesh, std::move(sums), vocab, ReduceOp::sum);

  const double count = static_cast<double>(numel(labels.global_shape()));
  double local_loss = 0;
  const double* m = max.data<double>();
  const double* s = sums.data<double>();
  for (std::int64_t r = 0; r < rows; ++r) local_loss += std::log(s[2 * r]) + m[r] - s[2 * r + 1];
  Tensor value(Shape{}, logits.dtype());
  if (logits.dtype() == DType::f32) value.data<float>()[0] = static_cast<float>(local_loss / count);
  else value.data<double>()[0] = local_loss / count;
  // Each row's loss is held by every rank of its row block: the mean is partial over the rows' axes.
  Spec loss_spec(std::vector<Axes>{}, axes_of(labels_spec.dims, mesh));
  ShardedTensor loss(mesh, loss_spec, Shape{}, std::move(value));

  return make_result(op, std::move(loss), {logits_var},
                     [held, labels = labels, width, v0, max = std::move(max), sums = std::move(sums),
                      count](const ShardedTensor& g, GradSink& sink) {
                       const ShardedTensor& logits = *held;
                       ShardedTensor moved;
                       const double scale = on_spec(g, g.spec().without_partial(), moved).local().at(0) / count;
                       Tensor dx(logits.local().shape(), logits.dtype());
                       if (logits.dtype() == DType::f32) {
                         softmax_minus_onehot<float>(logits.local(), labels.local(), width, v0, max, sums, scale, dx);
                       } else {
                         softmax_minus_onehot<double>(logits.local(), labels.local(), width, v0, max, sums, scale, dx);
                       }
                       sink.add(0, ShardedTensor(logits.mesh(), logits.spec(), logits.global_shape(), std::move(dx)));
                     });
}

Var sum_loss(const Var& y) { return sum(y); }

Var mse_loss(const Var& prediction, const Var& target) {
  if (prediction.shape() != target.shape()) {
    throw ShapeError("mse_loss: prediction " + shape_to_string(prediction.shape()) + " and target " +
                     shape_to_string(target.shape()) + " differ");
  }
  return mean(square(sub(prediction, target)));
}

Var softmax_cross_entropy(const Var& logits, const Var& labels) {
  if (logits.shape() != labels.shape() || logits.ndim() < 1) {
    throw ShapeError("softmax_cross_entropy: logits " + shape_to_string(logits.shape()) + " and labels " +
                     shape_to_string(labels.shape()) + " differ");
  }
  Var per_example = neg(sum(mul(labels, log_softmax(logits)), {logits.ndim() - 1}));
  return mean(per_example);
}

}  // namespace tessera::nn
