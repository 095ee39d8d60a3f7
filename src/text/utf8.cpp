#include "text/utf8.h"

namespace gridq::text {

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

int utf8_next(std::string_view s, size_t i, char32_t* cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  int len;
  char32_t c;
  // Allowed range of the second byte (Unicode Table 3-7): excludes overlongs, surrogates, > U+10FFFF.
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
    c = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    c = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    c = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int k = 1; k < len; ++k) {
    if (i + k >= s.size()) return 0;
    const auto b = static_cast<unsigned char>(s[i + k]);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return -k;
    c = (c << 6) | (b & 0x3F);
  }
  *cp = c;
  return len;
}

size_t utf8_lossy_prefix(std::string_view bytes, std::string& out) {
  size_t i = 0;
  while (i < bytes.size()) {
    char32_t cp;
    const int n = utf8_next(bytes, i, &cp);
    if (n == 0) break;
    if (n > 0) {
      out.append(bytes.substr(i, static_cast<size_t>(n)));
      i += static_cast<size_t>(n);
    } else {
      out.append(kReplacementChar);
      i += static_cast<size_t>(-n);
    }
  }
  return i;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const size_t used = utf8_lossy_prefix(bytes, out);
  if (used < bytes.size()) out.append(kReplacementChar);  // one incomplete sequence at the end
  return out;
}

bool utf8_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp;
    const int n = utf8_next(s, i, &cp);
    if (n <= 0) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace gridq::text
