#include "serve/http_server.h"

#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <array>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <deque>
#include <mutex>

#include "serve/access_log.h"

namespace gridq::serve {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

bool key_matches(const std::vector<std::string>& keys, std::string_view presented) {
  bool any = false;
  for (const auto& k : keys) {
    // Length is not secret; the byte comparison does not stop early.
    unsigned char diff = k.size() == presented.size() ? 0 : 1;
    const size_t n = std::max(k.size(), presented.size());
    for (size_t i = 0; i < n; ++i) {
      unsigned char a = i < k.size() ? static_cast<unsigned char>(k[i]) : 0;
      unsigned char b = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0;
      diff |= static_cast<unsigned char>(a ^ b);
    }
    any |= diff == 0;
  }
  return any;
}

namespace {

const char* reason_phrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 100:
      return "Continue";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 417:
      return "Expectation Failed";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

std::string lower(std::string_view s) {
  std::string o(s);
  for (auto& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

bool route_matches(const Route& r, const std::string& path) {
  return r.prefix ? path.size() > r.path.size() && path.compare(0, r.path.size(), r.path) == 0
                  : r.path == path;
}

ApiError transport_error(int status, std::string code, std::string message) {
  ApiError e;
  e.status = status;
  e.type = status == 401   ? "authentication_error"
           : status == 404 ? "not_found_error"
           : status == 503 ? "unavailable_error"
           : status == 429 ? "rate_limit_error"
           : status >= 500 ? "server_error"
                           : "invalid_request_error";
  e.code = std::move(code);
  e.message = std::move(message);
  return e;
}

}  // namespace

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

  void read_header() {
    if (closed) return;
    // Labels of the previous request on this connection must not be counted against this one's errors.
    cur_handler.clear();
    cur_method.clear();
    request_id.clear();
    stream.expires_after(std::chrono::milliseconds(static_cast<int64_t>(srv.opts.header_timeout_s * 1000)));
    read_head_block();
  }

  // Buffers the whole header block before Beast parses it: Beast silently unfolds obs-fold lines into
  // spaces, and RFC 9112 §5.2 lets a server do that only outside requests it acts on, so the raw bytes are
  // checked here and a folded request is refused with 400 (as are whitespace-led lines after the start line).
  void read_head_block() {
    const auto data = buf.data();
    const std::string_view v(static_cast<const char*>(data.data()), data.size());
    if (const size_t end = v.find("\r\n\r\n"); end != std::string_view::npos) {
      const std::string_view head = v.substr(0, end + 2);
      for (size_t p = head.find("\r\n"); p != std::string_view::npos; p = head.find("\r\n", p + 2)) {
        if (p + 2 < head.size() && (head[p + 2] == ' ' || head[p + 2] == '\t'))
          return respond_error_and_close(transport_error(
              400, "bad_request", "malformed HTTP request: obsolete line folding (obs-fold) in the headers"));
      }
      return parse_head();
    }
    if (v.size() > srv.opts.max_header_bytes)
      return respond_error_and_close(
          transport_error(431, "headers_too_large", "request headers exceed the limit"));
    stream.async_read_some(buf.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
      if (ec) return self->fail_transport(ec);
      self->buf.commit(n);
      self->read_head_block();
    });
  }

  void parse_head() {
    parser.emplace();
    parser->header_limit(static_cast<std::uint32_t>(srv.opts.max_header_bytes));
    parser->body_limit(srv.opts.max_body_bytes);
    http::async_read_header(stream, buf, *parser, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->on_header(ec);
    });
  }

  void fail_transport(const beast::error_code& ec) {
    if (ec == http::error::header_limit)
      return respond_error_and_close(
          transport_error(431, "headers_too_large", "request headers exceed the limit"));
    if (ec == http::error::body_limit)
      return respond_error_and_close(transport_error(
          413, "payload_too_large", fmt::format("request body exceeds {} bytes", srv.opts.max_body_bytes)));
    if (ec == beast::error::timeout || ec == http::error::end_of_stream || ec == net::error::eof ||
        ec == net::error::connection_reset || ec == net::error::operation_aborted) {
      return close();
    }
    if (ec.category() == http::make_error_code(http::error::bad_target).category())
      return respond_error_and_close(
          transport_error(400, "bad_request", "malformed HTTP request: " + ec.message()));
    close();
  }

  void on_header(beast::error_code ec) {
    if (ec) return fail_transport(ec);
    const auto& h = parser->get();
    size_t n = 0;
    for (auto it = h.begin(); it != h.end(); ++it) ++n;
    if (n > srv.opts.max_headers)
      return respond_error_and_close(transport_error(
          431, "headers_too_large", fmt::format("more than {} request headers", srv.opts.max_headers)));
    // Fields that decide who is asking and how the body is read must be unambiguous (RFC 9110 §5.3): two
    // values could be checked by one hop and used by another.
    for (const char* name : {"authorization", "x-api-key", "host", "content-type", "content-encoding"}) {
      if (h.count(name) > 1)
        return respond_error_and_close(
            transport_error(400, "bad_request", fmt::format("duplicate {} header", name)));
    }
    if (auto ce = h.find(http::field::content_encoding); ce != h.end() && lower(ce->value()) != "identity")
      return respond_error_and_close(transport_error(
          415, "unsupported_media_type", "Content-Encoding other than identity is not supported"));
    if (auto cl = parser->content_length(); cl && *cl > srv.opts.max_body_bytes)
      return respond_error_and_close(transport_error(
          413, "payload_too_large", fmt::format("request body exceeds {} bytes", srv.opts.max_body_bytes)));
    // curl and many HTTP libraries send Expect: 100-continue with larger bodies and wait for the interim
    // answer (curl up to 1 s) before sending the body; any other expectation is refused (RFC 9110 §10.1.1).
    if (auto ex = h.find(http::field::expect); ex != h.end()) {
      if (lower(ex->value()) != "100-continue")
        return respond_error_and_close(
            transport_error(417, "expectation_failed", "only Expect: 100-continue is supported"));
      if (!parser->is_done() && h.version() >= 11) enqueue("HTTP/1.1 100 Continue\r\n\r\n");
    }
    if (parser->is_done()) return on_request();
    stream.expires_after(std::chrono::milliseconds(static_cast<int64_t>(srv.opts.body_timeout_s * 1000)));
    http::async_read(stream, buf, *parser, [self = shared_from_this()](beast::error_code e, size_t) {
      if (e) return self->fail_transport(e);
      self->on_request();
    });
  }

  void on_request();
  void dispatch(HttpRequest req);

  // ---- writing ----
  void enqueue(std::string data) {
    if (closed) return;
    out.push_back(std::move(data));
    if (!writing) write_next();
  }
  void write_next() {
    if (out.empty()) {
      writing = false;
      if (close_after) {
        stop_flushed();
        return graceful_close();
      }
      return;
    }
    writing = true;
    stream.expires_after(std::chrono::milliseconds(static_cast<int64_t>(srv.opts.write_timeout_s * 1000)));
    net::async_write(stream, net::buffer(out.front()),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) {
                         self->notify_disconnect();
                         return self->close();
                       }
                       self->out.pop_front();
                       self->write_next();
                     });
  }

  // `length` nullopt: a stream, chunked unless `close_delimited` (HTTP/1.0).
  static std::string head(int status, const std::string& content_type, std::optional<size_t> length,
                          bool keep, const std::vector<std::pair<std::string, std::string>>& extra,
                          bool close_delimited = false) {
    std::string s = fmt::format("HTTP/1.1 {} {}\r\nServer: gridq\r\n", status, reason_phrase(status));
    if (!content_type.empty()) s += "Content-Type: " + content_type + "\r\n";
    if (length)
      s += fmt::format("Content-Length: {}\r\n", *length);
    else if (close_delimited)
      s += "Cache-Control: no-cache\r\n";
    else
      s += "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n";
    for (const auto& [k, v] : extra) s += k + ": " + v + "\r\n";
    s += keep ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    return s;
  }

  void send_full(int status, const std::string& ct, std::string body,
                 const std::vector<std::pair<std::string, std::string>>& extra) {
    if (!in_request || closed) return;
    if (srv.metrics && !cur_handler.empty()) srv.metrics->inc_http(cur_handler, cur_method, status);
    log_access(status, false);
    bool keep = keep_alive && !srv.owner->draining();
    std::string s = head(status, ct, body.size(), keep, with_cors(extra));
    if (!head_only) s += body;
    finish_request(keep);
    enqueue(std::move(s));
  }

  void log_access(int status, bool gone) {
    if (!srv.access_log.enabled() || request_id.empty()) return;
    AccessEntry e;
    e.request_id = request_id;
    e.method = cur_method.empty() ? "other" : cur_method;
    e.path = log_path;
    e.status = status;
    e.prompt_tokens = prompt_tokens;
    e.completion_tokens = completion_tokens;
    e.latency_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    e.stream = streaming;
    e.client_gone = gone;
    srv.access_log.write(e);
  }

  // The headers every answer to a dispatched request carries: X-Request-Id, and CORS when the origin may.
  std::vector<std::pair<std::string, std::string>> with_cors(
      std::vector<std::pair<std::string, std::string>> extra) const {
    if (!request_id.empty()) extra.push_back({"X-Request-Id", request_id});
    if (!cors_origin.empty()) {
      extra.push_back({"Access-Control-Allow-Origin", cors_origin});
      if (cors_origin != "*") extra.push_back({"Vary", "Origin"});
    }
    return extra;
  }

  void finish_request(bool keep) {
    in_request = false;
    streaming = false;
    disconnect_cb = nullptr;
    ++generation;
    if (!keep) {
      close_after = true;
    } else {
      // Read the next request while the response drains (keep-alive).
      net::post(stream.get_executor(), [self = shared_from_this()] { self->read_header(); });
    }
  }

  void respond_error_and_close(const ApiError& e) {
    // Refused before dispatch (431, 413, obs-fold, duplicate fields...): the client's headers are not
    // trusted, so the id is a fresh one, and the access log still records the refusal.
    if (!in_request) {
      request_id = random_id("");
      started = std::chrono::steady_clock::now();
      log_path.clear();
    }
    in_request = true;
    keep_alive = false;
    send_full(e.status, "application/json", error_body(e), e.headers);
  }

  void watch_disconnect(int spurious = 0) {
    // A readable socket while we answer means EOF/reset (client gone) or pipelined bytes (no longer
    // watched: EOF behind them cannot be seen without reading them). The reactor may also report readiness
    // with nothing to read (seen under load): then wait again, a bounded number of times.
    stream.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this(), gen = generation,
                                                        spurious](beast::error_code ec) {
      if (self->closed || gen != self->generation || !self->in_request) return;
      if (ec) return self->notify_disconnect();
      char c;
      ssize_t r = ::recv(self->stream.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (r == 0) return self->probe_peer();
      if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return self->notify_disconnect();
      if (r < 0 && spurious < 64) self->watch_disconnect(spurious + 1);
    });
  }

  // EOF only says the client sent a FIN: it does so when it is gone and also when it merely half-closed
  // after its request (shutdown(SHUT_WR), issue 14 item 9), which must not cancel the request. Only a write
  // tells the two apart, as a closed socket answers data with a reset: send bytes the client must ignore
  // (an interim 100 before the answer, RFC 9110 §15.2; an SSE comment in a stream), then watch for the
  // reset for up to a second. HTTP/1.0 has no interim answers, so there EOF before the answer stays "gone".
  void probe_peer() {
    if (!streaming && http10) return notify_disconnect();
    if (streaming)
      enqueue(http10 ? std::string(": probe\n\n") : std::string("9\r\n: probe\n\n\r\n"));
    else
      enqueue("HTTP/1.1 100 Continue\r\n\r\n");
    check_probe(0);
  }
  void check_probe(int round) {
    auto t = std::make_shared<net::steady_timer>(stream.get_executor(), std::chrono::milliseconds(50));
    t->async_wait([self = shared_from_this(), t, gen = generation, round](beast::error_code ec) {
      if (ec || self->closed || gen != self->generation || !self->in_request) return;
      char c;
      ssize_t r = ::recv(self->stream.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return self->notify_disconnect();
      if (r == 0 && round < 20) self->check_probe(round + 1);
      // Still only EOF after a second: a half-closed client, alive; its answer is sent when ready (a
      // failed write still reports it gone).
    });
  }

  void notify_disconnect() {
    if (auto cb = std::move(disconnect_cb)) {
      disconnect_cb = nullptr;
      cb();
    }
  }

  // Half-closes and drains what the client still sends (e.g. a refused body) before closing, so the kernel
  // does not answer unread bytes with a reset that destroys our response before the client has read it.
  void graceful_close() {
    if (closed || draining_input) return;
    draining_input = true;
    beast::error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream.expires_after(std::chrono::seconds(2));
    drain();
  }
  void drain() {
    auto b = std::make_shared<std::array<char, 8192>>();
    stream.async_read_some(net::buffer(*b), [self = shared_from_this(), b](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->drain();
    });
  }

  void close() {
    if (closed) return stop_flushed();
    closed = true;
    if (in_request) log_access(streaming ? 200 : 499, true);  // 499: nginx's "client closed request"
    notify_disconnect();
    beast::error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream.close();
    stop_flushed();
  }

  // Server stop: what is already queued (the last SSE events, [DONE], an abort's 503) is written first,
  // then the connection closes; one with nothing queued closes now.
  void close_when_flushed() {
    stop_pending = true;
    if (!closed && (writing || !out.empty())) {
      close_after = true;
      return;
    }
    close();
  }
  void stop_flushed() {
    if (!stop_pending) return;
    stop_pending = false;
    --srv.unflushed;
  }
};

namespace {

// A request's answer. It owns its session: a connection lives while its request does, whatever I/O is
// pending (between two SSE writes nothing else may hold it).
class Channel final : public ResponseChannel {
 public:
  Channel(std::shared_ptr<Session> s, uint64_t gen) : s_(std::move(s)), gen_(gen) {}
  void send(int status, std::string ct, std::string body,
            std::vector<std::pair<std::string, std::string>> headers) override {
    run([status, ct = std::move(ct), body = std::move(body),
         headers = std::move(headers)](Session& s) mutable {
      if (s.streaming) return;
      s.send_full(status, ct, std::move(body), headers);
    });
  }
  void start_stream() override {
    run([](Session& s) {
      if (s.streaming || !s.in_request) return;
      s.streaming = true;
      if (s.srv.metrics && !s.cur_handler.empty()) s.srv.metrics->inc_http(s.cur_handler, s.cur_method, 200);
      if (s.http10) s.keep_alive = false;  // the end of the stream is the end of the connection
      s.enqueue(Session::head(200, "text/event-stream", std::nullopt,
                              s.keep_alive && !s.srv.owner->draining(), s.with_cors({}), s.http10));
    });
  }
  void write(std::string data) override {
    run([data = std::move(data)](Session& s) {
      if (!s.streaming || data.empty()) return;
      if (s.http10) return s.enqueue(std::move(data));
      s.enqueue(fmt::format("{:x}\r\n", data.size()) + data + "\r\n");
    });
  }
  void end_stream() override {
    run([](Session& s) {
      if (!s.streaming) return;
      if (!s.http10) s.enqueue("0\r\n\r\n");
      s.log_access(200, false);
      s.finish_request(s.keep_alive && !s.srv.owner->draining());
      // HTTP/1.0: the close is the stream's end, and nothing more is queued to trigger it when the last
      // event has already been written: close now (write_next closes once `out` is empty).
      if (s.http10 && !s.writing) s.write_next();
    });
  }
  void note_usage(int64_t prompt_tokens, int64_t completion_tokens) override {
    run([prompt_tokens, completion_tokens](Session& s) {
      s.prompt_tokens = prompt_tokens;
      s.completion_tokens = completion_tokens;
    });
  }
  void on_disconnect(std::function<void()> cb) override {
    run([cb = std::move(cb)](Session& s) mutable {
      if (!s.in_request || s.closed) {
        cb();
        return;
      }
      s.disconnect_cb = std::move(cb);
      s.watch_disconnect();
    });
  }

 private:
  template <typename F>
  void run(F&& f) {
    net::post(s_->stream.get_executor(), [s = s_, gen = gen_, f = std::forward<F>(f)]() mutable {
      if (s->closed || s->generation != gen) return;
      f(*s);
    });
  }
  std::shared_ptr<Session> s_;
  uint64_t gen_;
};

}  // namespace

void Session::on_request() {
  stream.expires_never();
  auto msg = parser->release();
  keep_alive = msg.keep_alive();
  http10 = msg.version() < 11;
  HttpRequest req;
  req.version = static_cast<int>(msg.version());
  req.method = std::string(msg.method_string());
  std::string target(msg.target());
  req.path = target.substr(0, target.find('?'));
  for (const auto& f : msg) req.headers[lower(f.name_string())] = std::string(f.value());
  req.body = std::move(msg.body());
  dispatch(std::move(req));
}

void Session::dispatch(HttpRequest req) {
  in_request = true;
  cur_handler.clear();
  cur_method.clear();
  request_id = request_id_for(req.headers);
  log_path = req.path;
  started = std::chrono::steady_clock::now();
  prompt_tokens = completion_tokens = -1;
  // A method token is client data of any length: one that is not an RFC 9110 method is refused here, before
  // auth, routing or any metric sees it (vLLM's uvicorn answers unknown tokens without reaching the app).
  if (method_label(req.method) == "other") {
    auto e = transport_error(501, "not_implemented", "the request method is not implemented");
    return send_full(501, "application/json", error_body(e), {});
  }
  cur_method = req.method;
  head_only = false;
  cors_origin.clear();
  if (auto o = req.headers.find("origin"); o != req.headers.end()) {
    for (const auto& allowed : srv.opts.allowed_origins)
      if (allowed == "*" || allowed == o->second) cors_origin = allowed == "*" ? "*" : o->second;
    // A preflight (Fetch standard): answered before auth, like vLLM's (Starlette's) CORS middleware, with
    // no data; the request it announces is checked like any other.
    if (req.method == "OPTIONS" && req.headers.count("access-control-request-method")) {
      if (cors_origin.empty()) {
        auto e = transport_error(400, "cors_origin_not_allowed", "the Origin is not in --allowed-origins");
        return send_full(400, "application/json", error_body(e), {});
      }
      std::vector<std::pair<std::string, std::string>> h = {
          {"Access-Control-Allow-Methods", "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"},
          {"Access-Control-Max-Age", "600"}};
      if (auto rh = req.headers.find("access-control-request-headers"); rh != req.headers.end())
        h.push_back({"Access-Control-Allow-Headers", rh->second});
      return send_full(200, "text/plain", "", h);
    }
  }
  const Route* match = nullptr;
  const Route* get_route = nullptr;
  std::string allow;
  for (const auto& r : srv.routes) {
    if (!route_matches(r, req.path)) continue;
    if (!allow.empty()) allow += ", ";
    allow += r.method;
    if (r.method == req.method) match = &r;
    if (r.method == "GET") get_route = &r;
  }
  // HEAD is answered by the GET route of the path, without the body.
  if (get_route) allow += ", HEAD";
  if (!match && req.method == "HEAD" && get_route) {
    match = get_route;
    head_only = true;
  }
  bool path_known = !allow.empty();
  bool is_public = false;
  for (const auto& r : srv.routes)
    if (route_matches(r, req.path) && r.is_public) is_public = true;
  // The handler label is always a route name, never the request's own path.
  for (const auto& r : srv.routes)
    if (route_matches(r, req.path) && (match == nullptr || &r == match)) {
      cur_handler = r.name;
      break;
    }
  // Auth is one middleware over every route (known or not) except the public allowlist.
  if (!is_public && !srv.opts.api_keys.empty()) {
    std::string presented;
    if (auto it = req.headers.find("authorization"); it != req.headers.end()) {
      std::string_view v = it->second;
      if (v.size() > 7 && lower(v.substr(0, 7)) == "bearer ") presented = std::string(v.substr(7));
    } else if (auto x = req.headers.find("x-api-key"); x != req.headers.end()) {
      presented = x->second;
    }
    if (presented.empty() || !key_matches(srv.opts.api_keys, presented)) {
      auto e = transport_error(401, "invalid_api_key", "missing or invalid API key");
      e.headers.push_back({"WWW-Authenticate", "Bearer"});
      return send_full(401, "application/json", error_body(e), e.headers);
    }
  }
  if (!path_known) {
    auto e = transport_error(404, "unknown_route", fmt::format("no route {} {}", req.method, req.path));
    return send_full(404, "application/json", error_body(e), {});
  }
  if (!match) {
    auto e =
        transport_error(405, "method_not_allowed", fmt::format("{} does not allow {}", req.path, req.method));
    return send_full(405, "application/json", error_body(e), {{"Allow", allow}});
  }
  if (srv.owner->draining() && !match->is_public) {
    keep_alive = false;
    auto e = transport_error(503, "shutting_down", "the server is shutting down");
    return send_full(503, "application/json", error_body(e), {{"Retry-After", "5"}});
  }
  if (req.method == "POST") {
    if (auto ct = req.headers.find("content-type"); ct != req.headers.end()) {
      std::string t = lower(ct->second.substr(0, ct->second.find(';')));
      while (!t.empty() && t.back() == ' ') t.pop_back();
      if (t != "application/json") {
        auto e = transport_error(415, "unsupported_media_type", "request body must be application/json");
        return send_full(415, "application/json", error_body(e), {});
      }
    }
  }
  auto ch = std::make_shared<Channel>(shared_from_this(), generation);
  try {
    match->handler(req, ch);
  } catch (const std::exception& ex) {
    auto e = transport_error(500, "internal_error", std::string("internal error: ") + ex.what());
    send_full(500, "application/json", error_body(e), {});
  }
}

void HttpServer::Impl::do_accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket sock) {
    if (stopping) return;
    if (!ec) {
      auto s = std::make_shared<Session>(*this, std::move(sock));
      {
        std::lock_guard lk(sessions_mu);
        std::erase_if(sessions, [](const std::weak_ptr<Session>& w) { return w.expired(); });
        sessions.push_back(s);
      }
      net::dispatch(s->stream.get_executor(), [s] { s->start(); });
    }
    do_accept();
  });
}

HttpServer::HttpServer(HttpOptions opts, Metrics* metrics)
    : impl_(std::make_unique<Impl>(std::move(opts), metrics, this)) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::add_route(Route r) {
  if (impl_->metrics) impl_->metrics->allow_handler(r.name);
  impl_->routes.push_back(std::move(r));
}

void HttpServer::make_public(const std::string& path) {
  for (auto& r : impl_->routes)
    if (r.path == path) r.is_public = true;
}

void HttpServer::on_signal(std::function<void(int)> cb) { impl_->signal_cb = std::move(cb); }

Expected<uint16_t> HttpServer::start() {
  auto& im = *impl_;
  if (!im.opts.access_log.empty()) GRIDQ_RETURN_IF_ERROR(im.access_log.open(im.opts.access_log));
  beast::error_code ec;
  auto addr = net::ip::make_address(im.opts.host, ec);
  if (ec) return err("--host {}: not an IP address ({})", im.opts.host, ec.message());
  tcp::endpoint ep(addr, im.opts.port);
  im.acceptor.open(ep.protocol(), ec);
  if (!ec) im.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) im.acceptor.bind(ep, ec);
  if (!ec) im.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return err("cannot listen on {}:{}: {}", im.opts.host, im.opts.port, ec.message());
  const uint16_t port = im.acceptor.local_endpoint().port();
  im.signals.add(SIGINT);
  im.signals.add(SIGTERM);
  im.arm_signals();
  im.do_accept();
  for (int i = 0; i < std::max(1, im.opts.io_threads); ++i) im.threads.emplace_back([&im] { im.ioc.run(); });
  return port;
}

void HttpServer::stop() {
  if (!impl_) return;
  auto& im = *impl_;
  if (im.stopping.exchange(true)) return;
  net::post(im.ioc, [&im] {
    beast::error_code ec;
    im.acceptor.close(ec);
    im.signals.cancel(ec);
  });
  {
    std::lock_guard lk(im.sessions_mu);
    for (auto& w : im.sessions) {
      if (auto s = w.lock()) {
        ++im.unflushed;
        // Posted after every write a handler has already issued (strands run in order), so those are
        // queued by the time this runs.
        net::post(s->stream.get_executor(), [s] { s->close_when_flushed(); });
      }
    }
  }
  // Bounded: a client that stopped reading cannot hold the exit (api.md §9: timeout 0 exits in 4 s).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1000);
  while (!im.threads.empty() && im.unflushed.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  im.ioc.stop();
  for (auto& t : im.threads)
    if (t.joinable()) t.join();
  im.threads.clear();
}

}  // namespace gridq::serve
