#include "cli/prompt_format.h"

namespace gridq::cli {

Expected<std::string> render_chat(const std::string& model_dir, const std::vector<ChatTurn>& turns, bool thinking) {
  (void)turns;
  (void)thinking;
  return err("{}: chat template rendering is not available in this build yet (text/chat.h)", model_dir);
}

}  // namespace gridq::cli
