#include "cli/prompt_format.h"

#include "text/chat.h"

namespace gridq::cli {

Expected<std::vector<int32_t>> encode_chat(const std::string& model_dir, const text::Tokenizer& tok,
                                           const std::vector<ChatTurn>& turns, bool thinking,
                                           bool allow_special_tokens) {
  GRIDQ_ASSIGN_OR_RETURN(text::ChatTemplate tmpl, text::ChatTemplate::load(model_dir));
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (const auto& t : turns) msgs.push_back({{"role", t.role}, {"content", t.content}});
  nlohmann::ordered_json extra = {{"enable_thinking", thinking}};
  return text::encode_chat_prompt(tok, tmpl, msgs, nullptr, /*add_generation_prompt=*/true, extra,
                                  allow_special_tokens);
}

}  // namespace gridq::cli
