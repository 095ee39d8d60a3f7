// Per-request access log (issue 14 item 10, --access-log FILE, "-" for stderr) and the request id it is keyed
// by. One JSON object per line, so a client's path or id can never forge a line or a field: request_id,
// method, path, status, prompt/completion tokens (when a generation ran), latency, whether it streamed.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>

#include "core/status.h"

namespace gridq::serve {

struct AccessEntry {
  std::string request_id, method, path;
  int status = 0;
  int64_t prompt_tokens = -1, completion_tokens = -1;  // -1: not a generation request
  double latency_s = 0.0;
  bool stream = false;
  bool client_gone = false;  // the connection closed before the answer was complete
};

class AccessLog {
 public:
  AccessLog() = default;
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;
  // "-" is stderr; anything else is appended to.
  Status open(const std::string& path);
  bool enabled() const { return f_ != nullptr; }
  void write(const AccessEntry& e);

 private:
  std::mutex mu_;
  FILE* f_ = nullptr;
  bool owned_ = false;
};

// The X-Request-Id of a request (lower-case header map): the client's when it is 1..128 characters of
// [A-Za-z0-9._:-] (what request ids and UUIDs use; anything else could smuggle text into logs or headers),
// else a fresh random id.
std::string request_id_for(const std::map<std::string, std::string>& headers);

}  // namespace gridq::serve
