#include "io/json_strict.h"

#include <set>
#include <vector>

namespace gridq::io {

namespace {

// Thrown from the parser callback to stop parsing at the first structural violation.
struct StrictViolation {
  std::string message;
};

struct Frame {
  bool is_object = false;
  std::set<std::string, std::less<>> keys;
  std::string last_key;
};

std::string frame_path(const std::vector<Frame>& stack) {
  std::string p;
  for (const Frame& f : stack) {
    if (f.is_object && !f.last_key.empty()) p += "/" + f.last_key;
  }
  return p.empty() ? "/" : p;
}

}  // namespace

size_t find_invalid_utf8(std::string_view s) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = b[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte (Unicode Table 3-7)
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;
    }
    if (n - i < len) return i;
    if (b[i + 1] < lo || b[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if (b[i + k] < 0x80 || b[i + k] > 0xBF) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

Expected<nlohmann::json> parse_json_strict(std::string_view text, std::string_view label, int max_depth) {
  // nlohmann treats a NUL byte as the end of input, which would hide whatever follows it.
  if (size_t z = text.find('\0'); z != std::string_view::npos) {
    return err("{}: NUL byte at byte {} (not allowed in JSON text)", label, z);
  }
  std::vector<Frame> stack;
  auto cb = [&](int /*depth*/, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) -> bool {
    using E = nlohmann::json::parse_event_t;
    switch (ev) {
      case E::object_start:
      case E::array_start:
        if (max_depth > 0 && stack.size() >= static_cast<size_t>(max_depth)) {
          throw StrictViolation{
              fmt::format("{}: JSON nesting deeper than {} at {}", label, max_depth, frame_path(stack))};
        }
        stack.push_back(Frame{ev == E::object_start, {}, {}});
        break;
      case E::object_end:
      case E::array_end:
        if (!stack.empty()) stack.pop_back();
        break;
      case E::key: {
        if (stack.empty() || !stack.back().is_object) break;
        const std::string& k = parsed.get_ref<const std::string&>();
        Frame& f = stack.back();
        if (!f.keys.insert(k).second) {
          f.last_key.clear();
          throw StrictViolation{
              fmt::format("{}: duplicate key '{}' in JSON object {}", label, k, frame_path(stack))};
        }
        f.last_key = k;
        break;
      }
      case E::value:
        break;
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/true,
                                 /*ignore_comments=*/false);
  } catch (const StrictViolation& v) {
    return Error{v.message};
  } catch (const nlohmann::json::exception& e) {
    return err("{}: invalid JSON: {}", label, e.what());
  }
}

}  // namespace gridq::io
