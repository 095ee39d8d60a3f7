// PINS.json: the SHA-256 and size of every regular file of an artifact directory (recursively, except
// PINS.json itself), so a server can refuse a modified, truncated, missing or extra file before loading.
//   {"files": {"sub/name": {"sha256": "<64 lowercase hex>", "size": N}}, "version": 1}
// Written deterministically: sorted keys, 2-space indent, trailing newline.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/status.h"

namespace gridq::io {

inline constexpr const char* kPinsFile = "PINS.json";

struct Pin {
  std::string sha256;
  uint64_t size = 0;
};

// Hashes every regular file under `dir` (relative '/'-separated names, PINS.json at the top excluded).
// Refuses symlinks and anything that is neither a regular file nor a directory.
Expected<std::map<std::string, Pin>> compute_pins(const std::string& dir);
// Parses and validates `dir`/PINS.json.
Expected<std::map<std::string, Pin>> read_pins(const std::string& dir);
// Writes `dir`/PINS.json (atomically: tmp + rename) for the directory's current contents.
Status write_pins(const std::string& dir);
// Compares the directory against PINS.json; the error lists every mismatch (modified, missing, extra),
// one per line, each naming the file.
Status verify_pins(const std::string& dir);

}  // namespace gridq::io
