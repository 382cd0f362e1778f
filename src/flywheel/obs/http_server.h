// A small HTTP/1.1 server for observability endpoints (/metrics now; the
// dashboard's pages and JSON later). It listens on loopback only: a bind
// address that is not 127.0.0.1 / ::1 / localhost is refused. One thread
// accepts and serves connections one request at a time (Connection: close),
// which is plenty for scrapes and a dashboard.
//
// Thread-safety: Handle() before Start(); handlers run on the server thread
// and must be thread-safe with respect to the rest of the process.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "flywheel/base/status.h"

namespace flywheel::obs {

struct HttpRequest {
  std::string method;  // GET, POST, ...
  std::string path;    // without the query string
  std::string query;   // after '?', undecoded; empty when none
  std::map<std::string, std::string> headers;  // names lowercased
  std::string body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Whether an HTTP Host header names this machine's loopback (127.0.0.1,
// localhost, [::1], with or without a port). The server answers 403 to any
// other Host, so a page whose domain was re-pointed at 127.0.0.1 (DNS
// rebinding) cannot read from it.
bool IsLoopbackHost(std::string_view host);

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  // `address`: "127.0.0.1" (default), "::1" or "localhost"; `port` 0 picks
  // a free one (see port()).
  static Result<std::unique_ptr<HttpServer>> Create(const std::string& address = "127.0.0.1", int port = 0);
  ~HttpServer();  // stops and joins the thread

  // Exact path match; unknown paths get 404, a handler throwing nothing is
  // required (exceptions are not used here).
  void Handle(const std::string& path, Handler handler);
  // Serves GET /metrics with the process's MetricsRegistry exposition text
  // (Prometheus text format 0.0.4).
  void HandleMetrics();

  Status Start();
  void Stop();
  int port() const;

 private:
  HttpServer() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flywheel::obs
