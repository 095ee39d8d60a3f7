// How `gridq chat` and `gridq generate --chat` show the reasoning block of a streamed answer (issue 14 item
// 12; docs/cli.md). On a terminal it is dimmed (ANSI faint) and its tags are not printed. Anywhere else (a
// pipe, a file) no styling tells it from the answer, so it is written between the model's own tags,
// `<think>` … `</think>`, and the answer follows: the opening tag is printed although the chat template wrote
// it into the prompt, as llama-server's `--reasoning-format none` streams it back, so the output is
// well-formed for the usual `<think>.*?</think>` post-processing. A block cut off (max tokens, Ctrl-C) is
// still closed. --hide-thinking leaves the block out in both cases.
#pragma once

#include <string>

namespace gridq::cli {

class ThinkPrinter {
 public:
  // `in_think`: the generation prompt ends inside the reasoning block (text::initial_reasoning_mode).
  ThinkPrinter(bool in_think, bool hide, bool tty) : in_think_(in_think), hide_(hide), tty_(tty) {}
  void push(const std::string& piece);
  void finish();
  std::string answer;  // the text outside reasoning blocks (a chat's history keeps only this)

 private:
  void emit(const std::string& s);
  void mark(const char* tag);  // a block's tag, where the block is shown without styling
  bool in_think_;
  bool hide_;
  bool tty_;
  bool started_ = false;  // a piece arrived (the opening tag of a block the prompt opened is printed then)
  std::string buf_;       // a possible partial tag, held until the next piece
};

}  // namespace gridq::cli
