// Tests of the dashboard's scraper, history and JSON API over real loopback
// HTTP: a fake job's /metrics as the target, the dashboard's own server
// scraped and parsed with the Prometheus parser.
#include "flywheel/obs/dashboard.h"

#include <atomic>
#include <nlohmann/json.hpp>
#include <chrono>
#include <set>
#include <string>
#include <thread>

#include "flywheel/base/metrics.h"
#include "flywheel/obs/http_client.h"
#include "flywheel/obs/prometheus.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::obs {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

std::unique_ptr<HttpServer> Started(const std::function<void(HttpServer&)>& install) {
  auto s = HttpServer::Create("127.0.0.1", 0);
  EXPECT_TRUE(s.ok());
  install(**s);
  EXPECT_TRUE((*s)->Start().ok());
  return std::move(*s);
}

std::string Url(const HttpServer& s, const std::string& path) {
  return "http://127.0.0.1:" + std::to_string(s.port()) + path;
}

// A job whose exposition changes with every scrape: a counter that grows by
// 10, a labelled gauge, and a histogram.
struct FakeJob {
  std::atomic<int> scrapes{0};
  std::unique_ptr<HttpServer> server = Started([this](HttpServer& s) {
    s.Handle("/metrics", [this](const HttpRequest&) {
      const int n = ++scrapes;
      HttpResponse r;
      r.content_type = "text/plain; version=0.0.4";
      r.body = "# TYPE job_rows_total counter\njob_rows_total " + std::to_string(10 * n) +
               "\n# TYPE job_fill gauge\njob_fill{table=\"a<b\\\"c\"} 0.5\n"
               "# TYPE job_wait_seconds histogram\n"
               "job_wait_seconds_bucket{le=\"1\"} 1\njob_wait_seconds_bucket{le=\"+Inf\"} 2\n"
               "job_wait_seconds_sum 3.5\njob_wait_seconds_count 2\n"
               "# TYPE job_nan gauge\njob_nan NaN\n";
      return r;
    });
  });
};

const json* FindSeries(const json& series, const std::string& name) {
  for (const auto& s : series["series"]) {
    if (s["name"] == name) return &s;
  }
  return nullptr;
}

TEST(DashboardTest, ScrapesTargetsIntoSeriesWithHistory) {
  FakeJob job;
  DashboardOptions o;
  o.targets = {Url(*job.server, "/metrics")};
  Dashboard d(o);
  d.ScrapeOnce();
  d.ScrapeOnce();
  d.ScrapeOnce();
  const json all = json::parse(d.SeriesJson(0));
  const json* rows = FindSeries(all, "job_rows_total");
  ASSERT_NE(rows, nullptr);
  EXPECT_EQ((*rows)["type"], "counter");
  EXPECT_EQ((*rows)["target"], o.targets[0]);
  ASSERT_EQ((*rows)["points"].size(), 3u);
  EXPECT_EQ((*rows)["points"][0][1], 10.0);
  EXPECT_EQ((*rows)["points"][2][1], 30.0);
  // Labels come through unescaped; histograms keep _sum and _count only.
  const json* fill = FindSeries(all, "job_fill");
  ASSERT_NE(fill, nullptr);
  EXPECT_EQ((*fill)["labels"]["table"], "a<b\"c");
  EXPECT_NE(FindSeries(all, "job_wait_seconds_sum"), nullptr);
  EXPECT_NE(FindSeries(all, "job_wait_seconds_count"), nullptr);
  EXPECT_EQ(FindSeries(all, "job_wait_seconds_bucket"), nullptr);
  EXPECT_EQ((*FindSeries(all, "job_wait_seconds_sum"))["type"], "histogram");
  // JSON has no NaN: it goes out as null.
  EXPECT_TRUE((*FindSeries(all, "job_nan"))["points"][0][1].is_null());
  // Only newer points after `since`; ids are stable.
  const double t2 = (*rows)["points"][1][0].get<double>();
  const json newer = json::parse(d.SeriesJson(t2));
  const json* rows2 = FindSeries(newer, "job_rows_total");
  ASSERT_NE(rows2, nullptr);
  EXPECT_EQ((*rows2)["points"].size(), 1u);
  EXPECT_EQ((*rows2)["id"], (*rows)["id"]);
  // The process's own registry is target "self".
  bool self = false;
  for (const auto& s : all["series"]) self = self || s["target"] == "self";
  EXPECT_TRUE(self);
}

TEST(DashboardTest, ADownTargetIsReportedAndOthersKeepScraping) {
  FakeJob job;
  DashboardOptions o;
  o.targets = {"http://127.0.0.1:1/metrics", Url(*job.server, "/metrics"), Url(*job.server, "/nope")};
  o.scrape_timeout_ms = 1000;
  Dashboard d(o);
  d.ScrapeOnce();
  const json status = json::parse(d.StatusJson());
  ASSERT_EQ(status["targets"].size(), 4u);
  EXPECT_EQ(status["targets"][0]["url"], "self");
  EXPECT_TRUE(status["targets"][0]["up"]);
  EXPECT_FALSE(status["targets"][1]["up"]);
  EXPECT_THAT(status["targets"][1]["last_error"].get<std::string>(), HasSubstr("connecting to 127.0.0.1:1"));
  EXPECT_TRUE(status["targets"][2]["up"]);
  EXPECT_EQ(status["targets"][2]["series"], 5);  // rows, fill, wait _sum and _count, nan
  EXPECT_FALSE(status["targets"][3]["up"]);
  EXPECT_EQ(status["targets"][3]["last_error"], "HTTP 404");
  EXPECT_EQ(job.scrapes.load(), 1);
}

TEST(DashboardTest, SeriesBeyondTheCapWaitUntilOldOnesHaveNoPointsLeft) {
  std::atomic<int> phase{0};
  auto job = Started([&](HttpServer& s) {
    s.Handle("/metrics", [&](const HttpRequest&) {
      HttpResponse r;
      const std::string n = std::to_string(phase.load());
      r.body = "# TYPE a gauge\na{phase=\"" + n + "\"} 1\n# TYPE b gauge\nb{phase=\"" + n + "\"} 2\n";
      return r;
    });
  });
  DashboardOptions o;
  o.targets = {Url(*job, "/metrics")};
  o.max_series = 2;
  o.scrape_self = false;
  o.history_seconds = 0.2;
  Dashboard d(o);
  d.ScrapeOnce();
  ASSERT_TRUE(json::parse(d.StatusJson())["targets"][0]["up"]) << d.StatusJson();
  auto names = [&] {
    std::set<std::string> out;
    const json all = json::parse(d.SeriesJson(0));
    for (const auto& s : all["series"]) {
      out.insert(s["name"].get<std::string>() + "/" + s["labels"].value("phase", ""));
    }
    return out;
  };
  EXPECT_EQ(names(), (std::set<std::string>{"a/0", "b/0"}));
  const int old_id = json::parse(d.SeriesJson(0))["series"][0]["id"];
  phase = 1;
  d.ScrapeOnce();  // the cap is reached: the new labels wait
  EXPECT_EQ(names(), (std::set<std::string>{"a/0", "b/0"}));
  EXPECT_GT(json::parse(d.StatusJson())["dropped_series"].get<int>(), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  d.ScrapeOnce();  // phase 0's points have aged out: its series make room
  d.ScrapeOnce();
  EXPECT_EQ(names(), (std::set<std::string>{"a/1", "b/1"}));
  const json after = json::parse(d.SeriesJson(0));
  for (const auto& s : after["series"]) EXPECT_GT(s["id"].get<int>(), old_id);
}

TEST(DashboardTest, ServesThePageTheApiAndMetricsThatParse) {
  Dashboard d(DashboardOptions{});
  auto server = Started([&](HttpServer& s) { d.Install(s); });
  d.Start();
  auto page = HttpGet(Url(*server, "/"), 2000);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->status, 200);
  EXPECT_THAT(page->content_type, HasSubstr("text/html"));
  EXPECT_THAT(page->body, HasSubstr("/static/app.js"));
  for (const char* path : {"/static/app.js", "/static/app.css"}) {
    auto r = HttpGet(Url(*server, path), 2000);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->status, 200) << path;
    EXPECT_GT(r->body.size(), 1000u) << path;
  }
  // /metrics is Prometheus text our strict parser accepts, with the
  // dashboard's own series after a scrape.
  d.ScrapeOnce();
  auto m = HttpGet(Url(*server, "/metrics"), 2000);
  ASSERT_TRUE(m.ok());
  auto parsed = ParsePrometheusText(m->body);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_GE(parsed->Find("flywheel_dashboard_scrapes_total", {{"outcome", "ok"}}).value_or(0), 1);
  auto status = HttpGet(Url(*server, "/api/status"), 2000);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->content_type, "application/json");
  EXPECT_EQ(json::parse(status->body)["interval_s"], 1.0);
  auto bad = HttpGet(Url(*server, "/api/series?since=yesterday"), 2000);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->status, 400);
  EXPECT_THAT(json::parse(bad->body)["error"].get<std::string>(), HasSubstr("since"));
  auto series = HttpGet(Url(*server, "/api/series?since=0"), 2000);
  ASSERT_TRUE(series.ok());
  EXPECT_FALSE(json::parse(series->body)["series"].empty());
  d.Stop();
}

TEST(DashboardTest, QueryParamDecodesAndJsonNeverBreaksOnBytes) {
  EXPECT_EQ(QueryParam("name=ns%2Ft&x=1", "name"), "ns/t");
  EXPECT_EQ(QueryParam("a=1&name=a+b%20c", "name"), "a b c");
  EXPECT_EQ(QueryParam("name", "name"), "");
  EXPECT_EQ(QueryParam("other=1", "name"), "");
  EXPECT_EQ(QueryParam("name=%zz%4", "name"), "%zz%4");  // malformed escapes kept
  EXPECT_EQ(QueryParam("n%61me=v", "name"), "v");
  const std::string dumped = Dump(json{{"label", std::string("bad \xff byte")}});
  EXPECT_THAT(dumped, HasSubstr("bad \xef\xbf\xbd byte"));
}

}  // namespace
}  // namespace flywheel::obs
