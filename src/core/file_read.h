// Whole-file reads for the small text and JSON inputs the commands take (chat templates, schemas, tokenizer
// files); large weights are memory-mapped instead (io/).
#pragma once

#include <string>

#include "core/status.h"

namespace gridq {

// The bytes of `path`, or an error "PATH: cannot open".
Expected<std::string> read_file_bytes(const std::string& path);

}  // namespace gridq
