// Rotary embeddings (a local rotation by global positions) and causal attention, one fused op each
// way (core/kernels.h), with K and V resharded explicitly for context parallelism.
#include "nn/attention.h"

#include <cmath>
#include <memory>
#include <vector>

#include "collectives/reshard.h"
#include "core/bfloat16.h"
#include "core/error.h"
#include "core/kernels.h"
#include "nn/ops.h"
#include "nn/propagation.h"

namespace tessera::nn {

namespace {

// The cosines and sines of the rotation angles pos * base^(-2i / d_head) of positions
// [offset, offset + seq) and frequency pairs i in [0, d_head / 2), each [seq, d_head / 2].
struct RotaryTable {
  std::int64_t offset = 0, seq = 0, dh = 0;
  double base = 0;
  std::vector<double> cosines, sines;
};

// The table for these positions, made once: a step rotates q and k of every layer forward and
// back with the same positions, and the table's pow, cos and sin cost more than the rotation
// of a small block (8 ranks, B8 s128 d256: 64 x 16 angles against 32 Ki values per call).
// Per thread; the most recent tables are kept, at most kKept of them and kKeptValues angles in
// all (the newest always, however long its sequence). The reference is valid until the next call.
const RotaryTable& rotary_table(std::int64_t offset, std::int64_t seq, std::int64_t dh, double base) {
  constexpr std::size_t kKept = 8;
  constexpr std::size_t kKeptValues = std::size_t{1} << 20;  // 16 MiB of cosines and sines
  thread_local std::vector<RotaryTable> tables;
  for (const RotaryTable& t : tables) {
    if (t.offset == offset && t.seq == seq && t.dh == dh && t.base == base) return t;
  }
  RotaryTable t{offset, seq, dh, base, {}, {}};
  const std::int64_t half = dh / 2;
  t.cosines.resize(static_cast<std::size_t>(seq * half));
  t.sines.resize(t.cosines.size());
  for (std::int64_t p = 0; p < seq; ++p) {
    const double pos = static_cast<double>(offset + p);
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle = pos * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(dh));
      t.cosines[static_cast<std::size_t>(p * half + i)] = std::cos(angle);
      t.sines[static_cast<std::size_t>(p * half + i)] = std::sin(angle);
    }
  }
  const auto kept_values = [&] {
    std::size_t n = t.cosines.size();
    for (const RotaryTable& old : tables) n += old.cosines.size();
    return n;
  };
  while (!tables.empty() && (tables.size() >= kKept || kept_values() > kKeptValues)) tables.erase(tables.begin());
  tables.push_back(std::move(t));
  return tables.back();
}

ShardedTensor rotate_value(const ShardedTensor& x, double base, std::int64_t offset, double sign) {
  const Mesh& mesh = x.mesh();
  const std::int64_t seq0 = block_offsets(x.spec(), mesh.shape(), x.global_shape(), mesh.coords())[1];
  const Shape& s = x.local().shape();
  const RotaryTable& table = rotary_table(seq0 + offset, s[1], s[3], base);
  Tensor out = Tensor::empty(s, x.dtype());  // rotate_pairs writes every element
  rotate_pairs(x.local(), table.cosines.data(), table.sines.data(), sign, out);
  return ShardedTensor(mesh, x.spec(), x.global_shape(), std::move(out));
}

void check_bshd(const char* op, const ShardedTensor& x) {
  if (x.ndim() != 4 || (x.dtype() != DType::f32 && x.dtype() != DType::f64 && x.dtype() != DType::bf16)) {
    throw ShapeError(std::string(op) + ": " + operand_string(x) + " is not an f32, f64 or bf16 [batch, seq, heads, d_head]");
  }
}

}  // namespace

Var rotary(const Var& x, double base, std::int64_t offset) {
  check_bshd("rotary", x.value());
  if (x.shape()[3] % 2 != 0) throw ShapeError("rotary: d_head of " + operand_string(x.value()) + " is odd");
  // x's block is read where it lies (no copy) unless d_head is split.
  Spec whole = x.spec();
  whole.dims[3].clear();
  ShardedTensor moved;
  ShardedTensor y = rotate_value(on_spec(x.value(), whole, moved), base, offset, 1.0);
  Spec y_spec = y.spec();
  return make_result("rotary", std::move(y), {x}, [base, offset, y_spec](const ShardedTensor& g, GradSink& sink) {
    ShardedTensor moved;
    sink.add(0, rotate_value(on_spec(g, y_spec.without_partial(), moved), base, offset, -1.0));
  });
}

Var causal_attention(const Var& q, const Var& k, const Var& v) {
  check_bshd("causal_attention", q.value());
  check_bshd("causal_attention", k.value());
  check_bshd("causal_attention", v.value());
  if (q.shape() != k.shape() || q.shape() != v.shape() || q.dtype() != k.dtype() || q.dtype() != v.dtype()) {
    throw ShapeError("causal_attention: q " + operand_string(q.value()) + ", k " + operand_string(k.value()) + " and v " +
                     operand_string(v.value()) + " differ in shape or dtype");
  }
  check_same_mesh(q.value(), k.value(), "causal_attention");
  check_same_mesh(q.value(), v.value(), "causal_attention");
  // Q: its spec without partial axes and with d_head whole. K and V: Q's spec with the sequence
  // whole too (the all-gather of context parallelism). Each reshard is a differentiable op, so
  // the tape takes the cotangents back to the inputs' specs.
  Spec q_spec = q.spec().padded(4).without_partial();
  q_spec.dims[3].clear();
  Spec kv_spec = q_spec;
  kv_spec.dims[1].clear();
  const Var qw = q.spec() == q_spec ? q : reshard(q, q_spec);
  const Var kw = k.spec() == kv_spec ? k : reshard(k, kv_spec);
  const Var vw = v.spec() == kv_spec ? v : reshard(v, kv_spec);
  const Mesh& mesh = q.mesh();
  const Shape shape = q.shape();
  // The global position of this rank's first query row.
  const std::int64_t q0 = block_offsets(q_spec, mesh.shape(), shape, mesh.coords())[1];
  const double scale_factor = 1.0 / std::sqrt(static_cast<double>(shape[3]));
  Tensor out;
  auto probs = std::make_shared<Tensor>();
  causal_attention_forward(qw.value().local(), kw.value().local(), vw.value().local(), q0, scale_factor, out, *probs);
  ShardedTensor y(mesh, q_spec, shape, std::move(out));
  return make_result(
      "causal_attention", std::move(y), {qw, kw, vw},
      [qw, kw, vw, probs, q_spec, kv_spec, q0, scale_factor](const ShardedTensor& g, GradSink& sink) {
        ShardedTensor moved;
        const ShardedTensor& gl = on_spec(g, q_spec, moved);
        Tensor dq, dk, dv;
        causal_attention_backward(qw.value().local(), kw.value().local(), vw.value().local(), *probs, gl.local(), q0,
                                  scale_factor, dq, dk, dv);
        const Mesh& m = g.mesh();
        // Each rank's queries reach every key: dK and dV are sums over the axes splitting the
        // queries' sequence, partial until the tape reshards them.
        const Spec partial_kv(kv_spec.dims, q_spec.axes(1));
        if (sink.wants(0)) sink.add(0, ShardedTensor(m, q_spec, g.global_shape(), std::move(dq)));
        if (sink.wants(1)) sink.add(1, ShardedTensor(m, partial_kv, g.global_shape(), std::move(dk)));
        if (sink.wants(2)) sink.add(2, ShardedTensor(m, partial_kv, g.global_shape(), std::move(dv)));
      });
}

}  // namespace tessera::nn
