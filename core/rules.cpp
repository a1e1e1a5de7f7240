// Logical axis rules: flax.linen.spmd's priority resolution of logical names to mesh axes, the
// fallbacks of with_logical_constraint, and the command-line text form of a rule list.

#include "core/rules.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "core/text.h"

namespace tessera {
namespace {

// "(batch, None, embed)": names as flax prints a logical spec, so messages read like the model.
std::string names_to_string(const LogicalNames& names) {
  std::string out = "(";
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ", ";
    out += names[i].empty() ? "None" : names[i];
  }
  return out + ")";
}

std::string context(const LogicalNames& names, std::string_view tensor_name) {
  std::string out = "logical names " + names_to_string(names);
  if (!tensor_name.empty()) out += " of '" + std::string(tensor_name) + "'";
  return out;
}

std::string quoted_list(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += "'" + items[i] + "'";
  }
  return out;
}

void check_no_duplicates(const LogicalNames& names, std::string_view tensor_name) {
  std::vector<std::string> duplicates;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty()) continue;  // several unnamed dimensions are fine, as in flax
    const bool seen_before = std::find(names.begin(), names.begin() + i, names[i]) != names.begin() + i;
    const bool listed = std::find(duplicates.begin(), duplicates.end(), names[i]) != duplicates.end();
    if (!seen_before || listed) continue;
    duplicates.push_back(names[i]);
  }
  if (duplicates.empty()) return;
  throw RuleError(context(names, tensor_name) + ": " + quoted_list(duplicates) +
                  (duplicates.size() == 1 ? " occurs" : " occur") + " more than once");
}

// The per-dimension result of the priority resolution: nullopt = no rule assigned the dimension.
std::vector<std::optional<Axes>> assign(const LogicalNames& names, const Rules& rules, std::string_view tensor_name) {
  check_no_duplicates(names, tensor_name);
  std::vector<std::optional<Axes>> result(names.size());
  // Unnamed dimensions start as None, not unassigned: no fallback ever fires for them.
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty()) result[i] = Axes{};
  }
  Axes used;
  for (const Rule& rule : rules) {
    if (rule.logical.empty()) continue;
    const auto pos = std::find(names.begin(), names.end(), rule.logical);
    if (pos == names.end()) continue;
    std::optional<Axes>& slot = result[pos - names.begin()];
    if (slot.has_value()) continue;
    // A rule is free only if none of its axes is taken; a None rule has no axes, so it is free.
    const bool free = std::none_of(rule.mesh_axes.begin(), rule.mesh_axes.end(), [&](const std::string& axis) {
      return std::find(used.begin(), used.end(), axis) != used.end();
    });
    if (!free) continue;
    slot = rule.mesh_axes;
    used.insert(used.end(), rule.mesh_axes.begin(), rule.mesh_axes.end());
  }
  return result;
}

Spec unassigned_to_none(const std::vector<std::optional<Axes>>& assigned) {
  std::vector<Axes> dims;
  dims.reserve(assigned.size());
  for (const auto& axes : assigned) dims.push_back(axes.value_or(Axes{}));
  return Spec(std::move(dims));
}

[[noreturn]] void fail_parse(std::string_view text, std::size_t offset, const std::string& what) {
  throw RuleError("rules \"" + std::string(text) + "\": " + what + " (column " + std::to_string(offset + 1) + ")");
}

bool is_blank(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

// Narrows [begin, end) of `text` to its trim() (positions stay those of `text`, for columns).
void trim_range(std::string_view text, std::size_t& begin, std::size_t& end) {
  const std::string_view trimmed = trim(text.substr(begin, end - begin));
  begin = static_cast<std::size_t>(trimmed.data() - text.data());
  end = begin + trimmed.size();
}

// A logical name or mesh axis: anything without separators or blanks inside.
void check_name(std::string_view text, std::size_t begin, std::size_t end, const char* role) {
  if (begin == end) fail_parse(text, begin, std::string("empty ") + role);
  for (std::size_t i = begin; i < end; ++i) {
    const char c = text[i];
    if (c == '(' || c == ')') {
      fail_parse(text, i, "unexpected '" + std::string(1, c) + "'; write several mesh axes as data+model");
    }
    if (c == '=' || is_blank(c)) {
      fail_parse(text, i, std::string("unexpected '") + c + "' in " + role + " '" +
                              std::string(text.substr(begin, end - begin)) + "'");
    }
  }
}

Rule parse_rule(std::string_view text, std::size_t begin, std::size_t end) {
  std::size_t trimmed_begin = begin, trimmed_end = end;
  trim_range(text, trimmed_begin, trimmed_end);
  if (trimmed_begin == trimmed_end) fail_parse(text, begin, "empty rule");
  const std::size_t equals = text.find('=', trimmed_begin);
  if (equals == std::string_view::npos || equals >= trimmed_end) {
    fail_parse(text, trimmed_end, "expected '=' after '" +
                                      std::string(text.substr(trimmed_begin, trimmed_end - trimmed_begin)) + "'");
  }
  Rule rule;
  std::size_t name_begin = trimmed_begin, name_end = equals;
  trim_range(text, name_begin, name_end);
  check_name(text, name_begin, name_end, "logical name");
  rule.logical = std::string(text.substr(name_begin, name_end - name_begin));

  std::size_t axes_begin = equals + 1, axes_end = trimmed_end;
  trim_range(text, axes_begin, axes_end);
  const std::string_view axes_text = text.substr(axes_begin, axes_end - axes_begin);
  if (axes_text.empty() || axes_text == "None") return rule;
  std::size_t piece_begin = axes_begin;
  while (true) {
    std::size_t piece_end = text.find('+', piece_begin);
    if (piece_end == std::string_view::npos || piece_end > axes_end) piece_end = axes_end;
    std::size_t b = piece_begin, e = piece_end;
    trim_range(text, b, e);
    check_name(text, b, e, "mesh axis");
    std::string axis(text.substr(b, e - b));
    if (axis == "None") fail_parse(text, b, "None cannot be combined with mesh axes");
    if (std::find(rule.mesh_axes.begin(), rule.mesh_axes.end(), axis) != rule.mesh_axes.end()) {
      fail_parse(text, b, "mesh axis '" + axis + "' appears twice in the rule for '" + rule.logical + "'");
    }
    rule.mesh_axes.push_back(std::move(axis));
    if (piece_end == axes_end) break;
    piece_begin = piece_end + 1;
  }
  return rule;
}

}  // namespace

Spec logical_to_mesh_axes(const LogicalNames& names, const Rules& rules, std::string_view tensor_name) {
  return unassigned_to_none(assign(names, rules, tensor_name));
}

std::optional<Spec> logical_to_spec(const LogicalNames& names, const Rules& rules, RulesFallback fallback,
                                    std::string_view tensor_name) {
  const auto assigned = assign(names, rules, tensor_name);
  if (fallback == RulesFallback::unsharded) return unassigned_to_none(assigned);
  std::vector<std::string> unassigned;
  for (std::size_t i = 0; i < assigned.size(); ++i) {
    if (!assigned[i].has_value()) unassigned.push_back(names[i]);
  }
  if (unassigned.empty()) return unassigned_to_none(assigned);
  if (fallback == RulesFallback::no_constraint) return std::nullopt;

  // Say whether rules existed but were blocked: "no rule" would send the user to the wrong fix.
  std::string message = context(names, tensor_name) + ": no rule assigns ";
  for (std::size_t i = 0; i < unassigned.size(); ++i) {
    if (i > 0) message += ", ";
    message += "'" + unassigned[i] + "'";
    const bool has_rule = std::any_of(rules.begin(), rules.end(), [&](const Rule& r) { return r.logical == unassigned[i]; });
    if (has_rule) message += " (the mesh axes of its rules are already used)";
  }
  throw RuleError(message + " and the fallback is error");
}

Rules parse_rules(std::string_view text) {
  Rules rules;
  std::size_t all_begin = 0, all_end = text.size();
  trim_range(text, all_begin, all_end);
  if (all_begin == all_end) return rules;
  std::size_t begin = 0;
  while (true) {
    std::size_t end = text.find(',', begin);
    if (end == std::string_view::npos) end = text.size();
    rules.push_back(parse_rule(text, begin, end));
    if (end == text.size()) break;
    begin = end + 1;
  }
  return rules;
}

std::string to_string(const Rule& rule) {
  std::string out = rule.logical + "=";
  if (rule.mesh_axes.empty()) return out + "None";
  for (std::size_t i = 0; i < rule.mesh_axes.size(); ++i) {
    if (i > 0) out += "+";
    out += rule.mesh_axes[i];
  }
  return out;
}

std::string to_string(const Rules& rules) {
  std::string out;
  for (std::size_t i = 0; i < rules.size(); ++i) {
    if (i > 0) out += ",";
    out += to_string(rules[i]);
  }
  return out;
}

void validate_rules(const Rules& rules, const MeshShape& mesh) {
  for (std::size_t i = 0; i < rules.size(); ++i) {
    const Rule& rule = rules[i];
    const std::string where = "rule " + std::to_string(i + 1) + " '" + to_string(rule) + "'";
    if (rule.logical.empty()) throw RuleError(where + ": empty logical name");
    for (std::size_t a = 0; a < rule.mesh_axes.size(); ++a) {
      const std::string& axis = rule.mesh_axes[a];
      if (!mesh.has_axis(axis)) {
        throw RuleError(where + ": mesh axis '" + axis + "' is not in the mesh (" + mesh.to_string() + ")");
      }
      if (std::find(rule.mesh_axes.begin(), rule.mesh_axes.begin() + a, axis) != rule.mesh_axes.begin() + a) {
        throw RuleError(where + ": mesh axis '" + axis + "' appears twice");
      }
    }
  }
}

std::string to_string(RulesFallback fallback) {
  switch (fallback) {
    case RulesFallback::unsharded: return "unsharded";
    case RulesFallback::error: return "error";
    case RulesFallback::no_constraint: return "no_constraint";
  }
  return "unknown";
}

RulesFallback parse_rules_fallback(std::string_view text) {
  for (RulesFallback f : {RulesFallback::unsharded, RulesFallback::error, RulesFallback::no_constraint}) {
    if (text == to_string(f)) return f;
  }
  throw RuleError("rules fallback \"" + std::string(text) + "\": expected one of unsharded, error, no_constraint");
}

}  // namespace tessera
