// Untrusted text in a chat prompt (issue 14 item 2): message content, tool results, tool definitions and
// template kwargs come from a client or a retrieved document, so the added-token texts they hold
// ("<tool_call>", "</think>", "<|endoftext|>" ...) must encode as ordinary text, never as control ids; only
// the chat template's own markup may. The template still sees every string as given (it may trim, split or
// compare content), so instead of rendering placeholders each added-token text inside an untrusted string is
// replaced by an escape that no added token matches: U+FDD0 <index> U+FDD1 (two Unicode noncharacters
// around the token's index in Tokenizer::added_tokens(); a literal U+FDD0 is escaped too). The rendered
// prompt is then split on the template's added tokens and each plain piece is unescaped back to the original
// bytes before BPE, so the content encodes exactly as `encode(text, false, /*match_added_tokens=*/false)`.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "text/tokenizer.h"

namespace gridq::text {

// Every string in `v` (recursively, object keys included) with added-token texts escaped.
nlohmann::ordered_json escape_added_tokens(const nlohmann::ordered_json& v, const Tokenizer& tok);
std::string escape_added_token_text(std::string_view s, const Tokenizer& tok);

// The inverse on a piece of rendered text: escapes become the token texts again; a U+FDD0 that does not
// start a well-formed escape (template text) is kept as it is.
std::string unescape_added_tokens(std::string_view s, const Tokenizer& tok);

}  // namespace gridq::text
