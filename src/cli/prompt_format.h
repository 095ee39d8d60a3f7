// Chat prompts for the run commands: messages rendered with the model's own chat template.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace gridq::cli {

struct ChatTurn {
  std::string role;     // "system", "user", "assistant"
  std::string content;
};

// Renders `turns` plus the generation prompt with MODEL_DIR's chat template.
Expected<std::string> render_chat(const std::string& model_dir, const std::vector<ChatTurn>& turns, bool thinking);
inline Expected<std::string> render_single_turn(const std::string& model_dir, const std::string& user, bool thinking) {
  return render_chat(model_dir, {ChatTurn{"user", user}}, thinking);
}

}  // namespace gridq::cli
