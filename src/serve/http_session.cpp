// One connection's reading, writing and closing (http_session.h); what a request is answered with is
// decided in http_dispatch.cpp.
#include "serve/http_session.h"

#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <array>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>

namespace gridq::serve {

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

}  // namespace

std::string ascii_lower(std::string_view s) {
  std::string o(s);
  for (auto& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
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

void Session::read_header() {
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
void Session::read_head_block() {
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

void Session::parse_head() {
  parser.emplace();
  parser->header_limit(static_cast<std::uint32_t>(srv.opts.max_header_bytes));
  parser->body_limit(srv.opts.max_body_bytes);
  http::async_read_header(stream, buf, *parser,
                          [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

void Session::fail_transport(const beast::error_code& ec) {
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

void Session::on_header(beast::error_code ec) {
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
  if (auto ce = h.find(http::field::content_encoding);
      ce != h.end() && ascii_lower(ce->value()) != "identity")
    return respond_error_and_close(transport_error(415, "unsupported_media_type",
                                                   "Content-Encoding other than identity is not supported"));
  if (auto cl = parser->content_length(); cl && *cl > srv.opts.max_body_bytes)
    return respond_error_and_close(transport_error(
        413, "payload_too_large", fmt::format("request body exceeds {} bytes", srv.opts.max_body_bytes)));
  // curl and many HTTP libraries send Expect: 100-continue with larger bodies and wait for the interim
  // answer (curl up to 1 s) before sending the body; any other expectation is refused (RFC 9110 §10.1.1).
  if (auto ex = h.find(http::field::expect); ex != h.end()) {
    if (ascii_lower(ex->value()) != "100-continue")
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

// ---- writing ----
void Session::enqueue(std::string data) {
  if (closed) return;
  out.push_back(std::move(data));
  if (!writing) write_next();
}

void Session::write_next() {
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
std::string Session::head(int status, const std::string& content_type, std::optional<size_t> length,
                          bool keep, const std::vector<std::pair<std::string, std::string>>& extra,
                          bool close_delimited) {
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

void Session::send_full(int status, const std::string& ct, std::string body,
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

void Session::log_access(int status, bool gone) {
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
std::vector<std::pair<std::string, std::string>> Session::with_cors(
    std::vector<std::pair<std::string, std::string>> extra) const {
  if (!request_id.empty()) extra.push_back({"X-Request-Id", request_id});
  if (!cors_origin.empty()) {
    extra.push_back({"Access-Control-Allow-Origin", cors_origin});
    if (cors_origin != "*") extra.push_back({"Vary", "Origin"});
  }
  return extra;
}

void Session::finish_request(bool keep) {
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

void Session::respond_error_and_close(const ApiError& e) {
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

void Session::watch_disconnect(int spurious) {
  // A readable socket while we answer means EOF/reset (client gone) or pipelined bytes (no longer
  // watched: EOF behind them cannot be seen without reading them). The reactor may also report readiness
  // with nothing to read (seen under load): then wait again, a bounded number of times.
  stream.socket().async_wait(
      tcp::socket::wait_read, [self = shared_from_this(), gen = generation, spurious](beast::error_code ec) {
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
void Session::probe_peer() {
  if (!streaming && http10) return notify_disconnect();
  if (streaming)
    enqueue(http10 ? std::string(": probe\n\n") : std::string("9\r\n: probe\n\n\r\n"));
  else
    enqueue("HTTP/1.1 100 Continue\r\n\r\n");
  check_probe(0);
}

void Session::check_probe(int round) {
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

void Session::notify_disconnect() {
  if (auto cb = std::move(disconnect_cb)) {
    disconnect_cb = nullptr;
    cb();
  }
}

// Half-closes and drains what the client still sends (e.g. a refused body) before closing, so the kernel
// does not answer unread bytes with a reset that destroys our response before the client has read it.
void Session::graceful_close() {
  if (closed || draining_input) return;
  draining_input = true;
  beast::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream.expires_after(std::chrono::seconds(2));
  drain();
}

void Session::drain() {
  auto b = std::make_shared<std::array<char, 8192>>();
  stream.async_read_some(net::buffer(*b), [self = shared_from_this(), b](beast::error_code ec, size_t) {
    if (ec) return self->close();
    self->drain();
  });
}

void Session::close() {
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
void Session::close_when_flushed() {
  stop_pending = true;
  if (!closed && (writing || !out.empty())) {
    close_after = true;
    return;
  }
  close();
}

void Session::stop_flushed() {
  if (!stop_pending) return;
  stop_pending = false;
  --srv.unflushed;
}

}  // namespace gridq::serve
