// The dashboard's scraper, history and JSON API (dashboard.h).
//
// History: one series per (target, sample name, labels); histogram buckets
// are not kept (the page charts _sum and _count). Each series holds points
// (unix seconds, value) younger than history_seconds.
#include "flywheel/obs/dashboard.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "flywheel/base/metrics.h"
#include "flywheel/obs/dashboard_assets.h"
#include "flywheel/obs/http_client.h"
#include "flywheel/obs/prometheus.h"

namespace flywheel::obs {
namespace {

using json = nlohmann::json;

constexpr const char* kSelf = "self";

double NowUnix() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

const EmbeddedAsset* FindAsset(std::string_view name) {
  for (const EmbeddedAsset* a = kEmbeddedAssets; a->name != nullptr; ++a) {
    if (name == a->name) return a;
  }
  return nullptr;
}

HttpResponse Asset(std::string_view name, const char* content_type) {
  const EmbeddedAsset* a = FindAsset(name);
  if (a == nullptr) return HttpResponse{404, "text/plain; charset=utf-8", "not built into this binary\n"};
  return HttpResponse{200, content_type, std::string(a->data, a->size)};
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string PercentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 && HexValue(s[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The family a sample belongs to: its own name, or the name without a
// histogram/summary suffix.
const PromFamily* FamilyOf(const PromScrape& scrape, const std::string& sample) {
  if (auto it = scrape.families.find(sample); it != scrape.families.end()) return &it->second;
  for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
    if (sample.size() > suffix.size() && sample.compare(sample.size() - suffix.size(), suffix.size(), suffix) == 0) {
      auto it = scrape.families.find(sample.substr(0, sample.size() - suffix.size()));
      if (it != scrape.families.end()) return &it->second;
    }
  }
  return nullptr;
}

}  // namespace

std::string QueryParam(std::string_view query, std::string_view key) {
  size_t pos = 0;
  while (pos <= query.size()) {
    size_t end = query.find('&', pos);
    if (end == std::string_view::npos) end = query.size();
    std::string_view pair = query.substr(pos, end - pos);
    const size_t eq = pair.find('=');
    if (PercentDecode(pair.substr(0, eq)) == key) {
      return eq == std::string_view::npos ? std::string() : PercentDecode(pair.substr(eq + 1));
    }
    pos = end + 1;
  }
  return {};
}

std::string Dump(const nlohmann::json& j) {
  // Scraped label values and error texts may hold bytes that are not UTF-8.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

HttpResponse JsonError(int status, const std::string& message) {
  return HttpResponse{status, "application/json", Dump(json{{"error", message}})};
}

HttpResponse JsonResponse(std::string body) { return HttpResponse{200, "application/json", std::move(body)}; }

struct Dashboard::Impl {
  struct Series {
    int id = 0;
    std::string target, name, type;
    std::map<std::string, std::string> labels;
    std::deque<std::pair<double, double>> points;
  };
  struct Target {
    std::string url;
    bool up = false;
    std::string last_error;
    double last_scrape = 0;
    int64_t series = 0;
  };

  DashboardOptions o;
  double started = NowUnix();
  mutable absl::Mutex mu;
  std::vector<Target> targets ABSL_GUARDED_BY(mu);
  std::map<std::tuple<std::string, std::string, std::map<std::string, std::string>>, size_t> index ABSL_GUARDED_BY(mu);
  std::vector<Series> series ABSL_GUARDED_BY(mu);
  int next_id ABSL_GUARDED_BY(mu) = 1;  // ids stay with their series (the page merges by id)
  int64_t dropped_series ABSL_GUARDED_BY(mu) = 0;

  // Forgets the series with no point left in the history (a job that went
  // away, labels that changed), to make room for new ones.
  void DropEmptySeriesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::vector<Series> kept;
    kept.reserve(series.size());
    for (Series& s : series) {
      if (!s.points.empty()) kept.push_back(std::move(s));
    }
    series = std::move(kept);
    index.clear();
    for (size_t i = 0; i < series.size(); ++i) {
      index.emplace(std::make_tuple(series[i].target, series[i].name, series[i].labels), i);
    }
  }

  absl::Mutex stop_mu;
  bool stopping ABSL_GUARDED_BY(stop_mu) = false;
  std::thread thread;

  Counter* scrapes_ok = Metrics().GetCounter("flywheel_dashboard_scrapes_total", "Scrapes by the dashboard",
                                             {{"outcome", "ok"}});
  Counter* scrapes_failed = Metrics().GetCounter("flywheel_dashboard_scrapes_total", "Scrapes by the dashboard",
                                                 {{"outcome", "failed"}});
  Gauge* series_gauge = Metrics().GetGauge("flywheel_dashboard_series", "Series the dashboard keeps history of");

  void Record(size_t target_index, const Result<PromScrape>& scrape, double t) {
    absl::MutexLock lock(&mu);
    Target& tg = targets[target_index];
    tg.last_scrape = t;
    if (!scrape.ok()) {
      tg.up = false;
      tg.last_error = std::string(scrape.status().message());
      scrapes_failed->Increment();
      return;
    }
    tg.up = true;
    tg.last_error.clear();
    tg.series = 0;
    scrapes_ok->Increment();
    for (const PromSample& s : scrape->samples) {
      const PromFamily* fam = FamilyOf(*scrape, s.name);
      const std::string type = fam ? fam->type : "untyped";
      if ((type == "histogram" || type == "summary") && s.name != (fam ? fam->name + "_sum" : "") &&
          s.name != (fam ? fam->name + "_count" : "")) {
        continue;  // buckets and quantiles: not charted
      }
      auto key = std::make_tuple(tg.url, s.name, s.labels);
      auto it = index.find(key);
      if (it == index.end()) {
        if (series.size() >= o.max_series) {
          DropEmptySeriesLocked();
          it = index.end();
        }
        if (series.size() >= o.max_series) {
          ++dropped_series;
          continue;
        }
        Series ns;
        ns.id = next_id++;
        ns.target = tg.url;
        ns.name = s.name;
        ns.type = type;
        ns.labels = s.labels;
        series.push_back(std::move(ns));
        it = index.emplace(std::move(key), series.size() - 1).first;
      }
      Series& se = series[it->second];
      se.points.emplace_back(t, s.value);
      ++tg.series;
    }
    const double horizon = t - o.history_seconds;
    for (Series& se : series) {
      while (!se.points.empty() && se.points.front().first < horizon) se.points.pop_front();
    }
    series_gauge->Set(static_cast<double>(series.size()));
  }

  void ScrapeAll() {
    std::vector<std::string> urls;
    {
      absl::MutexLock lock(&mu);
      for (const Target& t : targets) urls.push_back(t.url);
    }
    for (size_t i = 0; i < urls.size(); ++i) {
      Result<PromScrape> scrape = absl::UnknownError("not scraped");
      if (urls[i] == kSelf) {
        scrape = ParsePrometheusText(Metrics().ExpositionText());
      } else {
        Result<HttpClientResponse> r = HttpGet(urls[i], o.scrape_timeout_ms);
        if (!r.ok()) {
          scrape = r.status();
        } else if (r->status != 200) {
          scrape = absl::UnavailableError(absl::StrCat("HTTP ", r->status));
        } else {
          scrape = ParsePrometheusText(r->body);
        }
      }
      Record(i, scrape, NowUnix());
    }
  }
};

Dashboard::Dashboard(DashboardOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->o = std::move(options);
  absl::MutexLock lock(&impl_->mu);
  if (impl_->o.scrape_self) impl_->targets.push_back(Impl::Target{kSelf});
  for (const std::string& url : impl_->o.targets) impl_->targets.push_back(Impl::Target{url});
}

Dashboard::~Dashboard() { Stop(); }

void Dashboard::Install(HttpServer& server) {
  server.Handle("/", [](const HttpRequest&) { return Asset("index.html", "text/html; charset=utf-8"); });
  server.Handle("/index.html", [](const HttpRequest&) { return Asset("index.html", "text/html; charset=utf-8"); });
  server.Handle("/static/app.js", [](const HttpRequest&) { return Asset("app.js", "text/javascript; charset=utf-8"); });
  server.Handle("/static/app.css", [](const HttpRequest&) { return Asset("app.css", "text/css; charset=utf-8"); });
  server.HandleMetrics();
  server.Handle("/api/status", [this](const HttpRequest&) { return JsonResponse(StatusJson()); });
  server.Handle("/api/series", [this](const HttpRequest& r) {
    const std::string since_text = QueryParam(r.query, "since");
    double since = 0;
    if (!since_text.empty()) {
      char* end = nullptr;
      since = std::strtod(since_text.c_str(), &end);
      if (end == since_text.c_str() || *end != '\0' || !std::isfinite(since)) {
        return JsonError(400, absl::StrCat("since: not a number of seconds: '", since_text, "'"));
      }
    }
    return JsonResponse(SeriesJson(since));
  });
}

void Dashboard::ScrapeOnce() { impl_->ScrapeAll(); }

void Dashboard::Start() {
  if (impl_->thread.joinable()) return;
  impl_->thread = std::thread([impl = impl_.get()] {
    const absl::Duration interval = absl::Seconds(std::max(0.05, impl->o.interval_seconds));
    for (;;) {
      const absl::Time next = absl::Now() + interval;
      impl->ScrapeAll();
      absl::MutexLock lock(&impl->stop_mu);
      auto stopping = [impl]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(impl->stop_mu) { return impl->stopping; };
      if (impl->stop_mu.AwaitWithDeadline(absl::Condition(&stopping), next)) return;
    }
  });
}

void Dashboard::Stop() {
  {
    absl::MutexLock lock(&impl_->stop_mu);
    impl_->stopping = true;
  }
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::string Dashboard::StatusJson() const {
  json targets = json::array();
  absl::MutexLock lock(&impl_->mu);
  for (const Impl::Target& t : impl_->targets) {
    targets.push_back(json{{"url", t.url},
                           {"up", t.up},
                           {"last_error", t.last_error},
                           {"last_scrape_unix", t.last_scrape},
                           {"series", t.series}});
  }
  json j{{"version", "flywheel 0.1.0"},
         {"pid", static_cast<int64_t>(::getpid())},
         {"started_unix", impl_->started},
         {"interval_s", impl_->o.interval_seconds},
         {"history_s", impl_->o.history_seconds},
         {"warehouse", impl_->o.warehouse.empty() ? json(nullptr) : json(impl_->o.warehouse)},
         {"catalog", impl_->o.catalog},
         {"series", impl_->series.size()},
         {"dropped_series", impl_->dropped_series},
         {"targets", std::move(targets)}};
  return Dump(j);
}

std::string Dashboard::SeriesJson(double since) const {
  json out = json::array();
  const double now = NowUnix();
  absl::MutexLock lock(&impl_->mu);
  for (const Impl::Series& s : impl_->series) {
    auto first = std::upper_bound(s.points.begin(), s.points.end(), since,
                                  [](double t, const std::pair<double, double>& p) { return t < p.first; });
    if (first == s.points.end()) continue;
    json points = json::array();
    for (auto it = first; it != s.points.end(); ++it) {
      // JSON has no NaN or infinities: they go out as null.
      points.push_back(json::array({it->first, std::isfinite(it->second) ? json(it->second) : json(nullptr)}));
    }
    out.push_back(json{{"id", s.id},
                       {"target", s.target},
                       {"name", s.name},
                       {"type", s.type},
                       {"labels", s.labels},
                       {"points", std::move(points)}});
  }
  return Dump(json{{"now", now}, {"series", std::move(out)}});
}

}  // namespace flywheel::obs
