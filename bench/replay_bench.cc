// In-process replay benchmarks (the replay issue's "In-process" figures).
//
// Workloads (--benchmarks=small,large,latency):
//   small    1-step items of 4 float32: inserts/s into a Uniform and a
//            Prioritized(0.6) table up to --items (default 1M), then
//            samples/s from each at that size. Baseline (same run): the simplest
//            in-process store — a mutex-guarded std::unordered_map of
//            key -> 16 bytes, inserting and reading uniformly random keys.
//   large    1-step items of one 84x84x4 uint8 frame (Atari-like: smooth
//            image plus noise), lz4 chunks: inserts/s and GB/s of frames for
//            --large_items (default 20000), samples/s with decode GB/s,
//            Uniform and Prioritized(0.6). Baselines: lz4 compress /
//            decompress of the same frames (and memcpy, in the note).
//   latency  single-sample latency p50/p99 at --items from a Prioritized(0.6)
//            table; baseline: the same percentile of a locked unordered_map
//            lookup + 16-byte copy.
//   checkpoint  a checkpoint of a --items table of small items while one
//            thread inserts and one samples: the longest time the table was
//            locked (Checkpoint's max_pause) against the whole checkpoint's
//            duration, which is how long a blocking checkpoint would stop
//            every call; and the slowest insert during the checkpoint
//            against the slowest insert in as long a window without one.
// Results: bench/results/replay.json (see docs/benchmarks.md).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include "bench_util.h"
#include "flywheel/base/rng.h"
#include "flywheel/format/codec.h"
#include "flywheel/replay/checkpoint.h"
#include "flywheel/replay/table.h"

namespace flywheel::bench {
namespace {

using format::DataType;
using format::TypeId;
using replay::Chunk;
using replay::Item;
using replay::ReplayTable;
using replay::ReplayTableOptions;
using replay::TrajectoryColumn;

std::unique_ptr<ReplayTable> MakeTable(const std::string& name, std::unique_ptr<replay::ItemSelector> sampler,
                                 int64_t max_size) {
  ReplayTableOptions o;
  o.name = name;
  o.sampler = std::move(sampler);
  o.max_size = max_size;
  o.rate_limiter = replay::RateLimiterOptions::MinSize(1);
  return CheckResult(ReplayTable::Create(std::move(o)), "create table");
}

Item SmallItem(uint64_t key, double priority) {
  float v[4] = {static_cast<float>(key), 1, 2, 3};
  auto chunk = CheckResult(Chunk::Make(key, DataType::Tensor(TypeId::kFloat32, {4}), 1, v, format::Codec::kNone),
                           "chunk");
  return Item{key, priority, 0, {TrajectoryColumn{"obs", {std::move(chunk)}, 0, 1}}};
}

// The simplest in-process store: a locked hash map of 16-byte values.
struct Baseline {
  std::mutex mu;
  std::unordered_map<uint64_t, std::array<float, 4>> items;
  std::vector<uint64_t> keys;
};

void RunSmall(const Flags& flags, Report& report) {
  const int64_t n = flags.Int("items");
  // flywheel inserts
  auto uniform = MakeTable("uniform", replay::NewUniformSelector(1), n);
  double t0 = Now();
  for (int64_t i = 0; i < n; ++i) Check(uniform->Insert(SmallItem(static_cast<uint64_t>(i) + 1, 1.0)), "insert");
  const double fw_insert = static_cast<double>(n) / (Now() - t0);
  // baseline inserts
  Baseline base;
  t0 = Now();
  for (int64_t i = 0; i < n; ++i) {
    std::lock_guard<std::mutex> lock(base.mu);
    base.items.emplace(static_cast<uint64_t>(i) + 1, std::array<float, 4>{static_cast<float>(i), 1, 2, 3});
    base.keys.push_back(static_cast<uint64_t>(i) + 1);
  }
  const double base_insert = static_cast<double>(n) / (Now() - t0);
  report.Add({"small/insert-uniform", "items/s", fw_insert, "locked unordered_map insert", base_insert, 0,
              absl::StrCat(n, " items of 4 float32")});

  const int64_t samples = std::min<int64_t>(n, 1000000);
  float out[4];
  t0 = Now();
  for (int64_t i = 0; i < samples; ++i) {
    auto s = CheckResult(uniform->Sample(), "sample");
    Check(s.item->columns[0].Decode(out), "decode");
  }
  const double fw_sample = static_cast<double>(samples) / (Now() - t0);
  SplitMix64 rng(7);
  float sink = 0;
  t0 = Now();
  for (int64_t i = 0; i < samples; ++i) {
    std::lock_guard<std::mutex> lock(base.mu);
    const auto& v = base.items[base.keys[rng.Uniform(base.keys.size())]];
    std::memcpy(out, v.data(), 16);
    sink += out[0];
  }
  const double base_sample = static_cast<double>(samples) / (Now() - t0);
  report.Add({"small/sample-uniform", "items/s", fw_sample, "locked unordered_map random read", base_sample, 0,
              absl::StrCat("table of ", n, " items; sink ", sink > 0 ? "ok" : "0")});
  uniform.reset();

  auto prio = MakeTable("prioritized", replay::NewPrioritizedSelector(0.6, 1), n);
  t0 = Now();
  for (int64_t i = 0; i < n; ++i) {
    Check(prio->Insert(SmallItem(static_cast<uint64_t>(i) + 1, 0.1 + static_cast<double>(i % 1000))), "insert");
  }
  const double fw_prio_insert = static_cast<double>(n) / (Now() - t0);
  report.Add({"small/insert-prioritized", "items/s", fw_prio_insert, "locked unordered_map insert", base_insert, 0,
              absl::StrCat(n, " items of 4 float32, priority exponent 0.6")});
  t0 = Now();
  for (int64_t i = 0; i < samples; ++i) {
    auto s = CheckResult(prio->Sample(), "sample");
    Check(s.item->columns[0].Decode(out), "decode");
  }
  const double fw_prio = static_cast<double>(samples) / (Now() - t0);
  report.Add({"small/sample-prioritized", "items/s", fw_prio, "locked unordered_map random read", base_sample, 0,
              absl::StrCat("table of ", n, " items, priority exponent 0.6")});
}

std::vector<uint8_t> Frame(uint64_t seed) {
  std::vector<uint8_t> f(84 * 84 * 4);
  SplitMix64 rng(seed);
  for (size_t i = 0; i < f.size(); ++i) {
    const size_t x = (i / 4) % 84, y = (i / 4) / 84;
    f[i] = static_cast<uint8_t>((x + y + seed) / 3 + ((rng.Next() & 15) == 0 ? rng.Next() & 7 : 0));
  }
  return f;
}

void RunLarge(const Flags& flags, Report& report) {
  const int64_t n = flags.Int("large_items");
  const DataType type = DataType::Tensor(TypeId::kUInt8, {84, 84, 4});
  std::vector<std::vector<uint8_t>> frames;
  for (int k = 0; k < 64; ++k) frames.push_back(Frame(static_cast<uint64_t>(k)));
  const double frame_bytes = static_cast<double>(frames[0].size());
  std::vector<uint8_t> dst(frames[0].size() * 64);
  double t0 = Now();
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst.data() + (i % 64) * frames[0].size(), frames[i % 64].data(), frames[0].size());
  const double memcpy_gbs = static_cast<double>(n) * frame_bytes / (Now() - t0) / 1e9;
  // The codec's own cost on the same frames: what an insert cannot go below.
  std::vector<std::string> packed(64);
  t0 = Now();
  for (int64_t i = 0; i < n; ++i) {
    packed[i % 64].clear();
    Check(format::Compress(format::Codec::kLz4, 1, frames[i % 64].data(), frames[i % 64].size(), &packed[i % 64]), "lz4");
  }
  const double lz4_gbs = static_cast<double>(n) * frame_bytes / (Now() - t0) / 1e9;
  t0 = Now();
  for (int64_t i = 0; i < n; ++i) {
    Check(format::Decompress(format::Codec::kLz4, packed[i % 64].data(), packed[i % 64].size(),
                             dst.data() + (i % 64) * frames[0].size(), frames[0].size()), "unlz4");
  }
  const double unlz4_gbs = static_cast<double>(n) * frame_bytes / (Now() - t0) / 1e9;
  for (const bool prioritized : {false, true}) {
    const std::string suffix = prioritized ? "-prioritized" : "";
    auto table = MakeTable("frames",
                           prioritized ? replay::NewPrioritizedSelector(0.6, 2) : replay::NewUniformSelector(1), n);
    t0 = Now();
    for (int64_t i = 0; i < n; ++i) {
      auto chunk = CheckResult(Chunk::Make(static_cast<uint64_t>(i) + 1, type, 1, frames[i % 64].data()), "chunk");
      Check(table->Insert(Item{static_cast<uint64_t>(i) + 1, 1.0 + static_cast<double>(i % 7), 0,
                               {TrajectoryColumn{"frame", {std::move(chunk)}, 0, 1}}}),
            "insert");
    }
    const double insert_s = Now() - t0;
    report.Add({"large/insert" + suffix, "GB/s", static_cast<double>(n) * frame_bytes / insert_s / 1e9,
                "lz4 compress of the frames", lz4_gbs, 0,
                absl::StrCat(static_cast<int64_t>(static_cast<double>(n) / insert_s), " items/s of 84x84x4 uint8, lz4")});
    t0 = Now();
    for (int64_t i = 0; i < n; ++i) {
      auto s = CheckResult(table->Sample(), "sample");
      Check(s.item->columns[0].Decode(dst.data() + (i % 64) * frames[0].size()), "decode");
    }
    const double sample_s = Now() - t0;
    report.Add({"large/sample+decode" + suffix, "GB/s", static_cast<double>(n) * frame_bytes / sample_s / 1e9,
                "lz4 decompress of the frames", unlz4_gbs, 0,
                absl::StrCat(static_cast<int64_t>(static_cast<double>(n) / sample_s), " items/s; memcpy of the frames ",
                             memcpy_gbs, " GB/s")});
  }
}

void RunLatency(const Flags& flags, Report& report) {
  const int64_t n = flags.Int("items");
  auto prio = MakeTable("latency", replay::NewPrioritizedSelector(0.6, 3), n);
  for (int64_t i = 0; i < n; ++i) {
    Check(prio->Insert(SmallItem(static_cast<uint64_t>(i) + 1, 0.1 + static_cast<double>(i % 997))), "insert");
  }
  Baseline base;
  for (int64_t i = 0; i < n; ++i) {
    base.items.emplace(static_cast<uint64_t>(i) + 1, std::array<float, 4>{1, 2, 3, 4});
    base.keys.push_back(static_cast<uint64_t>(i) + 1);
  }
  const int kSamples = 200000;
  std::vector<double> fw(kSamples), bl(kSamples);
  float out[4];
  SplitMix64 rng(9);
  for (int i = 0; i < kSamples; ++i) {
    double a = Now();
    auto s = CheckResult(prio->Sample(), "sample");
    Check(s.item->columns[0].Decode(out), "decode");
    fw[i] = (Now() - a) * 1e6;
    a = Now();
    {
      std::lock_guard<std::mutex> lock(base.mu);
      std::memcpy(out, base.items[base.keys[rng.Uniform(base.keys.size())]].data(), 16);
    }
    bl[i] = (Now() - a) * 1e6;
  }
  for (double p : {50.0, 99.0}) {
    report.Add({absl::StrCat("latency/prioritized-p", static_cast<int>(p)), "us", Percentile(fw, p),
                "locked unordered_map lookup", Percentile(bl, p), 0,
                absl::StrCat("table of ", n, " items; ratio = flywheel/baseline (lower is better)")});
  }
}

// Inserts and samples on `table` until `stop`, recording each insert's time.
struct Load {
  explicit Load(ReplayTable* table, uint64_t first_key) {
    inserter = std::thread([this, table, first_key] {
      for (uint64_t k = first_key; !stop.load(); ++k) {
        const double a = Now();
        Check(table->Insert(SmallItem(k, 1.0)), "insert under load");
        const double us = (Now() - a) * 1e6;
        std::lock_guard<std::mutex> lock(mu);
        insert_us.push_back(us);
      }
    });
    sampler = std::thread([this, table] {
      while (!stop.load()) CheckResult(table->Sample(), "sample under load");
    });
  }
  std::vector<double> Finish() {
    stop = true;
    inserter.join();
    sampler.join();
    return insert_us;
  }
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<double> insert_us;
  std::thread inserter, sampler;
};

void RunCheckpoint(const Flags& flags, Report& report) {
  const int64_t n = flags.Int("items");
  // Full: each insert of the load evicts the oldest item, so the table keeps
  // its size and no hash-map or sum-tree growth lands in either window.
  auto table = MakeTable("checkpointed", replay::NewPrioritizedSelector(0.6, 5), n);
  for (int64_t i = 0; i < n; ++i) {
    Check(table->Insert(SmallItem(static_cast<uint64_t>(i) + 1, 0.1 + static_cast<double>(i % 997))), "insert");
  }
  TempDir tmp;
  replay::CheckpointOptions co;
  co.fs = io::PosixFileSystem(io::PosixOptions{.sync = false});  // the pause, not the disk, is measured
  double duration_s = 0;
  std::vector<double> during, without;
  absl::Duration pause;
  {
    Load load(table.get(), static_cast<uint64_t>(n) + 1);
    absl::SleepFor(absl::Milliseconds(100));
    auto r = CheckResult(replay::Checkpoint({table.get()}, tmp.path() + "/ckpt", co), "checkpoint");
    during = load.Finish();
    pause = r.max_pause;
    duration_s = absl::ToDoubleSeconds(r.duration);
  }
  {
    Load load(table.get(), static_cast<uint64_t>(10 * n) + 1);
    absl::SleepFor(absl::Milliseconds(100) + absl::Seconds(duration_s));
    without = load.Finish();
  }
  const double pause_ms = absl::ToDoubleMilliseconds(pause);
  report.Add({"checkpoint/max-pause", "ms", pause_ms, "whole checkpoint (a blocking checkpoint's pause)",
              duration_s * 1e3, 0,
              absl::StrCat(n, " items, 1 inserter (evicting) + 1 sampler running; ratio = locked time / "
                              "checkpoint time (lower is better)")});
  const double worst_during = *std::max_element(during.begin(), during.end()) / 1e3;
  const double worst_without = *std::max_element(without.begin(), without.end()) / 1e3;
  report.Add({"checkpoint/slowest-insert", "ms", worst_during, "slowest insert, same load, no checkpoint",
              worst_without, 0,
              absl::StrCat(during.size(), " inserts during the checkpoint, ", without.size(),
                           " without; 2 busy threads + the checkpoint on this machine's CPUs")});
}

}  // namespace
}  // namespace flywheel::bench

int main(int argc, char** argv) {
  using namespace flywheel::bench;
  Flags flags(argc, argv,
              {{"items", "1000000"}, {"large_items", "20000"}, {"benchmarks", "small,large,latency,checkpoint"},
               {"out", SourceDir() + "/bench/results"}},
              "replay_bench [--items=N] [--large_items=N] [--benchmarks=small,large,latency,checkpoint] [--out=DIR]");
  Report report("replay", "in-process replay: inserts, samples, latency");
  for (const auto& b : flags.List("benchmarks")) {
    if (b == "small") RunSmall(flags, report);
    else if (b == "large") RunLarge(flags, report);
    else if (b == "latency") RunLatency(flags, report);
    else if (b == "checkpoint") RunCheckpoint(flags, report);
    else {
      std::fprintf(stderr, "replay_bench: unknown benchmark '%s'\n", b.c_str());
      return 2;
    }
  }
  TempDir tmp;
  report.Write(flags.Str("out"), MachineInfo(tmp.path()), flags.ToJson());
  return 0;
}
