// Reasoning parser matrix of api.md §6 (as in vLLM's reasoning tests): each case non-streaming against a
// hand-derived expectation, and streaming (text split at every byte boundary and at random) equal to it.
#include <gtest/gtest.h>

#include <random>

#include "text/reasoning_parser.h"

namespace gridq::text {
namespace {

// Ids as in laguna-tiny-code (laguna.md §5); the parser must not care which numbers they are.
const ReasoningMarkers kM{2, 3, 4};
constexpr int32_t kUser = 100;  // any non-marker id

// Splits "a<think>b</think>c" into marker pieces and text pieces.
std::vector<ReasoningPiece> pieces_of(const std::string& s) {
  std::vector<ReasoningPiece> out;
  size_t i = 0;
  std::string text;
  while (i < s.size()) {
    if (s.compare(i, 7, "<think>") == 0) {
      if (!text.empty()) out.push_back({-1, std::move(text)});
      text.clear();
      out.push_back({kM.think_start, ""});
      i += 7;
    } else if (s.compare(i, 8, "</think>") == 0) {
      if (!text.empty()) out.push_back({-1, std::move(text)});
      text.clear();
      out.push_back({kM.think_end, ""});
      i += 8;
    } else {
      text += s[i++];
    }
  }
  if (!text.empty()) out.push_back({-1, text});
  return out;
}

// Re-splits every text piece into chunks chosen by `cut` and streams them.
ReasoningResult stream(const std::vector<ReasoningPiece>& pieces, ReasoningMode init,
                       const std::function<std::vector<std::string>(const std::string&)>& cut) {
  ReasoningParser p(kM, init);
  std::string r, c;
  for (const auto& piece : pieces) {
    if (piece.marker_id >= 0) {
      EXPECT_TRUE(p.is_marker(piece.marker_id));
      p.feed_marker(piece.marker_id);
      continue;
    }
    for (const auto& part : cut(piece.text)) {
      auto d = p.feed_text(part);
      EXPECT_EQ(d.reasoning.find("</think>"), std::string::npos);
      EXPECT_EQ(d.content.find("</think>"), std::string::npos);
      r += d.reasoning;
      c += d.content;
    }
  }
  ReasoningResult out;
  if (!r.empty()) out.reasoning = r;
  if (!c.empty()) out.content = c;
  return out;
}

struct Case {
  const char* label;
  std::vector<int32_t> prompt_tail;  // ids at the end of the rendered prompt
  std::string output;                // generated text with markers spelled as tags
  std::optional<std::string> reasoning;
  std::optional<std::string> content;
};

// Prompt ends: thinking on = "...<assistant><think>", off = "...<assistant></think>", raw = no assistant.
const std::vector<int32_t> kOn = {kUser, kM.assistant, kM.think_start};
const std::vector<int32_t> kOff = {kUser, kM.assistant, kM.think_end};
const std::vector<int32_t> kRaw = {kUser, kUser};
// History holds a closed think block in an earlier assistant turn, then a new turn with thinking on.
const std::vector<int32_t> kHistoryOn = {kM.assistant, kM.think_start, kUser,         kM.think_end,
                                         kUser,        kM.assistant,   kM.think_start};
const std::vector<int32_t> kHistoryOff = {kM.assistant, kM.think_start, kUser,       kM.think_end,
                                          kUser,        kM.assistant,   kM.think_end};
// Prefill continuation: the prompt ends inside an assistant message's content (continue_final_message).
const std::vector<int32_t> kPrefill = {kM.assistant, kM.think_end, kUser, kUser};
const std::vector<int32_t> kPrefillInThink = {kM.assistant, kM.think_start, kUser};

std::vector<Case> cases() {
  return {
      {"on: reasoning then content", kOn, "I think.</think>Answer", "I think.", "Answer"},
      {"on: only </think>", kOn, "</think>Answer", std::nullopt, "Answer"},
      {"on: <think> with no end (length)", kOn, "still thinking", "still thinking", std::nullopt},
      {"on: empty output", kOn, "", std::nullopt, std::nullopt},
      {"on: multi-line", kOn, "a\nb\n\nc</think>\nx\ny", "a\nb\n\nc", "\nx\ny"},
      {"on: leading newline", kOn, "\nreason</think>\n\nans", "\nreason", "\n\nans"},
      {"on: two blocks", kOn, "r1</think>c1<think>r2</think>c2", "r1r2", "c1c2"},
      {"on: stray </think> in content dropped", kOn, "r</think>c</think>d", "r", "cd"},
      {"on: model repeats <think> inside reasoning", kOn, "<think>r</think>c", "r", "c"},
      {"off: all content", kOff, "just the answer", std::nullopt, "just the answer"},
      {"off: model-emitted leading think block still reasoning", kOff, "<think>hmm</think>ans", "hmm", "ans"},
      {"off: stray </think> dropped", kOff, "a</think>b", std::nullopt, "ab"},
      {"off: empty", kOff, "", std::nullopt, std::nullopt},
      {"raw prompt: content", kRaw, "def f():", std::nullopt, "def f():"},
      {"raw prompt: first token <think> opens reasoning", kRaw, "<think>r</think>c", "r", "c"},
      {"</think> in prompt history, thinking on", kHistoryOn, "r</think>c", "r", "c"},
      {"</think> in prompt history, thinking off", kHistoryOff, "c", std::nullopt, "c"},
      {"prefill continuation in content", kPrefill, "more content", std::nullopt, "more content"},
      {"prefill continuation inside reasoning", kPrefillInThink, "more</think>done", "more", "done"},
      {"two blocks with thinking off", kOff, "a<think>r1</think>b<think>r2</think>c", "r1r2", "abc"},
      {"non-ASCII", kOn, "é東</think>ü", "é東", "ü"},
  };
}

TEST(ReasoningParser, InitialModeFromPrompt) {
  EXPECT_EQ(initial_reasoning_mode(kOn, kM), ReasoningMode::kReasoning);
  EXPECT_EQ(initial_reasoning_mode(kOff, kM), ReasoningMode::kContent);
  EXPECT_EQ(initial_reasoning_mode(kRaw, kM), ReasoningMode::kContent);
  EXPECT_EQ(initial_reasoning_mode({}, kM), ReasoningMode::kContent);
  EXPECT_EQ(initial_reasoning_mode(kHistoryOn, kM), ReasoningMode::kReasoning);
  EXPECT_EQ(initial_reasoning_mode(kHistoryOff, kM), ReasoningMode::kContent);
  EXPECT_EQ(initial_reasoning_mode(kPrefill, kM), ReasoningMode::kContent);
  EXPECT_EQ(initial_reasoning_mode(kPrefillInThink, kM), ReasoningMode::kReasoning);
  // A <think> before the last <assistant> does not count.
  std::vector<int32_t> old_think = {kM.think_start, kM.assistant, kUser};
  EXPECT_EQ(initial_reasoning_mode(old_think, kM), ReasoningMode::kContent);
  // Absent markers (-1) never match any id.
  ReasoningMarkers none;
  std::vector<int32_t> ids = {-1, 5};
  EXPECT_EQ(initial_reasoning_mode(ids, none), ReasoningMode::kContent);
}

TEST(ReasoningParser, MatrixNonStreaming) {
  for (const auto& c : cases()) {
    auto init = initial_reasoning_mode(c.prompt_tail, kM);
    auto pieces = pieces_of(c.output);
    auto r = parse_reasoning(pieces, kM, init);
    EXPECT_EQ(r.reasoning, c.reasoning) << c.label;
    EXPECT_EQ(r.content, c.content) << c.label;
  }
}

TEST(ReasoningParser, MatrixStreamingSplitInvariant) {
  std::mt19937 rng(99);
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.label);
    auto init = initial_reasoning_mode(c.prompt_tail, kM);
    auto pieces = pieces_of(c.output);
    auto ns = parse_reasoning(pieces, kM, init);
    auto bytes = [](const std::string& s) {
      std::vector<std::string> v;
      for (char ch : s) v.emplace_back(1, ch);
      return v;
    };
    auto got = stream(pieces, init, bytes);
    EXPECT_EQ(got.reasoning, ns.reasoning);
    EXPECT_EQ(got.content, ns.content);
    for (size_t cut = 0; cut <= c.output.size(); ++cut) {
      auto two = [cut](const std::string& s) {
        size_t k = std::min(cut, s.size());
        return std::vector<std::string>{s.substr(0, k), s.substr(k)};
      };
      auto g = stream(pieces, init, two);
      EXPECT_EQ(g.reasoning, ns.reasoning);
      EXPECT_EQ(g.content, ns.content);
    }
    for (int t = 0; t < 100; ++t) {
      auto rnd = [&](const std::string& s) {
        std::vector<std::string> v;
        size_t i = 0;
        while (i < s.size()) {
          size_t n = std::uniform_int_distribution<size_t>(1, 5)(rng);
          v.push_back(s.substr(i, n));
          i += n;
        }
        return v;
      };
      auto g = stream(pieces, init, rnd);
      EXPECT_EQ(g.reasoning, ns.reasoning);
      EXPECT_EQ(g.content, ns.content);
    }
  }
}

}  // namespace
}  // namespace gridq::text
