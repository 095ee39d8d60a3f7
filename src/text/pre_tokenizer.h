// HF pre-tokenizers that byte-level BPE models use: ByteLevel, Split, Digits and Sequence of them. A
// pre-tokenizer turns one text segment into pieces; BPE then runs on each piece on its own.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "text/regex.h"

namespace gridq::text {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  enum class Kind { kByteLevel, kSplit };
  Kind kind = Kind::kSplit;
  bool add_prefix_space = false;  // ByteLevel
  std::shared_ptr<const Regex> regex;  // Split; ByteLevel with use_regex (the GPT-2 pattern)
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
};

class PreTokenizer {
 public:
  // `j` is tokenizer.json's "pre_tokenizer" (null means: the whole segment is one piece).
  static Expected<PreTokenizer> from_json(const nlohmann::json& j);

  // Splits `segment` (valid UTF-8) into pieces, appended to `out`.
  Status run(const std::string& segment, std::vector<std::string>& out) const;

  bool empty() const { return steps_.empty(); }

 private:
  static Status add(const nlohmann::json& j, std::vector<PreTokenizerStep>& steps);
  std::vector<PreTokenizerStep> steps_;
};

// Splits `s` at the matches of `re` by HF's NormalizedString::split rules; empty pieces are dropped.
Status split_by_regex(const Regex& re, SplitBehavior behavior, bool invert, const std::string& s,
                      std::vector<std::string>& out);

}  // namespace gridq::text
