#include "text/jinja/lexer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "text/utf8.h"

namespace gridq::text::jinja {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string normalize_newlines(std::string_view s, bool keep_trailing) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out += s[i];
    }
  }
  if (!keep_trailing && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Python "unicode-escape" decoding of a string literal's body, as Jinja2's lexer does.
std::string unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 >= s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    auto hex = [&](size_t n) -> long {
      if (i + n >= s.size()) return -1;
      std::string h(s.substr(i + 1, n));
      for (char x : h)
        if (!std::isxdigit(static_cast<unsigned char>(x))) return -1;
      i += n;
      return std::strtol(h.c_str(), nullptr, 16);
    };
    switch (c) {
      case '\n':
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
      case 'u':
      case 'U': {
        const long v = hex(c == 'x' ? 2 : c == 'u' ? 4 : 8);
        if (v < 0 || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
          out += '\\';
          out += c;
        } else {
          append_utf8(out, static_cast<char32_t>(v));
        }
        break;
      }
      default:
        if (c >= '0' && c <= '7') {
          int v = c - '0';
          for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k) v = v * 8 + (s[++i] - '0');
          append_utf8(out, static_cast<char32_t>(v));
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string src, const LexOptions& o, const std::string& name) : s_(std::move(src)), o_(o), name_(name) {}

  Expected<std::vector<Token>> run() {
    bool line_starting = true;
    while (pos_ < s_.size()) {
      // Find the next tag start.
      size_t t = pos_;
      int kind = 0;  // 1 var, 2 block, 3 comment
      while (true) {
        t = s_.find('{', t);
        if (t == std::string::npos || t + 1 >= s_.size()) {
          t = std::string::npos;
          break;
        }
        const char n = s_[t + 1];
        if (n == '{') kind = 1;
        else if (n == '%') kind = 2;
        else if (n == '#') kind = 3;
        if (kind) break;
        ++t;
      }
      if (t == std::string::npos) {
        emit_data(s_.substr(pos_));
        break;
      }
      std::string text = s_.substr(pos_, t - pos_);
      size_t p = t + 2;
      char sign = 0;
      if (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) sign = s_[p++];
      if (sign == '-') {
        size_t e = text.size();
        while (e > 0 && is_ws(text[e - 1])) --e;
        text.resize(e);
      } else if (sign != '+' && o_.lstrip_blocks && kind != 1) {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if (l_pos > 0 || line_starting) {
          bool all_ws = l_pos < text.size();
          for (size_t k = l_pos; k < text.size(); ++k)
            if (!is_ws(text[k])) all_ws = false;
          if (all_ws) text.resize(l_pos);
        }
      }
      for (char c : text)
        if (c == '\n') ++data_newlines_;
      emit_data(text);
      line_ += data_newlines_;
      data_newlines_ = 0;
      count_lines(pos_ + text.size(), t);  // stripped whitespace still counts lines
      pos_ = p;
      if (kind == 3) {
        GRIDQ_RETURN_IF_ERROR(comment());
      } else if (kind == 2 && is_raw()) {
        GRIDQ_RETURN_IF_ERROR(raw());
      } else {
        toks_.push_back({kind == 1 ? Token::Type::kVarBegin : Token::Type::kBlockBegin, "", 0, 0, line_});
        GRIDQ_RETURN_IF_ERROR(tag(kind == 1));
      }
      line_starting = pos_ > 0 && s_[pos_ - 1] == '\n';
    }
    toks_.push_back({Token::Type::kEof, "", 0, 0, line_});
    return std::move(toks_);
  }

 private:
  void count_lines(size_t a, size_t b) {
    for (size_t k = a; k < b && k < s_.size(); ++k)
      if (s_[k] == '\n') ++line_;
  }
  void emit_data(const std::string& d) {
    if (!d.empty()) toks_.push_back({Token::Type::kData, d, 0, 0, line_});
  }
  Error fail(const std::string& m) const { return err("{}:{}: syntax error: {}", name_, line_, m); }

  // After the closing delimiter: '-' strips following whitespace, trim_blocks drops one newline.
  void after_end(bool minus, bool plus, bool is_block) {
    if (minus) {
      const size_t a = pos_;
      while (pos_ < s_.size() && is_ws(s_[pos_])) ++pos_;
      count_lines(a, pos_);
    } else if (!plus && is_block && o_.trim_blocks && pos_ < s_.size() && s_[pos_] == '\n') {
      ++pos_;
      ++line_;
    }
  }

  Status comment() {
    size_t e = s_.find("#}", pos_);
    if (e == std::string::npos) return fail("missing end of comment tag");
    const bool minus = e > pos_ && s_[e - 1] == '-';
    const bool plus = e > pos_ && s_[e - 1] == '+';
    count_lines(pos_, e + 2);
    pos_ = e + 2;
    after_end(minus, plus, true);
    return {};
  }

  bool is_raw() const {
    size_t p = pos_;
    while (p < s_.size() && is_ws(s_[p])) ++p;
    if (s_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    size_t q = p;
    while (q < s_.size() && is_ws(s_[q])) ++q;
    return q < s_.size() && (s_.compare(q, 2, "%}") == 0 || s_.compare(q, 3, "-%}") == 0);
  }

  Status raw() {
    size_t p = s_.find("%}", pos_);
    const bool minus = s_[p - 1] == '-';
    count_lines(pos_, p + 2);
    pos_ = p + 2;
    after_end(minus, false, true);
    // Find {% endraw %} (with optional -/+).
    size_t search = pos_;
    while (true) {
      size_t b = s_.find("{%", search);
      if (b == std::string::npos) return fail("missing end of raw directive");
      size_t q = b + 2;
      char sign = 0;
      if (q < s_.size() && (s_[q] == '-' || s_[q] == '+')) sign = s_[q++];
      while (q < s_.size() && is_ws(s_[q])) ++q;
      if (s_.compare(q, 6, "endraw") != 0) {
        search = b + 2;
        continue;
      }
      q += 6;
      while (q < s_.size() && is_ws(s_[q])) ++q;
      bool emin = false, eplus = false;
      if (s_.compare(q, 1, "-") == 0) emin = true, ++q;
      else if (s_.compare(q, 1, "+") == 0) eplus = true, ++q;
      if (s_.compare(q, 2, "%}") != 0) {
        search = b + 2;
        continue;
      }
      std::string text = s_.substr(pos_, b - pos_);
      if (sign == '-') {
        size_t e = text.size();
        while (e > 0 && is_ws(text[e - 1])) --e;
        text.resize(e);
      } else if (sign != '+' && o_.lstrip_blocks) {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        bool all_ws = l_pos < text.size() && l_pos > 0;
        for (size_t k = l_pos; k < text.size(); ++k)
          if (!is_ws(text[k])) all_ws = false;
        if (all_ws) text.resize(l_pos);
      }
      emit_data(text);
      count_lines(pos_, q + 2);
      pos_ = q + 2;
      after_end(emin, eplus, true);
      return {};
    }
  }

  Status tag(bool var) {
    int depth = 0;
    while (true) {
      while (pos_ < s_.size() && is_ws(s_[pos_])) {
        if (s_[pos_] == '\n') ++line_;
        ++pos_;
      }
      if (pos_ >= s_.size()) return fail(var ? "missing '}}'" : "missing '%}'");
      if (depth == 0) {
        const char* end = var ? "}}" : "%}";
        if (s_.compare(pos_, 2, end) == 0) {
          pos_ += 2;
          toks_.push_back({var ? Token::Type::kVarEnd : Token::Type::kBlockEnd, "", 0, 0, line_});
          after_end(false, false, !var);
          return {};
        }
        if ((s_[pos_] == '-' || (!var && s_[pos_] == '+')) && s_.compare(pos_ + 1, 2, end) == 0) {
          const bool minus = s_[pos_] == '-';
          pos_ += 3;
          toks_.push_back({var ? Token::Type::kVarEnd : Token::Type::kBlockEnd, "", 0, 0, line_});
          after_end(minus, !minus, !var);
          return {};
        }
      }
      const char c = s_[pos_];
      if (c == '\'' || c == '"') {
        size_t k = pos_ + 1;
        while (k < s_.size() && s_[k] != c) {
          if (s_[k] == '\\') ++k;
          ++k;
        }
        if (k >= s_.size()) return fail("unterminated string literal");
        std::string body = s_.substr(pos_ + 1, k - pos_ - 1);
        toks_.push_back({Token::Type::kString, unescape(body), 0, 0, line_});
        count_lines(pos_, k);
        pos_ = k + 1;
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t k = pos_;
        std::string digits;
        auto take_digits = [&] {
          while (k < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[k])) || s_[k] == '_')) {
            if (s_[k] != '_') digits += s_[k];
            ++k;
          }
        };
        take_digits();
        bool is_float = false;
        if (k + 1 < s_.size() && s_[k] == '.' && std::isdigit(static_cast<unsigned char>(s_[k + 1]))) {
          is_float = true;
          digits += '.';
          ++k;
          take_digits();
        }
        if (k < s_.size() && (s_[k] == 'e' || s_[k] == 'E')) {
          size_t m = k + 1;
          if (m < s_.size() && (s_[m] == '+' || s_[m] == '-')) ++m;
          if (m < s_.size() && std::isdigit(static_cast<unsigned char>(s_[m]))) {
            is_float = true;
            digits += 'e';
            digits += s_.substr(k + 1, m - k - 1);
            k = m;
            take_digits();
          }
        }
        Token tk{is_float ? Token::Type::kFloat : Token::Type::kInt, digits, 0, 0, line_};
        if (is_float) {
          tk.f = std::strtod(digits.c_str(), nullptr);
        } else {
          errno = 0;
          tk.i = std::strtoll(digits.c_str(), nullptr, 10);
          if (errno == ERANGE) return fail("integer literal " + digits + " is out of range");
        }
        toks_.push_back(tk);
        pos_ = k;
        continue;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_' || static_cast<unsigned char>(c) >= 0x80) {
        size_t k = pos_;
        while (k < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[k])) || s_[k] == '_' ||
                                 static_cast<unsigned char>(s_[k]) >= 0x80))
          ++k;
        toks_.push_back({Token::Type::kName, s_.substr(pos_, k - pos_), 0, 0, line_});
        pos_ = k;
        continue;
      }
      static const char* ops[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
                                  "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
      bool found = false;
      for (const char* op : ops) {
        const size_t n = std::char_traits<char>::length(op);
        if (s_.compare(pos_, n, op) == 0) {
          const std::string o(op);
          if (o == "(" || o == "[" || o == "{") ++depth;
          if (o == ")" || o == "]" || o == "}") {
            if (depth == 0) return fail("unexpected '" + o + "'");
            --depth;
          }
          toks_.push_back({Token::Type::kOp, o, 0, 0, line_});
          pos_ += n;
          found = true;
          break;
        }
      }
      if (!found) return fail(std::string("unexpected character '") + c + "'");
    }
  }

  std::string s_;
  LexOptions o_;
  std::string name_;
  size_t pos_ = 0;
  int line_ = 1;
  int data_newlines_ = 0;
  std::vector<Token> toks_;
};

}  // namespace

Expected<std::vector<Token>> lex(std::string_view source, const LexOptions& opts, const std::string& name) {
  Lexer lx(normalize_newlines(source, opts.keep_trailing_newline), opts, name);
  return lx.run();
}

}  // namespace gridq::text::jinja
