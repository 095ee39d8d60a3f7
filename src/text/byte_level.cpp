#include "text/byte_level.h"

#include "text/utf8.h"

namespace gridq::text {
namespace {

struct Tables {
  std::array<std::string, 256> fwd;
  std::array<int16_t, 324> inv;  // code point -> byte, -1 if not in the alphabet (all are < 324)
  Tables() {
    inv.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const char32_t cp = self ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      append_utf8(fwd[b], cp);
      inv[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::array<std::string, 256>& byte_to_unicode() { return tables().fwd; }

void byte_level_encode(std::string_view bytes, std::string& out) {
  const auto& fwd = tables().fwd;
  for (char c : bytes) out += fwd[static_cast<unsigned char>(c)];
}

bool byte_level_decode(std::string_view text, std::string& out) {
  const auto& inv = tables().inv;
  const size_t start = out.size();
  size_t i = 0;
  while (i < text.size()) {
    char32_t cp;
    const int n = utf8_next(text, i, &cp);
    if (n <= 0 || cp >= inv.size() || inv[cp] < 0) {
      out.resize(start);
      return false;
    }
    out.push_back(static_cast<char>(static_cast<unsigned char>(inv[cp])));
    i += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace gridq::text
