// Private to the HTTP transport (http_server.cpp, http_session.cpp, http_dispatch.cpp): the server's state
// and one connection's. A Session reads a request, hands it to dispatch (routing, auth, CORS) and writes
// the answer; every member runs on the connection's strand, so none of its fields needs a lock.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <deque>
#include <mutex>
#include <optional>

#include "serve/access_log.h"
#include "serve/http_server.h"

namespace gridq::serve {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

std::string ascii_lower(std::string_view s);
// An error the transport answers itself (before or instead of a handler), typed from its status.
ApiError transport_error(int status, std::string code, std::string message);

struct Session;

struct HttpServer::Impl {
  HttpOptions opts;
  Metrics* metrics;
  HttpServer* owner;
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  net::signal_set signals{ioc};
  std::vector<std::thread> threads;
  std::vector<Route> routes;
  std::function<void(int)> signal_cb;
  std::mutex sessions_mu;
  std::vector<std::weak_ptr<Session>> sessions;
  std::atomic<bool> stopping{false};
  // Sessions told to close at stop() whose queued output has not reached the socket yet.
  std::atomic<int> unflushed{0};
  AccessLog access_log;

  Impl(HttpOptions o, Metrics* m, HttpServer* s) : opts(std::move(o)), metrics(m), owner(s) {}
  void do_accept();
  void arm_signals() {
    signals.async_wait([this](const beast::error_code& ec, int sig) {
      if (ec) return;
      if (signal_cb) signal_cb(sig);
      arm_signals();
    });
  }
};

struct Session : std::enable_shared_from_this<Session> {
  HttpServer::Impl& srv;
  beast::tcp_stream stream;
  beast::flat_buffer buf;
  std::optional<http::request_parser<http::string_body>> parser;
  // Outgoing bytes, written one buffer at a time.
  std::deque<std::string> out;
  bool writing = false;
  bool close_after = false;  // close once `out` drains
  bool in_request = false;   // a request is being answered
  bool streaming = false;
  bool keep_alive = true;
  bool closed = false;
  bool draining_input = false;
  bool stop_pending = false;  // counted in srv.unflushed until its output is flushed or it closes
  bool head_only = false;     // a HEAD request: headers of the GET answer, no body (RFC 9110 §9.3.2)
  bool http10 = false;        // an HTTP/1.0 client: streams are close-delimited, never chunked
  std::string cors_origin;    // Access-Control-Allow-Origin for this request's answer ("" = none)
  uint64_t generation = 0;    // request counter; stale channels are ignored
  std::function<void()> disconnect_cb;
  std::string cur_handler, cur_method;
  // This request's X-Request-Id (echoed on every answer) and what the access log records of it.
  std::string request_id, log_path;
  std::chrono::steady_clock::time_point started;
  int64_t prompt_tokens = -1, completion_tokens = -1;

  Session(HttpServer::Impl& s, tcp::socket sock) : srv(s), stream(std::move(sock)) {}

  void start() { read_header(); }

  // ---- reading (http_session.cpp) ----
  void read_header();
  // Buffers the whole header block before Beast parses it: Beast silently unfolds obs-fold lines into
  // spaces, and RFC 9112 §5.2 lets a server do that only outside requests it acts on, so the raw bytes are
  // checked here and a folded request is refused with 400 (as are whitespace-led lines after the start line).
  void read_head_block();
  void parse_head();
  void fail_transport(const beast::error_code& ec);
  void on_header(beast::error_code ec);

  // ---- answering (http_dispatch.cpp) ----
  void on_request();
  void dispatch(HttpRequest req);

  // ---- writing (http_session.cpp) ----
  void enqueue(std::string data);
  void write_next();

  // `length` nullopt: a stream, chunked unless `close_delimited` (HTTP/1.0).
  static std::string head(int status, const std::string& content_type, std::optional<size_t> length,
                          bool keep, const std::vector<std::pair<std::string, std::string>>& extra,
                          bool close_delimited = false);

  void send_full(int status, const std::string& ct, std::string body,
                 const std::vector<std::pair<std::string, std::string>>& extra);
  void log_access(int status, bool gone);

  // The headers every answer to a dispatched request carries: X-Request-Id, and CORS when the origin may.
  std::vector<std::pair<std::string, std::string>> with_cors(
      std::vector<std::pair<std::string, std::string>> extra) const;

  void finish_request(bool keep);
  void respond_error_and_close(const ApiError& e);

  // ---- the client going away, closing ----
  void watch_disconnect(int spurious = 0);

  // EOF only says the client sent a FIN: it does so when it is gone and also when it merely half-closed
  // after its request (shutdown(SHUT_WR), issue 14 item 9), which must not cancel the request. Only a write
  // tells the two apart, as a closed socket answers data with a reset: send bytes the client must ignore
  // (an interim 100 before the answer, RFC 9110 §15.2; an SSE comment in a stream), then watch for the
  // reset for up to a second. HTTP/1.0 has no interim answers, so there EOF before the answer stays "gone".
  void probe_peer();
  void check_probe(int round);
  void notify_disconnect();

  // Half-closes and drains what the client still sends (e.g. a refused body) before closing, so the kernel
  // does not answer unread bytes with a reset that destroys our response before the client has read it.
  void graceful_close();
  void drain();
  void close();

  // Server stop: what is already queued (the last SSE events, [DONE], an abort's 503) is written first,
  // then the connection closes; one with nothing queued closes now.
  void close_when_flushed();
  void stop_flushed();
};

}  // namespace gridq::serve
