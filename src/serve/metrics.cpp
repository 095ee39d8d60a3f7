#include "serve/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "serve/process_metrics.h"

namespace gridq::serve {
namespace {
const char* kHistNames[] = {
    "time_to_first_token_seconds", "inter_token_latency_seconds",  "e2e_request_latency_seconds",
    "request_queue_time_seconds",  "request_prefill_time_seconds", "request_decode_time_seconds",
    "request_prompt_tokens",       "request_generation_tokens",    "iteration_tokens_total",
    "decode_step_seconds",         "decode_step_forward_seconds"};
const char* kHistHelp[] = {"Time to first token",
                           "Time between output tokens",
                           "End-to-end request latency",
                           "Time spent waiting in the queue",
                           "Time spent in prefill",
                           "Time spent in decode",
                           "Prompt tokens per request",
                           "Generated tokens per request",
                           "Tokens per scheduler step",
                           "Wall time of a decode-only scheduler step",
                           "Wall time of a decode-only step's forward and sampling"};
static_assert(std::size(kHistNames) == static_cast<size_t>(Hist::kCount) &&
              std::size(kHistHelp) == static_cast<size_t>(Hist::kCount));

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\' || c == '"') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}
std::string num(double v) { return fmt::format("{}", v); }

// vLLM's names for the families both servers export (vllm-project/vllm docs/design/metrics.md), so
// dashboards and alerts written for vLLM work unchanged. Always on: the copy is a fixed set of families
// with the same bounded labels (a few KB per scrape), and a flag would only be one more thing to get wrong
// when pointing an existing dashboard at gridq.
constexpr std::string_view kVllmFamilies[] = {
    "num_requests_running",        "num_requests_waiting",        "kv_cache_usage_perc",
    "prompt_tokens_total",         "generation_tokens_total",     "request_success_total",
    "num_preemptions_total",       "prefix_cache_queries_total",  "prefix_cache_hits_total",
    "cache_config_info",           "time_to_first_token_seconds", "inter_token_latency_seconds",
    "e2e_request_latency_seconds", "request_queue_time_seconds",  "request_prefill_time_seconds",
    "request_decode_time_seconds", "request_prompt_tokens",       "request_generation_tokens",
    "iteration_tokens_total"};

// The families of `text` (each starts at its HELP line) named in kVllmFamilies, with `vllm:` for `gridq:`.
std::string vllm_names(const std::string& text) {
  std::string out;
  bool keep = false;
  size_t p = 0;
  while (p < text.size()) {
    size_t e = text.find('\n', p);
    if (e == std::string::npos) e = text.size();
    std::string_view line(text.data() + p, e - p);
    constexpr std::string_view kHelp = "# HELP gridq:";
    if (line.substr(0, kHelp.size()) == kHelp) {
      std::string_view name = line.substr(kHelp.size());
      name = name.substr(0, name.find(' '));
      keep = false;
      for (auto f : kVllmFamilies) keep = keep || f == name;
    }
    if (const size_t at = line.find("gridq:"); keep && at != std::string_view::npos)
      out.append(line.substr(0, at)).append("vllm:").append(line.substr(at + 6)).append("\n");
    p = e + 1;
  }
  return out;
}

// RFC 9110 §9 methods; other tokens (any length) are "other". The server refuses them before counting
// (501), so this is the second line of defence.
constexpr std::string_view kMethods[] = {"GET",     "HEAD",    "POST",  "PUT",  "DELETE",
                                         "CONNECT", "OPTIONS", "TRACE", "PATCH"};
constexpr std::string_view kFinishReasons[] = {"stop", "length", "tool_calls"};
constexpr std::string_view kOther = "other";
}  // namespace

std::string_view method_label(std::string_view method) {
  for (auto m : kMethods)
    if (m == method) return m;
  return kOther;
}

std::string_view finish_reason_label(std::string_view reason) {
  for (auto r : kFinishReasons)
    if (r == reason) return r;
  return kOther;
}

Metrics::Metrics(std::string model_name) : model_(std::move(model_name)) {
  const std::vector<double> secs = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
                                    0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
  const std::vector<double> toks = {1,   2,    5,    10,   20,    50,    100,  200,
                                    500, 1000, 2000, 5000, 10000, 20000, 50000};
  // A step's time: fine buckets around the 5-60 ms that a decode step of a large model takes.
  const std::vector<double> step = {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.0175, 0.02, 0.025,
                                    0.03,  0.035,  0.04,  0.05,   0.06, 0.08,   0.1,   0.15,   0.25, 0.5};
  for (size_t i = 0; i < hist_.size(); ++i) {
    auto& h = hist_[i];
    const auto which = static_cast<Hist>(i);
    h.bounds = which == Hist::kPromptTokens || which == Hist::kGenTokens || which == Hist::kIterTokens ? toks
               : which == Hist::kDecodeStep || which == Hist::kDecodeForward                           ? step
                                                                                                       : secs;
    h.counts.assign(h.bounds.size() + 1, 0);
  }
}

void Metrics::set_info(std::string sha, std::string format) {
  std::lock_guard lk(mu_);
  sha_ = std::move(sha);
  format_ = std::move(format);
}
void Metrics::allow_handler(const std::string& name) {
  std::lock_guard lk(mu_);
  if (std::find(handlers_.begin(), handlers_.end(), name) == handlers_.end()) handlers_.push_back(name);
}
void Metrics::inc_http(const std::string& handler, const std::string& method, int status) {
  std::lock_guard lk(mu_);
  std::string h(kOther);
  for (const auto& known : handlers_)
    if (known == handler) h = handler;
  ++http_[{std::move(h), std::string(method_label(method)), status >= 100 && status <= 599 ? status : 0}];
}
void Metrics::add_prompt_tokens(int64_t n) {
  std::lock_guard lk(mu_);
  prompt_tokens_ += static_cast<uint64_t>(n);
}
void Metrics::add_generation_tokens(int64_t n) {
  std::lock_guard lk(mu_);
  gen_tokens_ += static_cast<uint64_t>(n);
}
void Metrics::request_success(const std::string& r) {
  std::lock_guard lk(mu_);
  ++success_[std::string(finish_reason_label(r))];
}
void Metrics::request_aborted() {
  std::lock_guard lk(mu_);
  ++aborted_;
}
void Metrics::observe(Hist which, double v) {
  std::lock_guard lk(mu_);
  auto& h = hist_[static_cast<size_t>(which)];
  size_t b = 0;
  while (b < h.bounds.size() && v > h.bounds[b]) ++b;
  ++h.counts[b];
  h.sum += v;
  ++h.count;
}
void Metrics::set_gauges(int64_t running, int64_t waiting, double kv) {
  std::lock_guard lk(mu_);
  running_ = running;
  waiting_ = waiting;
  kv_ = kv;
}

void Metrics::set_kv_pages(int64_t total, int64_t used, int64_t cached) {
  std::lock_guard lk(mu_);
  pages_total_ = std::max<int64_t>(total, 0);
  pages_used_ = total < 0 ? 0 : used;
  pages_cached_ = total < 0 ? 0 : cached;
}
void Metrics::add_preemptions(int64_t n) {
  std::lock_guard lk(mu_);
  preemptions_ += static_cast<uint64_t>(n);
}
void Metrics::add_prefix_cache(int64_t queried, int64_t hit, int64_t recomputed) {
  std::lock_guard lk(mu_);
  prefix_queries_ += static_cast<uint64_t>(queried);
  prefix_hits_ += static_cast<uint64_t>(hit);
  prefix_recomputed_ += static_cast<uint64_t>(recomputed);
}
void Metrics::set_cache_config(int page_tokens, int64_t pages, bool prefix_caching) {
  std::lock_guard lk(mu_);
  cfg_set_ = true;
  cfg_page_tokens_ = page_tokens;
  cfg_pages_ = pages;
  cfg_prefix_ = prefix_caching;
}

std::string Metrics::render() const {
  std::lock_guard lk(mu_);
  const std::string ml = fmt::format("model_name=\"{}\"", esc(model_));
  std::string o;
  auto gauge = [&](const char* name, const char* help, double v) {
    o += fmt::format("# HELP gridq:{} {}\n# TYPE gridq:{} gauge\ngridq:{}{{{}}} {}\n", name, help, name, name,
                     ml, num(v));
  };
  // Counters are named with their `_total` on the HELP and TYPE lines too, as prometheus_client writes
  // the 0.0.4 format: its parser types a sample only when its name is the TYPE line's name.
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    o += fmt::format("# HELP gridq:{}_total {}\n# TYPE gridq:{}_total counter\ngridq:{}_total{{{}}} {}\n",
                     name, help, name, name, ml, v);
  };
  gauge("num_requests_running", "Requests with sequences in the running batch",
        static_cast<double>(running_));
  gauge("num_requests_waiting", "Requests waiting to be scheduled", static_cast<double>(waiting_));
  gauge("kv_cache_usage_perc", "Fraction of KV cache capacity in use (1 = full)", kv_);
  counter("prompt_tokens", "Prefill tokens processed", prompt_tokens_);
  counter("generation_tokens", "Generated tokens", gen_tokens_);
  counter("request_aborted", "Requests aborted (client gone, shutdown)", aborted_);
  gauge("kv_cache_pages_used", "KV pages referenced by running sequences", static_cast<double>(pages_used_));
  gauge("kv_cache_pages_free", "KV pages free, cached ones included (evictable)",
        static_cast<double>(pages_total_ - pages_used_));
  gauge("kv_cache_pages_cached", "Unreferenced KV pages kept for prefix-cache hits",
        static_cast<double>(pages_cached_));
  counter("num_preemptions", "Requests preempted (KV dropped, recomputed later)", preemptions_);
  counter("prefix_cache_queries", "Prefix cache queries, in tokens", prefix_queries_);
  counter("prefix_cache_hits", "Prefix cache hits, in tokens", prefix_hits_);
  counter("prefix_cache_recomputed_tokens",
          "Prefix-cache hit tokens run again to rebuild the sliding-window rings", prefix_recomputed_);
  if (cfg_set_)
    o += fmt::format(
        "# HELP gridq:cache_config_info KV cache configuration\n# TYPE gridq:cache_config_info gauge\n"
        "gridq:cache_config_info{{{},block_size=\"{}\",num_gpu_blocks=\"{}\",enable_prefix_caching=\"{}\"}} "
        "1\n",
        ml, cfg_page_tokens_, cfg_pages_, cfg_prefix_ ? "True" : "False");
  o += "# HELP gridq:request_success_total Finished requests by finish reason\n# TYPE "
       "gridq:request_success_total counter\n";
  for (const char* r : {"stop", "length", "tool_calls", "other"}) {
    auto it = success_.find(r);
    o += fmt::format("gridq:request_success_total{{{},finished_reason=\"{}\"}} {}\n", ml, r,
                     it == success_.end() ? 0 : it->second);
  }
  o += "# HELP gridq:http_requests_total HTTP requests by handler, method and status\n# TYPE "
       "gridq:http_requests_total counter\n";
  for (const auto& [k, v] : http_) {
    const int st = std::get<2>(k);
    o += fmt::format("gridq:http_requests_total{{{},handler=\"{}\",method=\"{}\",status=\"{}\"}} {}\n", ml,
                     esc(std::get<0>(k)), esc(std::get<1>(k)), st ? std::to_string(st) : "other", v);
  }
  for (size_t i = 0; i < hist_.size(); ++i) {
    const auto& h = hist_[i];
    o += fmt::format("# HELP gridq:{} {}\n# TYPE gridq:{} histogram\n", kHistNames[i], kHistHelp[i],
                     kHistNames[i]);
    uint64_t cum = 0;
    for (size_t b = 0; b < h.bounds.size(); ++b) {
      cum += h.counts[b];
      o += fmt::format("gridq:{}_bucket{{{},le=\"{}\"}} {}\n", kHistNames[i], ml, num(h.bounds[b]), cum);
    }
    cum += h.counts.back();
    o += fmt::format("gridq:{}_bucket{{{},le=\"+Inf\"}} {}\n", kHistNames[i], ml, cum);
    o += fmt::format("gridq:{}_sum{{{}}} {}\ngridq:{}_count{{{}}} {}\n", kHistNames[i], ml, num(h.sum),
                     kHistNames[i], ml, h.count);
  }
  o += fmt::format(
      "# HELP gridq:model_info Served model\n# TYPE gridq:model_info gauge\n"
      "gridq:model_info{{{},artifact_sha256=\"{}\",format=\"{}\"}} 1\n",
      ml, esc(sha_), esc(format_));
  o += vllm_names(o);
  o += process_metrics_text();
  return o;
}

}  // namespace gridq::serve
