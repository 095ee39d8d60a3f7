// A SchedRequest that records what the scheduler reports (tokens per choice, finish reasons, errors, the
// order in which requests finish), and a request builder. Shared by the scheduler tests.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "serve/scheduler.h"

namespace gridq::serve::testing {

class Recorder final : public SchedRequest {
 public:
  bool on_token(int c, const runtime::SampledToken& t) override {
    std::lock_guard lk(mu);
    out[c].push_back(t.token);
    if (stop_after > 0 && static_cast<int>(out[c].size()) >= stop_after) return true;
    return false;
  }
  void on_choice_done(int c, FinishReason r) override {
    std::lock_guard lk(mu);
    reasons[c] = r;
    if (++done == n) {
      if (clock) finished_at = (*clock)++;
      cv.notify_all();
    }
  }
  void on_error(int status, const std::string& code, const std::string&) override {
    std::lock_guard lk(mu);
    error_status = status;
    error_code = code;
    done = n;
    cv.notify_all();
  }
  void on_prompt_logprob(const runtime::SampledToken& t) override {
    std::lock_guard lk(mu);
    prompt_lps.push_back(t);
  }
  bool wait(int ms = 20000) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, std::chrono::milliseconds(ms), [&] { return done >= n; });
  }
  std::mutex mu;
  std::condition_variable cv;
  std::map<int, std::vector<int32_t>> out;
  std::map<int, FinishReason> reasons;
  std::vector<runtime::SampledToken> prompt_lps;
  int done = 0;
  int stop_after = 0;
  int error_status = 0;
  int64_t finished_at = -1;  // order among recorders sharing `clock` (set when the last choice ends)
  std::atomic<int64_t>* clock = nullptr;
  std::string error_code;
};

inline std::shared_ptr<Recorder> make_req(std::vector<int32_t> prompt, int64_t max_tokens, int n = 1,
                                          float temperature = 0.0f, uint64_t seed = 0) {
  auto r = std::make_shared<Recorder>();
  r->prompt = std::move(prompt);
  r->max_tokens = max_tokens;
  r->n = n;
  for (int c = 0; c < n; ++c) {
    runtime::SamplingParams sp;
    sp.temperature = temperature;
    sp.seed = seed + static_cast<uint64_t>(c);
    r->sampling.push_back(sp);
  }
  return r;
}

}  // namespace gridq::serve::testing
