// The dashboard behind `flywheel serve`: a scraper that keeps a short
// history of every series of some Prometheus endpoints (and of this process's
// own registry), the JSON API the page polls, and the page itself (static
// files compiled into the binary). Table browsing and lineage are added by
// the caller as more handlers (they need the table and catalog libraries;
// obs depends on base only). Protocol: docs/observability.md, "Dashboard".
//
//   auto server = HttpServer::Create("127.0.0.1", 8080);
//   Dashboard dash({.targets = {"http://127.0.0.1:9000/metrics"}});
//   dash.Install(**server);
//   (*server)->Start();  dash.Start();
//
// Thread-safety: Install before the server starts; the handlers and the
// scraper thread share the history under a lock.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "flywheel/obs/http_server.h"

namespace flywheel::obs {

struct DashboardOptions {
  // Prometheus endpoints to scrape (http://host:port/metrics).
  std::vector<std::string> targets;
  bool scrape_self = true;  // this process's own registry, as target "self"
  double interval_seconds = 1.0;   // between scrapes
  double history_seconds = 900;    // points older than this are dropped
  int scrape_timeout_ms = 2000;
  size_t max_series = 20000;       // beyond this, new series are not kept (counted)
  // Shown by /api/status; empty = none.
  std::string warehouse;
  bool catalog = false;
};

class Dashboard {
 public:
  explicit Dashboard(DashboardOptions options);
  ~Dashboard();  // stops the scraper

  // Adds "/", "/static/app.js", "/static/app.css", "/metrics", "/api/status"
  // and "/api/series" to `server`.
  void Install(HttpServer& server);
  // Starts the scraper thread (one scrape at once, then every interval).
  void Start();
  void Stop();
  // One scrape of every target now (tests; Start() calls it on its thread).
  void ScrapeOnce();

  // JSON bodies of the API (also used by the tests).
  std::string StatusJson() const;
  std::string SeriesJson(double since_unix_seconds) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The value of `key` in a URL query string ("a=1&b=x%20y"), percent-decoded
// ('+' is a space); empty when absent. A malformed escape is kept as is.
std::string QueryParam(std::string_view query, std::string_view key);

// A JSON error response: {"error": message} with `status`.
HttpResponse JsonError(int status, const std::string& message);
// JSON text of `j`; bytes that are not UTF-8 become U+FFFD.
std::string Dump(const nlohmann::json& j);
// A JSON response with status 200.
HttpResponse JsonResponse(std::string body);

}  // namespace flywheel::obs
