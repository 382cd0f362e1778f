// loader_bench: Google Benchmark micro figures for the loader's order function
// and batch assembly, each paired with a same-run baseline; the ratios are
// printed after the runs and written with the machine description to
// <--out>/loader_bench.json.
//
//   loader_bench [--rows=16384] [--out=DIR] [--tmp=/tmp] [--benchmark_*...]
//
// Data: a CIFAR-shaped table of --rows rows (image uint8[32,32,3], label
// int64), uncompressed, default 256 KiB pages, one fragment.
//
//   BM_OrderRow          SampleOrder::Fill of 4096 positions of a row shuffle
//                        over 10M rows  vs BM_PermutationRead: reading 4096
//                        entries of a precomputed permutation array (what an
//                        O(N)-memory shuffle costs per position, memory aside).
//   BM_OrderBlock        the same in block mode (1024-row blocks, 16-block
//                        windows)         vs BM_PermutationRead.
//   BM_MixtureFill       Mixture::Fill of 4096 positions over 3 tables
//                        vs BM_PermutationRead.
//   BM_LoaderBatch/T     Loader::Next of shuffled batches of 256 rows with T
//                        worker threads (batches assembled ahead in place)
//                        vs BM_GatherMemcpy: memcpy of the same rows in the
//                        same order from one in-memory array into a batch.
// Default: 3 repetitions per benchmark, the fastest reported.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>

#include "bench_util.h"
#include "flywheel/io/file_system.h"
#include "flywheel/loader/loader.h"
#include "flywheel/loader/mixture.h"
#include "flywheel/loader/order.h"
#include "flywheel/table/table.h"

namespace flywheel::bench {
namespace {

constexpr int64_t kPositions = 4096;
constexpr int64_t kOrderRows = 10'000'000;
constexpr int64_t kBatch = 256;
constexpr size_t kImage = 32 * 32 * 3;

struct Env {
  std::unique_ptr<TempDir> tmp;
  int64_t rows = 0;
  std::shared_ptr<table::Table> table;
  std::vector<uint8_t> images;       // the same images, in memory
  std::vector<int64_t> permutation;  // of kOrderRows
};
Env* env = nullptr;

void Setup(const std::string& tmp_parent, int64_t rows) {
  env = new Env;
  env->tmp = std::make_unique<TempDir>(tmp_parent, "fw_loader_bench");
  env->rows = rows;
  format::Schema schema =
      CheckResult(format::Schema::Parse("image:uint8[32,32,3], label:int64"), "schema");
  table::TableOptions o;
  o.fs = io::PosixFileSystem(io::PosixOptions{.sync = false});
  env->table = CheckResult(table::Table::Create(env->tmp->Sub("cifar"), schema, o), "create");
  env->images.resize(static_cast<size_t>(rows) * kImage);
  std::mt19937_64 rng(1);
  for (auto& b : env->images) b = static_cast<uint8_t>(rng());
  std::vector<int64_t> labels(rows);
  std::iota(labels.begin(), labels.end(), 0);
  format::RecordBatch b;
  b.schema = schema;
  b.num_rows = rows;
  b.columns.push_back(format::MakeFixedColumn(schema.fields[0].type, env->images));
  b.columns.push_back(format::MakeFixedColumn(schema.fields[1].type, labels));
  Check(env->table->Append(b), "append");
  env->permutation.resize(kOrderRows);
  std::iota(env->permutation.begin(), env->permutation.end(), 0);
  std::shuffle(env->permutation.begin(), env->permutation.end(), rng);
}

// Positions per second of SampleOrder::Fill with `options`, over a sliding window.
void RunOrder(benchmark::State& state, const loader::OrderOptions& options) {
  auto order = CheckResult(loader::SampleOrder::Create(kOrderRows, 7, 0, options), "order");
  std::vector<int64_t> out(kPositions);
  int64_t start = 0;
  for (auto _ : state) {
    order.Fill(start, start + kPositions, out.data());
    benchmark::DoNotOptimize(out.data());
    start = (start + kPositions) % (kOrderRows - kPositions);
  }
  state.SetItemsProcessed(state.iterations() * kPositions);
}

void BM_OrderRow(benchmark::State& state) { RunOrder(state, {}); }
BENCHMARK(BM_OrderRow);

void BM_OrderBlock(benchmark::State& state) { RunOrder(state, {true, loader::ShuffleMode::kBlock, 1024, 16}); }
BENCHMARK(BM_OrderBlock);

void BM_MixtureFill(benchmark::State& state) {
  auto m = CheckResult(loader::Mixture::Create({1, 2, 5}, 3), "mixture");
  std::vector<int32_t> out(kPositions);
  int64_t start = 0;
  for (auto _ : state) {
    m.Fill(0, start, start + kPositions, out.data());
    benchmark::DoNotOptimize(out.data());
    start += kPositions;
  }
  state.SetItemsProcessed(state.iterations() * kPositions);
}
BENCHMARK(BM_MixtureFill);

void BM_PermutationRead(benchmark::State& state) {
  std::vector<int64_t> out(kPositions);
  int64_t start = 0;
  for (auto _ : state) {
    std::memcpy(out.data(), env->permutation.data() + start, kPositions * sizeof(int64_t));
    benchmark::DoNotOptimize(out.data());
    start = (start + kPositions) % (kOrderRows - kPositions);
  }
  state.SetItemsProcessed(state.iterations() * kPositions);
}
BENCHMARK(BM_PermutationRead);

void BM_LoaderBatch(benchmark::State& state) {
  loader::LoaderOptions o;
  o.batch_size = kBatch;
  o.seed = 11;
  o.num_threads = static_cast<int>(state.range(0));
  o.prefetch_bytes = 64 << 20;
  auto l = CheckResult(loader::Loader::Create({env->table}, o), "loader");
  int64_t rows = 0;
  for (auto _ : state) {
    auto b = CheckResult(l->Next(), "next");
    if (!b) b = CheckResult(l->Next(), "next");  // epoch boundary
    rows += b->num_rows;
    benchmark::DoNotOptimize(b->columns[0].values);
  }
  state.SetItemsProcessed(rows);
  state.SetBytesProcessed(rows * static_cast<int64_t>(kImage + 8));
  const auto s = l->stats();
  state.counters["consumer_wait_s"] = s.consumer_wait_seconds;
}
BENCHMARK(BM_LoaderBatch)->Arg(1)->Arg(2)->UseRealTime();

void BM_GatherMemcpy(benchmark::State& state) {
  auto order = CheckResult(loader::SampleOrder::Create(env->rows, 11, 0, {}), "order");
  std::vector<int64_t> idx(env->rows);
  order.Fill(0, env->rows, idx.data());
  std::vector<uint8_t> out(kBatch * kImage);
  std::vector<int64_t> labels(kBatch);
  int64_t pos = 0, rows = 0;
  for (auto _ : state) {
    const int64_t n = std::min<int64_t>(kBatch, env->rows - pos);
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(out.data() + i * kImage, env->images.data() + idx[pos + i] * kImage, kImage);
      labels[i] = idx[pos + i];
    }
    benchmark::DoNotOptimize(out.data());
    rows += n;
    pos = pos + n >= env->rows ? 0 : pos + n;
  }
  state.SetItemsProcessed(rows);
  state.SetBytesProcessed(rows * static_cast<int64_t>(kImage + 8));
}
BENCHMARK(BM_GatherMemcpy)->UseRealTime();

// Keeps the fastest repetition of every benchmark for the ratio table.
class CollectingReporter : public benchmark::ConsoleReporter {
 public:
  CollectingReporter() : ConsoleReporter(::isatty(1) ? OO_Defaults : OO_Tabular) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (r.run_type != Run::RT_Iteration || r.error_occurred || r.iterations == 0) continue;
      auto it = r.counters.find("items_per_second");
      const double v = it == r.counters.end() ? 0 : it->second.value;
      double& b = best_[r.benchmark_name()];
      b = std::max(b, v);
    }
    std::vector<Run> shown;
    for (const auto& r : runs) {
      if (r.run_type == Run::RT_Iteration || r.aggregate_name == "median") shown.push_back(r);
    }
    ConsoleReporter::ReportRuns(shown);
  }
  const std::map<std::string, double>& best() const { return best_; }

 private:
  std::map<std::string, double> best_;
};

}  // namespace
}  // namespace flywheel::bench

int main(int argc, char** argv) {
  using namespace flywheel::bench;
  std::string out_dir = SourceDir() + "/bench/results", tmp_parent = "/tmp";
  int64_t rows = 16384;
  std::vector<char*> args = {argv[0]};
  std::string reps = "--benchmark_repetitions=3";
  args.push_back(reps.data());
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
  CollectingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  struct Pair {
    const char* name;
    const char* baseline;
    const char* unit;
  };
  const Pair pairs[] = {
      {"BM_OrderRow", "BM_PermutationRead", "positions/s"},
      {"BM_OrderBlock", "BM_PermutationRead", "positions/s"},
      {"BM_MixtureFill", "BM_PermutationRead", "positions/s"},
      {"BM_LoaderBatch/1/real_time", "BM_GatherMemcpy/real_time", "rows/s"},
      {"BM_LoaderBatch/2/real_time", "BM_GatherMemcpy/real_time", "rows/s"},
  };
  Report report("loader_bench",
                "Loader order function and batch assembly (Google Benchmark, fastest repetition)");
  std::printf("\nRatios (fastest repetition of each):\n");
  for (const Pair& p : pairs) {
    auto a = reporter.best().find(p.name), b = reporter.best().find(p.baseline);
    if (a == reporter.best().end() || b == reporter.best().end()) continue;
    Comparison c;
    c.name = p.name;
    c.unit = p.unit;
    c.value = a->second;
    c.baseline = p.baseline;
    c.baseline_value = b->second;
    report.Add(c);
  }
  report.Write(out_dir, machine, nlohmann::json{{"rows", rows}});
  delete env;
  return 0;
}
