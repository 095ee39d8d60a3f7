// Strict JSON parsing for untrusted files: nlohmann keeps the last of duplicate object keys silently, which
// would let a crafted header or index say two different things to two readers. These helpers refuse that.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"

namespace gridq::io {

// Parses `text` as one JSON document. Refuses invalid JSON, duplicate keys in any object, and nesting
// deeper than `max_depth` containers (0 = unlimited). Errors start with `label`.
Expected<nlohmann::json> parse_json_strict(std::string_view text, std::string_view label, int max_depth = 0);

// Returns the byte offset of the first invalid UTF-8 sequence (overlong forms, surrogates and code points
// above U+10FFFF are invalid), or npos when `s` is valid UTF-8.
size_t find_invalid_utf8(std::string_view s);

}  // namespace gridq::io
