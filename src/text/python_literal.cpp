// Python literals in tool-call argument values (api.md §5): the poolside format writes each value bare
// between <arg_value> tags, and a non-string value that is not JSON may still be a Python literal
// (`True`, `None`, `('a', 1)`, `{'k': 1}`) — read here into JSON. Recursive descent, depth-limited so hostile
// model output cannot blow the stack.
#include "text/tool_parser_common.h"

namespace gridq::text {

namespace {
struct PyLit {
  std::string_view s;
  size_t i = 0;
  int depth = 0;
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) ++i;
  }
  bool lit(std::string_view w) {
    if (s.substr(i, w.size()) == w) {
      i += w.size();
      return true;
    }
    return false;
  }
  std::optional<nlohmann::ordered_json> value() {
    if (++depth > 64) return std::nullopt;
    auto v = value_inner();
    --depth;
    return v;
  }
  std::optional<nlohmann::ordered_json> value_inner() {
    ws();
    if (i >= s.size()) return std::nullopt;
    char c = s[i];
    if (lit("None")) return nlohmann::ordered_json(nullptr);
    if (lit("True")) return nlohmann::ordered_json(true);
    if (lit("False")) return nlohmann::ordered_json(false);
    if (c == '\'' || c == '"') return str();
    if (c == '[' || c == '(') return seq(c == '[' ? ']' : ')');
    if (c == '{') return dict();
    return number();
  }
  std::optional<nlohmann::ordered_json> str() {
    char q = s[i++];
    std::string out;
    while (i < s.size() && s[i] != q) {
      char c = s[i++];
      if (c == '\\') {
        if (i >= s.size()) return std::nullopt;
        char e = s[i++];
        switch (e) {
          case 'n':
            out += '\n';
            break;
          case 't':
            out += '\t';
            break;
          case 'r':
            out += '\r';
            break;
          case '0':
            out += '\0';
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
          case '\n':
            break;
          default:
            out += '\\';
            out += e;
        }
      } else {
        out += c;
      }
    }
    if (i >= s.size()) return std::nullopt;
    ++i;
    return nlohmann::ordered_json(std::move(out));
  }
  std::optional<nlohmann::ordered_json> seq(char close) {
    ++i;
    auto arr = nlohmann::ordered_json::array();
    ws();
    if (i < s.size() && s[i] == close) {
      ++i;
      return arr;
    }
    for (;;) {
      auto v = value();
      if (!v) return std::nullopt;
      arr.push_back(std::move(*v));
      ws();
      if (i >= s.size()) return std::nullopt;
      if (s[i] == ',') {
        ++i;
        ws();
        if (i < s.size() && s[i] == close) {
          ++i;
          return arr;
        }
        continue;
      }
      if (s[i] == close) {
        ++i;
        return arr;
      }
      return std::nullopt;
    }
  }
  std::optional<nlohmann::ordered_json> dict() {
    ++i;
    auto obj = nlohmann::ordered_json::object();
    ws();
    if (i < s.size() && s[i] == '}') {
      ++i;
      return obj;
    }
    for (;;) {
      ws();
      if (i >= s.size() || (s[i] != '\'' && s[i] != '"')) return std::nullopt;
      auto k = str();
      if (!k) return std::nullopt;
      ws();
      if (i >= s.size() || s[i] != ':') return std::nullopt;
      ++i;
      auto v = value();
      if (!v) return std::nullopt;
      const auto& key = k->get_ref<const std::string&>();
      if (!obj.contains(key)) obj[key] = std::move(*v);
      ws();
      if (i >= s.size()) return std::nullopt;
      if (s[i] == ',') {
        ++i;
        ws();
        if (i < s.size() && s[i] == '}') {
          ++i;
          return obj;
        }
        continue;
      }
      if (s[i] == '}') {
        ++i;
        return obj;
      }
      return std::nullopt;
    }
  }
  std::optional<nlohmann::ordered_json> number() {
    size_t b = i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.' || s[i] == 'e' ||
                            s[i] == 'E' || s[i] == '-' || s[i] == '+' || s[i] == '_'))
      ++i;
    std::string tok(s.substr(b, i - b));
    std::erase(tok, '_');
    if (!tok.empty() && tok[0] == '+') tok.erase(0, 1);
    if (tok.empty()) return std::nullopt;
    // Python allows "1." and ".5"; JSON does not. Written into a fresh string: inserting into `tok` itself
    // trips GCC 12's false -Wrestrict at -O3 (GCC PR 105651) and broke -Werror Release builds.
    std::string json;
    const size_t k = tok[0] == '-' ? 1 : 0;
    json.append(tok, 0, k);
    if (k < tok.size() && tok[k] == '.') json += '0';
    json.append(tok, k, std::string::npos);
    if (json.back() == '.') json += '0';
    auto j = nlohmann::ordered_json::parse(json, nullptr, false);
    if (j.is_discarded() || !j.is_number()) return std::nullopt;
    return j;
  }
};
}  // namespace

std::optional<nlohmann::ordered_json> parse_python_literal(std::string_view s) {
  PyLit p{s};
  auto v = p.value();
  if (!v) return std::nullopt;
  p.ws();
  if (p.i != s.size()) return std::nullopt;
  return v;
}

}  // namespace gridq::text
