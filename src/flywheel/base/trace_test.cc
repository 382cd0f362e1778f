#include "flywheel/base/trace.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

namespace flywheel::obs {
namespace {

using json = nlohmann::json;

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

std::string TracePath(const char* name) {
  return std::string(::testing::TempDir()) + "/" + name + ".json";
}

TEST(TraceTest, SpansFromManyThreadsAreWrittenAsValidChromeTraceJson) {
  const std::string path = TracePath("spans");
  ASSERT_TRUE(StartTracing(path).ok());
  constexpr int kThreads = 4, kSpans = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      SetThreadName("worker-" + std::to_string(t));
      for (int i = 0; i < kSpans; ++i) {
        FW_TRACE_SPAN("test", "outer");
        {
          Span inner("test", "inner");
          inner.SetArgs("{\"i\": " + std::to_string(i) + "}");
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(StopTracing().ok());
  EXPECT_FALSE(TracingEnabled());
  json doc = ReadJson(path);
  ASSERT_TRUE(doc.contains("traceEvents"));
  std::map<int, int> outer_per_tid, inner_per_tid;
  std::set<std::string> thread_names;
  for (const auto& e : doc["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("tid") && e.contains("name"));
    if (e["ph"] == "M") {
      if (e["name"] == "thread_name") thread_names.insert(e["args"]["name"].get<std::string>());
      continue;
    }
    ASSERT_EQ(e["ph"], "X");
    ASSERT_TRUE(e["ts"].is_number_integer() && e["dur"].is_number_integer());
    EXPECT_GE(e["ts"].get<int64_t>(), 0);
    EXPECT_GE(e["dur"].get<int64_t>(), 0);
    EXPECT_EQ(e["cat"], "test");
    (e["name"] == "outer" ? outer_per_tid : inner_per_tid)[e["tid"].get<int>()]++;
    if (e["name"] == "inner") {
      EXPECT_TRUE(e["args"]["i"].is_number_integer());
    }
  }
  EXPECT_EQ(outer_per_tid.size(), static_cast<size_t>(kThreads));
  for (const auto& [tid, n] : outer_per_tid) EXPECT_EQ(n, kSpans) << tid;
  for (const auto& [tid, n] : inner_per_tid) EXPECT_EQ(n, kSpans) << tid;
  for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(thread_names.count("worker-" + std::to_string(t)));
  EXPECT_EQ(TraceEventsRecorded(), 2 * kThreads * kSpans);
  EXPECT_EQ(doc["otherData"]["dropped_events"], 0);
}

TEST(TraceTest, InnerSpansNestInsideOuterOnesInTime) {
  const std::string path = TracePath("nest");
  ASSERT_TRUE(StartTracing(path).ok());
  {
    FW_TRACE_SPAN("t", "outer");
    FW_TRACE_SPAN("t", "inner");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(StopTracing().ok());
  std::map<std::string, json> by_name;
  const json doc = ReadJson(path);  // kept: a range-for over a temporary's member would dangle
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X") by_name[e["name"].get<std::string>()] = e;
  }
  ASSERT_TRUE(by_name.count("outer") && by_name.count("inner"));
  const int64_t os = by_name["outer"]["ts"], od = by_name["outer"]["dur"];
  const int64_t is = by_name["inner"]["ts"], id = by_name["inner"]["dur"];
  EXPECT_GE(is, os);
  EXPECT_LE(is + id, os + od);
  EXPECT_GE(id, 2000);
}

TEST(TraceTest, OffByDefaultAndNothingIsRecordedWhenOff) {
  ASSERT_FALSE(TracingEnabled());
  const int64_t before = TraceEventsRecorded();
  for (int i = 0; i < 1000; ++i) FW_TRACE_SPAN("t", "off");
  EXPECT_EQ(TraceEventsRecorded(), before);
}

TEST(TraceTest, TheEventCapDropsAndCountsTheRest) {
  const std::string path = TracePath("cap");
  ASSERT_TRUE(StartTracing(path, 10).ok());
  for (int i = 0; i < 25; ++i) FW_TRACE_SPAN("t", "capped");
  ASSERT_TRUE(StopTracing().ok());
  json doc = ReadJson(path);
  int n = 0;
  for (const auto& e : doc["traceEvents"]) n += e["ph"] == "X";
  EXPECT_EQ(n, 10);
  EXPECT_EQ(doc["otherData"]["dropped_events"], 15);
}

TEST(TraceTest, BadArgumentsAndAnUnwritablePathAreErrors) {
  EXPECT_TRUE(absl::IsInvalidArgument(StartTracing("")));
  EXPECT_TRUE(absl::IsInvalidArgument(StartTracing("/tmp/x.json", 0)));
  ASSERT_TRUE(StartTracing("/nonexistent-dir/trace.json").ok());
  { FW_TRACE_SPAN("t", "x"); }
  Status s = StopTracing();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent-dir/trace.json"), std::string::npos) << s;
}

}  // namespace
}  // namespace flywheel::obs
