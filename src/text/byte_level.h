// GPT-2 byte-level alphabet: every byte maps to one printable code point so BPE vocabularies can be stored as
// text. Bytes 33-126, 161-172 and 174-255 map to themselves; the other 68 map to U+0100.. in byte order.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace gridq::text {

// UTF-8 text of the code point byte b maps to.
const std::array<std::string, 256>& byte_to_unicode();

// Maps each byte of `bytes` to its byte-level character and appends to `out`.
void byte_level_encode(std::string_view bytes, std::string& out);

// Inverse: appends the bytes of a byte-level string to `out`. Returns false (appending nothing) when some
// character is not in the byte-level alphabet; HF's ByteLevel decoder then keeps the token's own UTF-8.
bool byte_level_decode(std::string_view text, std::string& out);

}  // namespace gridq::text
