// Small text helpers shared by every parser and message in tessera (specs, meshes, rules,
// signatures, initializers, byte tables): one trim, one identifier rule, one way to list names.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tessera {

// `s` without leading and trailing ASCII whitespace (space, tab, newline, carriage return,
// vertical tab, form feed).
std::string_view trim(std::string_view s);

// [A-Za-z_][A-Za-z0-9_]*: the names of mesh axes, logical dimensions and signature arguments.
bool is_identifier(std::string_view s);

// The items separated by `separator`: join({"a", "b"}, ", ") == "a, b".
std::string join(const std::vector<std::string>& items, std::string_view separator);

// The items in parentheses, comma separated: "(data, model)"; "()" for none.
std::string parenthesized(const std::vector<std::string>& items);

}  // namespace tessera
