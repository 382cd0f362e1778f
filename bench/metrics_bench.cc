// What metrics cost on the hot paths (the observability issue: under 3%).
//
// Each workload runs in rounds with metrics on and off (SetMetricsEnabled;
// the same switch as FLYWHEEL_METRICS=0), back to back in pairs whose order
// alternates, many pairs; the figure is the median with metrics on, the
// baseline the median with them off, the ratio the median of the pairs'
// on/off ratios (1.00 = free; 0.97 = 3% slower), which cancels the drift of
// a shared machine's speed over the run.
//   replay   in-process replay table kept full at --replay_size items:
//            rounds of --replay_ops (insert one small item, sample one)
//            (uniform sampler, FIFO remover): each call updates counters,
//            the size gauge and a blocked-time histogram.
//   loader   a shuffled epoch of --loader_rows rows (int64 + float32[16])
//            in batches of 256 with 2 threads: per-batch counters, the
//            stage-time collector, and a scrape of the whole registry every
//            --scrape_ms (default 1000: what `flywheel serve` does; a
//            Prometheus server scrapes every 15-60 s) while on.
//   micro    one Counter::Increment and one Histogram::Observe, single
//            thread (ns per call, on vs off).
// Results: bench/results/metrics.json (docs/benchmarks.md).
#include <algorithm>
#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "bench_util.h"
#include "flywheel/base/metrics.h"
#include "flywheel/format/types.h"
#include "flywheel/loader/loader.h"
#include "flywheel/replay/chunk.h"
#include "flywheel/replay/table.h"
#include "flywheel/table/table.h"

namespace flywheel::bench {
namespace {

using format::DataType;
using format::TypeId;

replay::Item SmallItem(uint64_t key) {
  float v[4] = {static_cast<float>(key), 1, 2, 3};
  auto chunk = CheckResult(
      replay::Chunk::Make(key, DataType::Tensor(TypeId::kFloat32, {4}), 1, v, format::Codec::kNone), "chunk");
  return replay::Item{key, 1.0, 0, {replay::TrajectoryColumn{"obs", {std::move(chunk)}, 0, 1}}};
}

// Operations per second of `op` over `n` iterations.
template <typename F>
double Rate(int64_t n, F&& op) {
  const double t0 = Now();
  op();
  return static_cast<double>(n) / (Now() - t0);
}

double Median(std::vector<double> v) { return Percentile(std::move(v), 50); }

struct OnOff {
  std::vector<double> on, off;
};

// Runs `once(on)` alternating on/off, `repeats` times each (first pair as
// warm-up, not kept).
template <typename F>
OnOff Alternate(int repeats, F&& once) {
  OnOff r;
  for (int i = 0; i <= repeats; ++i) {
    for (bool on : {i % 2 == 0, i % 2 != 0}) {
      SetMetricsEnabled(on);
      const double v = once(on);
      if (i > 0) (on ? r.on : r.off).push_back(v);
    }
  }
  SetMetricsEnabled(true);
  return r;
}

// Median of the per-pair ratios on[i] / off[i]: each pair ran back to back,
// so drift in the machine's speed over the run cancels out.
double PairRatio(const OnOff& r) {
  std::vector<double> q;
  for (size_t i = 0; i < r.on.size() && i < r.off.size(); ++i) q.push_back(r.on[i] / r.off[i]);
  return Median(q);
}

void Add(Report& report, const std::string& name, const std::string& unit, const OnOff& r, const std::string& note) {
  Comparison c{name, unit, Median(r.on), "the same with metrics off", Median(r.off), PairRatio(r),
               note + "; ratio = median of back-to-back on/off pairs", {}};
  c.details = {{"on", r.on}, {"off", r.off}};
  report.Add(std::move(c));
}

void RunReplay(const Flags& flags, Report& report) {
  const int64_t size = flags.Int("replay_size"), ops = flags.Int("replay_ops");
  replay::ReplayTableOptions o;
  o.name = "metrics_bench";
  o.max_size = size;
  o.rate_limiter = replay::RateLimiterOptions::MinSize(1);
  auto t = CheckResult(replay::ReplayTable::Create(std::move(o)), "table");
  uint64_t next_key = 1;
  for (int64_t i = 0; i < size; ++i) Check(t->Insert(SmallItem(next_key++)), "fill");
  // Items are built outside the timed loop: the figure is the table's work.
  // The table stays full (each insert evicts the oldest item).
  std::vector<replay::Item> items;
  auto r = Alternate(static_cast<int>(flags.Int("replay_pairs")), [&](bool) {
    items.clear();
    for (int64_t i = 0; i < ops; ++i) items.push_back(SmallItem(next_key++));
    return Rate(ops, [&] {
      for (int64_t i = 0; i < ops; ++i) {
        Check(t->Insert(std::move(items[static_cast<size_t>(i)])), "insert");
        CheckResult(t->Sample(), "sample");
      }
    });
  });
  Add(report, "replay/insert+sample", "pairs/s", r,
      absl::StrCat(flags.Int("replay_pairs"), " pairs of rounds of ", ops, " insert+sample on a full table of ", size,
                   " small items"));
}

void RunLoader(const Flags& flags, Report& report, const std::string& dir) {
  const int64_t rows = flags.Int("loader_rows");
  table::TableOptions topts;
  auto t = CheckResult(table::Table::Create(dir + "/loader_table", DataSchema(false), topts), "create");
  for (const auto& b : MakeBatches(rows, 1 << 18, false)) Check(t->Append(b), "append");
  auto r = Alternate(static_cast<int>(flags.Int("loader_pairs")), [&](bool on) {
    loader::LoaderOptions lo;
    lo.batch_size = 256;
    lo.num_threads = 2;
    lo.seed = 1;
    auto l = CheckResult(loader::Loader::Open({loader::TableRef{t->uri()}}, lo), "loader");
    std::atomic<bool> stop{false};
    std::thread scraper;
    if (on && flags.Int("scrape_ms") > 0) {
      scraper = std::thread([&] {
        while (!stop.load()) {
          std::string text = Metrics().ExpositionText();
          for (int64_t ms = 0; ms < flags.Int("scrape_ms") && !stop.load(); ms += 10) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
        }
      });
    }
    int64_t n = 0;
    const double rate = Rate(rows, [&] {
      while (auto b = CheckResult(l->Next(), "next")) n += b->num_rows;
    });
    stop = true;
    if (scraper.joinable()) scraper.join();
    if (n != rows) Check(absl::InternalError(absl::StrCat("read ", n, " rows of ", rows)), "loader epoch");
    return rate;
  });
  Add(report, "loader/epoch", "rows/s", r,
      absl::StrCat(rows, " rows (int64 + float32[16]), shuffled, batches of 256, 2 threads; registry scraped every ",
                   flags.Int("scrape_ms"), " ms while on"));
}

void RunMicro(const Flags& flags, Report& report) {
  const int64_t n = flags.Int("micro_ops");
  Counter* c = Metrics().GetCounter("flywheel_bench_counter_total", "metrics_bench");
  Histogram* h = Metrics().GetHistogram("flywheel_bench_seconds", "metrics_bench");
  auto counter = Alternate(static_cast<int>(flags.Int("micro_pairs")), [&](bool) {
    return Rate(n, [&] {
      for (int64_t i = 0; i < n; ++i) c->Increment();
    });
  });
  auto hist = Alternate(static_cast<int>(flags.Int("micro_pairs")), [&](bool) {
    return Rate(n, [&] {
      for (int64_t i = 0; i < n; ++i) h->Observe(1e-4 * static_cast<double>(i & 1023));
    });
  });
  auto ns = [](const OnOff& r) {
    OnOff out;
    for (double v : r.on) out.on.push_back(1e9 / v);
    for (double v : r.off) out.off.push_back(1e9 / v);
    return out;
  };
  const OnOff cn = ns(counter), hn = ns(hist);
  Comparison cc{"micro/counter-increment", "ns", Median(cn.on), "the same with metrics off", Median(cn.off),
                PairRatio(counter), "ratio = calls/s on / off", {{"on", cn.on}, {"off", cn.off}}};
  report.Add(std::move(cc));
  Comparison hc{"micro/histogram-observe", "ns", Median(hn.on), "the same with metrics off", Median(hn.off),
                PairRatio(hist), "ratio = calls/s on / off", {{"on", hn.on}, {"off", hn.off}}};
  report.Add(std::move(hc));
}

}  // namespace
}  // namespace flywheel::bench

namespace fb = flywheel::bench;

int main(int argc, char** argv) {
  const bool quick = fb::HasSwitch(argc, argv, "quick");
  std::map<std::string, std::string> defaults = {{"replay_size", "100000"}, {"replay_ops", "50000"}, {"replay_pairs", "41"},
                                                 {"loader_pairs", "21"}, {"micro_pairs", "9"},
                                                 {"loader_rows", "2000000"}, {"micro_ops", "50000000"}, {"scrape_ms", "1000"},
                                                 {"only", "replay,loader,micro"},
                                                 {"quick", "0"},           {"tmp", "/tmp"},
                                                 {"out", fb::SourceDir() + "/bench/results"}};
  if (quick) {
    defaults["replay_size"] = "10000";
    defaults["replay_ops"] = "10000";
    defaults["replay_pairs"] = "5";
    defaults["loader_rows"] = "200000";
    defaults["loader_pairs"] = "3";
    defaults["micro_ops"] = "5000000";
    defaults["micro_pairs"] = "3";
    defaults["out"] = "";
  }
  fb::Flags flags(argc, argv, defaults,
                  "metrics_bench: the cost of metrics on the replay and loader hot paths (on vs off, same run).\n"
                  "  metrics_bench [--quick] [--replay_pairs=N] [--replay_ops=N] [--loader_pairs=N] [--loader_rows=N]\n"
                  "                [--scrape_ms=N] [--only=replay,loader,micro]\n"
                  "                [--out=DIR]\n"
                  "--quick: smoke run (a few seconds), no results file unless --out=DIR is given.");
  fb::TempDir tmp(flags.Str("tmp"), "fw_metrics_bench");
  fb::Report report("metrics", "metrics on vs off on the hot paths");
  const auto only = flags.List("only");
  auto want = [&](const char* w) { return std::find(only.begin(), only.end(), w) != only.end(); };
  if (want("replay")) fb::RunReplay(flags, report);
  if (want("loader")) fb::RunLoader(flags, report, tmp.path());
  if (want("micro")) fb::RunMicro(flags, report);
  if (!flags.Str("out").empty()) report.Write(flags.Str("out"), fb::MachineInfo(tmp.path()), flags.ToJson());
  return 0;
}
