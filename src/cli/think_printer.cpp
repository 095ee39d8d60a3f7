#include "cli/think_printer.h"

#include <algorithm>
#include <cstdio>

namespace gridq::cli {

void ThinkPrinter::push(const std::string& piece) {
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

void ThinkPrinter::finish() {
  emit(buf_);
  buf_.clear();
  if (started_ && in_think_) mark("</think>");
  if (tty_) std::fputs("\x1b[0m", stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void ThinkPrinter::mark(const char* tag) {
  if (tty_ || hide_) return;
  std::fputs(tag, stdout);
}

void ThinkPrinter::emit(const std::string& s) {
  if (s.empty()) return;
  if (in_think_) {
    if (hide_) return;
    if (tty_) std::fputs("\x1b[2m", stdout);
    std::fputs(s.c_str(), stdout);
    if (tty_) std::fputs("\x1b[0m", stdout);
  } else {
    answer += s;
    std::fputs(s.c_str(), stdout);
  }
  std::fflush(stdout);
}

}  // namespace gridq::cli
