// Chat prompts for the run commands: messages rendered with the model's own chat template and encoded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "text/tokenizer.h"

namespace gridq::cli {

struct ChatTurn {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

// Renders `turns` plus the generation prompt with MODEL_DIR's chat template and encodes it. What the user
// typed is untrusted text like a server request's content: its "</think>" or "<tool_call>" encode as text
// unless allow_special_tokens (--allow-special-tokens) asks for the raw behaviour (issue 14 item 2).
Expected<std::vector<int32_t>> encode_chat(const std::string& model_dir, const text::Tokenizer& tok,
                                           const std::vector<ChatTurn>& turns, bool thinking,
                                           bool allow_special_tokens);

}  // namespace gridq::cli
