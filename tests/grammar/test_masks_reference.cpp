// The fast mask paths (precomputed string sets, character-loop subtrees taken whole, byte-class
// transitions, the state cache) against TokenMasker::compute_reference, the plain trie walk: on every test
// schema, at every byte position of its valid instances and of its invalid ones up to where they are
// refused, both must allow exactly the same tokens. Two vocabularies: the bundled tokenizer's and one
// with many longer tokens cut from the instances themselves, so deep subtrees are taken whole.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "grammar/compile.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"
#include "text/tokenizer.h"

namespace gridq::grammar {
namespace {

using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

struct Case {
  std::string name;
  std::shared_ptr<const Grammar> g;
  std::vector<std::string> texts;  // valid and invalid instances, compact JSON
};

std::vector<Case> load_cases() {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(std::string(GRIDQ_SOURCE_DIR) + "/tests/grammar/schemas"))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<Case> out;
  for (const fs::path& p : files) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    ojson c = ojson::parse(ss.str());
    auto g = compile(InputKind::kJsonSchema, c["schema"].dump());
    if (!g) continue;  // test_schemas.cpp fails on these
    Case k{p.stem().string(), *g, {}};
    for (const char* key : {"valid", "invalid", "strict_invalid"})
      for (const ojson& v : c.value(key, ojson::array())) k.texts.push_back(v.dump());
    out.push_back(std::move(k));
  }
  return out;
}

std::string diff(const TokenVocab& v, const std::vector<uint64_t>& got, const std::vector<uint64_t>& want) {
  std::string d;
  for (size_t id = 0; id < v.size() && d.size() < 300; ++id) {
    auto i = static_cast<int32_t>(id);
    if (mask_test(got, i) != mask_test(want, i))
      d += (mask_test(want, i) ? " missing " : " extra ") +
           ojson(v.bytes(i)).dump(-1, ' ', false, ojson::error_handler_t::replace);
  }
  return d;
}

// Returns how many masks were compared.
size_t compare_all(const std::vector<Case>& cases, const std::shared_ptr<const TokenVocab>& v) {
  size_t masks = 0;
  std::vector<uint64_t> fast, ref;
  for (const Case& c : cases) {
    TokenMasker masker(v);  // one per grammar, as the server keeps it: caches carry across positions
    for (const std::string& text : c.texts) {
      Matcher m(c.g);
      for (size_t i = 0; i <= text.size(); ++i) {
        masker.compute(m, fast);
        masker.compute_reference(m, ref);
        EXPECT_EQ(fast, ref) << c.name << ", " << text << ", position " << i << ":" << diff(*v, fast, ref);
        if (fast != ref) return masks;
        ++masks;
        if (i == text.size() || !m.advance(static_cast<uint8_t>(text[i]))) break;
      }
    }
  }
  return masks;
}

text::Tokenizer laguna() {
  auto tok =
      text::Tokenizer::from_file(std::string(GRIDQ_SOURCE_DIR) + "/models/laguna-tiny-code/tokenizer.json");
  EXPECT_TRUE(tok.ok());
  return std::move(*tok);
}

TEST(GrammarMaskReference, BundledVocabulary) {
  auto tok = laguna();
  auto v = TokenVocab::from_tokenizer(tok, {tok.token_id("<|endoftext|>")});
  auto cases = load_cases();
  ASSERT_GE(cases.size(), 100u);
  EXPECT_GT(compare_all(cases, v), 3000u);
}

// Every 1-12 byte piece of every instance (cut anywhere, so some end or start inside a UTF-8 character),
// wrapped in a few of the bytes JSON puts around text, plus all single bytes and `extra`.
std::shared_ptr<const TokenVocab> cut_vocab(const std::vector<Case>& cases,
                                            const std::vector<std::string>& extra) {
  std::set<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.insert(std::string(1, static_cast<char>(b)));
  for (const Case& c : cases)
    for (const std::string& t : c.texts)
      for (size_t i = 0; i < t.size(); ++i)
        for (size_t n = 2; n <= 12 && i + n <= t.size(); ++n) {
          std::string p = t.substr(i, n);
          pieces.insert(p);
          pieces.insert(" " + p);
          pieces.insert(p + "\"");
        }
  pieces.insert(extra.begin(), extra.end());
  std::vector<std::string> bytes(pieces.begin(), pieces.end());
  bytes.push_back("");  // an end-of-sequence token
  const auto eos = static_cast<int32_t>(bytes.size() - 1);
  return std::make_shared<const TokenVocab>(bytes, std::vector<bool>(bytes.size(), false),
                                            std::vector<int32_t>{eos});
}

TEST(GrammarMaskReference, LongTokensFromTheInstances) {
  auto cases = load_cases();
  auto v =
      cut_vocab(cases, {"abcdefgh", "hello world", "日本語", "é@x.co", "ab\\\"c", "\xe6\x97", "\x97\xa5"});
  EXPECT_GT(v->size(), 20000u);
  EXPECT_GT(compare_all(cases, v), 3000u);
}

// Schemas aimed at single fast paths, with instances (compact JSON, valid or not) whose pieces make the
// vocabulary: extra keys starting with multi-byte characters (Matcher::char_then_free_string: viable
// tokens from a lead byte taken as one bit range), a declared name starting with one (then the key trie's
// root does not take every multi-byte character), counted repetitions (deep first visits).
std::vector<Case> fast_path_cases() {
  struct Source {
    const char* schema;
    std::vector<const char*> texts;
  };
  const std::vector<Source> sources = {
      {R"({"type":"object","properties":{"k":{"const":1}},"additionalProperties":true})",
       {R"({"k":1,"日本":"x","é":2})", R"({"中文":[1,"é"],"😀x":null})", R"({"k":1,"kk":3,"k\"é":{}})",
        R"({"k":1,"k":2})", "{\"\xe6\x97\":1}"}},
      {R"({"type":"object","properties":{"日本":{"type":"integer"},"éa":{"type":"string"}},)"
       R"("additionalProperties":{"type":"string"}})",
       {R"({"日本":1,"éa":"x","日":"y","日本語":"z","éb":"w"})", R"({"é":"x","中":"y"})",
        R"({"日本":1,"日本":2})"}},
      // One character of a class, then any text (a pattern searched for): every multi-byte character or not.
      {R"({"type":"string","pattern":"^[^a]"})", {R"("日本語abc")", R"("éa\"")", R"("ab")"}},
      {R"({"type":"string","pattern":"^[^é]"})", {R"("aé")", R"("日é")", R"("éa")"}},
      {R"({"type":"string","format":"email"})",
       {R"("john.doe@mail-server.example-domain.com")", R"("a@b-c.d")", R"("a@-b.c")"}},
      {R"({"type":"string","pattern":"^[a-z]{2,40}-[0-9]{0,30}$"})",
       {R"("abcdefghijklmnopqrstuvwxyz-0123456789")", R"("ab-")", R"("a-1")"}},
  };
  std::vector<Case> out;
  for (const Source& s : sources) {
    auto g = compile(InputKind::kJsonSchema, s.schema);
    EXPECT_TRUE(g.ok()) << s.schema << ": " << g.message();
    if (!g) continue;
    Case c{s.schema, *g, {}};
    for (const char* t : s.texts) c.texts.emplace_back(t);
    out.push_back(std::move(c));
  }
  return out;
}

TEST(GrammarMaskReference, FastPathCases) {
  auto cases = fast_path_cases();
  ASSERT_EQ(cases.size(), 6u);
  auto v = cut_vocab(
      cases, {"日本", "日\"", "é\":", "中文\":\"", "\xe4\xb8", "\xe4\xb8\xad\xff", "中\x80", "é\\n", "\xc3",
              "\xf0\x9f\x98\x80x", "日本\\\"", "\xed\xa0\x80", "abcdefghijklmnopqrstuvwxyz-012"});
  EXPECT_GT(compare_all(cases, v), 300u);
  auto tok = laguna();
  EXPECT_GT(compare_all(cases, TokenVocab::from_tokenizer(tok, {tok.token_id("<|endoftext|>")})), 300u);
}

}  // namespace
}  // namespace gridq::grammar
