// Parsing and printing of shard_map signatures.
#include "nn/signature.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "core/text.h"

namespace tessera::nn {

namespace {

[[noreturn]] void fail(std::string_view text, const std::string& message) {
  throw SpecError("signature \"" + std::string(text) + "\": " + message);
}

// Splits at commas outside brackets and parentheses.
std::vector<std::string_view> split_top(std::string_view text, std::string_view s) {
  std::vector<std::string_view> parts;
  int depth = 0;
  std::size_t begin = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '[' || s[i] == '(') ++depth;
    if (s[i] == ']' || s[i] == ')') {
      if (--depth < 0) fail(text, "unbalanced '" + std::string(1, s[i]) + "'");
    }
    if (s[i] == ',' && depth == 0) {
      parts.push_back(trim(s.substr(begin, i - begin)));
      begin = i + 1;
    }
  }
  if (depth != 0) fail(text, "unbalanced brackets");
  parts.push_back(trim(s.substr(begin)));
  return parts;
}

DType parse_dtype(std::string_view text, std::string_view name) {
  for (DType d : {DType::f32, DType::f64, DType::i32}) {
    if (dtype_name(d) == name) return d;
  }
  fail(text, "unknown dtype '" + std::string(name) + "' (expected f32, f64 or i32)");
}

ArgSignature parse_arg(std::string_view text, std::string_view part, bool need_name, const std::string& default_name) {
  ArgSignature arg;
  std::string_view rest = part;
  const auto colon = part.find(':');
  if (colon != std::string_view::npos) {
    arg.name = std::string(trim(part.substr(0, colon)));
    if (arg.name.empty()) fail(text, "an argument has an empty name in '" + std::string(part) + "'");
    // An identifier, as in Python: a name with spaces, brackets or NULs would not print back to
    // the same signature (found by the parse_signature fuzz target).
    const bool identifier =
        (std::isalpha(static_cast<unsigned char>(arg.name[0])) || arg.name[0] == '_') &&
        std::all_of(arg.name.begin(), arg.name.end(),
                    [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
    if (!identifier) fail(text, "argument name '" + arg.name + "' is not an identifier");
    rest = trim(part.substr(colon + 1));
  } else if (need_name) {
    fail(text, "argument '" + std::string(part) + "' has no name (write name: dtype[shape])");
  } else {
    arg.name = default_name;
  }
  const auto open = rest.find('[');
  if (open == std::string_view::npos || rest.back() != ']') {
    fail(text, "argument '" + arg.name + "': expected dtype[shape], got '" + std::string(rest) + "'");
  }
  arg.dtype = parse_dtype(text, trim(rest.substr(0, open)));
  try {
    arg.shape = parse_shape_string(rest.substr(open + 1, rest.size() - open - 2));
  } catch (const SpecError& e) {
    fail(text, "argument '" + arg.name + "': " + e.what());
  }
  return arg;
}

}  // namespace

std::string ArgSignature::to_string() const {
  // Unnamed results print without their default name.
  const std::string prefix = name.rfind("result ", 0) == 0 ? "" : name + ": ";
  return prefix + std::string(dtype_name(dtype)) + "[" + shape.to_string() + "]";
}

std::vector<Spec> Signature::in_specs() const {
  std::vector<Spec> out;
  for (const auto& a : inputs) out.push_back(a.shape.spec());
  return out;
}

std::vector<Spec> Signature::out_specs() const {
  std::vector<Spec> out;
  for (const auto& a : outputs) out.push_back(a.shape.spec());
  return out;
}

std::string Signature::to_string() const {
  std::string out;
  for (std::size_t i = 0; i < inputs.size(); ++i) out += (i ? ", " : "") + inputs[i].to_string();
  out += " -> ";
  if (outputs.size() != 1) out += "(";
  for (std::size_t i = 0; i < outputs.size(); ++i) out += (i ? ", " : "") + outputs[i].to_string();
  if (outputs.size() != 1) out += ")";
  return out;
}

Signature Signature::stacked(const std::vector<std::string>& names, const std::string& dim) const {
  Signature out = *this;
  for (const auto& name : names) {
    auto it = std::find_if(out.inputs.begin(), out.inputs.end(), [&](const ArgSignature& a) { return a.name == name; });
    if (it == out.inputs.end()) throw SpecError("stacked: '" + name + "' is not an argument of " + to_string());
    it->shape.dims.insert(it->shape.dims.begin(), DimSpec{dim, std::nullopt, {}});
  }
  return out;
}

Signature parse_signature(std::string_view text) {
  const auto arrow = text.find("->");
  if (arrow == std::string_view::npos) fail(text, "no '->' between arguments and results");
  std::string_view lhs = trim(text.substr(0, arrow));
  std::string_view rhs = trim(text.substr(arrow + 2));
  if (rhs.empty()) fail(text, "no result after '->'");
  if (rhs.front() == '(' && rhs.back() == ')') rhs = trim(rhs.substr(1, rhs.size() - 2));
  Signature sig;
  if (!lhs.empty()) {
    for (auto part : split_top(text, lhs)) sig.inputs.push_back(parse_arg(text, part, true, ""));
  }
  int i = 0;
  for (auto part : split_top(text, rhs)) {
    sig.outputs.push_back(parse_arg(text, part, false, "result " + std::to_string(i++)));
  }
  for (std::size_t a = 0; a < sig.inputs.size(); ++a) {
    for (std::size_t b = 0; b < a; ++b) {
      if (sig.inputs[a].name == sig.inputs[b].name) fail(text, "argument name '" + sig.inputs[a].name + "' is used twice");
    }
  }
  return sig;
}

bool is_fully_sharded(const Spec& spec, const MeshShape& mesh) {
  for (int i = 0; i < mesh.ndim(); ++i) {
    if (mesh.sizes()[i] > 1 && spec.dim_of(mesh.names()[i]) < 0) return false;
  }
  return true;
}

}  // namespace tessera::nn
