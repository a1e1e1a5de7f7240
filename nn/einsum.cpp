// Global-view einsum: align the operands' specs, multiply the local blocks, name the result's
// spec (partial over the contracted axes), and its backward as two more einsums.
#include "nn/einsum.h"

#include <algorithm>
#include <map>
#include <set>

#include "collectives/reshard.h"
#include "core/error.h"
#include "nn/propagation.h"

namespace tessera::nn {

namespace {

bool has(const std::string& s, char c) { return s.find(c) != std::string::npos; }

std::set<std::string> dim_axes(const Spec& s) {
  std::set<std::string> out;
  for (const auto& d : s.dims)
    for (const auto& a : d) out.insert(a);
  return out;
}

// True when the two operands' specs are consistent: shared letters split alike, no mesh axis on
// two different letters, and no partial axis of one operand used by the other.
bool consistent(const EinsumSubscripts& sub, const Spec& sa, const Spec& sb) {
  std::map<std::string, char> owner;  // mesh axis -> letter
  auto claim = [&](const std::string& letters, const Spec& s) {
    for (std::size_t i = 0; i < letters.size(); ++i) {
      for (const auto& axis : s.axes(static_cast<int>(i))) {
        auto [it, fresh] = owner.emplace(axis, letters[i]);
        if (!fresh && it->second != letters[i]) return false;
      }
    }
    return true;
  };
  if (!claim(sub.a, sa) || !claim(sub.b, sb)) return false;
  for (std::size_t i = 0; i < sub.a.size(); ++i) {
    auto j = sub.b.find(sub.a[i]);
    if (j != std::string::npos && sa.axes(static_cast<int>(i)) != sb.axes(static_cast<int>(j))) return false;
  }
  for (const auto& p : sa.partial) {
    if (owner.count(p) || sb.is_partial_on(p)) return false;
  }
  for (const auto& p : sb.partial) {
    if (owner.count(p)) return false;
  }
  return true;
}

// The spec `to` (subscripts to_letters) takes to agree with `from`: shared letters copy from's
// axes, other letters keep theirs minus any axis `from` uses.
Spec adopt(const std::string& to_letters, const Spec& to, const std::string& from_letters, const Spec& from) {
  std::set<std::string> used = dim_axes(from);
  for (const auto& p : from.partial) used.insert(p);
  Spec out = Spec::replicated(static_cast<int>(to_letters.size()));
  for (std::size_t i = 0; i < to_letters.size(); ++i) {
    auto j = from_letters.find(to_letters[i]);
    if (j != std::string::npos) {
      out.dims[i] = from.axes(static_cast<int>(j));
    } else {
      for (const auto& a : to.axes(static_cast<int>(i))) {
        if (!used.count(a)) out.dims[i].push_back(a);
      }
    }
  }
  for (const auto& p : to.partial) {
    if (!used.count(p)) out.partial.push_back(p);
  }
  return out;
}

// Operands after alignment: pointers to the originals or to resharded copies held here. Not
// copyable or movable, since it points into itself.
struct Aligned {
  Aligned() = default;
  Aligned(const Aligned&) = delete;
  Aligned& operator=(const Aligned&) = delete;
  ShardedTensor a_store, b_store;
  const ShardedTensor* a = nullptr;
  const ShardedTensor* b = nullptr;
};

// Reshards at most what the rules require so the operands' specs are consistent.
void align(const EinsumSubscripts& sub, const ShardedTensor& a, const ShardedTensor& b, Aligned& out) {
  out.a = &a;
  out.b = &b;
  // Partial axes the other operand uses cannot stay partial: reduce them first.
  auto conflicts_partial = [](const Spec& x, const Spec& other) {
    std::set<std::string> used = dim_axes(other);
    for (const auto& p : other.partial) used.insert(p);
    return std::any_of(x.partial.begin(), x.partial.end(), [&](const std::string& p) { return used.count(p) > 0; });
  };
  if (conflicts_partial(a.spec(), b.spec())) {
    out.a_store = resolve_partial(a);
    out.a = &out.a_store;
  }
  if (conflicts_partial(out.b->spec(), out.a->spec())) {
    out.b_store = resolve_partial(b);
    out.b = &out.b_store;
  }
  if (consistent(sub, out.a->spec(), out.b->spec())) return;
  Spec b_target = adopt(sub.b, out.b->spec(), sub.a, out.a->spec());
  Spec a_target = adopt(sub.a, out.a->spec(), sub.b, out.b->spec());
  const std::int64_t cost_b = reshard_bytes(*out.b, b_target);
  const std::int64_t cost_a = reshard_bytes(*out.a, a_target);
  // Ties reshard the second operand (in a layer, the weight) and keep the activation in place.
  if (cost_a < cost_b) {
    out.a_store = reshard(*out.a, a_target);
    out.a = &out.a_store;
  } else {
    out.b_store = reshard(*out.b, b_target);
    out.b = &out.b_store;
  }
}

Spec result_spec(const EinsumSubscripts& sub, const Spec& sa, const Spec& sb) {
  Spec out = Spec::replicated(static_cast<int>(sub.out.size()));
  for (std::size_t i = 0; i < sub.out.size(); ++i) {
    auto j = sub.a.find(sub.out[i]);
    out.dims[i] = j != std::string::npos ? sa.axes(static_cast<int>(j))
                                          : sb.axes(static_cast<int>(sub.b.find(sub.out[i])));
  }
  for (std::size_t i = 0; i < sub.a.size(); ++i) {
    if (!has(sub.out, sub.a[i])) {
      for (const auto& axis : sa.axes(static_cast<int>(i))) out.partial.push_back(axis);
    }
  }
  for (const auto& p : sa.partial) out.partial.push_back(p);
  for (const auto& p : sb.partial) out.partial.push_back(p);
  return out;
}

Shape result_shape(const EinsumSubscripts& sub, const ShardedTensor& a, const ShardedTensor& b) {
  std::map<char, std::int64_t> extent;
  for (std::size_t i = 0; i < sub.a.size(); ++i) extent[sub.a[i]] = a.global_shape()[i];
  for (std::size_t i = 0; i < sub.b.size(); ++i) {
    auto it = extent.find(sub.b[i]);
    if (it != extent.end() && it->second != b.global_shape()[i]) {
      throw ShapeError("einsum '" + sub.to_string() + "': letter '" + std::string(1, sub.b[i]) + "' is " +
                       std::to_string(it->second) + " in '" + a.name() + "' " + shape_to_string(a.global_shape()) +
                       " but " + std::to_string(b.global_shape()[i]) + " in '" + b.name() + "' " +
                       shape_to_string(b.global_shape()));
    }
    extent[sub.b[i]] = b.global_shape()[i];
  }
  Shape out;
  for (char c : sub.out) out.push_back(extent[c]);
  return out;
}

void check_operands(const EinsumSubscripts& sub, const ShardedTensor& a, const ShardedTensor& b) {
  check_same_mesh(a, b, "einsum '" + sub.to_string() + "'");
  if (a.ndim() != static_cast<int>(sub.a.size()) || b.ndim() != static_cast<int>(sub.b.size())) {
    throw ShapeError("einsum '" + sub.to_string() + "': operands of shapes " + shape_to_string(a.global_shape()) +
                     " and " + shape_to_string(b.global_shape()) + " do not match the subscripts");
  }
  if (a.dtype() != b.dtype()) {
    throw DTypeError("einsum '" + sub.to_string() + "': dtypes " + std::string(dtype_name(a.dtype())) + " and " +
                     std::string(dtype_name(b.dtype())) + " differ");
  }
}

// Matrix FLOPs of the local product of blocks of these specs: 2 x the product of every letter's
// largest block extent.
double local_flops(const EinsumSubscripts& sub, const MeshShape& mesh, const Spec& sa, const Shape& a_shape,
                   const Spec& sb, const Shape& b_shape) {
  std::map<char, std::int64_t> extent;
  const Shape a_block = max_local_shape(sa, mesh, a_shape);
  const Shape b_block = max_local_shape(sb, mesh, b_shape);
  for (std::size_t i = 0; i < sub.a.size(); ++i) extent[sub.a[i]] = a_block[i];
  for (std::size_t i = 0; i < sub.b.size(); ++i) extent[sub.b[i]] = b_block[i];
  double flops = 2;
  for (const auto& [letter, n] : extent) flops *= static_cast<double>(n);
  return flops;
}

// The spec an operand (subscripts `letters`, spec `s`) takes so that the product lands in
// `want` with nothing to reduce: its contracted letters whole, each free letter split as `want`
// splits that letter of the output; its partial axes stay.
Spec toward(const std::string& letters, const Spec& s, const std::string& out, const Spec& want) {
  Spec target = Spec::replicated(static_cast<int>(letters.size()));
  for (std::size_t i = 0; i < letters.size(); ++i) {
    const auto j = out.find(letters[i]);
    if (j != std::string::npos) target.dims[i] = want.axes(static_cast<int>(j));
  }
  target.partial = s.partial;
  return target;
}

// einsum, or einsum_toward when `want` is given.
ShardedTensor contract(std::string_view subscripts, const ShardedTensor& a, const ShardedTensor& b,
                       const Spec* want) {
  const auto sub = EinsumSubscripts::parse(subscripts);
  check_operands(sub, a, b);
  Shape shape = result_shape(sub, a, b);
  Aligned al;
  align(sub, a, b, al);
  const Spec natural = result_spec(sub, al.a->spec(), al.b->spec());
  if (want != nullptr) {
    const MeshShape& mesh = a.mesh().shape();
    const Spec target = want->padded(static_cast<int>(shape.size()));
    const Spec a_to = toward(sub.a, al.a->spec(), sub.out, target);
    const Spec b_to = toward(sub.b, al.b->spec(), sub.out, target);
    // The product of the moved factors is exactly the wanted block: no rank computes a block it
    // then drops, and nothing is left to reshard.
    if (!(natural == target) && consistent(sub, a_to, b_to) && result_spec(sub, a_to, b_to) == target) {
      const double reduce_cost =
          static_cast<double>(plan_reshard(mesh, natural, target, shape, a.dtype()).bytes_per_rank());
      const double extra_flops =
          local_flops(sub, mesh, a_to, a.global_shape(), b_to, b.global_shape()) -
          local_flops(sub, mesh, al.a->spec(), a.global_shape(), al.b->spec(), b.global_shape());
      const double move_cost =
          static_cast<double>(reshard_bytes(*al.a, a_to) + reshard_bytes(*al.b, b_to)) +
          extra_flops / kFlopsPerCommByte;
      if (move_cost < reduce_cost) {
        const ShardedTensor a_moved = to_spec(*al.a, a_to);
        const ShardedTensor b_moved = to_spec(*al.b, b_to);
        Tensor local = einsum_local(sub, a_moved.local(), b_moved.local());
        return ShardedTensor(a.mesh(), target, std::move(shape), std::move(local));
      }
    }
  }
  Tensor local = einsum_local(sub, al.a->local(), al.b->local());
  return ShardedTensor(a.mesh(), natural, std::move(shape), std::move(local));
}

}  // namespace

ShardedTensor einsum(std::string_view subscripts, const ShardedTensor& a, const ShardedTensor& b) {
  return contract(subscripts, a, b, nullptr);
}

ShardedTensor einsum_toward(std::string_view subscripts, const ShardedTensor& a, const ShardedTensor& b,
                            const Spec& want) {
  return contract(subscripts, a, b, &want);
}

Var einsum(std::string_view subscripts, const Var& a, const Var& b) {
  const auto sub = EinsumSubscripts::parse(subscripts);
  ShardedTensor out = einsum(subscripts, a.value(), b.value());
  return make_result("einsum", std::move(out), {a, b}, [sub, a, b](const ShardedTensor& g, GradSink& sink) {
    // d/da = einsum(out,b->a)(g, b); d/db = einsum(a,out->b)(a, g), each computed toward the
    // spec its cotangent is resharded to (its primal's, without partial axes).
    if (sink.wants(0)) {
      sink.add(0, einsum_toward(sub.out + "," + sub.b + "->" + sub.a, g, b.value(), a.value().spec().without_partial()));
    }
    if (sink.wants(1)) {
      sink.add(1, einsum_toward(sub.a + "," + sub.out + "->" + sub.b, a.value(), g, b.value().spec().without_partial()));
    }
  });
}

}  // namespace tessera::nn
