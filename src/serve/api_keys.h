// --api-key-file (issue 14 item 6): one key per line; surrounding whitespace (CRLF files included) is
// trimmed, blank lines and lines starting with '#' are skipped, and a file that yields no key is an error:
// a server started with --api-key-file must never end up open to everyone.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gridq::serve {

// `text` is the file's content; `path` names it in messages.
Expected<std::vector<std::string>> parse_api_key_file(std::string_view text, const std::string& path);

}  // namespace gridq::serve
