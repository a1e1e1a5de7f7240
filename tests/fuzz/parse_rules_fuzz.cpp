// parse_rules and parse_rules_fallback on arbitrary text; rules that parse print back to text
// that parses to them (rules.h: parse_rules(to_string(r)) == r).
#include <cstdlib>

#include "core/error.h"
#include "core/rules.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = tessera::fuzz::as_text(data, size);
  try {
    const tessera::Rules rules = tessera::parse_rules(text);
    if (tessera::parse_rules(tessera::to_string(rules)) != rules) std::abort();
  } catch (const tessera::Error&) {
  }
  try {
    (void)tessera::parse_rules_fallback(text);
  } catch (const tessera::Error&) {
  }
  return 0;
}
