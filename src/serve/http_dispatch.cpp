// Routing a parsed request (http_session.h): method check, CORS preflight, the route table, auth over
// every non-public route, 404/405/503/415, then the handler with a Channel to answer through.
#include <fmt/format.h>

#include <boost/asio/post.hpp>

#include "serve/http_session.h"

namespace gridq::serve {

namespace {

bool route_matches(const Route& r, const std::string& path) {
  return r.prefix ? path.size() > r.path.size() && path.compare(0, r.path.size(), r.path) == 0
                  : r.path == path;
}

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
  for (const auto& f : msg) req.headers[ascii_lower(f.name_string())] = std::string(f.value());
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
      if (v.size() > 7 && ascii_lower(v.substr(0, 7)) == "bearer ") presented = std::string(v.substr(7));
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
      std::string t = ascii_lower(ct->second.substr(0, ct->second.find(';')));
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

}  // namespace gridq::serve
