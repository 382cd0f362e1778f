// Tests of flywheel doctor: the bottleneck analysis on made-up stage figures,
// reading a job's figures from /metrics (a fake exposition on a real
// loopback server), the report, and quick real machine measurements.
#include "flywheel/obs/doctor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "flywheel/obs/http_server.h"

namespace flywheel::obs {
namespace {

using ::testing::HasSubstr;

MachineLimits Limits(double memcpy_gbps = 10, double page_cache_gbps = 5, std::optional<double> disk = 1) {
  MachineLimits m;
  m.memcpy_gbps = memcpy_gbps;
  m.page_cache_gbps = page_cache_gbps;
  m.disk_gbps = disk;
  return m;
}

TEST(DoctorAnalysisTest, IdleDominatingNamesTheTrainer) {
  StageFigures f;
  f.wall_seconds = 10;
  f.idle_seconds = 8;
  f.consumer_wait_seconds = 0.2;
  f.io_seconds = 0.5;
  f.assemble_seconds = 1.5;
  f.rows = 5000;
  f.bytes = 2'000'000'000;
  f.num_threads = 2;
  auto a = AnalyzeBottleneck(f, Limits());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->bottleneck, "trainer");
  EXPECT_THAT(a->explanation, HasSubstr("the loader waited on the consumer 80% of the time"));
  EXPECT_DOUBLE_EQ(a->stage("idle")->fraction_of_wall, 0.8);
  EXPECT_DOUBLE_EQ(a->stage("consumer_wait")->fraction_of_wall, 0.02);
  EXPECT_DOUBLE_EQ(*a->stage("assemble")->share_of_worker_time, 0.75);
  EXPECT_DOUBLE_EQ(*a->stage("io")->share_of_worker_time, 0.25);
  EXPECT_DOUBLE_EQ(a->rows_per_second, 500);
  EXPECT_DOUBLE_EQ(a->delivered_gbps, 0.2);
  EXPECT_DOUBLE_EQ(*a->worker_utilization, 2.0 / 20.0);
  EXPECT_FALSE(a->stage("idle")->throughput_gbps.has_value());
  EXPECT_FALSE(a->stage("idle")->share_of_worker_time.has_value());
}

TEST(DoctorAnalysisTest, ConsumerWaitDominatingNamesTheSlowestWorkerStage) {
  StageFigures f;
  f.wall_seconds = 10;
  f.consumer_wait_seconds = 6;
  f.io_seconds = 2;
  f.decode_seconds = 12;
  f.assemble_seconds = 4;
  f.bytes = 2'000'000'000;
  f.rows = 100;
  f.num_threads = 2;
  auto a = AnalyzeBottleneck(f, Limits());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->bottleneck, "decode");
  const StageResult* d = a->stage("decode");
  ASSERT_NE(d, nullptr);
  EXPECT_DOUBLE_EQ(*d->throughput_gbps, 2.0 / 12.0);
  ASSERT_EQ(d->limits.size(), 1u);
  EXPECT_EQ(d->limits[0].name, "memcpy");
  EXPECT_DOUBLE_EQ(d->limits[0].fraction, (2.0 / 12.0) / 10.0);
  EXPECT_DOUBLE_EQ(*d->share_of_worker_time, 12.0 / 18.0);
  EXPECT_DOUBLE_EQ(d->fraction_of_wall, 1.2);  // thread-seconds per second
  EXPECT_THAT(a->explanation, HasSubstr("the trainer waited for batches 60% of the time"));
  EXPECT_THAT(a->explanation, HasSubstr("decode took 67% of the workers' time"));
  EXPECT_THAT(a->explanation, HasSubstr("2% of memcpy (10.00 GB/s)"));
  EXPECT_THAT(a->explanation, HasSubstr("codec"));  // far below the limit: the hint
  // io is compared with the page cache first, then the disk.
  const StageResult* io = a->stage("io");
  ASSERT_EQ(io->limits.size(), 2u);
  EXPECT_EQ(io->limits[0].name, "page_cache");
  EXPECT_DOUBLE_EQ(io->limits[0].fraction, 1.0 / 5.0);
  EXPECT_EQ(io->limits[1].name, "disk");
  EXPECT_DOUBLE_EQ(io->limits[1].fraction, 1.0);
  EXPECT_FALSE(a->stage("transform")->throughput_gbps.has_value());
}

TEST(DoctorAnalysisTest, IoBottleneckAgainstPageCacheAndDisk) {
  StageFigures f;
  f.wall_seconds = 4;
  f.consumer_wait_seconds = 3;
  f.io_seconds = 6;
  f.assemble_seconds = 1;
  f.bytes = 3'000'000'000;
  auto a = AnalyzeBottleneck(f, Limits(10, 5, 0.8));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->bottleneck, "io");
  EXPECT_FALSE(a->worker_utilization.has_value());  // threads unknown
  EXPECT_THAT(a->explanation, HasSubstr("delivering 0.50 GB/s per thread"));
  EXPECT_THAT(a->explanation, HasSubstr("10% of the page-cache read limit (5.00 GB/s)"));
  EXPECT_THAT(a->explanation, HasSubstr("62% of the disk read (0.80 GB/s)"));
}

TEST(DoctorAnalysisTest, PageBytesAreTheBasisOfIoAndDecode) {
  StageFigures f;
  f.wall_seconds = 4;
  f.consumer_wait_seconds = 3;
  f.io_seconds = 1;
  f.decode_seconds = 4;
  f.assemble_seconds = 2;
  f.bytes = 4'000'000'000;      // delivered
  f.page_bytes = 1'000'000'000;  // fetched: the rest came from the loader's page cache
  auto a = AnalyzeBottleneck(f, Limits());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->bottleneck, "decode");
  EXPECT_EQ(a->stage("io")->bytes_basis, "page_bytes");
  EXPECT_DOUBLE_EQ(*a->stage("io")->throughput_gbps, 1.0);
  EXPECT_DOUBLE_EQ(*a->stage("decode")->throughput_gbps, 0.25);
  EXPECT_DOUBLE_EQ(a->stage("decode")->limits[0].fraction, 0.025);
  EXPECT_EQ(a->stage("assemble")->bytes_basis, "delivered_bytes");
  EXPECT_DOUBLE_EQ(*a->stage("assemble")->throughput_gbps, 2.0);
  EXPECT_THAT(a->explanation, HasSubstr("reading pages at 0.25 GB/s per thread"));
  f.page_bytes = -2;
  EXPECT_THAT(std::string(AnalyzeBottleneck(f, Limits()).status().message()), HasSubstr("page_bytes is negative"));
}

TEST(DoctorAnalysisTest, StageNearItsLimitSuggestsMoreThreads) {
  StageFigures f;
  f.wall_seconds = 1;
  f.consumer_wait_seconds = 0.5;
  f.assemble_seconds = 1;
  f.bytes = 8'000'000'000;  // 8 GB/s per thread against a 10 GB/s memcpy
  f.num_threads = 1;
  auto a = AnalyzeBottleneck(f, Limits());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->bottleneck, "assemble");
  EXPECT_DOUBLE_EQ(a->stage("assemble")->limits[0].fraction, 0.8);
  EXPECT_THAT(a->explanation, HasSubstr("near what one thread can do"));
}

TEST(DoctorAnalysisTest, IdleWorkersWhileTheTrainerWaitsAreReported) {
  StageFigures f;
  f.wall_seconds = 10;
  f.consumer_wait_seconds = 5;
  f.transform_seconds = 3;
  f.bytes = 1000;
  f.num_threads = 8;
  auto a = AnalyzeBottleneck(f, Limits());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->bottleneck, "transform");
  EXPECT_DOUBLE_EQ(*a->worker_utilization, 3.0 / 80.0);
  EXPECT_THAT(a->explanation, HasSubstr("busy only 4% of the time"));
}

TEST(DoctorAnalysisTest, AStarvingTrainerBlamesTheLoaderEvenWhenItsReadAheadIsFull) {
  // One worker thread: the read-ahead's slots are all taken (queued behind
  // it), so the loader counts idle time, yet the trainer waits.
  StageFigures f;
  f.wall_seconds = 1;
  f.consumer_wait_seconds = 0.23;
  f.idle_seconds = 0.76;
  f.assemble_seconds = 0.85;
  f.bytes = 700'000'000;
  f.num_threads = 1;
  auto a = AnalyzeBottleneck(f, Limits());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->bottleneck, "assemble");
  EXPECT_THAT(a->explanation, HasSubstr("the trainer waited for batches 23% of the time"));
  EXPECT_THAT(a->explanation, HasSubstr("read-ahead was also full 76% of the time"));
}

TEST(DoctorAnalysisTest, SmallWaitsAreBalanced) {
  StageFigures f;
  f.wall_seconds = 10;
  f.consumer_wait_seconds = 0.5;
  f.idle_seconds = 0.9;
  f.assemble_seconds = 7;
  f.bytes = 1'000'000;
  auto a = AnalyzeBottleneck(f, Limits());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->bottleneck, "balanced");
  EXPECT_THAT(a->explanation, HasSubstr("waited for batches 5% of the time, the loader for the trainer 9%"));
  EXPECT_THAT(a->explanation, HasSubstr("assemble took 100%"));
}

TEST(DoctorAnalysisTest, WaitingWithoutWorkerTimeBlamesTheLoader) {
  StageFigures f;
  f.wall_seconds = 2;
  f.consumer_wait_seconds = 2;
  auto a = AnalyzeBottleneck(f, Limits());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->bottleneck, "loader");
  EXPECT_THAT(a->explanation, HasSubstr("no stage time"));
  EXPECT_FALSE(a->stage("io")->share_of_worker_time.has_value());
}

TEST(DoctorAnalysisTest, UnknownLimitsLeaveFractionsOut) {
  StageFigures f;
  f.wall_seconds = 1;
  f.consumer_wait_seconds = 0.9;
  f.io_seconds = 1;
  f.bytes = 1'000'000'000;
  auto a = AnalyzeBottleneck(f, Limits(0, 0, std::nullopt));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->bottleneck, "io");
  EXPECT_DOUBLE_EQ(*a->stage("io")->throughput_gbps, 1.0);
  EXPECT_TRUE(a->stage("io")->limits.empty());
}

TEST(DoctorAnalysisTest, BadFiguresAreRefusedNamingTheField) {
  StageFigures ok;
  ok.wall_seconds = 1;
  auto expect_error = [&](StageFigures f, const std::string& text) {
    auto a = AnalyzeBottleneck(f, Limits());
    ASSERT_FALSE(a.ok()) << text;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(a.status().message()), HasSubstr(text));
  };
  StageFigures f = ok;
  f.wall_seconds = 0;
  expect_error(f, "wall_seconds must be > 0");
  f.wall_seconds = -3;
  expect_error(f, "wall_seconds must be > 0");
  f.wall_seconds = std::numeric_limits<double>::infinity();
  expect_error(f, "wall_seconds must be > 0");
  f = ok;
  f.io_seconds = -1;
  expect_error(f, "io_seconds is negative");
  f = ok;
  f.decode_seconds = std::nan("");
  expect_error(f, "decode_seconds is not finite");
  f = ok;
  f.rows = -5;
  expect_error(f, "rows is negative");
  f = ok;
  f.bytes = -5;
  expect_error(f, "bytes is negative");
  f = ok;
  f.num_threads = -1;
  expect_error(f, "num_threads is negative");
  f = ok;
  f.consumer_wait_seconds = 2;
  expect_error(f, "consumer_wait_seconds (2 s) is longer than the wall interval (1 s)");
  f = ok;
  f.idle_seconds = 1.5;
  expect_error(f, "idle_seconds");

  auto bad_limits = AnalyzeBottleneck(ok, Limits(-1));
  ASSERT_FALSE(bad_limits.ok());
  EXPECT_THAT(std::string(bad_limits.status().message()), HasSubstr("memcpy_gbps is negative"));
  bad_limits = AnalyzeBottleneck(ok, Limits(1, 1, std::nan("")));
  ASSERT_FALSE(bad_limits.ok());
  EXPECT_THAT(std::string(bad_limits.status().message()), HasSubstr("disk_gbps is not finite"));
}

// ---------------------------------------------------------------------------
// Scrapes.

std::string Exposition(double scale, double rows) {
  auto stage = [&](const char* s, double v) {
    return absl::StrCat("flywheel_loader_stage_seconds_total{table=\"/data/t\",stage=\"", s, "\"} ", v * scale,
                        "\n");
  };
  return absl::StrCat(
      "# HELP flywheel_loader_stage_seconds_total Loader time by stage\n"
      "# TYPE flywheel_loader_stage_seconds_total gauge\n",
      stage("io", 1), stage("decode", 0.5), stage("transform", 0), stage("assemble", 2),
      stage("consumer_wait", 1.5), stage("idle", 0.1),
      "# TYPE flywheel_loader_rows_total counter\n"
      "flywheel_loader_rows_total{table=\"/data/t\"} ",
      rows,
      "\n"
      "# TYPE flywheel_loader_bytes_total counter\n"
      "flywheel_loader_bytes_total{table=\"/data/t\"} ",
      rows * 1000,
      "\n"
      "# TYPE flywheel_replay_inserts_total counter\n"
      "flywheel_replay_inserts_total{table=\"q\"} ",
      100 * scale,
      "\n"
      "# TYPE flywheel_replay_samples_total counter\n"
      "flywheel_replay_samples_total{table=\"q\"} ",
      50 * scale,
      "\n"
      "# TYPE flywheel_replay_insert_blocked_seconds histogram\n"
      "flywheel_replay_insert_blocked_seconds_bucket{table=\"q\",le=\"+Inf\"} ",
      100 * scale,
      "\n"
      "flywheel_replay_insert_blocked_seconds_sum{table=\"q\"} ",
      3 * scale,
      "\n"
      "flywheel_replay_insert_blocked_seconds_count{table=\"q\"} ",
      100 * scale,
      "\n"
      "# TYPE flywheel_replay_sample_blocked_seconds histogram\n"
      "flywheel_replay_sample_blocked_seconds_bucket{table=\"q\",le=\"+Inf\"} ",
      50 * scale,
      "\n"
      "flywheel_replay_sample_blocked_seconds_sum{table=\"q\"} 0\n"
      "flywheel_replay_sample_blocked_seconds_count{table=\"q\"} ",
      50 * scale, "\n");
}

TEST(DoctorScrapeTest, FiguresFromTwoScrapes) {
  auto before = ParsePrometheusText(Exposition(1, 1000));
  auto after = ParsePrometheusText(Exposition(3, 5000));
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_TRUE(after.ok()) << after.status();
  JobCounters b = CountersFromScrape(*before);
  JobCounters a = CountersFromScrape(*after);
  EXPECT_FALSE(a.loader_without_stages);
  ASSERT_EQ(a.loaders.count("/data/t"), 1u);
  EXPECT_DOUBLE_EQ(a.loaders["/data/t"].stage_seconds["assemble"], 6);
  auto f = LoaderFiguresFromDelta(b.loaders["/data/t"], a.loaders["/data/t"], 4);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_DOUBLE_EQ(f->io_seconds, 2);
  EXPECT_DOUBLE_EQ(f->decode_seconds, 1);
  EXPECT_DOUBLE_EQ(f->assemble_seconds, 4);
  EXPECT_DOUBLE_EQ(f->consumer_wait_seconds, 3);
  EXPECT_NEAR(f->idle_seconds, 0.2, 1e-12);
  EXPECT_EQ(f->rows, 4000);
  EXPECT_EQ(f->bytes, 4'000'000);
  auto analysis = AnalyzeBottleneck(*f, Limits());
  ASSERT_TRUE(analysis.ok());
  EXPECT_EQ(analysis->bottleneck, "assemble");  // the trainer waited 75%

  ASSERT_EQ(a.replay.count("q"), 1u);
  auto r = ReplayFiguresFromDelta("q", b.replay["q"], a.replay["q"], 4);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->inserts, 200);
  EXPECT_DOUBLE_EQ(r->insert_blocked_seconds, 6);
  EXPECT_DOUBLE_EQ(r->insert_blocked_callers(), 1.5);
  EXPECT_EQ(r->Blocked(), "replay_insert");
  EXPECT_THAT(r->Explain(), HasSubstr("the learner samples too slowly"));
}

TEST(DoctorScrapeTest, ACounterGoingDownIsARestart) {
  LoaderCounters before, after;
  before.rows = 10;
  after.rows = 5;
  auto f = LoaderFiguresFromDelta(before, after, 1);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("did the process restart?"));
  EXPECT_FALSE(LoaderFiguresFromDelta({}, {}, 0).ok());  // zero interval
}

TEST(DoctorScrapeTest, LoaderWithoutStageSeriesIsFlagged) {
  auto s = ParsePrometheusText(
      "# TYPE flywheel_loader_rows_total counter\n"
      "flywheel_loader_rows_total{table=\"t\"} 5\n");
  ASSERT_TRUE(s.ok()) << s.status();
  JobCounters c = CountersFromScrape(*s);
  EXPECT_TRUE(c.loader_without_stages);
  EXPECT_TRUE(c.loaders.empty());
  EXPECT_TRUE(c.replay.empty());
}

TEST(DoctorScrapeTest, ScrapesARealEndpoint) {
  auto server = HttpServer::Create();
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->Handle("/metrics", [](const HttpRequest&) {
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4";
    r.body = Exposition(1, 10);
    return r;
  });
  (*server)->Handle("/junk", [](const HttpRequest&) {
    HttpResponse r;
    r.body = "this is { not metrics\n";
    return r;
  });
  ASSERT_TRUE((*server)->Start().ok());
  const std::string base = absl::StrCat("http://127.0.0.1:", (*server)->port());

  auto s = ScrapeMetrics(base + "/metrics", 5000);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(CountersFromScrape(*s).loaders.size(), 1u);

  auto missing = ScrapeMetrics(base + "/nope", 5000);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("HTTP status 404"));

  auto junk = ScrapeMetrics(base + "/junk", 5000);
  ASSERT_FALSE(junk.ok());
  EXPECT_THAT(std::string(junk.status().message()), HasSubstr("did not answer with Prometheus metrics"));

  const int port = (*server)->port();
  (*server)->Stop();
  server->reset();
  const std::string gone = absl::StrCat("http://127.0.0.1:", port, "/metrics");
  auto unreachable = ScrapeMetrics(gone, 2000);
  ASSERT_FALSE(unreachable.ok());
  EXPECT_EQ(unreachable.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(unreachable.status().message()), HasSubstr("cannot scrape " + gone));
}

// ---------------------------------------------------------------------------
// The report.

TEST(DoctorReportTest, JsonAndTextCarryTheFiguresAndTheBottleneck) {
  DoctorReport r;
  r.machine = Limits(12, 6, std::nullopt);
  r.machine.memcpy_bytes = 64 << 20;
  r.machine.file_bytes = 64 << 20;
  r.machine.repetitions = 3;
  r.machine.dir = "/tmp";
  r.machine.notes.push_back("disk read not measured: tmpfs");
  r.grpc = GrpcLoopback{32, 1 << 20, 900, 1200};
  StageFigures f;
  f.wall_seconds = 2;
  f.consumer_wait_seconds = 1.6;
  f.assemble_seconds = 3;
  f.io_seconds = 0.5;
  f.bytes = 600'000'000;
  f.rows = 10000;
  f.num_threads = 2;
  auto a = AnalyzeBottleneck(f, r.machine);
  ASSERT_TRUE(a.ok());
  r.loaders.push_back({"loader", "/data/t", "batch 256, 2 threads, shuffle", *a});

  nlohmann::json j = DoctorReportJson(r);
  EXPECT_DOUBLE_EQ(j["machine"]["memcpy_gbps"].get<double>(), 12);
  EXPECT_TRUE(j["machine"]["disk_gbps"].is_null());
  EXPECT_DOUBLE_EQ(j["grpc"]["insert_mbps"].get<double>(), 900);
  ASSERT_EQ(j["loaders"].size(), 1u);
  EXPECT_EQ(j["loaders"][0]["bottleneck"], "assemble");
  EXPECT_EQ(j["loaders"][0]["stages"].size(), 6u);
  EXPECT_DOUBLE_EQ(j["loaders"][0]["stages"][3]["limits"][0]["fraction"].get<double>(), 0.2 / 12);
  EXPECT_EQ(j["bottleneck"]["stage"], "assemble");
  EXPECT_TRUE(j["replay"].empty());

  const std::string text = DoctorReportText(r);
  EXPECT_THAT(text, HasSubstr("memcpy"));
  EXPECT_THAT(text, HasSubstr("12.00 GB/s"));
  EXPECT_THAT(text, HasSubstr("not measured"));
  EXPECT_THAT(text, HasSubstr("insert 900.0 MB/s, sample 1200.0 MB/s"));
  EXPECT_THAT(text, HasSubstr("consumer_wait"));
  EXPECT_THAT(text, HasSubstr("disk read not measured: tmpfs"));
  EXPECT_THAT(text, HasSubstr("\nbottleneck: assemble \u2014 the loader's assemble stage"));

  DoctorReport empty;
  EXPECT_TRUE(DoctorReportJson(empty)["bottleneck"].is_null());
  EXPECT_THAT(DoctorReportText(empty), HasSubstr("bottleneck: not analysed"));
}

// ---------------------------------------------------------------------------
// Real measurements, small sizes.

std::string TestDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  if (d == nullptr) d = std::getenv("TMPDIR");
  return d != nullptr ? d : "/tmp";
}

bool PositiveFinite(double v) { return std::isfinite(v) && v > 0; }

TEST(DoctorMeasureTest, MemcpyIsPositiveAndFinite) {
  auto g = MeasureMemcpyGBps(8 << 20, 2);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(PositiveFinite(*g)) << *g;
  EXPECT_FALSE(MeasureMemcpyGBps(0, 1).ok());
  EXPECT_FALSE(MeasureMemcpyGBps(1024, 0).ok());
}

TEST(DoctorMeasureTest, FileReadsArePositiveOrExplained) {
  MachineOptions o;
  o.dir = TestDir();
  o.file_bytes = 8 << 20;
  o.memcpy_bytes = 8 << 20;
  o.repetitions = 2;
  int progress_lines = 0;
  o.progress = [&](const std::string&) { ++progress_lines; };
  auto m = MeasureMachine(o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(PositiveFinite(m->memcpy_gbps));
  EXPECT_TRUE(PositiveFinite(m->page_cache_gbps));
  if (m->disk_gbps) {
    EXPECT_TRUE(PositiveFinite(*m->disk_gbps));
    EXPECT_LT(*m->disk_gbps, 0.9 * m->page_cache_gbps);
    EXPECT_TRUE(m->disk_method == "fadvise" || m->disk_method == "o_direct") << m->disk_method;
  } else {
    bool explained = false;
    for (const auto& n : m->notes) explained |= n.rfind("disk read not measured: ", 0) == 0;
    EXPECT_TRUE(explained) << ::testing::PrintToString(m->notes);
  }
  EXPECT_EQ(m->file_bytes, 8 << 20);
  EXPECT_EQ(m->dir, o.dir);
  EXPECT_GE(progress_lines, 3);
}

TEST(DoctorMeasureTest, ODirectDiskReadIsPositiveOrExplained) {
  MachineOptions o;
  o.dir = TestDir();
  o.file_bytes = 8 << 20;
  o.repetitions = 1;
  o.prefer_o_direct = true;
  auto m = MeasureFileReads(o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(PositiveFinite(m->page_cache_gbps));
  if (m->disk_gbps) {
    EXPECT_EQ(m->disk_method, "o_direct");
    EXPECT_TRUE(PositiveFinite(*m->disk_gbps));
  } else {
    ASSERT_EQ(m->notes.size(), 1u);
    EXPECT_THAT(m->notes[0], HasSubstr("disk read not measured: "));
  }
}

TEST(DoctorMeasureTest, BadOptionsAreRefused) {
  MachineOptions o;
  EXPECT_THAT(std::string(MeasureMachine(o).status().message()), HasSubstr("directory"));
  o.dir = TestDir() + "/no/such/dir/for/doctor";
  o.file_bytes = 1 << 20;
  o.memcpy_bytes = 1 << 20;
  auto m = MeasureMachine(o);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("/no/such/dir/for/doctor"));
  o.dir = TestDir();
  o.file_bytes = 1000;
  EXPECT_EQ(MeasureMachine(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.file_bytes = 1 << 20;
  o.repetitions = 0;
  EXPECT_EQ(MeasureMachine(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.repetitions = 1;
  o.read_block_bytes = 1000;
  EXPECT_EQ(MeasureMachine(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace flywheel::obs
