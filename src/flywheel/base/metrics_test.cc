#include "flywheel/base/metrics.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace flywheel {
namespace {

TEST(MetricsTest, ConcurrentIncrementsAreExact) {
  MetricsRegistry reg;
  Counter* c = reg.GetCounter("t_total", "test", {{"k", "v"}});
  Histogram* h = reg.GetHistogram("t_seconds", "test", {}, {1, 2, 3});
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100000; ++i) {
        c->Increment();
        h->Observe(i % 4);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->Value(), 800000);
  EXPECT_EQ(h->Count(), 800000);
  EXPECT_EQ(h->BucketCounts(), (std::vector<int64_t>{400000, 200000, 200000, 0}));
  EXPECT_DOUBLE_EQ(h->Sum(), 8 * 25000 * (0 + 1 + 2 + 3));
}

TEST(MetricsTest, SameLabelsReturnSameSeries) {
  MetricsRegistry reg;
  EXPECT_EQ(reg.GetGauge("g", "h", {{"a", "1"}}), reg.GetGauge("g", "h", {{"a", "1"}}));
  EXPECT_NE(reg.GetGauge("g", "h", {{"a", "1"}}), reg.GetGauge("g", "h", {{"a", "2"}}));
}

TEST(MetricsTest, ExpositionTextFollowsPrometheusFormat) {
  MetricsRegistry reg;
  reg.GetCounter("fw_commits_total", "Commits", {{"op", "append"}})->Increment(3);
  reg.GetGauge("fw_rows", "Rows \"live\"")->Set(2.5);
  reg.GetHistogram("fw_lat_seconds", "Latency", {{"t", "a\"b"}}, {0.1, 1})->Observe(0.5);
  const std::string text = reg.ExpositionText();
  EXPECT_NE(text.find("# TYPE fw_commits_total counter\nfw_commits_total{op=\"append\"} 3\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("fw_rows 2.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("fw_lat_seconds_bucket{t=\"a\\\"b\",le=\"0.1\"} 0\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("fw_lat_seconds_bucket{t=\"a\\\"b\",le=\"+Inf\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("fw_lat_seconds_count{t=\"a\\\"b\"} 1\n"), std::string::npos);
}

TEST(MetricsTest, SwitchedOffUpdatesNothingAndOnAgainCounts) {
  MetricsRegistry r;
  Counter* c = r.GetCounter("switch_total", "h");
  Gauge* g = r.GetGauge("switch_gauge", "h");
  Histogram* h = r.GetHistogram("switch_seconds", "h");
  c->Increment(2);
  SetMetricsEnabled(false);
  EXPECT_FALSE(MetricsEnabled());
  c->Increment(5);
  g->Set(3);
  g->Add(1);
  h->Observe(0.5);
  EXPECT_EQ(c->Value(), 2);
  EXPECT_EQ(g->Value(), 0);
  EXPECT_EQ(h->Count(), 0);
  SetMetricsEnabled(true);
  c->Increment(5);
  h->Observe(0.5);
  EXPECT_EQ(c->Value(), 7);
  EXPECT_EQ(h->Count(), 1);
}

TEST(MetricsTest, CollectorsRunBeforeEachExpositionUntilRemoved) {
  MetricsRegistry r;
  Gauge* g = r.GetGauge("collected", "refreshed at scrape");
  int runs = 0;
  const int id = r.AddCollector([&] { g->Set(++runs); });
  EXPECT_NE(r.ExpositionText().find("collected 1\n"), std::string::npos);
  EXPECT_NE(r.ExpositionText().find("collected 2\n"), std::string::npos);
  r.RemoveCollector(id);
  EXPECT_NE(r.ExpositionText().find("collected 2\n"), std::string::npos);
  EXPECT_EQ(runs, 2);
}

TEST(MetricsTest, AScrapeDoesNotHoldUpOtherCollectorsAndRemoveWaitsForItsRun) {
  MetricsRegistry r;
  std::atomic<bool> entered{false}, release{false}, removed{false};
  const int slow = r.AddCollector([&] {
    entered = true;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  std::thread scrape([&] { r.ExpositionText(); });
  while (!entered) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // Adding and removing another collector does not wait for the scrape.
  const int other = r.AddCollector([] {});
  r.RemoveCollector(other);
  // Removing the running one waits until its run is over.
  std::thread remover([&] {
    r.RemoveCollector(slow);
    removed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(removed.load());
  release = true;
  remover.join();
  scrape.join();
  EXPECT_TRUE(removed.load());
}

}  // namespace
}  // namespace flywheel
