// Tokenizer and StreamDecoder on the bundled model. Bulk parity with HF tokenizers lives in
// tests/python/test_tokenizer_parity.py; these checks use facts from models/README.md and Unicode's
// replacement rules, and invariants (streaming == whole decode).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>

#include "text/byte_level.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace gridq::text {
namespace {

const std::string kModel = std::string(GRIDQ_SOURCE_DIR) + "/models/laguna-tiny-code";

const Tokenizer& tiny() {
  static const Tokenizer t = [] {
    auto r = Tokenizer::from_file(kModel + "/tokenizer.json");
    if (!r) {
      ADD_FAILURE() << r.message();
      std::abort();
    }
    return std::move(*r);
  }();
  return t;
}

std::string read(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int32_t byte_id(unsigned char b) { return tiny().token_id(byte_to_unicode()[b]); }

TEST(Tokenizer, ControlTokensFromModelCard) {
  const auto& t = tiny();
  EXPECT_EQ(t.vocab_size(), 4096u);
  const char* names[] = {"<|endoftext|>", "<|pad|>", "<think>", "</think>", "<assistant>", "</assistant>",
                         "<tool_call>", "</tool_call>"};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(t.token_id(names[i]), i);
    EXPECT_EQ(t.token_text(i), names[i]);
    EXPECT_TRUE(t.is_special(i));
  }
  EXPECT_EQ(t.token_id("<user>"), -1);  // plain text in this model
  // The 256 byte symbols occupy ids 8..263 (in the byte-level alphabet's order).
  std::vector<int32_t> ids;
  for (int b = 0; b < 256; ++b) ids.push_back(byte_id(static_cast<unsigned char>(b)));
  std::sort(ids.begin(), ids.end());
  for (int k = 0; k < 256; ++k) EXPECT_EQ(ids[static_cast<size_t>(k)], 8 + k);
}

TEST(Tokenizer, AddedTokensMatchInTextUnlessDisabled) {
  const auto& t = tiny();
  auto ids = t.encode("a</think>b");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[1], 3);
  auto plain = t.encode("a</think>b", false, /*match_added_tokens=*/false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 3), 0);
  EXPECT_EQ(t.decode(plain), "a</think>b");
  // skip_special drops the markers' text.
  EXPECT_EQ(t.decode(ids, /*skip_special=*/true), "ab");
  EXPECT_EQ(t.decode(ids), "a</think>b");
}

TEST(Tokenizer, RoundTripOnEvalTextAndSpeed) {
  const std::string text = read(std::string(GRIDQ_SOURCE_DIR) + "/data/code-eval.txt");
  ASSERT_GT(text.size(), 1000000u);
  const auto ids = tiny().encode(text);
  EXPECT_GT(ids.size(), 100000u);
  for (int32_t id : ids) EXPECT_TRUE(id >= 8 || id < 0 ? true : false) << id;  // no control ids in code
  EXPECT_EQ(tiny().decode(ids), text);
}

TEST(Tokenizer, InvalidUtf8BecomesReplacementChars) {
  // Maximal-subpart rule (Unicode 3.9 / WHATWG): F0 9F 98 then 'y' is one U+FFFD; C0 AF is two.
  EXPECT_EQ(utf8_lossy("x\xF0\x9F\x98y"), "x\xEF\xBF\xBDy");
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  const auto& t = tiny();
  EXPECT_EQ(t.encode("a\xFF"), t.encode("a\xEF\xBF\xBD"));
}

TEST(StreamDecoder, HoldsBackIncompleteUtf8) {
  const auto& t = tiny();
  StreamDecoder sd(t);
  // U+1F600 as four byte tokens.
  EXPECT_EQ(sd.push(byte_id(0xF0)), "");
  EXPECT_EQ(sd.push(byte_id(0x9F)), "");
  EXPECT_EQ(sd.push(byte_id(0x98)), "");
  EXPECT_EQ(sd.push(byte_id(0x80)), "\xF0\x9F\x98\x80");
  EXPECT_FALSE(sd.has_pending());
  // A byte that can never start a sequence is replaced at once; a lead byte followed by ASCII too.
  EXPECT_EQ(sd.push(byte_id(0xFF)), "\xEF\xBF\xBD");
  EXPECT_EQ(sd.push(byte_id(0xE2)), "");
  EXPECT_EQ(sd.push(byte_id('a')), "\xEF\xBF\xBD" "a");
  // An incomplete tail is one U+FFFD at flush.
  EXPECT_EQ(sd.push(byte_id(0xF0)), "");
  EXPECT_EQ(sd.push(byte_id(0x9F)), "");
  EXPECT_EQ(sd.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(sd.flush(), "");
}

TEST(StreamDecoder, ConcatenationEqualsDecodeForRandomIds) {
  const auto& t = tiny();
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> any(-5, 4100), bytes(8 + 0x80, 8 + 0xFF);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> ids;
    for (int k = 0; k < 40; ++k) ids.push_back(rng() % 3 == 0 ? bytes(rng) : any(rng));
    for (bool skip : {false, true}) {
      StreamDecoder sd(t, skip);
      std::string streamed;
      for (int32_t id : ids) {
        const std::string piece = sd.push(id);
        EXPECT_TRUE(utf8_valid(piece));
        streamed += piece;
      }
      streamed += sd.flush();
      EXPECT_EQ(streamed, t.decode(ids, skip));
    }
  }
}

TEST(StreamDecoder, EvalTextStreamsBackExactly) {
  const std::string text = read(std::string(GRIDQ_SOURCE_DIR) + "/data/code-eval.txt").substr(0, 200000);
  const auto ids = tiny().encode(text);
  StreamDecoder sd(tiny());
  std::string out;
  for (int32_t id : ids) out += sd.push(id);
  out += sd.flush();
  EXPECT_EQ(out, text);
}

TEST(Tokenizer, RefusesWhatItCannotDo) {
  const std::string base = read(kModel + "/tokenizer.json");
  auto j = nlohmann::json::parse(base);
  auto bad = j;
  bad["normalizer"] = {{"type", "NFC"}};
  auto r = Tokenizer::from_json_text(bad.dump(), "x.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("normalizer 'NFC' is not supported"), std::string::npos) << r.message();
  bad = j;
  bad["model"]["type"] = "WordPiece";
  EXPECT_FALSE(Tokenizer::from_json_text(bad.dump(), "x.json").ok());
  bad = j;
  bad["model"]["merges"].push_back({"nope1", "nope2"});
  EXPECT_FALSE(Tokenizer::from_json_text(bad.dump(), "x.json").ok());
  bad = j;
  bad["pre_tokenizer"] = {{"type", "Metaspace"}};
  EXPECT_FALSE(Tokenizer::from_json_text(bad.dump(), "x.json").ok());
  bad = j;
  bad["decoder"] = {{"type", "WordPiece"}};
  EXPECT_FALSE(Tokenizer::from_json_text(bad.dump(), "x.json").ok());
  EXPECT_FALSE(Tokenizer::from_json_text("{not json", "x.json").ok());
  EXPECT_FALSE(Tokenizer::from_file("/nonexistent/tokenizer.json").ok());
}

}  // namespace
}  // namespace gridq::text
