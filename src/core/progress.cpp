#include "core/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace gridq {

namespace {

int64_t proc_status_kib(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(f, line)) {
    if (line.compare(0, n, key) == 0 && line.size() > n && line[n] == ':') {
      return std::strtoll(line.c_str() + n + 1, nullptr, 10);  // "VmHWM:   123456 kB"
    }
  }
  return 0;
}

}  // namespace

int64_t peak_rss_bytes() { return proc_status_kib("VmHWM") * 1024; }
int64_t current_rss_bytes() { return proc_status_kib("VmRSS") * 1024; }

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (int64_t{1} << 30)) return fmt::format("{:.2f} GiB", b / double(int64_t{1} << 30));
  if (bytes >= (int64_t{1} << 20)) return fmt::format("{:.1f} MiB", b / double(int64_t{1} << 20));
  if (bytes >= (int64_t{1} << 10)) return fmt::format("{:.0f} KiB", b / 1024.0);
  return fmt::format("{} B", bytes);
}

std::string format_duration(double seconds) {
  if (!(seconds >= 0.0) || !std::isfinite(seconds)) return "?";
  if (seconds < 60.0) return fmt::format("{:.1f} s", seconds);
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s < 3600) return fmt::format("{} min {:02} s", s / 60, s % 60);
  return fmt::format("{} h {:02} min", s / 3600, (s % 3600) / 60);
}

Progress::Progress(int total_steps, FILE* out, Mode mode)
    : out_(out), mode_(mode), total_(total_steps), start_(std::chrono::steady_clock::now()) {
  if (mode_ == Mode::kAuto) mode_ = (out_ && isatty(fileno(out_))) ? Mode::kTty : Mode::kPlain;
  if (!out_) mode_ = Mode::kQuiet;
  last_step_ = start_;
  last_draw_ = start_ - std::chrono::seconds(1);
}

Progress::~Progress() { clear_line(); }

void Progress::skip_steps(int n) {
  done_ += n;
  skipped_ += n;
  start_ = last_step_ = std::chrono::steady_clock::now();  // earlier time is not this run's rate
}

double Progress::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

double Progress::eta_seconds() const {
  const int ran = done_ - skipped_;
  if (ran <= 0) return -1.0;
  // Average step time so far × steps left, minus the part of the current step already spent.
  const auto now = std::chrono::steady_clock::now();
  const double per_step = std::chrono::duration<double>(last_step_ - start_).count() / ran;
  const double in_step = std::chrono::duration<double>(now - last_step_).count();
  return std::max(0.0, per_step * static_cast<double>(total_ - done_) - in_step);
}

void Progress::clear_line() {
  if (mode_ == Mode::kTty && line_dirty_) {
    std::fputs("\r\033[K", out_);
    line_dirty_ = false;
  }
}

void Progress::update(const std::string& label, const std::string& stage, const std::string& item) {
  if (mode_ != Mode::kTty) return;
  const auto now = std::chrono::steady_clock::now();
  const bool changed = label != last_label_ || stage != last_stage_;
  if (!changed && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  last_label_ = label;
  last_stage_ = stage;
  const double eta = eta_seconds();
  std::string s = fmt::format("[{}/{}] {} · {}", done_, total_, label, stage);
  if (!item.empty()) s += " · " + item;
  s += " · ETA " + (eta < 0 ? std::string("?") : format_duration(eta));
  if (s.size() > 160) s = s.substr(0, 157) + "...";
  std::fprintf(out_, "\r\033[K%s", s.c_str());
  std::fflush(out_);
  line_dirty_ = true;
}

void Progress::step_done(const std::string& line) {
  ++done_;
  last_step_ = std::chrono::steady_clock::now();
  if (mode_ == Mode::kQuiet) return;
  clear_line();
  const double eta = eta_seconds();
  if (done_ < total_ && eta >= 0) {
    std::fprintf(out_, "%s, ETA %s\n", line.c_str(), format_duration(eta).c_str());
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void Progress::log(const std::string& line) {
  if (mode_ == Mode::kQuiet) return;
  clear_line();
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

}  // namespace gridq
