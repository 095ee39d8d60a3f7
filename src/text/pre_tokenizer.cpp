#include "text/pre_tokenizer.h"

#include <algorithm>

#include "text/byte_level.h"

namespace gridq::text {
namespace {

using json = nlohmann::json;

// GPT-2's pattern, which HF's ByteLevel pre-tokenizer applies when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

Expected<std::shared_ptr<const Regex>> gpt2_regex() {
  static const auto re = Regex::compile(kGpt2Pattern);
  return re;
}

bool get_bool(const json& j, const char* key, bool dflt) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : dflt;
}

}  // namespace

Status split_by_regex(const Regex& re, SplitBehavior behavior, bool invert, const std::string& s,
                      std::vector<std::string>& out) {
  if (s.empty()) return {};
  std::vector<std::pair<size_t, size_t>> ms;
  GRIDQ_RETURN_IF_ERROR(re.find_all(s, ms));
  struct Part {
    size_t b, e;
    bool match;
  };
  std::vector<Part> parts;
  size_t prev = 0;
  for (auto [b, e] : ms) {
    if (prev != b) parts.push_back({prev, b, false});
    parts.push_back({b, e, true});
    prev = e;
  }
  if (prev != s.size()) parts.push_back({prev, s.size(), false});
  if (invert)
    for (auto& p : parts) p.match = !p.match;

  std::vector<Part> res;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      res = parts;
      break;
    case SplitBehavior::kRemoved:
      for (auto& p : parts)
        if (!p.match) res.push_back(p);
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (auto& p : parts) {
        if (p.match && !prev_match && !res.empty()) {
          res.back().e = p.e;
        } else {
          res.push_back(p);
        }
        prev_match = p.match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev_match = false;
      for (size_t k = parts.size(); k-- > 0;) {
        const auto& p = parts[k];
        if (p.match && !prev_match && !res.empty()) {
          res.back().b = p.b;
        } else {
          res.push_back(p);
        }
        prev_match = p.match;
      }
      std::reverse(res.begin(), res.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool prev_match = false;
      for (auto& p : parts) {
        if (p.match == prev_match && !res.empty()) {
          res.back().e = p.e;
        } else {
          res.push_back(p);
        }
        prev_match = p.match;
      }
      break;
    }
  }
  for (auto& p : res)
    if (p.e > p.b) out.emplace_back(s.substr(p.b, p.e - p.b));
  return {};
}

Status PreTokenizer::add(const json& j, std::vector<PreTokenizerStep>& steps) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    return err("tokenizer.json: pre_tokenizer entry has no \"type\"");
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      return err("tokenizer.json: Sequence pre_tokenizer has no \"pretokenizers\" list");
    for (const auto& sub : j["pretokenizers"]) GRIDQ_RETURN_IF_ERROR(add(sub, steps));
    return {};
  }
  PreTokenizerStep st;
  if (type == "ByteLevel") {
    st.kind = PreTokenizerStep::Kind::kByteLevel;
    st.add_prefix_space = get_bool(j, "add_prefix_space", true);
    if (get_bool(j, "use_regex", true)) {
      auto re = gpt2_regex();
      if (!re) return re.error();
      st.regex = *re;
    }
    steps.push_back(std::move(st));
    return {};
  }
  if (type == "Split" || type == "Digits") {
    std::string behavior = "Isolated";
    if (type == "Split") {
      const auto& pat = j.value("pattern", json());
      Expected<std::shared_ptr<const Regex>> re = err("unset");
      if (pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string()) {
        re = Regex::compile(pat["Regex"].get<std::string>());
      } else if (pat.is_object() && pat.contains("String") && pat["String"].is_string()) {
        re = Regex::compile(pat["String"].get<std::string>(), /*literal=*/true);
      } else {
        return err("tokenizer.json: Split pre_tokenizer needs pattern {{\"Regex\": ...}} or {{\"String\": ...}}");
      }
      if (!re) return re.error();
      st.regex = *re;
      behavior = j.value("behavior", std::string("Isolated"));
      st.invert = get_bool(j, "invert", false);
    } else {
      auto re = Regex::compile(get_bool(j, "individual_digits", false) ? "\\p{N}" : "\\p{N}+");
      if (!re) return re.error();
      st.regex = *re;
      behavior = get_bool(j, "individual_digits", false) ? "Isolated" : "Contiguous";
    }
    if (behavior == "Removed") st.behavior = SplitBehavior::kRemoved;
    else if (behavior == "Isolated") st.behavior = SplitBehavior::kIsolated;
    else if (behavior == "MergedWithPrevious") st.behavior = SplitBehavior::kMergedWithPrevious;
    else if (behavior == "MergedWithNext") st.behavior = SplitBehavior::kMergedWithNext;
    else if (behavior == "Contiguous") st.behavior = SplitBehavior::kContiguous;
    else return err("tokenizer.json: Split pre_tokenizer behavior '{}' is not one of Removed, Isolated, "
                    "MergedWithPrevious, MergedWithNext, Contiguous", behavior);
    steps.push_back(std::move(st));
    return {};
  }
  return err("tokenizer.json: pre_tokenizer type '{}' is not supported (supported: ByteLevel, Split, Digits, "
             "Sequence)", type);
}

Expected<PreTokenizer> PreTokenizer::from_json(const json& j) {
  PreTokenizer p;
  if (!j.is_null()) GRIDQ_RETURN_IF_ERROR(add(j, p.steps_));
  return p;
}

Status PreTokenizer::run(const std::string& segment, std::vector<std::string>& out) const {
  std::vector<std::string> cur{segment}, next;
  for (const auto& st : steps_) {
    next.clear();
    for (auto& piece : cur) {
      if (st.kind == PreTokenizerStep::Kind::kByteLevel) {
        std::string s = std::move(piece);
        if (st.add_prefix_space && (s.empty() || s[0] != ' ')) s.insert(s.begin(), ' ');
        std::vector<std::string> parts;
        if (st.regex) {
          GRIDQ_RETURN_IF_ERROR(split_by_regex(*st.regex, SplitBehavior::kIsolated, false, s, parts));
        } else if (!s.empty()) {
          parts.push_back(std::move(s));
        }
        for (auto& p : parts) {
          std::string mapped;
          byte_level_encode(p, mapped);
          next.push_back(std::move(mapped));
        }
      } else {
        GRIDQ_RETURN_IF_ERROR(split_by_regex(*st.regex, st.behavior, st.invert, piece, next));
      }
    }
    cur.swap(next);
  }
  for (auto& p : cur)
    if (!p.empty()) out.push_back(std::move(p));
  return {};
}

}  // namespace gridq::text
