// How `gridq chat` and `gridq generate --chat` show the reasoning block of a streamed answer (issue 14 item
// 12; docs/cli.md). On a terminal it is dimmed (ANSI faint) and its tags are not printed. Anywhere else (a
// pipe, a file) no styling tells it from the answer, so it is written between the model's own tags,
// `<think>` … `</think>`, and the answer follows: the opening tag is printed although the chat template wrote
// it into the prompt, as llama-server's `--reasoning-format none` streams it back, so the output is
// well-formed for the usual `<think>.*?</think>` post-processing. A block cut off (max tokens, Ctrl-C) is
// still closed. --hide-thinking leaves the block out in both cases.
// Header-only so tests/cli can drive it without the gridq binary.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>

namespace gridq::cli {

class ThinkPrinter {
 public:
  // `in_think`: the generation prompt ends inside the reasoning block (text::initial_reasoning_mode).
  ThinkPrinter(bool in_think, bool hide, bool tty, std::FILE* out = stdout)
      : in_think_(in_think), hide_(hide), tty_(tty), out_(out) {}

  void push(const std::string& piece) {
    if (!started_) {
      started_ = true;
      if (in_think_) mark("<think>");
    }
    buf_ += piece;
    for (;;) {
      const std::string tag = in_think_ ? "</think>" : "<think>";
      const size_t p = buf_.find(tag);
      if (p == std::string::npos) {
        // Keep a possible partial tag back.
        const size_t keep = std::min(buf_.size(), tag.size() - 1);
        emit(buf_.substr(0, buf_.size() - keep));
        buf_.erase(0, buf_.size() - keep);
        return;
      }
      emit(buf_.substr(0, p));
      buf_.erase(0, p + tag.size());
      in_think_ = !in_think_;
      mark(in_think_ ? "<think>" : "</think>");
    }
  }

  void finish() {
    emit(buf_);
    buf_.clear();
    if (started_ && in_think_) mark("</think>");
    if (tty_) std::fputs("\x1b[0m", out_);
    std::fputc('\n', out_);
    std::fflush(out_);
  }

  std::string answer;  // the text outside reasoning blocks (a chat's history keeps only this)

 private:
  // A block's tag, where the block is shown without styling.
  void mark(const char* tag) {
    if (tty_ || hide_) return;
    std::fputs(tag, out_);
  }
  void emit(const std::string& s) {
    if (s.empty()) return;
    if (in_think_) {
      if (hide_) return;
      if (tty_) std::fputs("\x1b[2m", out_);
      std::fputs(s.c_str(), out_);
      if (tty_) std::fputs("\x1b[0m", out_);
    } else {
      answer += s;
      std::fputs(s.c_str(), out_);
    }
    std::fflush(out_);
  }

  bool in_think_;
  bool hide_;
  bool tty_;
  std::FILE* out_;
  bool started_ = false;  // a piece arrived (the opening tag of a block the prompt opened is printed then)
  std::string buf_;       // a possible partial tag, held until the next piece
};

}  // namespace gridq::cli
