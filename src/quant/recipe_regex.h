// Anchored full-match regexes for recipe rules (quantizer.md §1). A rule's `match` must match the *whole*
// source tensor name, never a substring or a prefix: gridbook shipped a bug where an unanchored router name
// (`…mlp.gate`) also claimed `…mlp.gate_proj` (format.md §13). PCRE2 compiles the pattern with
// PCRE2_ANCHORED | PCRE2_ENDANCHORED, so a match must start at the first byte and end at the last, with
// backtracking into alternatives (`a|ab` matches "ab"), like Python's re.fullmatch.
//
// Refused at compile time, naming the pattern: anything PCRE2 cannot compile, an empty pattern, and explicit
// anchors or match-start tricks (`^`, `$`, `\A`, `\z`, `\Z`, `\G`, `\K`, `\Q…\E`, backtracking verbs
// `(*…)`): the rule is anchored already, and these either say nothing or suggest search semantics the
// writer did not get.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace gridq::quant {

class NameRegex {
 public:
  static Expected<std::shared_ptr<const NameRegex>> compile(std::string_view pattern);
  ~NameRegex();
  NameRegex(const NameRegex&) = delete;
  NameRegex& operator=(const NameRegex&) = delete;

  // True when the pattern matches all of `name`. Fails only if PCRE2 reports a match error (e.g. its
  // backtracking limit), which the caller must treat as an error, not as "no match".
  Expected<bool> full_match(std::string_view name) const;

  const std::string& pattern() const { return pattern_; }

 private:
  NameRegex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code*
};

}  // namespace gridq::quant
