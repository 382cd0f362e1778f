// format_bench: Google Benchmark micro figures for shard files and checksums,
// each paired with a same-run baseline; the ratios are printed after the runs
// and written with the machine description to <--out>/format_bench.json.
//
//   format_bench [--rows=262144] [--out=DIR] [--tmp=/tmp] [--benchmark_*...]
//
// Data: a shard of --rows rows (id int64, emb float32[16]; bench_util.h) with
// default 256 KiB pages, written uncompressed and with zstd; a table holding
// the same rows in one fragment.
//
//   BM_ReadPageMapped    ShardReader::ReadPage of an uncompressed page (zero-copy
//                        view of the mapped file, checksum verified once) + sum
//                        of its words     vs BM_SumPage: the same sum over the
//                        same mapped bytes.
//   BM_ReadPagePread     the same with ShardReaderOptions{mmap=false} (pread
//                        copy + checksum on every read) + sum
//                        vs BM_PreadPage: pread of the page bytes + sum.
//   BM_ReadPageZstd      a zstd page (read + checksum + decompress) + sum
//                        vs BM_PreadPage.
//   BM_ShardTake1K       ShardReader::Take of 1000 random rows of emb
//                        vs BM_Gather1K/1: memcpy of the same rows from the
//                        mapped file using the page index.
//   BM_TableTake1K       Table::Take of 1000 random rows of (id, emb)
//                        vs BM_Gather1K/2: memcpy gather of both columns.
//   BM_Checksum64/N      Checksum64 (XXH3-64) of N bytes
//                        vs BM_SumWords/N: summing the same N bytes.
// Default: 3 repetitions per benchmark, the fastest reported.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>

#include "bench_util.h"
#include "flywheel/base/checksum.h"
#include "flywheel/format/shard.h"
#include "flywheel/io/file_system.h"
#include "flywheel/table/table.h"

namespace flywheel::bench {
namespace {

constexpr int kTakeRows = 1000;
constexpr int kTakeSets = 64;

struct Env {
  std::unique_ptr<TempDir> tmp;
  int64_t rows = 0;
  std::string plain_path, zstd_path;
  std::shared_ptr<format::ShardReader> mapped, pread, zstd;
  std::shared_ptr<io::RandomAccessFile> file;  // mapped plain shard
  std::shared_ptr<table::Table> table;
  std::vector<std::vector<int64_t>> take_sets;
};
Env* env = nullptr;

void Setup(const std::string& tmp_parent, int64_t rows) {
  env = new Env;
  env->tmp = std::make_unique<TempDir>(tmp_parent, "fw_format_bench");
  env->rows = rows;
  auto fs = io::PosixFileSystem(io::PosixOptions{.sync = false});
  const format::RecordBatch batch = MakeRows(0, rows, false);
  auto write = [&](const std::string& path, format::Codec codec) {
    format::ShardWriterOptions o;
    o.codec = codec;
    auto w = CheckResult(format::ShardWriter::Open(fs.get(), path, batch.schema, o), "open writer");
    Check(w->Write(batch), "write");
    CheckResult(w->Finish(), "finish");
  };
  env->plain_path = env->tmp->Sub("plain.shard");
  env->zstd_path = env->tmp->Sub("zstd.shard");
  write(env->plain_path, format::Codec::kNone);
  write(env->zstd_path, format::Codec::kZstd);
  env->mapped = CheckResult(format::ShardReader::Open(fs.get(), env->plain_path), "open");
  env->pread =
      CheckResult(format::ShardReader::Open(fs.get(), env->plain_path, {.mmap = false}), "open");
  env->zstd = CheckResult(format::ShardReader::Open(fs.get(), env->zstd_path), "open");
  env->file = CheckResult(fs->OpenRead(env->plain_path), "open");
  table::TableOptions to;
  to.fs = fs;
  env->table =
      CheckResult(table::Table::Create(env->tmp->Sub("table"), DataSchema(false), to), "create");
  Check(env->table->Append(batch), "append");
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int64_t> dist(0, rows - 1);
  env->take_sets.resize(kTakeSets);
  for (auto& s : env->take_sets) {
    s.resize(kTakeRows);
    for (auto& r : s) r = dist(rng);
  }
}

// Pages of the emb column (1) cycle so consecutive reads touch other memory.
int NumPages() { return static_cast<int>(env->mapped->pages(1).size()); }

void BM_ReadPageMapped(benchmark::State& state) {
  const int np = NumPages();
  int p = 0;
  size_t bytes = 0;
  for (auto _ : state) {
    auto c = env->mapped->ReadPage(1, p);
    if (!c.ok()) state.SkipWithError("ReadPage failed");
    benchmark::DoNotOptimize(SumWords(c->values.data, c->values.size));
    bytes += c->values.size;
    p = (p + 1) % np;
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK(BM_ReadPageMapped);

void BM_SumPage(benchmark::State& state) {
  const int np = NumPages();
  const uint8_t* base = env->file->mapped_data();
  int p = 0;
  size_t bytes = 0;
  for (auto _ : state) {
    const auto& pi = env->mapped->pages(1)[p];
    benchmark::DoNotOptimize(SumWords(base + pi.offset, pi.values_size));
    bytes += pi.values_size;
    p = (p + 1) % np;
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK(BM_SumPage);

void BM_ReadPagePread(benchmark::State& state) {
  const int np = NumPages();
  int p = 0;
  size_t bytes = 0;
  for (auto _ : state) {
    auto c = env->pread->ReadPage(1, p);
    if (!c.ok()) state.SkipWithError("ReadPage failed");
    benchmark::DoNotOptimize(SumWords(c->values.data, c->values.size));
    bytes += c->values.size;
    p = (p + 1) % np;
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK(BM_ReadPagePread);

void BM_ReadPageZstd(benchmark::State& state) {
  const int np = static_cast<int>(env->zstd->pages(1).size());
  int p = 0;
  size_t bytes = 0;
  for (auto _ : state) {
    auto c = env->zstd->ReadPage(1, p);
    if (!c.ok()) state.SkipWithError("ReadPage failed");
    benchmark::DoNotOptimize(SumWords(c->values.data, c->values.size));
    bytes += c->values.size;
    p = (p + 1) % np;
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK(BM_ReadPageZstd);

void BM_PreadPage(benchmark::State& state) {
  const int np = NumPages();
  const int fd = ::open(env->plain_path.c_str(), O_RDONLY | O_CLOEXEC);
  std::vector<uint64_t> buf(1 << 16);
  int p = 0;
  size_t bytes = 0;
  for (auto _ : state) {
    const auto& pi = env->mapped->pages(1)[p];
    if (::pread(fd, buf.data(), pi.values_size, static_cast<off_t>(pi.offset)) !=
        static_cast<ssize_t>(pi.values_size)) {
      state.SkipWithError("pread failed");
    }
    benchmark::DoNotOptimize(
        SumWords(reinterpret_cast<const uint8_t*>(buf.data()), pi.values_size));
    bytes += pi.values_size;
    p = (p + 1) % np;
  }
  ::close(fd);
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK(BM_PreadPage);

void BM_ShardTake1K(benchmark::State& state) {
  int s = 0;
  for (auto _ : state) {
    const auto& rows = env->take_sets[s];
    auto c = env->mapped->Take(1, rows.data(), rows.size());
    if (!c.ok()) state.SkipWithError("Take failed");
    benchmark::DoNotOptimize(c->values.data);
    s = (s + 1) % kTakeSets;
  }
  state.SetItemsProcessed(state.iterations() * kTakeRows);
  state.SetBytesProcessed(state.iterations() * kTakeRows * 4 * kEmbDim);
}
BENCHMARK(BM_ShardTake1K);

void BM_TableTake1K(benchmark::State& state) {
  int s = 0;
  const std::vector<std::string> cols = {"id", "emb"};
  for (auto _ : state) {
    auto b = env->table->Take(env->take_sets[s], cols);
    if (!b.ok()) state.SkipWithError("Take failed");
    benchmark::DoNotOptimize(b->columns[1].values.data);
    s = (s + 1) % kTakeSets;
  }
  state.SetItemsProcessed(state.iterations() * kTakeRows);
  state.SetBytesProcessed(state.iterations() * kTakeRows * (8 + 4 * kEmbDim));
}
BENCHMARK(BM_TableTake1K);

// The limit for Take: memcpy of the rows out of the mapped file (addresses
// from the page index; the lookups are not timed). Arg: 1 = emb, 2 = id+emb.
void BM_Gather1K(benchmark::State& state) {
  const int ncols = static_cast<int>(state.range(0));
  const uint8_t* base = env->file->mapped_data();
  std::vector<std::vector<const uint8_t*>> addr(kTakeSets * ncols);
  const int col_of[2] = {1, 0};
  const size_t width_of[2] = {4 * kEmbDim, 8};
  for (int s = 0; s < kTakeSets; ++s) {
    for (int k = 0; k < ncols; ++k) {
      const int col = col_of[k];
      for (int64_t r : env->take_sets[s]) {
        const auto& pi = env->mapped->pages(col)[env->mapped->FindPage(col, r)];
        addr[s * ncols + k].push_back(base + pi.offset + (r - pi.first_row) * width_of[k]);
      }
    }
  }
  std::vector<uint8_t> out(kTakeRows * (8 + 4 * kEmbDim));
  int s = 0;
  for (auto _ : state) {
    uint8_t* dst = out.data();
    for (int k = 0; k < ncols; ++k) {
      const size_t w = width_of[k];
      for (const uint8_t* a : addr[s * ncols + k]) {
        std::memcpy(dst, a, w);
        dst += w;
      }
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    s = (s + 1) % kTakeSets;
  }
  state.SetItemsProcessed(state.iterations() * kTakeRows);
  state.SetBytesProcessed(state.iterations() * kTakeRows *
                          (ncols == 1 ? 4 * kEmbDim : 8 + 4 * kEmbDim));
}
BENCHMARK(BM_Gather1K)->Arg(1)->Arg(2);

void BM_Checksum64(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  std::vector<uint8_t> buf(n, 0x5a);
  for (size_t i = 0; i < n; ++i) buf[i] = static_cast<uint8_t>(i * 131);
  for (auto _ : state) benchmark::DoNotOptimize(Checksum64(buf.data(), n));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_Checksum64)->Arg(4 << 10)->Arg(256 << 10)->Arg(16 << 20);

void BM_SumWords(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  std::vector<uint8_t> buf(n, 0x5a);
  for (size_t i = 0; i < n; ++i) buf[i] = static_cast<uint8_t>(i * 131);
  for (auto _ : state) benchmark::DoNotOptimize(SumWords(buf.data(), n));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_SumWords)->Arg(4 << 10)->Arg(256 << 10)->Arg(16 << 20);

// Keeps the fastest repetition of every benchmark for the ratio table.
class CollectingReporter : public benchmark::ConsoleReporter {
 public:
  // Colour only on a terminal; shows each repetition and the median.
  CollectingReporter() : ConsoleReporter(::isatty(1) ? OO_Defaults : OO_Tabular) {}

  struct Best {
    double seconds = 0;  // per iteration
    double bytes_per_s = 0;
    double items_per_s = 0;
    std::vector<double> samples;  // seconds per iteration, each repetition
  };
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (r.run_type != Run::RT_Iteration || r.error_occurred || r.iterations == 0) continue;
      const double sec = r.real_accumulated_time / static_cast<double>(r.iterations);
      Best& b = best_[r.benchmark_name()];
      b.samples.push_back(sec);
      if (b.seconds == 0 || sec < b.seconds) {
        b.seconds = sec;
        auto it = r.counters.find("bytes_per_second");
        b.bytes_per_s = it == r.counters.end() ? 0 : it->second.value;
        it = r.counters.find("items_per_second");
        b.items_per_s = it == r.counters.end() ? 0 : it->second.value;
      }
    }
    std::vector<Run> shown;
    for (const auto& r : runs) {
      if (r.run_type == Run::RT_Iteration || r.aggregate_name == "median") shown.push_back(r);
    }
    ConsoleReporter::ReportRuns(shown);
  }
  const std::map<std::string, Best>& best() const { return best_; }

 private:
  std::map<std::string, Best> best_;
};

}  // namespace
}  // namespace flywheel::bench

int main(int argc, char** argv) {
  using namespace flywheel::bench;
  // Our flags first; the rest goes to Google Benchmark.
  std::string out_dir = SourceDir() + "/bench/results", tmp_parent = "/tmp";
  int64_t rows = 1 << 18;
  std::vector<char*> args = {argv[0]};
  std::string reps = "--benchmark_repetitions=3";
  args.push_back(reps.data());  // default; a later flag overrides it
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--out=", 0) == 0)
      out_dir = a.substr(6);
    else if (a.rfind("--tmp=", 0) == 0)
      tmp_parent = a.substr(6);
    else if (a.rfind("--rows=", 0) == 0)
      rows = std::stoll(a.substr(7));
    else
      args.push_back(argv[i]);
  }
  int bargc = static_cast<int>(args.size());
  benchmark::Initialize(&bargc, args.data());
  if (benchmark::ReportUnrecognizedArguments(bargc, args.data())) return 1;

  Setup(tmp_parent, rows);
  const nlohmann::json machine = MachineInfo(env->tmp->path());
  for (const auto& [k, v] : machine.items()) {
    benchmark::AddCustomContext("fw_" + k, v.is_string() ? v.get<std::string>() : v.dump());
  }
  CollectingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  struct Pair {
    const char* name;
    const char* baseline;
    const char* unit;  // "bytes" or "items"
  };
  const Pair pairs[] = {
      {"BM_ReadPageMapped", "BM_SumPage", "bytes"},
      {"BM_ReadPagePread", "BM_PreadPage", "bytes"},
      {"BM_ReadPageZstd", "BM_PreadPage", "bytes"},
      {"BM_ShardTake1K", "BM_Gather1K/1", "items"},
      {"BM_TableTake1K", "BM_Gather1K/2", "items"},
      {"BM_Checksum64/4096", "BM_SumWords/4096", "bytes"},
      {"BM_Checksum64/262144", "BM_SumWords/262144", "bytes"},
      {"BM_Checksum64/16777216", "BM_SumWords/16777216", "bytes"},
  };
  Report report(
      "format_bench",
      "Shard page reads, Take and checksums (Google Benchmark, fastest of the repetitions)");
  std::printf("\nRatios (fastest repetition of each):\n");
  for (const Pair& p : pairs) {
    auto a = reporter.best().find(p.name), b = reporter.best().find(p.baseline);
    if (a == reporter.best().end() || b == reporter.best().end()) continue;  // filtered out
    const bool bytes = std::string(p.unit) == "bytes";
    Comparison c;
    c.name = p.name;
    c.unit = bytes ? "GB/s" : "M rows/s";
    c.value = bytes ? a->second.bytes_per_s / 1e9 : a->second.items_per_s / 1e6;
    c.baseline = p.baseline;
    c.baseline_value = bytes ? b->second.bytes_per_s / 1e9 : b->second.items_per_s / 1e6;
    c.details = {{"seconds_per_iter", a->second.seconds},
                 {"samples_seconds_per_iter", a->second.samples},
                 {"baseline_seconds_per_iter", b->second.seconds},
                 {"baseline_samples_seconds_per_iter", b->second.samples}};
    report.Add(std::move(c));
  }
  nlohmann::json all = nlohmann::json::object();
  for (const auto& [name, b] : reporter.best()) {
    all[name] = {{"seconds_per_iter", b.seconds},
                 {"bytes_per_second", b.bytes_per_s},
                 {"items_per_second", b.items_per_s},
                 {"samples_seconds_per_iter", b.samples}};
  }
  report.extra()["benchmarks"] = all;
  nlohmann::json flags = {{"rows", rows}, {"out", out_dir}, {"tmp", tmp_parent}};
  report.Write(out_dir, machine, flags);
  delete env;
  return 0;
}
