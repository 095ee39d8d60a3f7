#include "grammar/regex.h"

#include <memory>

#include "grammar/codepoints.h"

namespace gridq::grammar {
namespace {

struct Node {
  enum Kind { kSet, kSeq, kAlt, kRep };
  Node() = default;
  explicit Node(Kind k) : kind(k) {}
  Kind kind = kSeq;
  CodepointSet set;
  std::vector<Node> kids;
  uint32_t min = 0, max = 0;
};

CodepointSet ascii_class(char c) {
  CodepointSet s;
  switch (c) {
    case 'd':
      s.add('0', '9');
      break;
    case 'w':
      s.add('0', '9');
      s.add('A', 'Z');
      s.add('a', 'z');
      s.add('_', '_');
      break;
    case 's':
      s.add('\t', '\r');
      s.add(' ', ' ');
      break;
    default:
      break;
  }
  return s;
}

class Parser {
 public:
  Parser(std::string_view p, size_t max_depth) : p_(p), max_depth_(max_depth) {}

  // Top level: each alternative may start with ^ and end with $.
  Expected<Node> parse_top(std::vector<std::pair<bool, bool>>& anchors) {
    Node alt(Node::kAlt);
    while (true) {
      bool start = false, end = false;
      if (peek('^')) {
        ++i_;
        start = true;
      }
      GRIDQ_ASSIGN_OR_RETURN(Node s, parse_seq(1, true));
      if (peek('$')) {
        ++i_;
        end = true;
      }
      alt.kids.push_back(std::move(s));
      anchors.emplace_back(start, end);
      if (i_ >= p_.size()) break;
      if (p_[i_] == '|') {
        ++i_;
        continue;
      }
      if (p_[i_] == ')') return err("regex: unmatched ')' at offset {}", i_);
      return err("regex: anchor '{}' inside the pattern at offset {} is not supported", p_[i_ - 1], i_ - 1);
    }
    return alt;
  }

 private:
  bool peek(char c) const { return i_ < p_.size() && p_[i_] == c; }

  Expected<Node> parse_alt(size_t depth) {
    if (depth > max_depth_) return err("regex: nesting deeper than {} (limit)", max_depth_);
    Node alt(Node::kAlt);
    while (true) {
      GRIDQ_ASSIGN_OR_RETURN(Node s, parse_seq(depth, false));
      alt.kids.push_back(std::move(s));
      if (!peek('|')) break;
      ++i_;
    }
    return alt;
  }

  Expected<Node> parse_seq(size_t depth, bool top) {
    Node seq(Node::kSeq);
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
      if (p_[i_] == '$') {
        if (top && i_ + 1 == p_.size()) break;
        if (top && i_ + 1 < p_.size() && p_[i_ + 1] == '|') break;
        return err("regex: anchor '$' inside the pattern at offset {} is not supported", i_);
      }
      if (p_[i_] == '^') return err("regex: anchor '^' inside the pattern at offset {} is not supported", i_);
      GRIDQ_ASSIGN_OR_RETURN(Node atom, parse_atom(depth));
      GRIDQ_ASSIGN_OR_RETURN(Node q, parse_quant(std::move(atom)));
      seq.kids.push_back(std::move(q));
    }
    return seq;
  }

  Expected<Node> parse_quant(Node atom) {
    while (i_ < p_.size()) {
      uint32_t mn = 0, mx = 0;
      char c = p_[i_];
      size_t save = i_;
      if (c == '*') {
        mn = 0, mx = kUnbounded, ++i_;
      } else if (c == '+') {
        mn = 1, mx = kUnbounded, ++i_;
      } else if (c == '?') {
        mn = 0, mx = 1, ++i_;
      } else if (c == '{') {
        if (!parse_braces(mn, mx)) {
          i_ = save;
          return atom;  // a literal '{' (ECMAScript Annex B)
        }
      } else {
        return atom;
      }
      if (mx != kUnbounded && mn > mx) return err("regex: quantifier {{{},{}}} has min > max", mn, mx);
      if ((mx != kUnbounded && mx > 100000) || mn > 100000)
        return err("regex: quantifier bound over 100000 at offset {}", save);
      if (peek('?')) ++i_;  // lazy: same language
      if (peek('+')) return err("regex: possessive quantifier at offset {} is not supported", i_);
      Node r(Node::kRep);
      r.min = mn;
      r.max = mx;
      r.kids.push_back(std::move(atom));
      atom = std::move(r);
    }
    return atom;
  }

  bool parse_braces(uint32_t& mn, uint32_t& mx) {
    size_t j = i_ + 1;
    auto num = [&](uint32_t& v) {
      size_t s = j;
      uint64_t x = 0;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9' && x < 10000000) x = x * 10 + (p_[j++] - '0');
      v = static_cast<uint32_t>(x);
      return j > s;
    };
    if (!num(mn)) return false;
    if (j < p_.size() && p_[j] == '}') {
      mx = mn;
    } else if (j < p_.size() && p_[j] == ',') {
      ++j;
      if (j < p_.size() && p_[j] == '}')
        mx = kUnbounded;
      else if (!num(mx))
        return false;
      if (j >= p_.size() || p_[j] != '}') return false;
    } else {
      return false;
    }
    i_ = j + 1;
    return true;
  }

  Expected<uint32_t> next_cp() {
    uint32_t cp;
    if (!decode_utf8(p_, i_, cp)) return err("regex: invalid UTF-8 at offset {}", i_);
    return cp;
  }

  Expected<uint32_t> hex(size_t n) {
    uint32_t v = 0;
    for (size_t k = 0; k < n; ++k) {
      if (i_ >= p_.size()) return err("regex: truncated hex escape");
      char c = p_[i_++];
      int d = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (d < 0) return err("regex: bad hex digit '{}' at offset {}", c, i_ - 1);
      v = v * 16 + d;
    }
    return v;
  }

  // After a backslash. in_class: \b is backspace there.
  Expected<CodepointSet> parse_escape(bool in_class) {
    if (i_ >= p_.size()) return err("regex: trailing backslash");
    char c = p_[i_++];
    switch (c) {
      case 'd':
      case 'w':
      case 's':
        return ascii_class(c);
      case 'D':
      case 'W':
      case 'S': {
        // Negations stay ASCII: Python's Unicode \W excludes letters ECMAScript's includes.
        return CodepointSet::range(0, 0x7F).minus(ascii_class(static_cast<char>(c + 32)));
      }
      case 'n':
        return CodepointSet::range('\n', '\n');
      case 't':
        return CodepointSet::range('\t', '\t');
      case 'r':
        return CodepointSet::range('\r', '\r');
      case 'f':
        return CodepointSet::range('\f', '\f');
      case 'v':
        return CodepointSet::range('\v', '\v');
      case '0':
        return CodepointSet::range(0, 0);
      case 'x': {
        GRIDQ_ASSIGN_OR_RETURN(uint32_t v, hex(2));
        return CodepointSet::range(v, v);
      }
      case 'u': {
        if (peek('{')) return err("regex: \\u{{...}} escape at offset {} is not supported", i_ - 2);
        GRIDQ_ASSIGN_OR_RETURN(uint32_t v, hex(4));
        return CodepointSet::range(v, v);
      }
      case 'b':
        if (in_class) return CodepointSet::range('\b', '\b');
        return err("regex: word boundary \\b at offset {} is not supported", i_ - 2);
      case 'B':
        return err("regex: word boundary \\B at offset {} is not supported", i_ - 2);
      case 'p':
      case 'P':
        return err("regex: Unicode property escape \\{} at offset {} is not supported", c, i_ - 2);
      case 'k':
        return err("regex: named backreference \\k at offset {} is not supported", i_ - 2);
      case 'c':
        return err("regex: control escape \\c at offset {} is not supported", i_ - 2);
      default:
        break;
    }
    if (c >= '1' && c <= '9')
      return err("regex: backreference \\{} at offset {} is not supported", c, i_ - 2);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
      return err("regex: unknown escape \\{} at offset {}", c, i_ - 2);
    --i_;
    GRIDQ_ASSIGN_OR_RETURN(uint32_t cp, next_cp());
    return CodepointSet::range(cp, cp);
  }

  Expected<CodepointSet> parse_class() {
    bool neg = false;
    if (peek('^')) {
      neg = true;
      ++i_;
    }
    CodepointSet s;
    bool first = true;
    while (true) {
      if (i_ >= p_.size()) return err("regex: unterminated character class");
      if (p_[i_] == ']' && !(first && false)) {
        ++i_;
        break;
      }
      first = false;
      if (p_[i_] == '[' && i_ + 1 < p_.size() &&
          (p_[i_ + 1] == ':' || p_[i_ + 1] == '=' || p_[i_ + 1] == '.'))
        return err("regex: POSIX class at offset {} is not supported", i_);
      GRIDQ_ASSIGN_OR_RETURN(CodepointSet lo, class_atom());
      bool single = lo.ranges().size() == 1 && lo.ranges()[0].first == lo.ranges()[0].second;
      if (single && peek('-') && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        GRIDQ_ASSIGN_OR_RETURN(CodepointSet hi, class_atom());
        bool hs = hi.ranges().size() == 1 && hi.ranges()[0].first == hi.ranges()[0].second;
        if (!hs) return err("regex: class range ends in a class escape at offset {}", i_);
        uint32_t a = lo.ranges()[0].first, z = hi.ranges()[0].first;
        if (a > z) return err("regex: class range out of order at offset {}", i_);
        s.add(a, z);
      } else {
        s.add(lo);
      }
    }
    return neg ? s.complement() : s;
  }

  Expected<CodepointSet> class_atom() {
    if (p_[i_] == '\\') {
      ++i_;
      return parse_escape(true);
    }
    GRIDQ_ASSIGN_OR_RETURN(uint32_t cp, next_cp());
    return CodepointSet::range(cp, cp);
  }

  Expected<Node> parse_atom(size_t depth) {
    char c = p_[i_];
    Node n(Node::kSet);
    if (c == '(') {
      ++i_;
      if (peek('?')) {
        ++i_;
        if (peek(':')) {
          ++i_;
        } else if (peek('=') || peek('!')) {
          return err("regex: lookahead at offset {} is not supported", i_ - 2);
        } else if (peek('<') && i_ + 1 < p_.size() && (p_[i_ + 1] == '=' || p_[i_ + 1] == '!')) {
          return err("regex: lookbehind at offset {} is not supported", i_ - 2);
        } else if (peek('<') || (peek('P') && i_ + 1 < p_.size() && p_[i_ + 1] == '<')) {
          while (i_ < p_.size() && p_[i_] != '>') ++i_;
          if (i_ >= p_.size()) return err("regex: unterminated group name");
          ++i_;
        } else {
          return err("regex: group modifier '(?{}' at offset {} is not supported",
                     i_ < p_.size() ? p_[i_] : ' ', i_ - 2);
        }
      }
      GRIDQ_ASSIGN_OR_RETURN(Node inner, parse_alt(depth + 1));
      if (!peek(')')) return err("regex: unterminated group");
      ++i_;
      return inner;
    }
    if (c == '[') {
      ++i_;
      GRIDQ_ASSIGN_OR_RETURN(n.set, parse_class());
      return n;
    }
    if (c == '.') {
      ++i_;
      n.set =
          CodepointSet::all().minus(CodepointSet::range('\n', '\n')).minus(CodepointSet::range('\r', '\r'));
      return n;
    }
    if (c == '\\') {
      ++i_;
      GRIDQ_ASSIGN_OR_RETURN(n.set, parse_escape(false));
      return n;
    }
    if (c == '*' || c == '+' || c == '?') return err("regex: nothing to repeat at offset {}", i_);
    GRIDQ_ASSIGN_OR_RETURN(uint32_t cp, next_cp());
    n.set = CodepointSet::range(cp, cp);
    return n;
  }

  std::string_view p_;
  size_t i_ = 0;
  size_t max_depth_;
};

Seq lower(Builder& b, const Node& n, bool json) {
  switch (n.kind) {
    case Node::kSet:
      if (n.set.ranges().size() == 1 && n.set.ranges()[0].first == n.set.ranges()[0].second) {
        std::string s;
        append_utf8(s, n.set.ranges()[0].first);
        return b.lit(json ? json_escape_body(s) : s);
      }
      return {json ? lower_json_char(b, n.set) : lower_utf8(b, n.set)};
    case Node::kSeq: {
      Seq out;
      for (const Node& k : n.kids) out = out + lower(b, k, json);
      return out;
    }
    case Node::kAlt: {
      if (n.kids.size() == 1) return lower(b, n.kids[0], json);
      std::vector<Seq> alts;
      for (const Node& k : n.kids) alts.push_back(lower(b, k, json));
      return {b.alt(std::move(alts))};
    }
    case Node::kRep:
      return {b.rep(lower(b, n.kids[0], json), n.min, n.max)};
  }
  return {};
}

}  // namespace

Expected<Sym> compile_regex(Builder& b, std::string_view pattern, const RegexOptions& opt, size_t max_depth) {
  Parser p(pattern, max_depth);
  std::vector<std::pair<bool, bool>> anchors;
  GRIDQ_ASSIGN_OR_RETURN(Node top, p.parse_top(anchors));
  std::vector<Seq> alts;
  for (size_t k = 0; k < top.kids.size(); ++k) {
    Seq s = lower(b, top.kids[k], opt.json_string);
    if (opt.search) {
      Sym any = opt.json_string ? json_free_chars(b) : b.star({lower_utf8(b, CodepointSet::all())});
      if (!anchors[k].first) s = Seq{any} + s;
      if (!anchors[k].second) s = s + any;
    }
    alts.push_back(std::move(s));
  }
  GRIDQ_RETURN_IF_ERROR(b.check_limits());
  return b.alt(std::move(alts));
}

}  // namespace gridq::grammar
