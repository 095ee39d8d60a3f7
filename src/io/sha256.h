// SHA-256 digests (OpenSSL EVP) as 64 lowercase hex characters, for pins and codebook provenance.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"

namespace gridq::io {

std::string sha256_hex(std::span<const uint8_t> bytes);
// Streams the file in chunks, so memory stays bounded for multi-GB shards.
Expected<std::string> sha256_file(const std::string& path);

}  // namespace gridq::io
