#include "grammar/gbnf.h"

#include <map>

#include "grammar/codepoints.h"

namespace gridq::grammar {
namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class GbnfParser {
 public:
  GbnfParser(Builder& b, std::string_view t, size_t max_depth) : b_(b), t_(t), max_depth_(max_depth) {}

  Expected<Sym> parse() {
    skip_space();
    while (i_ < t_.size()) {
      std::string name = read_name();
      if (name.empty()) return err("gbnf: expected a rule name at {}", where());
      skip_space();
      if (t_.substr(i_, 3) != "::=") return err("gbnf: expected '::=' after '{}' at {}", name, where());
      i_ += 3;
      uint32_t r = rule_id(name);
      if (defined_.count(name)) return err("gbnf: rule '{}' defined twice", name);
      defined_[name] = true;
      GRIDQ_ASSIGN_OR_RETURN(std::vector<Seq> alts, parse_alternates(0));
      b_.define(r, std::move(alts));
      GRIDQ_RETURN_IF_ERROR(b_.check_limits());
      skip_space();
    }
    for (const auto& [name, id] : ids_)
      if (!defined_.count(name)) return err("gbnf: rule '{}' is used but never defined", name);
    if (!defined_.count("root")) return err("gbnf: no 'root' rule");
    return Sym::rule(ids_["root"]);
  }

 private:
  std::string where() const {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < i_ && k < t_.size(); ++k) {
      if (t_[k] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return "line " + std::to_string(line) + " col " + std::to_string(col);
  }
  void skip_space() {
    while (i_ < t_.size()) {
      char c = t_[i_];
      if (c == '#') {
        while (i_ < t_.size() && t_[i_] != '\n') ++i_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++i_;
      } else {
        break;
      }
    }
  }
  std::string read_name() {
    size_t s = i_;
    while (i_ < t_.size() && is_name_char(t_[i_])) ++i_;
    return std::string(t_.substr(s, i_ - s));
  }
  uint32_t rule_id(const std::string& name) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    uint32_t r = b_.declare(name);
    ids_[name] = r;
    return r;
  }
  // The next token is `name ::=`: the current rule ended.
  bool at_rule_start() const {
    size_t j = i_;
    while (j < t_.size() && is_name_char(t_[j])) ++j;
    if (j == i_) return false;
    while (j < t_.size() && (t_[j] == ' ' || t_[j] == '\t' || t_[j] == '\n' || t_[j] == '\r')) ++j;
    return t_.substr(j, 3) == "::=";
  }

  Expected<std::vector<Seq>> parse_alternates(size_t depth) {
    if (depth > max_depth_) return err("gbnf: nesting deeper than {} (limit)", max_depth_);
    std::vector<Seq> alts;
    while (true) {
      GRIDQ_ASSIGN_OR_RETURN(Seq s, parse_sequence(depth));
      alts.push_back(std::move(s));
      skip_space();
      if (i_ < t_.size() && t_[i_] == '|') {
        ++i_;
        continue;
      }
      break;
    }
    return alts;
  }

  Expected<Seq> parse_sequence(size_t depth) {
    Seq out;
    while (true) {
      skip_space();
      if (i_ >= t_.size()) break;
      char c = t_[i_];
      if (c == '|' || c == ')') break;
      if (depth == 0 && at_rule_start()) break;
      GRIDQ_ASSIGN_OR_RETURN(Seq term, parse_term(depth));
      GRIDQ_ASSIGN_OR_RETURN(Seq q, parse_postfix(std::move(term)));
      out = out + q;
    }
    return out;
  }

  Expected<Seq> parse_postfix(Seq term) {
    while (i_ < t_.size()) {
      char c = t_[i_];
      uint32_t mn, mx;
      if (c == '*') {
        mn = 0, mx = kUnbounded;
        ++i_;
      } else if (c == '+') {
        mn = 1, mx = kUnbounded;
        ++i_;
      } else if (c == '?') {
        mn = 0, mx = 1;
        ++i_;
      } else if (c == '{') {
        ++i_;
        auto num = [&](uint32_t& v) -> bool {
          skip_space();
          size_t s = i_;
          uint64_t x = 0;
          while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9' && x < 100000000)
            x = x * 10 + (t_[i_++] - '0');
          v = static_cast<uint32_t>(x);
          skip_space();
          return i_ > s;
        };
        if (!num(mn)) return err("gbnf: expected a number after '{{' at {}", where());
        mx = mn;
        if (i_ < t_.size() && t_[i_] == ',') {
          ++i_;
          skip_space();
          if (i_ < t_.size() && t_[i_] == '}')
            mx = kUnbounded;
          else if (!num(mx))
            return err("gbnf: expected a number after ',' at {}", where());
        }
        if (i_ >= t_.size() || t_[i_] != '}') return err("gbnf: expected '}}' at {}", where());
        ++i_;
        if (mx != kUnbounded && mn > mx) return err("gbnf: repetition {{{},{}}} has min > max", mn, mx);
        if (mn > 100000 || (mx != kUnbounded && mx > 100000))
          return err("gbnf: repetition bound over 100000");
      } else {
        break;
      }
      term = Seq{b_.rep(std::move(term), mn, mx)};
    }
    return term;
  }

  Expected<uint32_t> escape() {
    // after the backslash
    if (i_ >= t_.size()) return err("gbnf: trailing backslash");
    char c = t_[i_++];
    auto hex = [&](size_t n) -> Expected<uint32_t> {
      uint32_t v = 0;
      for (size_t k = 0; k < n; ++k) {
        if (i_ >= t_.size()) return err("gbnf: truncated escape at {}", where());
        char h = t_[i_++];
        int d = h >= '0' && h <= '9'   ? h - '0'
                : h >= 'a' && h <= 'f' ? h - 'a' + 10
                : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                       : -1;
        if (d < 0) return err("gbnf: bad hex digit at {}", where());
        v = v * 16 + d;
      }
      return v;
    };
    switch (c) {
      case 'n':
        return uint32_t{'\n'};
      case 't':
        return uint32_t{'\t'};
      case 'r':
        return uint32_t{'\r'};
      case 'x':
        return hex(2);
      case 'u':
        return hex(4);
      case 'U':
        return hex(8);
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-':
      case '^':
        return uint32_t(static_cast<unsigned char>(c));
      default:
        return err("gbnf: unknown escape '\\{}' at {}", c, where());
    }
  }

  Expected<uint32_t> char_at() {
    if (t_[i_] == '\\') {
      ++i_;
      return escape();
    }
    uint32_t cp;
    if (!decode_utf8(t_, i_, cp)) return err("gbnf: invalid UTF-8 at {}", where());
    return cp;
  }

  Expected<Seq> parse_term(size_t depth) {
    char c = t_[i_];
    if (c == '"') {
      ++i_;
      std::string bytes;
      while (true) {
        if (i_ >= t_.size()) return err("gbnf: unterminated string literal");
        if (t_[i_] == '"') {
          ++i_;
          break;
        }
        GRIDQ_ASSIGN_OR_RETURN(uint32_t cp, char_at());
        append_utf8(bytes, cp);
      }
      return b_.lit(bytes);
    }
    if (c == '[') {
      ++i_;
      bool neg = i_ < t_.size() && t_[i_] == '^';
      if (neg) ++i_;
      CodepointSet s;
      while (true) {
        if (i_ >= t_.size()) return err("gbnf: unterminated character class");
        if (t_[i_] == ']') {
          ++i_;
          break;
        }
        GRIDQ_ASSIGN_OR_RETURN(uint32_t lo, char_at());
        uint32_t hi = lo;
        if (i_ + 1 < t_.size() && t_[i_] == '-' && t_[i_ + 1] != ']') {
          ++i_;
          GRIDQ_ASSIGN_OR_RETURN(hi, char_at());
        }
        if (hi < lo) return err("gbnf: class range out of order at {}", where());
        s.add(lo, hi);
      }
      return Seq{lower_utf8(b_, neg ? s.complement() : s)};
    }
    if (c == '.') {
      ++i_;
      return Seq{lower_utf8(b_, CodepointSet::all())};
    }
    if (c == '(') {
      ++i_;
      GRIDQ_ASSIGN_OR_RETURN(std::vector<Seq> alts, parse_alternates(depth + 1));
      skip_space();
      if (i_ >= t_.size() || t_[i_] != ')') return err("gbnf: expected ')' at {}", where());
      ++i_;
      return Seq{b_.alt(std::move(alts))};
    }
    if (c == '<') return err("gbnf: token references (<...>) at {} are not supported", where());
    if (c == '!') return err("gbnf: negation '!' at {} is not supported", where());
    if (is_name_char(c)) {
      std::string name = read_name();
      return Seq{Sym::rule(rule_id(name))};
    }
    return err("gbnf: unexpected '{}' at {}", c, where());
  }

  Builder& b_;
  std::string_view t_;
  size_t i_ = 0;
  size_t max_depth_;
  std::map<std::string, uint32_t> ids_;
  std::map<std::string, bool> defined_;
};

}  // namespace

Expected<Sym> compile_gbnf(Builder& b, std::string_view text, size_t max_depth) {
  GbnfParser p(b, text, max_depth);
  return p.parse();
}

}  // namespace gridq::grammar
