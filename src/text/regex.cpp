#include "text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace gridq::text {
namespace {

// Rewrites \s and \S (outside and inside character classes) to the White_Space property.
std::string rewrite_whitespace(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 32);
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 's') {
        out += "\\p{White_Space}";
      } else if (n == 'S') {
        out += "\\P{White_Space}";
      } else {
        out += p[i];
        out += n;
      }
      ++i;
    } else {
      out += p[i];
    }
  }
  return out;
}

std::string escape_literal(std::string_view p) {
  std::string out;
  for (char c : p) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

Regex::~Regex() {
  if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

Expected<std::shared_ptr<const Regex>> Regex::compile(std::string_view pattern, bool literal) {
  std::shared_ptr<Regex> re(new Regex());
  re->pattern_ = std::string(pattern);
  const std::string p = literal ? escape_literal(pattern) : rewrite_whitespace(pattern);
  int errcode = 0;
  PCRE2_SIZE erroff = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                                   PCRE2_UTF | PCRE2_UCP, &errcode, &erroff, nullptr);
  if (!code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(errcode, buf, sizeof(buf));
    return err("tokenizer regex '{}': PCRE2 cannot compile it at offset {}: {}", pattern, erroff,
               reinterpret_cast<const char*>(buf));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
  re->code_ = code;
  return std::shared_ptr<const Regex>(std::move(re));
}

Status Regex::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  pcre2_match_context* mctx = pcre2_match_context_create(nullptr);
  // Long whitespace or symbol runs backtrack deeply; give the JIT a stack that grows to 8 MiB.
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  if (stack) pcre2_jit_stack_assign(mctx, nullptr, stack);
  Status st;
  size_t pos = 0;
  const auto* subj = reinterpret_cast<PCRE2_SPTR>(s.data());
  while (pos <= s.size()) {
    const int rc = pcre2_match(code, subj, s.size(), pos, PCRE2_NO_UTF_CHECK, md, mctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(rc, buf, sizeof(buf));
      st = err("tokenizer regex '{}': match failed: {}", pattern_, reinterpret_cast<const char*>(buf));
      break;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    out.emplace_back(b, e);
    if (e > b) {
      pos = e;
    } else {
      if (e >= s.size()) break;
      pos = e + 1;
      while (pos < s.size() && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
  if (stack) pcre2_jit_stack_free(stack);
  pcre2_match_context_free(mctx);
  pcre2_match_data_free(md);
  return st;
}

}  // namespace gridq::text
