// Chat prompts: loads a model's chat template (chat_template.jinja, else tokenizer_config.json's
// "chat_template") and renders OpenAI-style messages with it the way transformers' apply_chat_template does
// (variables messages, tools, add_generation_prompt, bos_token, eos_token, ... plus extra kwargs such as
// enable_thinking). The rendered prompt already holds the BOS text, so it is encoded WITHOUT special tokens.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "text/jinja/template.h"
#include "text/tokenizer.h"

namespace gridq::text {

struct ChatTemplate {
  jinja::Template tmpl;
  std::string source;
  // Special-token texts from tokenizer_config.json ("" when absent); passed to the template.
  std::string bos_token, eos_token, pad_token, unk_token;

  // `model_dir` holds chat_template.jinja and/or tokenizer_config.json.
  static Expected<ChatTemplate> load(const std::string& model_dir);
  // `tokenizer_config` may be null; `name` is used in error messages.
  static Expected<ChatTemplate> from_source(std::string_view source,
                                            const nlohmann::ordered_json& tokenizer_config,
                                            const std::string& name = "chat_template");
};

// Renders the prompt. `messages` is a JSON array of message objects; `tools` is null or an array; tool-call
// arguments given as JSON strings (OpenAI) are decoded into objects first. `extra_kwargs` (null or an object)
// become template variables but may not replace messages, tools, add_generation_prompt, bos_token or
// eos_token.
Expected<std::string> render_chat(const ChatTemplate& tmpl, const nlohmann::ordered_json& messages,
                                  const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                  const nlohmann::ordered_json& extra_kwargs);

// render_chat, then encode without adding special tokens (no double BOS). Added tokens are matched only in
// the template's own text: the strings of messages, tools and kwargs encode as text (content_escape.h), so a
// user or a document that holds "</think>" or "<tool_call>" cannot forge a turn or a call (issue 14 item 2).
// allow_special_tokens=true matches them in the whole prompt, as transformers does (the raw behaviour).
Expected<std::vector<int32_t>> encode_chat_prompt(const Tokenizer& tok, const ChatTemplate& tmpl,
                                                  const nlohmann::ordered_json& messages,
                                                  const nlohmann::ordered_json& tools,
                                                  bool add_generation_prompt,
                                                  const nlohmann::ordered_json& extra_kwargs,
                                                  bool allow_special_tokens = false);

// Copy of `messages` with string tool-call arguments parsed into JSON values.
Expected<nlohmann::ordered_json> decode_tool_call_arguments(const nlohmann::ordered_json& messages);

}  // namespace gridq::text
