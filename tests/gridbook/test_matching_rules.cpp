// Target/ignore matching (format.md §13, test vectors §17.11). Expected outcomes come from the spec text and
// from Python re.match semantics (anchored at the start, not required to reach the end).
#include <gtest/gtest.h>

#include "gridbook/matching.h"

namespace gridq::gridbook {
namespace {

Pattern P(std::string_view e) {
  auto p = Pattern::compile(e);
  EXPECT_TRUE(p.ok()) << e << ": " << (p.ok() ? "" : p.message());
  return *p;
}

TEST(Matching, RouterIgnoreDoesNotCaptureGateProj) {
  // The substring bug of format.md §13: the router's short name is a prefix of gate_proj / gate_up_proj.
  const Pattern ig = P("model.layers.1.mlp.gate");
  EXPECT_TRUE(ig.matches("model.layers.1.mlp.gate"));
  EXPECT_FALSE(ig.matches("model.layers.1.mlp.gate_proj"));
  EXPECT_FALSE(ig.matches("model.layers.1.mlp.gate_up_proj"));
  EXPECT_FALSE(ig.matches("model.layers.1.mlp.experts.gate_up_proj"));
  EXPECT_FALSE(ig.matches("model.layers.1.mlp.shared_expert.gate_proj"));
}

TEST(Matching, RegexAnchoredAtStartNotAtEnd) {
  const Pattern re = P(R"(re:model\.layers\.0)");
  EXPECT_TRUE(re.is_regex());
  EXPECT_TRUE(re.matches("model.layers.0.mlp.down_proj"));
  EXPECT_FALSE(re.matches("x.model.layers.0"));
  EXPECT_FALSE(re.matches("model.layers.1.mlp.down_proj"));
  const Pattern end = P(R"(re:.*q_proj$)");
  EXPECT_TRUE(end.matches("model.layers.3.self_attn.q_proj"));
  EXPECT_FALSE(end.matches("model.layers.3.self_attn.q_proj.weight"));
  // Alternation binds inside the anchor the way re.match does: only the first alternative is anchored in
  // a search, but PCRE2_ANCHORED anchors every alternative, like re.match.
  const Pattern alt = P("re:abc|self_attn");
  EXPECT_FALSE(alt.matches("model.layers.0.self_attn.q_proj"));
  EXPECT_TRUE(alt.matches("self_attn.x"));
}

TEST(Matching, LiteralParentDoesNotMatchChildren) {
  const Pattern lit = P("model.layers.0.mlp");
  EXPECT_FALSE(lit.is_regex());
  EXPECT_TRUE(lit.matches("model.layers.0.mlp"));
  EXPECT_FALSE(lit.matches("model.layers.0.mlp.down_proj"));
  EXPECT_FALSE(P("lm_head").matches("model.lm_head"));
}

TEST(Matching, NamespaceCanonicalisation) {
  EXPECT_EQ(canonical_module_name("model.language_model.layers.0.mlp"), "model.layers.0.mlp");
  EXPECT_EQ(canonical_module_name("language_model.model.layers.0.mlp"), "model.layers.0.mlp");
  EXPECT_EQ(canonical_module_name("model.layers.0.mlp"), "model.layers.0.mlp");
  EXPECT_EQ(canonical_module_name("lm_head"), "lm_head");
  EXPECT_TRUE(P("model.language_model.layers.0.mlp.gate").matches("model.layers.0.mlp.gate"));
  EXPECT_TRUE(P("model.layers.0.mlp.gate").matches("language_model.model.layers.0.mlp.gate"));
  EXPECT_TRUE(P(R"(re:model\.layers\.0\.)").matches("model.language_model.layers.0.mlp.gate"));
}

TEST(Matching, RefusesConstructsPcre2AndPythonDisagreeOn) {
  for (const char* bad : {R"(re:(?<=model)\.layers)", R"(re:(?<!x)model)", R"(re:\p{L}+)", R"(re:\P{L})",
                          R"(re:model\Klayers)", R"(re:(*UTF)model)", R"(re:[[:alpha:]]+)", R"(re:a{,3})",
                          R"(re:\h)", R"(re:(?|a|b))", "re:", "re:model(", ""}) {
    EXPECT_FALSE(Pattern::compile(bad).ok()) << bad;
  }
  for (const char* good : {R"(re:model\.layers\.\d+\.self_attn\.(q|k|v)_proj)", R"(re:(?:a|b)\w+\s*\Z)",
                           R"(re:(?P<n>x)(?P=n))", R"(re:(?i)MODEL)", R"(re:(?=model)m)"}) {
    EXPECT_TRUE(Pattern::compile(good).ok()) << good;
  }
}

TEST(Matching, RoutedExpertChildRule) {
  auto r = parse_routed_expert("model.layers.1.mlp.experts.gate_up_proj");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->experts_prefix, "model.layers.1.mlp.experts");
  EXPECT_FALSE(r->expert.has_value());
  EXPECT_EQ(r->leaf, "gate_up_proj");
  r = parse_routed_expert("model.layers.1.mlp.experts.11.down_proj");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r->expert, 11);
  EXPECT_FALSE(parse_routed_expert("model.layers.1.mlp.experts2.gate_up_proj"));
  EXPECT_FALSE(parse_routed_expert("model.layers.1.mlp.experts"));
  EXPECT_FALSE(parse_routed_expert("model.layers.1.mlp.experts.gate"));
  EXPECT_FALSE(parse_routed_expert("model.layers.1.mlp.experts.e_score_correction_bias"));
  EXPECT_FALSE(parse_routed_expert("model.layers.1.mlp.shared_expert.gate_proj"));
  // The experts2 target of format.md §13 does not reach the experts stack.
  EXPECT_FALSE(
      P("model.layers.1.mlp.experts2.gate_up_proj").matches("model.layers.1.mlp.experts.gate_up_proj"));
}

TEST(Matching, FusedSets) {
  EXPECT_EQ(fused_set("model.layers.0.self_attn.q_proj"), "model.layers.0.self_attn.qkv");
  EXPECT_EQ(fused_set("model.layers.0.self_attn.v_proj"), "model.layers.0.self_attn.qkv");
  EXPECT_FALSE(fused_set("model.layers.0.self_attn.o_proj"));
  EXPECT_FALSE(fused_set("model.layers.0.self_attn.g_proj"));
  EXPECT_EQ(fused_set("model.layers.0.mlp.up_proj"), "model.layers.0.mlp.gate_up");
  EXPECT_EQ(fused_set("model.layers.2.mlp.shared_expert.gate_proj"),
            "model.layers.2.mlp.shared_expert.gate_up");
  EXPECT_FALSE(fused_set("model.layers.0.mlp.down_proj"));
}

// ---- claim_modules ------------------------------------------------------------------------------------

struct Fixture {
  std::vector<ClaimGroup> groups;
  std::vector<Pattern> ignore;
  std::vector<std::string> linear = {"model.layers.1.self_attn.q_proj",
                                     "model.layers.1.self_attn.k_proj",
                                     "model.layers.1.self_attn.v_proj",
                                     "model.layers.1.self_attn.o_proj",
                                     "model.layers.1.mlp.gate",
                                     "model.layers.1.mlp.experts.gate_up_proj",
                                     "model.layers.1.mlp.experts.down_proj",
                                     "model.layers.1.mlp.shared_expert.gate_proj",
                                     "model.layers.1.mlp.shared_expert.up_proj"};
  std::vector<std::string> other = {"model.layers.1.input_layernorm", "model.embed_tokens"};
  Fixture() {
    groups.push_back(
        {"routed",
         ClaimKind::kCodebook,
         {P("model.layers.1.mlp.experts.gate_up_proj"), P("model.layers.1.mlp.experts.down_proj")}});
    groups.push_back(
        {"attn", ClaimKind::kCompressedTensors, {P(R"(re:model\.layers\.\d+\.self_attn\.[qkvo]_proj)")}});
    ignore = {P("model.layers.1.mlp.gate"), P(R"(re:model\.layers\.\d+\.mlp\.shared_expert\.)"),
              P("model.embed_tokens")};
  }
  Expected<std::vector<Claim>> run() const { return claim_modules(groups, ignore, linear, other); }
};

TEST(Claims, EveryLinearClaimedOnce) {
  Fixture f;
  auto c = f.run();
  ASSERT_TRUE(c.ok()) << c.message();
  ASSERT_EQ(c->size(), f.linear.size());
  EXPECT_EQ((*c)[0].kind, ClaimKind::kCompressedTensors);
  EXPECT_EQ((*c)[0].group, 1);
  EXPECT_EQ((*c)[4].kind, ClaimKind::kIgnore);  // router, not gate_up_proj
  EXPECT_EQ((*c)[5].kind, ClaimKind::kCodebook);
  EXPECT_EQ((*c)[5].group, 0);
  EXPECT_EQ((*c)[7].kind, ClaimKind::kIgnore);
}

TEST(Claims, OverlapRefused) {
  Fixture f;
  f.ignore.push_back(P("model.layers.1.mlp.experts.down_proj"));
  auto c = f.run();
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("claimed twice"), std::string::npos) << c.message();
  EXPECT_NE(c.message().find("model.layers.1.mlp.experts.down_proj"), std::string::npos);
}

TEST(Claims, RoleClaimedByTwoGroupsRefused) {
  Fixture f;
  f.groups.push_back(
      {"routed_b", ClaimKind::kCodebook, {P(R"(re:model\.layers\.1\.mlp\.experts\.gate_up)")}});
  auto c = f.run();
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("claimed twice"), std::string::npos) << c.message();
}

TEST(Claims, UnclaimedRefused) {
  Fixture f;
  f.ignore.erase(f.ignore.begin());  // the router is left without a claimer
  auto c = f.run();
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("model.layers.1.mlp.gate"), std::string::npos) << c.message();
  EXPECT_NE(c.message().find("not claimed"), std::string::npos);
}

TEST(Claims, SubstringIgnoreWouldHaveBeenTheBug) {
  // Only the router is ignored; gate_up_proj stays with its codebook group.
  Fixture f;
  auto c = f.run();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)[5].kind, ClaimKind::kCodebook);
}

TEST(Claims, DisagreeingFusedShardsRefused) {
  Fixture f;
  f.groups[1].targets = {P(R"(re:model\.layers\.\d+\.self_attn\.[qko]_proj)")};
  f.ignore.push_back(P("model.layers.1.self_attn.v_proj"));
  auto c = f.run();
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("fused"), std::string::npos) << c.message();
}

TEST(Claims, LiteralNamingNothingRefused) {
  Fixture f;
  f.ignore.push_back(P("model.layers.1.mlp"));  // a literal parent claims nothing
  auto c = f.run();
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("names no module"), std::string::npos) << c.message();
}

TEST(Claims, ExpertsParentTargetRefusedWithTheChildRule) {
  Fixture f;
  f.groups[0].targets.push_back(P("model.layers.1.mlp.experts"));
  auto c = f.run();
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("dotted child"), std::string::npos) << c.message();
}

TEST(Claims, Experts2TargetDoesNotClaimExperts) {
  Fixture f;
  f.groups[0].targets = {P("model.layers.1.mlp.experts2.gate_up_proj"),
                         P("model.layers.1.mlp.experts.down_proj")};
  auto c = f.run();
  ASSERT_FALSE(c.ok());  // experts.gate_up_proj is unclaimed, and the experts2 literal names nothing
  EXPECT_NE(c.message().find("model.layers.1.mlp.experts.gate_up_proj"), std::string::npos) << c.message();
}

TEST(Claims, TargetOnNonLinearRefused) {
  Fixture f;
  f.groups[1].targets.push_back(P("model.embed_tokens"));
  auto c = f.run();
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("not a Linear"), std::string::npos) << c.message();
}

TEST(Claims, ClassNameTargetRefused) {
  Fixture f;
  f.groups[1].targets.push_back(P("Linear"));
  auto c = f.run();
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("class-name"), std::string::npos) << c.message();
}

TEST(Claims, TwoSpellingsOfOneModuleRefused) {
  Fixture f;
  f.other.push_back("model.language_model.embed_tokens");
  auto c = f.run();
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("canonicalise"), std::string::npos) << c.message();
}

}  // namespace
}  // namespace gridq::gridbook
