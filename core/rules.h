// Logical axis rules: an ordered list (logical name -> mesh axes or none) that turns the model-side
// names of a tensor's dimensions (batch, embed, hidden) into a Spec. The resolution follows
// flax.linen.spmd (_logical_to_mesh_axes and with_logical_constraint's fallbacks) exactly.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/mesh_shape.h"
#include "core/spec.h"

namespace tessera {

// One rule. Empty mesh_axes means the rule maps its name to None (replicated); a None rule still
// counts as an assignment, so it blocks later rules for the same name.
struct Rule {
  std::string logical;
  Axes mesh_axes;
  bool operator==(const Rule&) const = default;
};

// Rules in priority order: earlier rules win.
using Rules = std::vector<Rule>;

// What to do with a dimension whose logical name no rule could assign (no rule for it, or every
// rule for it names a mesh axis that an earlier-assigned dimension already uses).
enum class RulesFallback {
  unsharded,      // leave the dimension replicated (flax AXIS_IS_UNSHARDED, the default)
  error,          // throw RuleError naming the tensor and the unassigned names (RAISE_ERROR)
  no_constraint,  // impose no spec at all: the caller leaves the tensor as it is (NO_CONSTRAINT)
};

// Logical names of a tensor's dimensions; an empty string is an unnamed dimension (flax's None),
// which is always replicated and never "unassigned".
using LogicalNames = std::vector<std::string>;

// The spec the rules give `names`; unassigned dimensions become None (replicated). Throws
// RuleError when a logical name occurs twice in `names`; `tensor_name` names the tensor in it.
Spec logical_to_mesh_axes(const LogicalNames& names, const Rules& rules, std::string_view tensor_name = "");

// The spec the rules give `names`, with `fallback` for unassigned dimensions: unsharded -> None;
// error -> RuleError naming `tensor_name` and the unassigned names; no_constraint -> nullopt.
std::optional<Spec> logical_to_spec(const LogicalNames& names, const Rules& rules, RulesFallback fallback,
                                    std::string_view tensor_name = "");

// The command-line form, comma-separated `logical=axes` pairs:
//   "batch=data,hidden=model,embed=None,layer=,heads=data+model"
// `x=None` and `x=` both map x to None; several mesh axes are joined with '+', major first (no
// parentheses, so the form needs no shell quoting). Whitespace around names is ignored. The empty
// string is the empty rule list. Throws RuleError quoting the text and the column of the fault.
Rules parse_rules(std::string_view text);

// The canonical command-line form; parse_rules(to_string(r)) == r. None prints as `x=None`.
std::string to_string(const Rule& rule);
std::string to_string(const Rules& rules);

// Throws RuleError naming the rule when a rule has an empty logical name, names a mesh axis that
// `mesh` lacks, or names a mesh axis twice.
void validate_rules(const Rules& rules, const MeshShape& mesh);

// "unsharded", "error", "no_constraint" and back; parse throws RuleError listing the choices.
std::string to_string(RulesFallback fallback);
RulesFallback parse_rules_fallback(std::string_view text);

}  // namespace tessera
