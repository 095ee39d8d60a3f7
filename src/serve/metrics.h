// Prometheus metrics (api.md §10): names follow vLLM's with the prefix `gridq:` and a model_name label.
// Thread-safe; render() writes the text exposition format 0.0.4.
// No label takes an unbounded value from a client (issue 14 item 1): every label set is a closed list chosen
// here, and a value outside it is counted as `other`, so neither memory nor /metrics grows with what clients
// send.
#pragma once

#include <array>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace gridq::serve {

// kIterTokens: tokens a scheduler step ran (vLLM's iteration_tokens_total). kDecodeStep / kDecodeForward: the
// wall time of a decode-only step (every row one sequence's next token: the steps that set the inter-token
// latency) and of its engine call (forward and sampling) within it; their difference is the scheduler's own
// host work a step.
enum class Hist {
  kTtft,
  kItl,
  kE2e,
  kQueue,
  kPrefill,
  kDecode,
  kPromptTokens,
  kGenTokens,
  kIterTokens,
  kDecodeStep,
  kDecodeForward,
  kCount
};

// The label values a method, handler, status or finish reason is counted under: the value itself when it is
// one of the known ones, else "other" (statuses: "other" outside 100..599).
std::string_view method_label(std::string_view method);
std::string_view finish_reason_label(std::string_view reason);

class Metrics {
 public:
  explicit Metrics(std::string model_name);
  // Adds a route name to the values the handler label may take (anything else counts as "other").
  void allow_handler(const std::string& name);
  void set_info(std::string artifact_sha256, std::string format);
  void inc_http(const std::string& handler, const std::string& method, int status);
  void add_prompt_tokens(int64_t n);
  void add_generation_tokens(int64_t n);
  void request_success(const std::string& finished_reason);
  void request_aborted();
  void observe(Hist h, double v);
  void set_gauges(int64_t running, int64_t waiting, double kv_usage);
  // KV pages (total -1: the engine has no page accounting; the page gauges then read 0).
  void set_kv_pages(int64_t total, int64_t used, int64_t cached);
  void add_preemptions(int64_t n);
  // Tokens looked up in the prefix cache, found there, and found but run again for the sliding rings.
  void add_prefix_cache(int64_t queried, int64_t hit, int64_t recomputed);
  // gridq:cache_config_info's labels (vLLM's): page size, pages, prefix caching on.
  void set_cache_config(int page_tokens, int64_t pages, bool prefix_caching);
  std::string render() const;

 private:
  struct Histogram {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;  // per bucket (not cumulative), +Inf last
    double sum = 0.0;
    uint64_t count = 0;
  };
  mutable std::mutex mu_;
  std::string model_, sha_, format_;
  std::vector<std::string> handlers_;
  // (handler, method, status) -> count; each part comes from a closed list, so the map is bounded.
  std::map<std::tuple<std::string, std::string, int>, uint64_t> http_;
  std::map<std::string, uint64_t> success_;
  uint64_t prompt_tokens_ = 0, gen_tokens_ = 0, aborted_ = 0;
  uint64_t preemptions_ = 0, prefix_queries_ = 0, prefix_hits_ = 0, prefix_recomputed_ = 0;
  int64_t running_ = 0, waiting_ = 0;
  int64_t pages_total_ = 0, pages_used_ = 0, pages_cached_ = 0;
  int cfg_page_tokens_ = 0;
  int64_t cfg_pages_ = 0;
  bool cfg_set_ = false, cfg_prefix_ = false;
  double kv_ = 0.0;
  std::array<Histogram, static_cast<size_t>(Hist::kCount)> hist_;
};

}  // namespace gridq::serve
