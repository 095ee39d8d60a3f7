// Token masks against brute force: at every byte position of some valid instances, the trie walk (with
// its free-string fast path and state cache) must allow exactly the tokens that the matcher takes whole.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "grammar/compile.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"
#include "text/tokenizer.h"

namespace gridq::grammar {
namespace {

std::vector<uint64_t> brute_force(const TokenVocab& v, const Matcher& m, const text::Tokenizer& tok) {
  std::vector<uint64_t> mask(v.words(), 0);
  for (size_t id = 0; id < v.size(); ++id) {
    const std::string& b = v.bytes(static_cast<int32_t>(id));
    if (b.empty() || tok.is_special(static_cast<int32_t>(id))) continue;
    Matcher c = m;
    if (c.advance_bytes(b) == b.size()) mask[id >> 6] |= uint64_t{1} << (id & 63);
  }
  if (m.accepting())
    for (int32_t e : v.eos_ids()) mask[e >> 6] |= uint64_t{1} << (e & 63);
  return mask;
}

std::shared_ptr<const TokenVocab> laguna_vocab(const text::Tokenizer& tok) {
  return TokenVocab::from_tokenizer(tok, {tok.token_id("<|endoftext|>")});
}

void check_walk(const std::shared_ptr<const Grammar>& g, const std::string& text, const TokenVocab& v,
                TokenMasker& masker, const text::Tokenizer& tok) {
  Matcher m(g);
  std::vector<uint64_t> mask;
  for (size_t i = 0; i <= text.size(); ++i) {
    std::vector<uint64_t> want = brute_force(v, m, tok);
    masker.compute(m, mask);
    if (mask != want) {
      std::string diff;
      for (size_t id = 0; id < v.size() && diff.size() < 400; ++id)
        if (mask_test(mask, static_cast<int32_t>(id)) != mask_test(want, static_cast<int32_t>(id)))
          diff += (mask_test(want, static_cast<int32_t>(id)) ? " missing " : " extra ") +
                  nlohmann::json(v.bytes(static_cast<int32_t>(id)))
                      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      FAIL() << "position " << i << " of " << text << ":" << diff;
    }
    masker.compute(m, mask);  // now from the cache
    ASSERT_EQ(mask, want) << "cached, position " << i << " of " << text;
    if (i < text.size()) {
      ASSERT_TRUE(m.advance(static_cast<uint8_t>(text[i])));
    }
  }
}

TEST(GrammarMasks, MatchBruteForce) {
  auto tok =
      text::Tokenizer::from_file(std::string(GRIDQ_SOURCE_DIR) + "/models/laguna-tiny-code/tokenizer.json");
  ASSERT_TRUE(tok.ok());
  auto v = laguna_vocab(*tok);
  EXPECT_GT(v->free_string_tokens(), 1000u);
  struct Case {
    InputKind kind;
    std::string input, text;
  };
  std::vector<Case> cases = {
      {InputKind::kJsonSchema,
       R"({"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer","minimum":-3,"maximum":300},"tags":{"type":"array","items":{"enum":["a","bc"]}}},"required":["name"]})",
       R"({"name":"x \"y\" é","n":-2,"tags":["bc","a"]})"},
      {InputKind::kJsonObject, "", R"({"a":[1,2.5e-3,true,null],"b":{"c":"d\u00e9"}})"},
      {InputKind::kJsonSchema, R"({"type":"string","pattern":"^[a-z]+[0-9]{2}$"})", R"("abc12")"},
      {InputKind::kJsonSchema, R"({"type":"string","maxLength":4})", R"("ab\nc")"},
      {InputKind::kRegex, "(def|class) [a-z_]+\\(\\):", "def foo_bar():"},
      {InputKind::kJsonSchema,
       R"({"anyOf":[{"type":"string","maxLength":2},{"type":"string","pattern":"^x+$"}]})", R"("xxxx")"},
      {InputKind::kJsonSchema, R"({"type":"object","additionalProperties":{"type":"string","minLength":2}})",
       R"({"k\"ey":"v\u00e9é","":"zz"})"},
      {InputKind::kGbnf, "root ::= \"x\" [0-9]+ (\" \" root)?", "x12 x3"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.input);
    auto g = compile(c.kind, c.input);
    ASSERT_TRUE(g.ok()) << g.message();
    TokenMasker masker(v);
    check_walk(*g, c.text, *v, masker, *tok);
  }
}

TEST(GrammarMasks, SpecialTokensNeverAllowedEosOnlyWhenAccepting) {
  auto tok =
      text::Tokenizer::from_file(std::string(GRIDQ_SOURCE_DIR) + "/models/laguna-tiny-code/tokenizer.json");
  ASSERT_TRUE(tok.ok());
  auto v = laguna_vocab(*tok);
  auto g = compile(InputKind::kJsonObject, "");
  ASSERT_TRUE(g.ok());
  TokenMasker masker(v);
  Matcher m(*g);
  std::vector<uint64_t> mask;
  masker.compute(m, mask);
  const int32_t eos = tok->token_id("<|endoftext|>");
  EXPECT_FALSE(mask_test(mask, eos));
  for (const auto& a : tok->added_tokens())
    if (a.special) {
      EXPECT_FALSE(mask_test(mask, a.id)) << a.content;
    }
  ASSERT_EQ(m.advance_bytes("{}"), 2u);
  masker.compute(m, mask);
  EXPECT_TRUE(mask_test(mask, eos));
  size_t allowed = 0;
  for (uint64_t w : mask) allowed += __builtin_popcountll(w);
  EXPECT_EQ(allowed, 1u);  // a complete object: only EOS
}

TEST(GrammarMasks, CacheHitsInsideStrings) {
  auto tok =
      text::Tokenizer::from_file(std::string(GRIDQ_SOURCE_DIR) + "/models/laguna-tiny-code/tokenizer.json");
  ASSERT_TRUE(tok.ok());
  auto v = laguna_vocab(*tok);
  auto g = compile(InputKind::kJsonSchema, R"({"type":"string"})");
  ASSERT_TRUE(g.ok());
  TokenMasker masker(v);
  Matcher m(*g);
  std::vector<uint64_t> mask;
  ASSERT_TRUE(m.advance('"'));
  for (char c : std::string("hello world")) {
    masker.compute(m, mask);
    ASSERT_TRUE(m.advance(static_cast<uint8_t>(c)));
  }
  // Right after the quote, then one state for every later character.
  EXPECT_EQ(masker.cache_misses(), 2u);
  EXPECT_EQ(masker.cache_hits(), 9u);
}

}  // namespace
}  // namespace gridq::grammar
