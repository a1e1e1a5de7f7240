// Tests of logical axis rules: flax.linen.spmd's documented examples, priority and blocking, the
// three fallbacks, the duplicate-name error, and the command-line text form.

#include "core/rules.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace tessera {
namespace {

std::string rule_error(const auto& call) {
  try {
    call();
  } catch (const RuleError& e) {
    return e.what();
  }
  return "no RuleError";
}

TEST(LogicalToMeshAxes, FlaxDocstringExample) {
  const Rules rules = {{"batch", {"X"}}, {"features", {"X"}}, {"heads", {"Y"}}, {"batch", {"Z"}}};
  const Spec spec = logical_to_mesh_axes({"batch", "length", "heads", "features"}, rules);
  EXPECT_EQ(spec, parse_spec("P(X, None, Y, None)"));
  EXPECT_EQ(spec.ndim(), 4);
  EXPECT_EQ(spec.to_string(), "P(X, None, Y, None)");
  EXPECT_NE(spec, parse_spec("P(X, None, None, Y)"));
}

TEST(LogicalToMeshAxes, TutorialRules) {
  const Rules rules = {{"batch", {"data"}}, {"hidden", {"model"}}};
  EXPECT_EQ(logical_to_mesh_axes({"embed", "hidden"}, rules), parse_spec("P(None, model)"));
  EXPECT_EQ(logical_to_mesh_axes({"batch", "embed"}, rules), parse_spec("P(data, None)"));
  EXPECT_EQ(logical_to_mesh_axes({"hidden", "embed"}, rules), parse_spec("P(model, None)"));
}

TEST(LogicalToMeshAxes, MultiAxisRule) {
  const Rules rules = {{"batch", {"data", "model"}}, {"embed", {"model"}}};
  const Spec spec = logical_to_mesh_axes({"batch", "embed"}, rules);
  // model is taken by batch, so embed stays unsharded.
  EXPECT_EQ(spec, parse_spec("P((data, model), None)"));
  EXPECT_EQ(spec.dims[0], (Axes{"data", "model"}));
}

TEST(LogicalToMeshAxes, MultiAxisRuleBlockedByAnyUsedAxis) {
  const Rules rules = {{"embed", {"model"}}, {"batch", {"data", "model"}}, {"batch", {"data"}}};
  // (data, model) overlaps model, so the next rule for batch is tried.
  EXPECT_EQ(logical_to_mesh_axes({"batch", "embed"}, rules), parse_spec("P(data, model)"));
}

TEST(LogicalToMeshAxes, EarlierRuleWinsForTheSameName) {
  const Rules rules = {{"batch", {"data"}}, {"batch", {"model"}}};
  EXPECT_EQ(logical_to_mesh_axes({"batch"}, rules), parse_spec("P(data)"));
}

TEST(LogicalToMeshAxes, PriorityIsRuleOrderNotDimensionOrder) {
  // features comes first in the rules, so it takes X although batch is the first dimension.
  const Rules rules = {{"features", {"X"}}, {"batch", {"X"}}, {"batch", {"Y"}}};
  EXPECT_EQ(logical_to_mesh_axes({"batch", "features"}, rules), parse_spec("P(Y, X)"));
}

TEST(LogicalToMeshAxes, NoneRuleBlocksLaterRulesForTheSameName) {
  const Rules rules = {{"embed", {}}, {"embed", {"model"}}, {"batch", {"data"}}};
  EXPECT_EQ(logical_to_mesh_axes({"batch", "embed"}, rules), parse_spec("P(data, None)"));
  // Assigned to None is assigned: no fallback fires for it.
  EXPECT_EQ(logical_to_spec({"batch", "embed"}, rules, RulesFallback::error, "x"), parse_spec("P(data, None)"));
  EXPECT_EQ(logical_to_spec({"batch", "embed"}, rules, RulesFallback::no_constraint), parse_spec("P(data, None)"));
}

TEST(LogicalToMeshAxes, NoneRuleDoesNotUseAnAxis) {
  const Rules rules = {{"embed", {}}, {"batch", {"data"}}, {"hidden", {"data"}}};
  EXPECT_EQ(logical_to_mesh_axes({"embed", "batch", "hidden"}, rules), parse_spec("P(None, data, None)"));
}

TEST(LogicalToMeshAxes, UnnamedDimensionsAreReplicated) {
  const Rules rules = {{"batch", {"data"}}};
  EXPECT_EQ(logical_to_mesh_axes({"", "batch", ""}, rules), parse_spec("P(None, data, None)"));
  // Unnamed dimensions are None from the start, never unassigned.
  EXPECT_EQ(logical_to_spec({"", "batch"}, rules, RulesFallback::error), parse_spec("P(None, data)"));
}

TEST(LogicalToMeshAxes, RulesForAbsentNamesAreSkipped) {
  const Rules rules = {{"vocab", {"model"}}, {"hidden", {"model"}}};
  EXPECT_EQ(logical_to_mesh_axes({"embed", "hidden"}, rules), parse_spec("P(None, model)"));
  EXPECT_EQ(logical_to_mesh_axes({}, rules), Spec::replicated(0));
  EXPECT_EQ(logical_to_mesh_axes({"embed"}, {}), parse_spec("P(None)"));
}

TEST(LogicalToMeshAxes, DuplicateNameIsAnError) {
  const Rules rules = {{"batch", {"data"}}};
  EXPECT_EQ(rule_error([&] { logical_to_mesh_axes({"batch", "batch"}, rules, "x"); }),
            "logical names (batch, batch) of 'x': 'batch' occurs more than once");
  EXPECT_EQ(rule_error([&] { logical_to_mesh_axes({"batch", "", "batch"}, rules); }),
            "logical names (batch, None, batch): 'batch' occurs more than once");
  EXPECT_EQ(rule_error([&] { logical_to_spec({"a", "b", "a", "b", "a"}, rules, RulesFallback::unsharded, "w"); }),
            "logical names (a, b, a, b, a) of 'w': 'a', 'b' occur more than once");
  // Even with no rule for the name: the error is about the names, as in flax.
  EXPECT_THROW(logical_to_mesh_axes({"embed", "embed"}, {}), RuleError);
  // Several unnamed dimensions are not duplicates.
  EXPECT_NO_THROW(logical_to_mesh_axes({"", ""}, rules));
}

TEST(LogicalToSpec, FallbackUnsharded) {
  const Rules rules = {{"batch", {"data"}}, {"hidden", {"data"}}};
  EXPECT_EQ(logical_to_spec({"batch", "hidden", "embed"}, rules, RulesFallback::unsharded),
            parse_spec("P(data, None, None)"));
}

TEST(LogicalToSpec, FallbackError) {
  const Rules rules = {{"batch", {"data"}}, {"hidden", {"data"}}};
  EXPECT_EQ(rule_error([&] { logical_to_spec({"batch", "embed"}, rules, RulesFallback::error, "x"); }),
            "logical names (batch, embed) of 'x': no rule assigns 'embed' and the fallback is error");
  EXPECT_EQ(rule_error([&] { logical_to_spec({"batch", "hidden", "embed"}, rules, RulesFallback::error, "h"); }),
            "logical names (batch, hidden, embed) of 'h': no rule assigns 'hidden' (the mesh axes of its rules are "
            "already used), 'embed' and the fallback is error");
  EXPECT_EQ(logical_to_spec({"batch"}, rules, RulesFallback::error), parse_spec("P(data)"));
}

TEST(LogicalToSpec, FallbackNoConstraint) {
  const Rules rules = {{"batch", {"data"}}};
  EXPECT_EQ(logical_to_spec({"batch", "embed"}, rules, RulesFallback::no_constraint), std::nullopt);
  EXPECT_EQ(logical_to_spec({"batch", ""}, rules, RulesFallback::no_constraint), parse_spec("P(data, None)"));
}

TEST(ParseRules, CommandLineForm) {
  const Rules expected = {{"batch", {"data"}}, {"hidden", {"model"}}};
  EXPECT_EQ(parse_rules("batch=data,hidden=model"), expected);
  EXPECT_EQ(parse_rules("  batch = data ,  hidden=model "), expected);
  EXPECT_EQ(parse_rules(""), Rules{});
  EXPECT_EQ(parse_rules("   "), Rules{});
}

TEST(ParseRules, NoneAndMultiAxis) {
  const Rules expected = {{"embed", {}}, {"layer", {}}, {"batch", {"data", "model"}}, {"x", {"a", "b", "c"}}};
  EXPECT_EQ(parse_rules("embed=None,layer=,batch=data+model,x=a + b+c"), expected);
}

TEST(ParseRules, RoundTrip) {
  const std::string canonical = "batch=data+model,embed=None,hidden=model,batch=data";
  EXPECT_EQ(to_string(parse_rules(canonical)), canonical);
  const Rules rules = {{"a", {}}, {"b", {"x", "y"}}, {"c", {"z"}}};
  EXPECT_EQ(parse_rules(to_string(rules)), rules);
  EXPECT_EQ(to_string(Rules{}), "");
  EXPECT_EQ(to_string(Rule{"layer", {}}), "layer=None");
  EXPECT_EQ(to_string(parse_rules("layer=")), "layer=None");
}

TEST(ParseRules, ErrorsPointAtTheText) {
  EXPECT_EQ(rule_error([] { parse_rules("batch=data,hidden"); }),
            "rules \"batch=data,hidden\": expected '=' after 'hidden' (column 18)");
  EXPECT_EQ(rule_error([] { parse_rules("batch=data,"); }), "rules \"batch=data,\": empty rule (column 12)");
  EXPECT_EQ(rule_error([] { parse_rules("=data"); }), "rules \"=data\": empty logical name (column 1)");
  EXPECT_EQ(rule_error([] { parse_rules("batch=data+"); }), "rules \"batch=data+\": empty mesh axis (column 12)");
  EXPECT_EQ(rule_error([] { parse_rules("batch=(data,model)"); }),
            "rules \"batch=(data,model)\": unexpected '('; write several mesh axes as data+model (column 7)");
  EXPECT_EQ(rule_error([] { parse_rules("batch=data=model"); }),
            "rules \"batch=data=model\": unexpected '=' in mesh axis 'data=model' (column 11)");
  EXPECT_EQ(rule_error([] { parse_rules("bat ch=data"); }),
            "rules \"bat ch=data\": unexpected ' ' in logical name 'bat ch' (column 4)");
  EXPECT_EQ(rule_error([] { parse_rules("batch=data+data"); }),
            "rules \"batch=data+data\": mesh axis 'data' appears twice in the rule for 'batch' (column 12)");
  EXPECT_EQ(rule_error([] { parse_rules("batch=None+data"); }),
            "rules \"batch=None+data\": None cannot be combined with mesh axes (column 7)");
}

TEST(ValidateRules, MeshAxesMustExist) {
  const MeshShape mesh({"data", "model"}, {2, 4});
  EXPECT_NO_THROW(validate_rules(parse_rules("batch=data,hidden=model,embed=None,x=data+model"), mesh));
  EXPECT_EQ(rule_error([&] { validate_rules(parse_rules("batch=data,hidden=tensor"), mesh); }),
            "rule 2 'hidden=tensor': mesh axis 'tensor' is not in the mesh (" + mesh.to_string() + ")");
  EXPECT_EQ(rule_error([&] { validate_rules({{"batch", {"data", "data"}}}, mesh); }),
            "rule 1 'batch=data+data': mesh axis 'data' appears twice");
  EXPECT_EQ(rule_error([&] { validate_rules({{"", {"data"}}}, mesh); }), "rule 1 '=data': empty logical name");
}

TEST(RulesFallbackText, RoundTrip) {
  for (RulesFallback f : {RulesFallback::unsharded, RulesFallback::error, RulesFallback::no_constraint}) {
    EXPECT_EQ(parse_rules_fallback(to_string(f)), f);
  }
  EXPECT_EQ(rule_error([] { parse_rules_fallback("raise"); }),
            "rules fallback \"raise\": expected one of unsharded, error, no_constraint");
}

}  // namespace
}  // namespace tessera
