#include "quant/recipe_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace gridq::quant {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

// Finds the constructs the header lists as refused. Walks the pattern once, skipping escaped characters
// and the insides of character classes (where `^` and `$` are ordinary).
Status check_constructs(std::string_view p) {
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 >= p.size()) return Status();  // PCRE2 reports the dangling escape
      const char n = p[++i];
      if (!in_class && std::string_view("AzZGKQE").find(n) != std::string_view::npos) {
        return err("'\\{}' at offset {} is refused: the rule is an anchored full match already", n, i - 1);
      }
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
      continue;
    }
    if (c == '[') {
      in_class = true;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') ++i;
      if (i + 1 < p.size() && p[i + 1] == ']') ++i;
      continue;
    }
    if (c == '^' || c == '$') {
      return err("'{}' at offset {} is refused: the rule is an anchored full match already; drop the anchor",
                 c, i);
    }
    if (c == '(' && i + 1 < p.size() && p[i + 1] == '*') {
      return err(
          "'(*' at offset {} is refused: backtracking verbs and start-of-pattern options are not allowed", i);
    }
  }
  return Status();
}

}  // namespace

NameRegex::~NameRegex() {
  if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

Expected<std::shared_ptr<const NameRegex>> NameRegex::compile(std::string_view pattern) {
  if (pattern.empty()) return err("empty pattern");
  GRIDQ_RETURN_IF_ERROR(check_constructs(pattern));
  int errcode = 0;
  PCRE2_SIZE erroff = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_ANCHORED | PCRE2_ENDANCHORED, &errcode, &erroff, nullptr);
  if (!code) {
    return err("PCRE2 cannot compile it at offset {}: {}", static_cast<size_t>(erroff),
               pcre2_message(errcode));
  }
  std::shared_ptr<NameRegex> re(new NameRegex());
  re->pattern_ = std::string(pattern);
  re->code_ = code;
  return std::shared_ptr<const NameRegex>(std::move(re));
}

Expected<bool> NameRegex::full_match(std::string_view name) const {
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  if (!md) return err("regex '{}': out of memory", pattern_);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(name.data()), name.size(), 0, 0, md, nullptr);
  pcre2_match_data_free(md);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) return err("regex '{}' on '{}': match failed: {}", pattern_, name, pcre2_message(rc));
  return true;
}

}  // namespace gridq::quant
