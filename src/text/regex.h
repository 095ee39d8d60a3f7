// PCRE2 wrapper for HF tokenizer regexes (which HF runs with Oniguruma). Patterns are compiled with UTF and
// UCP; `\s`/`\S` are rewritten to the Unicode White_Space property because PCRE2's UCP `\s` also matches
// U+180E, which Oniguruma's does not.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace gridq::text {

class Regex {
 public:
  // `literal` escapes the pattern (HF Split's {"String": ...} form).
  static Expected<std::shared_ptr<const Regex>> compile(std::string_view pattern, bool literal = false);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the byte ranges [start, end) of all non-overlapping matches in `s` (valid UTF-8), left to right.
  // An empty match is reported and the search resumes one code point later, as Oniguruma's find_iter does.
  Status find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code*
};

}  // namespace gridq::text
