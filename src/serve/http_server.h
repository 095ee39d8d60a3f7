// HTTP/1.1 transport on Boost.Beast (api.md §1, §3, §9): keep-alive, header/body size limits and read
// timeouts, 413/415/431 before the body is read, chunked SSE responses, one auth middleware over the route
// table (public routes are an explicit allowlist), 404/405 in the OpenAI error shape, disconnect detection
// while a request is in flight, and draining on shutdown (new requests 503 shutting_down, Connection: close).
// Handlers run on the connection's strand and answer through a thread-safe ResponseChannel. The connection
// (http_session.*) and the routing (http_dispatch.cpp) are private to the transport.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "serve/metrics.h"
#include "serve/openai_protocol.h"

namespace gridq::serve {

struct HttpRequest {
  std::string method;
  std::string path;                            // target without the query string
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  int version = 11;  // 10 or 11
};

// Answers one request. Safe to call from any thread; calls after the connection is gone are dropped.
class ResponseChannel {
 public:
  virtual ~ResponseChannel() = default;
  virtual void send(int status, std::string content_type, std::string body,
                    std::vector<std::pair<std::string, std::string>> headers = {}) = 0;
  void send_error(const ApiError& e) { send(e.status, "application/json", error_body(e), e.headers); }
  // SSE: a 200 text/event-stream response with chunked encoding (HTTP/1.0 clients: delimited by closing the
  // connection, as they cannot read chunks); write() sends raw event bytes.
  virtual void start_stream() = 0;
  virtual void write(std::string data) = 0;
  virtual void end_stream() = 0;
  // `cb` runs once (on an I/O thread) when the client disconnects before the response is complete.
  virtual void on_disconnect(std::function<void()> cb) = 0;
  // The request's token counts, for the access log; call before the answer (send, end_stream).
  virtual void note_usage(int64_t /*prompt_tokens*/, int64_t /*completion_tokens*/) {}
};

using Handler = std::function<void(const HttpRequest&, std::shared_ptr<ResponseChannel>)>;

struct Route {
  std::string path;
  std::string method;
  std::string name;  // metrics handler label
  Handler handler;
  bool is_public = false;
  bool prefix = false;  // `path` ends with '/' and matches every longer path (/v1/models/{id})
};

struct HttpOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;
  std::vector<std::string> api_keys;
  // CORS (vLLM's --allowed-origins, default every origin): origins whose browsers may read answers; "*" is
  // any. A preflight is answered before auth with no data; the request it announces still needs a key.
  std::vector<std::string> allowed_origins = {"*"};
  size_t max_body_bytes = 2u << 20;
  size_t max_header_bytes = 16u << 10;
  size_t max_headers = 100;
  double header_timeout_s = 20.0;
  double body_timeout_s = 30.0;
  double write_timeout_s = 60.0;
  int io_threads = 2;
  std::string access_log;  // --access-log: a file, "-" for stderr, "" for none (serve/access_log.h)
};

class HttpServer {
 public:
  HttpServer(HttpOptions opts, Metrics* metrics);
  ~HttpServer();
  void add_route(Route r);
  // Adds `path` to the public allowlist (no API key), e.g. /metrics with --metrics-public.
  void make_public(const std::string& path);
  // Binds and starts the I/O threads. Returns the bound port (useful with port 0).
  Expected<uint16_t> start();
  // New requests now get 503 shutting_down with Connection: close.
  void set_draining() { draining_ = true; }
  bool draining() const { return draining_; }
  // Stops accepting, closes connections and joins the I/O threads.
  void stop();
  // Calls `cb` (on an I/O thread) for each SIGINT/SIGTERM received after start().
  void on_signal(std::function<void(int)> cb);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> draining_{false};
};

// Constant-time comparison of a presented key against every configured key.
bool key_matches(const std::vector<std::string>& keys, std::string_view presented);

}  // namespace gridq::serve
