// UTF-8 helpers shared by the tokenizer, the streaming decoder and the template engine. Invalid input is
// replaced with U+FFFD using the "maximal subpart" policy, which is what Rust's String::from_utf8_lossy (HF
// tokenizers' decoders) and Python's bytes.decode('utf-8', errors='replace') both do, so all three agree.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace gridq::text {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Appends the UTF-8 encoding of `cp` (must be a Unicode scalar value).
void append_utf8(std::string& out, char32_t cp);

// Looks at the sequence starting at s[i]. Returns n > 0 for a valid sequence of n bytes (code point in *cp),
// 0 if the bytes up to the end of `s` are a valid but incomplete prefix, and -n for an invalid maximal
// subpart of n bytes (n >= 1) that must become one U+FFFD.
int utf8_next(std::string_view s, size_t i, char32_t* cp);

// Whole-buffer lossy decode.
std::string utf8_lossy(std::string_view bytes);

// Lossy-decodes the longest prefix of `bytes` that cannot change with more bytes appended (a trailing
// incomplete-but-valid sequence is left) and appends it to `out`. Returns the number of bytes consumed.
size_t utf8_lossy_prefix(std::string_view bytes, std::string& out);

bool utf8_valid(std::string_view s);

}  // namespace gridq::text
