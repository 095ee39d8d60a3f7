// Every test schema in tests/grammar/schemas compiles, accepts its hand-made valid instances (byte by byte
// and token by token through the masks of the bundled tokenizer) and rejects the invalid ones; every file
// in tests/grammar/unsupported fails to compile with a message naming the feature.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "grammar/compile.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"
#include "text/tokenizer.h"

namespace gridq::grammar {
namespace {

using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

ojson read_json(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ojson::parse(ss.str());
}

std::vector<fs::path> files_in(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(std::string(GRIDQ_SOURCE_DIR) + "/tests/grammar/" + dir))
    if (e.path().extension() == ".json") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  Matcher m(g);
  return m.advance_bytes(text) == text.size() && m.accepting();
}

TEST(GrammarSchemas, AtLeastOneHundred) { EXPECT_GE(files_in("schemas").size(), 100u); }

TEST(GrammarSchemas, ValidAcceptedInvalidRejected) {
  size_t instances = 0;
  for (const fs::path& p : files_in("schemas")) {
    SCOPED_TRACE(p.filename().string());
    ojson c = read_json(p);
    auto g = compile(InputKind::kJsonSchema, c["schema"].dump());
    ASSERT_TRUE(g.ok()) << g.message();
    for (const ojson& v : c["valid"]) {
      EXPECT_TRUE(accepts(*g, v.dump())) << "valid instance refused: " << v.dump();
      ++instances;
    }
    for (const char* key : {"invalid", "strict_invalid"})
      for (const ojson& v : c.value(key, ojson::array())) {
        EXPECT_FALSE(accepts(*g, v.dump())) << key << " instance accepted: " << v.dump();
        ++instances;
      }
  }
  EXPECT_GT(instances, 400u);
}

TEST(GrammarSchemas, FlexibleWhitespaceAcceptsPrettyPrinted) {
  CompileOptions o;
  o.flexible_whitespace = true;
  for (const fs::path& p : files_in("schemas")) {
    SCOPED_TRACE(p.filename().string());
    ojson c = read_json(p);
    auto g = compile(InputKind::kJsonSchema, c["schema"].dump(), o);
    ASSERT_TRUE(g.ok()) << g.message();
    for (const ojson& v : c["valid"]) {
      // Strings inside enum/const values stay compact; pretty-print only where whitespace is structural.
      if (c["schema"].is_object() && (c["schema"].contains("enum") || c["schema"].contains("const")))
        continue;
      EXPECT_TRUE(accepts(*g, v.dump(2))) << v.dump(2);
    }
  }
}

TEST(GrammarSchemas, ValidInstancesTokenByToken) {
  auto tok =
      text::Tokenizer::from_file(std::string(GRIDQ_SOURCE_DIR) + "/models/laguna-tiny-code/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.message();
  const int32_t eos = tok->token_id("<|endoftext|>");
  auto vocab = TokenVocab::from_tokenizer(*tok, {eos});
  std::vector<uint64_t> mask;
  for (const fs::path& p : files_in("schemas")) {
    SCOPED_TRACE(p.filename().string());
    ojson c = read_json(p);
    auto g = compile(InputKind::kJsonSchema, c["schema"].dump());
    ASSERT_TRUE(g.ok());
    TokenMasker masker(vocab);
    for (const ojson& v : c["valid"]) {
      Matcher m(*g);
      for (int32_t id : tok->encode(v.dump())) {
        masker.compute(m, mask);
        ASSERT_TRUE(mask_test(mask, id)) << "token " << id << " of " << v.dump() << " masked out";
        EXPECT_EQ(mask_test(mask, eos), m.accepting()) << "EOS exactly when the grammar accepts";
        const std::string& b = vocab->bytes(id);
        ASSERT_EQ(m.advance_bytes(b), b.size());
      }
      masker.compute(m, mask);
      EXPECT_TRUE(mask_test(mask, eos)) << "EOS not allowed at the end of " << v.dump();
    }
  }
}

TEST(GrammarSchemas, UnsupportedFailsNamingTheFeature) {
  EXPECT_GE(files_in("unsupported").size(), 20u);
  for (const fs::path& p : files_in("unsupported")) {
    SCOPED_TRACE(p.filename().string());
    ojson c = read_json(p);
    auto g = compile(InputKind::kJsonSchema, c["schema"].dump());
    ASSERT_FALSE(g.ok()) << "compiled, but should be refused";
    EXPECT_NE(g.message().find(c["error"].get<std::string>()), std::string::npos) << g.message();
  }
}

TEST(GrammarSchemas, AdditionalPropertiesOption) {
  CompileOptions o;
  o.allow_additional_properties = true;
  auto g = compile(InputKind::kJsonSchema, R"({"type":"object","properties":{"a":{"type":"integer"}}})", o);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(accepts(*g, R"({"a":1,"b":[true]})"));
  EXPECT_TRUE(accepts(*g, R"({"zz":null})"));
  EXPECT_FALSE(accepts(*g, R"({"a":1,"a":2})"));  // an extra key never repeats a declared one
  auto strict = compile(InputKind::kJsonSchema, R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  ASSERT_TRUE(strict.ok());
  EXPECT_FALSE(accepts(*strict, R"({"a":1,"b":2})"));
}

}  // namespace
}  // namespace gridq::grammar
