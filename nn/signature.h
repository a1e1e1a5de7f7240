// Function signatures from seqax shape strings, for typed shard_maps:
//   "x: f32[batch/data embed], w: f32[embed hidden/model] -> f32[batch/data hidden/model]"
// Each argument is `name: dtype[shape string]`; results are `dtype[shape string]`, optionally
// named (`z: f32[...]`) and optionally in parentheses when there are several. The specs of a
// shard_map come from the shape strings' mesh axes; the names are checked by a shape scope.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/spec.h"

namespace tessera::nn {

struct ArgSignature {
  std::string name;  // "x"; for results "result <i>" when the signature does not name them
  DType dtype = DType::f32;
  ShapeString shape;
  // "x: f32[batch/data embed]"
  std::string to_string() const;
  bool operator==(const ArgSignature&) const = default;
};

struct Signature {
  std::vector<ArgSignature> inputs;
  std::vector<ArgSignature> outputs;

  std::vector<Spec> in_specs() const;
  std::vector<Spec> out_specs() const;
  // The text form; parse_signature(to_string()) == *this.
  std::string to_string() const;
  // seqax's Array['layers', ...] for scanned layers: the named inputs gain a leading unsplit
  // dimension `dim` (SpecError for a name that is not an input).
  Signature stacked(const std::vector<std::string>& inputs, const std::string& dim = "layers") const;
  bool operator==(const Signature&) const = default;
};

// Throws SpecError quoting the signature and saying what is wrong: a missing "->", an argument
// without a name or dtype, an unknown dtype, a shape string that does not parse (with the shape
// string's own message), an argument name used twice.
Signature parse_signature(std::string_view text);

// seqax's is_fully_sharded: every mesh axis of size > 1 splits some dimension of the spec (no
// replica of the tensor on any axis, so its memory is divided by the whole mesh).
bool is_fully_sharded(const Spec& spec, const MeshShape& mesh);

}  // namespace tessera::nn
