#include "serve/http_server.h"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include "serve/http_session.h"

namespace gridq::serve {

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
