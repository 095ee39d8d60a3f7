// Progress reporting for long commands (gridq quantize). On a terminal: one line that is redrawn in place
// (carriage return + erase) with the current step, stage, item and ETA, and a permanent line per finished
// step. Otherwise (a pipe, a log file, CI): only the permanent lines, so logs stay readable and diffable.
// Everything goes to one FILE* (stderr by default); stdout stays free for --json output.
//
//   Progress p(/*total_steps=*/n_layers + 1);
//   p.update("layer 3/4", "encode", "mlp.experts.7.down_proj");   // TTY: redraws the status line
//   p.step_done("layer 3/4: 12.1 s, 5400 tok/s, peak 1.2 GiB");   // one permanent line, advances the ETA
//
// ETA = average step time of this run × steps left − time already spent in the current step; steps skipped
// by a resumed run (skip_steps) count neither as time nor as work.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace gridq {

// Peak resident set of this process (VmHWM of /proc/self/status) in bytes; 0 when unavailable.
int64_t peak_rss_bytes();
// Current resident set (VmRSS) in bytes; 0 when unavailable.
int64_t current_rss_bytes();

// "1.23 GiB", "512 KiB", "17 B".
std::string format_bytes(int64_t bytes);
// "42 s", "3 min 05 s", "1 h 02 min".
std::string format_duration(double seconds);

class Progress {
 public:
  enum class Mode { kAuto, kTty, kPlain, kQuiet };
  // kAuto: kTty when `out` is a terminal, else kPlain. kQuiet prints nothing.
  explicit Progress(int total_steps, FILE* out = stderr, Mode mode = Mode::kAuto);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  bool tty() const { return mode_ == Mode::kTty; }
  // Marks `n` steps as already done before this run started (a resumed run).
  void skip_steps(int n);
  // TTY only: redraws the status line "[step/total] label · stage · item · ETA". Rate-limited to ~10 Hz,
  // except when the label or stage changes.
  void update(const std::string& label, const std::string& stage, const std::string& item = "");
  // Finishes one step and prints `line` permanently (with the ETA of what is left appended).
  void step_done(const std::string& line);
  // A permanent line that is not a step (warnings, the final summary).
  void log(const std::string& line);

  int done() const { return done_; }
  int total() const { return total_; }
  double elapsed_seconds() const;  // since construction (or the last skip_steps)
  double eta_seconds() const;      // < 0 when unknown (no step finished in this run yet)

 private:
  void clear_line();
  FILE* out_;
  Mode mode_;
  int total_;
  int done_ = 0;
  int skipped_ = 0;
  bool line_dirty_ = false;
  std::string last_label_, last_stage_;
  std::chrono::steady_clock::time_point start_, last_step_, last_draw_;
};

}  // namespace gridq
