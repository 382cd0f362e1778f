#include "flywheel/loader/internal/loader_metrics.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>

namespace flywheel::internal_loader {
namespace {

double Stage(const std::string& uri, const char* stage) {
  return Metrics().GetFloatCounter("flywheel_loader_stage_seconds_total", "", {{"table", uri}, {"stage", stage}})
      ->Value();
}

TEST(LoaderMetricsTest, BatchesAndStageTimesReachTheSeriesOnce) {
  const std::string uri = "/loader_metrics_test/a";
  auto* batches = Metrics().GetCounter("flywheel_loader_batches_total", "", {{"table", uri}});
  auto* rows = Metrics().GetCounter("flywheel_loader_rows_total", "", {{"table", uri}});
  auto* bytes = Metrics().GetCounter("flywheel_loader_bytes_total", "", {{"table", uri}});
  auto* skipped = Metrics().GetCounter("flywheel_loader_skipped_rows_total", "", {{"table", uri}});
  auto* instances = Metrics().GetGauge("flywheel_loader_instances", "", {{"table", uri}});
  loader::LoaderStats stats;
  {
    LoaderMetrics m(uri, [&] { return stats; });
    EXPECT_EQ(instances->Value(), 1);
    m.OnBatch(32, 1024, 0);
    m.OnBatch(30, 960, 2);
    EXPECT_EQ(batches->Value(), 2);
    EXPECT_EQ(rows->Value(), 62);
    EXPECT_EQ(bytes->Value(), 1984);
    EXPECT_EQ(skipped->Value(), 2);
    stats.io_seconds = 1.5;
    stats.consumer_wait_seconds = 0.25;
    m.PublishStageTimes();
    m.PublishStageTimes();  // nothing new: nothing added
    EXPECT_DOUBLE_EQ(Stage(uri, "io"), 1.5);
    EXPECT_DOUBLE_EQ(Stage(uri, "consumer_wait"), 0.25);
    stats.io_seconds = 2.0;
    stats.idle_seconds = 3.0;
  }
  // The destructor publishes the last deltas and counts the loader out.
  EXPECT_DOUBLE_EQ(Stage(uri, "io"), 2.0);
  EXPECT_DOUBLE_EQ(Stage(uri, "idle"), 3.0);
  EXPECT_EQ(instances->Value(), 0);
}

TEST(LoaderMetricsTest, LoadersOfOneTableSumAndAnotherTableIsApart) {
  const std::string a = "/loader_metrics_test/b", other = "/loader_metrics_test/c";
  loader::LoaderStats s1, s2, s3;
  s1.decode_seconds = 1;
  s2.decode_seconds = 2;
  s3.decode_seconds = 5;
  {
    LoaderMetrics m1(a, [&] { return s1; }), m2(a, [&] { return s2; }), m3(other, [&] { return s3; });
    EXPECT_EQ(Metrics().GetGauge("flywheel_loader_instances", "", {{"table", a}})->Value(), 2);
    // The registry's collectors refresh the stage series when it is read.
    const std::string text = Metrics().ExpositionText();
    EXPECT_NE(text.find("flywheel_loader_stage_seconds_total"), std::string::npos);
  }
  EXPECT_DOUBLE_EQ(Stage(a, "decode"), 3.0);
  EXPECT_DOUBLE_EQ(Stage(other, "decode"), 5.0);
}

}  // namespace
}  // namespace flywheel::internal_loader
