#include "serve/api_keys.h"

namespace gridq::serve {

namespace {
bool space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }
}  // namespace

Expected<std::vector<std::string>> parse_api_key_file(std::string_view text, const std::string& path) {
  std::vector<std::string> keys;
  size_t line_no = 0;
  for (size_t pos = 0; pos <= text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    while (!line.empty() && space(line.front())) line.remove_prefix(1);
    while (!line.empty() && space(line.back())) line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    // A bearer token has no whitespace or control bytes (RFC 6750 §2.1); such a line is a mistake (two keys
    // on one line, a stray comment), never a key a client could present.
    for (char c : line) {
      const auto u = static_cast<unsigned char>(c);
      if (space(c) || u < 0x20 || u == 0x7f)
        return err("--api-key-file {}: line {}: a key must not contain whitespace or control characters",
                   path, line_no);
    }
    keys.emplace_back(line);
  }
  if (keys.empty())
    return err(
        "--api-key-file {}: no API key in the file (blank lines and lines starting with # are skipped)",
        path);
  return keys;
}

}  // namespace gridq::serve
