#include "serve/access_log.h"

#include <fmt/format.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "serve/openai_protocol.h"

namespace gridq::serve {

AccessLog::~AccessLog() {
  if (f_ && owned_) std::fclose(f_);
}

Status AccessLog::open(const std::string& path) {
  if (path == "-") {
    f_ = stderr;
    return {};
  }
  f_ = std::fopen(path.c_str(), "a");
  if (!f_) return err("--access-log {}: cannot open for appending", path);
  owned_ = true;
  return {};
}

void AccessLog::write(const AccessEntry& e) {
  if (!f_) return;
  nlohmann::ordered_json j;
  j["time"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  j["request_id"] = e.request_id;
  j["method"] = e.method;
  // The path is client data: bounded, and invalid UTF-8 replaced rather than refused.
  j["path"] = e.path.size() > 256 ? e.path.substr(0, 256) : e.path;
  j["status"] = e.status;
  if (e.prompt_tokens >= 0) {
    j["prompt_tokens"] = e.prompt_tokens;
    j["completion_tokens"] = e.completion_tokens;
  }
  j["latency_ms"] = std::round(e.latency_s * 1e4) / 10.0;
  j["stream"] = e.stream;
  if (e.client_gone) j["client_gone"] = true;
  const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::lock_guard lk(mu_);
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fflush(f_);
}

std::string request_id_for(const std::map<std::string, std::string>& headers) {
  if (auto it = headers.find("x-request-id"); it != headers.end()) {
    const std::string& v = it->second;
    bool sane = !v.empty() && v.size() <= 128;
    for (char c : v)
      sane = sane &&
             (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == ':' || c == '-');
    if (sane) return v;
  }
  return random_id("");
}

}  // namespace gridq::serve
