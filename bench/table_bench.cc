// table_bench: end-to-end figures for flywheel tables (DESIGN.md section 5).
// Each figure is printed next to a baseline measured in the same run on the
// same data, with the ratio; results go to <--out>/table_<workload>.json.
// Method and latest figures: docs/benchmarks.md.
//
//   table_bench [--rows=1000000] [--benchmarks=write,scan,take] [--repeats=3]
//
// Data (bench_util.h): row i = (id int64 = i, emb float32[16] = i + k/16,
// name string of 16..32 chars). Scratch tables live in a fresh directory
// under --tmp (default /tmp) and are deleted at exit.
//
// Workloads:
//   write   Table::Create + Append of --rows rows of (id, emb, name):
//             write/batches+fsync   in batches of --batch_rows (default 64K),
//             write/one-batch+fsync one Append of all rows,
//             write/batches-nosync  PosixOptions{sync=false}.
//           Baseline: write() of the same number of bytes (what the table
//           directory holds afterwards) to one file in the same directory in
//           1 MiB calls, + fsync for the fsync variants. MB/s; ratio
//           flywheel / raw.
//   scan    Table::Scan of (id, emb) over --rows rows written as one
//           uncompressed fragment, summing every 8-byte word of every value
//           buffer. Baselines: read() of the table's shard files in 1 MiB
//           chunks from the page cache into one buffer, summed the same way;
//           and the same sum over a heap buffer (memory bandwidth). All warm.
//             scan/warm-handle   one open Table scanned repeatedly (a loader),
//             scan/fresh-open    Table::Open + Scan each time (maps the file
//                                and verifies page checksums again),
//             scan/batch-64k     ScanOptions{batch_rows=65536} (copies).
//           GB/s; ratio flywheel / read(). Target >= 0.8 (warm handle).
//   take    Table::Take of (id, emb) at --rows shuffled indices (seed 42):
//             take/random-1-call   one Take of all indices,
//             take/random-256      Takes of 256 indices each (loader pattern),
//             take/sequential      one Take of 0..N-1,
//             take/random-16-frag  one Take, table written in 64K-row appends,
//           and random-1-call/sequential again in a child process whose
//           malloc keeps freed memory (mallopt), separating the library's own
//           work from faulting in fresh output pages.
//           Peer: DuckDB (bench/peers/duckdb_take.mjs, Node) on a Parquet
//           file DuckDB writes from the same formula, fed the same indices
//           (CSV file): 256 indices per query (loader pattern) and one bulk
//           join of all indices. rows/s. Target: >= 50x DuckDB, loader pattern.
//
// Every figure is the best of --repeats runs (flywheel and baseline runs
// alternate, so machine load hits both).
#include <fcntl.h>
#include <malloc.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <random>

#include "bench_util.h"
#include "flywheel/io/file_system.h"
#include "flywheel/table/table.h"

namespace flywheel::bench {
namespace {

using format::Column;
using format::RecordBatch;
using table::Table;
using table::TableOptions;

constexpr size_t kChunk = 1 << 20;


// A 64-byte aligned, pre-faulted buffer.
struct AlignedBuffer {
  explicit AlignedBuffer(size_t n) : size(n) {
    data = static_cast<uint8_t*>(std::aligned_alloc(64, (n + 63) / 64 * 64));
    std::memset(data, 0x5a, n);
  }
  ~AlignedBuffer() { std::free(data); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  uint8_t* data;
  size_t size;
};

TableOptions Options(bool sync) {
  TableOptions o;
  o.fs = io::PosixFileSystem(io::PosixOptions{.sync = sync});
  return o;
}

// Writes a table of `rows` rows (id, emb) in Appends of `batch_rows` rows
// (0 = one) without fsync (setup, not measured).
std::shared_ptr<Table> BuildTable(const std::string& uri, int64_t rows, int64_t batch_rows) {
  auto t = CheckResult(Table::Create(uri, DataSchema(false), Options(false)), "create " + uri);
  for (const auto& b : MakeBatches(rows, batch_rows, false)) Check(t->Append(b), "append " + uri);
  return t;
}

// ---------------------------------------------------------------- write

// write() of `bytes` bytes from `buf` to a new file `path` in kChunk calls;
// fsync before close when `sync`. Returns seconds; deletes the file after.
double RawWrite(const std::string& path, uint64_t bytes, const AlignedBuffer& buf, bool sync) {
  const double t0 = Now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::perror(path.c_str());
    std::exit(1);
  }
  uint64_t left = bytes;
  while (left > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buf.size));
    const ssize_t w = ::write(fd, buf.data, n);
    if (w <= 0) {
      std::perror("write");
      std::exit(1);
    }
    left -= static_cast<uint64_t>(w);
  }
  if (sync && ::fsync(fd) != 0) std::perror("fsync");
  ::close(fd);
  const double el = Now() - t0;
  ::unlink(path.c_str());
  return el;
}

void RunWrite(const Flags& flags, const TempDir& tmp, Report& report) {
  const int64_t rows = flags.Int("rows");
  const int64_t batch_rows = flags.Int("batch_rows");
  const int repeats = static_cast<int>(flags.Int("repeats"));
  std::printf("== write: %lld rows of %s\n", static_cast<long long>(rows),
              DataSchema(true).ToString().c_str());
  const auto batched = MakeBatches(rows, batch_rows, true);
  const auto single = MakeBatches(rows, 0, true);
  uint64_t logical = 0;
  for (const auto& b : single) {
    for (const auto& c : b.columns) logical += c.values.size + c.offsets.size;
  }
  AlignedBuffer buf(kChunk);

  struct Variant {
    std::string name;
    const std::vector<RecordBatch>* batches;
    bool sync;
    std::vector<double> fw_mbps, raw_mbps, fw_rows_per_s;
    uint64_t bytes = 0;
    int64_t files = 0;
  };
  std::vector<Variant> variants = {
      {"write/batches+fsync", &batched, true, {}, {}, {}},
      {"write/one-batch+fsync", &single, true, {}, {}, {}},
      {"write/batches-nosync", &batched, false, {}, {}, {}},
  };
  int run = 0;
  for (int r = 0; r < repeats; ++r) {
    for (auto& v : variants) {
      const std::string uri = tmp.Sub("write_" + std::to_string(run++));
      const double t0 = Now();
      auto t = CheckResult(Table::Create(uri, DataSchema(true), Options(v.sync)), "create");
      for (const auto& b : *v.batches) Check(t->Append(b), "append");
      const double el = Now() - t0;
      Check(t->num_rows() == rows ? absl::OkStatus() : absl::InternalError("row count"), "write");
      v.bytes = DirBytes(uri);
      v.files = static_cast<int64_t>(ListFiles(uri + "/data").size());
      t.reset();
      std::filesystem::remove_all(uri);
      v.fw_mbps.push_back(static_cast<double>(v.bytes) / 1e6 / el);
      v.fw_rows_per_s.push_back(static_cast<double>(rows) / el);
      const double raw = RawWrite(tmp.Sub("raw_write"), v.bytes, buf, v.sync);
      v.raw_mbps.push_back(static_cast<double>(v.bytes) / 1e6 / raw);
    }
  }
  for (const auto& v : variants) {
    Comparison c;
    c.name = v.name;
    c.unit = "MB/s";
    c.value = Best(v.fw_mbps);
    c.baseline = v.sync ? "raw write()+fsync, same bytes" : "raw write(), same bytes";
    c.baseline_value = Best(v.raw_mbps);
    c.details = {{"bytes_written", v.bytes},
                 {"logical_bytes", logical},
                 {"data_files", v.files},
                 {"appends", v.batches->size()},
                 {"rows_per_s", Best(v.fw_rows_per_s)},
                 {"flywheel_mbps_samples", v.fw_mbps},
                 {"raw_mbps_samples", v.raw_mbps}};
    c.note = FormatRate(Best(v.fw_rows_per_s), "rows/s");
    report.Add(std::move(c));
  }
}

// ---------------------------------------------------------------- scan

struct ScanResult {
  uint64_t sum = 0;
  uint64_t bytes = 0;
};

ScanResult ScanSum(const Table& t, int64_t batch_rows) {
  ScanResult r;
  auto it = CheckResult(t.Scan(table::ScanOptions{{"id", "emb"}, batch_rows}), "scan");
  while (true) {
    auto b = CheckResult(it->Next(), "scan next");
    if (!b) break;
    for (const Column& c : b->columns) {
      r.sum += SumWords(c.values.data, c.values.size);
      r.bytes += c.values.size;
    }
  }
  return r;
}

ScanResult ReadSum(const std::vector<std::string>& files, AlignedBuffer& buf) {
  ScanResult r;
  for (const auto& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      std::perror(f.c_str());
      std::exit(1);
    }
    while (true) {
      const ssize_t n = ::read(fd, buf.data, buf.size);
      if (n < 0) {
        std::perror("read");
        std::exit(1);
      }
      if (n == 0) break;
      r.sum += SumWords(buf.data, static_cast<size_t>(n));
      r.bytes += static_cast<uint64_t>(n);
    }
    ::close(fd);
  }
  return r;
}

void RunScan(const Flags& flags, const TempDir& tmp, Report& report) {
  const int64_t rows = flags.Int("rows");
  const int repeats = static_cast<int>(flags.Int("repeats"));
  const std::string uri = tmp.Sub("scan");
  std::printf("== scan: %lld rows of %s, one Append, uncompressed\n", static_cast<long long>(rows),
              DataSchema(false).ToString().c_str());
  BuildTable(uri, rows, 0);
  const auto files = ListFiles(uri + "/data");
  uint64_t file_bytes = 0;
  for (const auto& f : files) file_bytes += std::filesystem::file_size(f);

  // Expected sum of the value words, from the generator.
  uint64_t expect = 0;
  for (const auto& b : MakeBatches(rows, 1 << 16, false)) {
    for (const auto& c : b.columns) expect += SumWords(c.values.data, c.values.size);
  }

  AlignedBuffer buf(kChunk);
  AlignedBuffer heap(static_cast<size_t>(rows) * (8 + 4 * kEmbDim));
  auto warm = CheckResult(Table::Open(uri, {}, Options(true)), "open");
  // Warm-up: page cache, mapping, checksums of the warm handle.
  ReadSum(files, buf);
  ScanResult check = ScanSum(*warm, 0);
  if (check.sum != expect) {
    std::fprintf(stderr, "scan sum mismatch: %llu != %llu\n",
                 static_cast<unsigned long long>(check.sum),
                 static_cast<unsigned long long>(expect));
    std::exit(1);
  }
  SumWords(heap.data, heap.size);
  std::vector<double> warm_gbps, fresh_gbps, batch_gbps, read_gbps, mem_gbps;
  nlohmann::json fresh_split = nlohmann::json::array();
  volatile uint64_t sink = 0;
  for (int r = 0; r < repeats; ++r) {
    double t0 = Now();
    ScanResult s = ScanSum(*warm, 0);
    warm_gbps.push_back(static_cast<double>(s.bytes) / 1e9 / (Now() - t0));
    sink = sink + s.sum;

    t0 = Now();
    s = ReadSum(files, buf);
    read_gbps.push_back(static_cast<double>(s.bytes) / 1e9 / (Now() - t0));
    sink = sink + s.sum;

    t0 = Now();
    {
      auto fresh = CheckResult(Table::Open(uri, {}, Options(true)), "open");
      const double t1 = Now();
      s = ScanSum(*fresh, 0);
      const double t2 = Now();
      fresh.reset();  // unmaps
      fresh_split.push_back({{"open_ms", (t1 - t0) * 1e3},
                             {"scan_ms", (t2 - t1) * 1e3},
                             {"close_ms", (Now() - t2) * 1e3}});
    }
    fresh_gbps.push_back(static_cast<double>(s.bytes) / 1e9 / (Now() - t0));
    if (s.sum != expect) std::exit(1);

    t0 = Now();
    s = ScanSum(*warm, 65536);
    batch_gbps.push_back(static_cast<double>(s.bytes) / 1e9 / (Now() - t0));
    if (s.sum != expect) std::exit(1);

    t0 = Now();
    const uint64_t m = SumWords(heap.data, heap.size);
    mem_gbps.push_back(static_cast<double>(heap.size) / 1e9 / (Now() - t0));
    sink = sink + m;
  }
  const nlohmann::json sizes = {{"value_bytes", check.bytes},
                                {"shard_file_bytes", file_bytes},
                                {"shard_files", files.size()}};
  auto add = [&](const std::string& name, const std::vector<double>& v, const std::string& note) {
    Comparison c;
    c.name = name;
    c.unit = "GB/s";
    c.value = Best(v);
    c.baseline = "read() 1MiB chunks, page cache";
    c.baseline_value = Best(read_gbps);
    c.note = note;
    c.details = sizes;
    c.details["samples"] = v;
    c.details["read_samples"] = read_gbps;
    report.Add(std::move(c));
  };
  add("scan/warm-handle", warm_gbps, "target >= 0.8");
  add("scan/fresh-open", fresh_gbps, "");
  report.extra()["fresh_open_split"] = fresh_split;
  std::printf("   fresh-open split: %s\n", fresh_split.dump().c_str());
  add("scan/batch-64k", batch_gbps, "");
  Comparison mem;
  mem.name = "scan/warm-handle";
  mem.unit = "GB/s";
  mem.value = Best(warm_gbps);
  mem.baseline = "sum over a heap buffer (memory)";
  mem.baseline_value = Best(mem_gbps);
  mem.details = {{"samples", mem_gbps}};
  report.Add(std::move(mem));
}

// ---------------------------------------------------------------- take

// Checks that `b` holds the rows `idx` (id and emb of the generator).
void VerifyTake(const RecordBatch& b, const std::vector<int64_t>& idx) {
  const int64_t* ids = b.columns[0].values.as<int64_t>();
  const float* emb = b.columns[1].values.as<float>();
  for (size_t i = 0; i < idx.size(); ++i) {
    const float want = static_cast<float>(idx[i]) + 0.0625f * 15;
    if (ids[i] != idx[i] || emb[i * kEmbDim + 15] != want) {
      std::fprintf(stderr, "take returned the wrong row at %zu: id %lld, want %lld\n", i,
                   static_cast<long long>(ids[i]), static_cast<long long>(idx[i]));
      std::exit(1);
    }
  }
}

double TakeRate(const Table& t, const std::vector<int64_t>& idx, bool verify) {
  const double t0 = Now();
  RecordBatch b = CheckResult(t.Take(idx, {"id", "emb"}), "take");
  const double el = Now() - t0;
  if (verify) VerifyTake(b, idx);
  return static_cast<double>(idx.size()) / el;
}

double TakeBatchedRate(const Table& t, const std::vector<int64_t>& idx, size_t batch, bool verify) {
  std::vector<int64_t> part(batch);
  size_t done = 0;
  const double t0 = Now();
  for (size_t s = 0; s + batch <= idx.size(); s += batch) {
    std::copy(idx.begin() + static_cast<ptrdiff_t>(s),
              idx.begin() + static_cast<ptrdiff_t>(s + batch), part.begin());
    RecordBatch b = CheckResult(t.Take(part, {"id", "emb"}), "take");
    if (verify) VerifyTake(b, part);
    done += batch;
  }
  return static_cast<double>(done) / (Now() - t0);
}

// Runs the Node DuckDB peer; returns its JSON, or null with `why` set.
nlohmann::json RunDuckDb(const Flags& flags, const TempDir& tmp, const std::string& indices_csv,
                         std::string* why) {
  if (flags.Str("duckdb") == "off") {
    *why = "--duckdb=off";
    return nullptr;
  }
  const std::string peers =
      flags.Str("peers_dir").empty() ? SourceDir() + "/bench/peers" : flags.Str("peers_dir");
  if (!std::filesystem::exists(peers + "/node_modules/@duckdb/node-api")) {
    *why = "no " + peers + "/node_modules (run: cd bench/peers && npm install)";
    return nullptr;
  }
  const std::string dir = tmp.Sub("duckdb");
  std::filesystem::create_directories(dir);
  const std::string cmd = "cd '" + peers + "' && node duckdb_take.mjs --rows " + flags.Str("rows") +
                          " --indices '" + indices_csv + "' --dir '" + dir + "' --seconds " +
                          flags.Str("duckdb_seconds") + " --batch " + flags.Str("take_batch") +
                          " --repeats " + flags.Str("repeats");
  std::printf("   running DuckDB peer: %s\n", cmd.c_str());
  std::fflush(stdout);
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char chunk[4096];
  size_t n;
  while (p != nullptr && (n = std::fread(chunk, 1, sizeof chunk, p)) > 0) out.append(chunk, n);
  const int rc = p == nullptr ? -1 : ::pclose(p);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  const std::string last =
      out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1);
  if (rc != 0) {
    *why = "peer failed (exit " + std::to_string(rc) + ")";
    return nullptr;
  }
  try {
    return nlohmann::json::parse(last);
  } catch (const nlohmann::json::exception& e) {
    *why = std::string("peer printed no JSON: ") + e.what();
    return nullptr;
  }
}

// Runs `fn` (returning rates) in a forked child whose malloc keeps freed
// memory (no munmap/trim), so repeated large Takes reuse already-faulted
// pages. Returns the child's rates.
template <typename Fn>
std::vector<double> InRetainingChild(Fn fn) {
  int fds[2];
  if (::pipe(fds) != 0) std::exit(1);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ::mallopt(M_MMAP_THRESHOLD, 1 << 30);
    ::mallopt(M_TRIM_THRESHOLD, 1 << 30);
    const std::vector<double> rates = fn();
    const ssize_t want = static_cast<ssize_t>(rates.size() * sizeof(double));
    ::_exit(::write(fds[1], rates.data(), rates.size() * sizeof(double)) == want ? 0 : 1);
  }
  ::close(fds[1]);
  std::vector<double> out;
  double v;
  while (::read(fds[0], &v, sizeof v) == static_cast<ssize_t>(sizeof v)) out.push_back(v);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return out;
}

void RunTake(const Flags& flags, const TempDir& tmp, Report& report) {
  const int64_t rows = flags.Int("rows");
  const int repeats = static_cast<int>(flags.Int("repeats"));
  const size_t batch = static_cast<size_t>(flags.Int("take_batch"));
  std::printf("== take: %lld shuffled indices of (id, emb), %lld rows\n",
              static_cast<long long>(rows), static_cast<long long>(rows));
  const std::string uri = tmp.Sub("take");
  const std::string uri16 = tmp.Sub("take16");
  BuildTable(uri, rows, 0);
  BuildTable(uri16, rows, flags.Int("batch_rows"));
  auto t = CheckResult(Table::Open(uri, {}, Options(true)), "open");
  auto t16 = CheckResult(Table::Open(uri16, {}, Options(true)), "open");

  std::vector<int64_t> seq(static_cast<size_t>(rows));
  std::iota(seq.begin(), seq.end(), 0);
  std::vector<int64_t> idx = seq;
  std::mt19937_64 rng(42);
  std::shuffle(idx.begin(), idx.end(), rng);
  const std::string csv = tmp.Sub("indices.csv");
  {
    std::ofstream out(csv);
    out << "pos,idx\n";
    for (size_t i = 0; i < idx.size(); ++i) out << i << ',' << idx[i] << '\n';
  }

  // Warm-up (maps files, verifies checksums) and correctness.
  TakeRate(*t, idx, true);
  TakeRate(*t16, idx, true);
  TakeRate(*t, seq, true);
  TakeBatchedRate(*t, idx, batch, true);
  std::vector<double> random1, random256, sequential, random16, random16_256;
  for (int r = 0; r < repeats; ++r) {
    random1.push_back(TakeRate(*t, idx, false));
    random256.push_back(TakeBatchedRate(*t, idx, batch, false));
    sequential.push_back(TakeRate(*t, seq, false));
    random16.push_back(TakeRate(*t16, idx, false));
    random16_256.push_back(TakeBatchedRate(*t16, idx, batch, false));
  }
  // The same Takes when malloc reuses freed memory (half the values: random,
  // half: sequential), to separate the library's work from the cost of
  // faulting in fresh output pages.
  const std::vector<double> retained = InRetainingChild([&] {
    TakeRate(*t, idx, false);
    std::vector<double> v;
    for (int r = 0; r < repeats; ++r) v.push_back(TakeRate(*t, idx, false));
    for (int r = 0; r < repeats; ++r) v.push_back(TakeRate(*t, seq, false));
    return v;
  });
  const std::vector<double> retained_random(
      retained.begin(), retained.begin() + std::min<size_t>(retained.size(), repeats));
  const std::vector<double> retained_seq(
      retained.begin() + std::min<size_t>(retained.size(), repeats), retained.end());
  const double best1 = Best(random1), best256 = Best(random256);
  report.Add({"take/random-1-call",
              "rows/s",
              best1,
              "take/sequential (same run)",
              Best(sequential),
              0,
              "",
              {{"samples", random1}, {"sequential_samples", sequential}}});
  report.Add({"take/random-1-call",
              "rows/s",
              Best(retained_random),
              "take/sequential",
              Best(retained_seq),
              0,
              "malloc retains freed memory",
              {{"samples", retained_random}, {"sequential_samples", retained_seq}}});
  report.Add({"take/random-16-frag",
              "rows/s",
              Best(random16),
              "take/random-1-call (1 fragment)",
              best1,
              0,
              "",
              {{"samples", random16}, {"fragments", t16->manifest().fragments.size()}}});
  report.Add({"take/random-256-16-frag",
              "rows/s",
              Best(random16_256),
              "take/random-256 (1 fragment)",
              best256,
              0,
              "",
              {{"samples", random16_256}}});

  std::string why;
  nlohmann::json duck = RunDuckDb(flags, tmp, csv, &why);
  report.extra()["duckdb"] = duck;
  if (duck.is_null()) {
    std::printf("   DuckDB peer skipped: %s\n", why.c_str());
    report.extra()["duckdb_skipped"] = why;
    report.Add({"take/random-256",
                "rows/s",
                best256,
                "take/random-1-call",
                best1,
                0,
                "DuckDB skipped",
                {{"samples", random256}}});
    return;
  }
  const double duck_loader = duck["loader_rows_per_s"].get<double>();
  const double duck_bulk = duck["bulk_rows_per_s"].get<double>();
  report.Add({"take/random-256",
              "rows/s",
              best256,
              "DuckDB parquet, 256 idx/query",
              duck_loader,
              0,
              "target >= 50",
              {{"samples", random256}, {"duckdb_ms_per_query", duck["loader_ms_per_batch"]}}});
  report.Add({"take/random-1-call",
              "rows/s",
              best1,
              "DuckDB parquet, bulk join",
              duck_bulk,
              0,
              "",
              {{"samples", random1}}});
}

}  // namespace
}  // namespace flywheel::bench

int main(int argc, char** argv) {
  using namespace flywheel::bench;
  Flags flags(argc, argv,
              {{"rows", "1000000"},
               {"benchmarks", "write,scan,take"},
               {"repeats", "3"},
               {"batch_rows", "65536"},
               {"take_batch", "256"},
               {"tmp", "/tmp"},
               {"out", SourceDir() + "/bench/results"},
               {"duckdb", "auto"},
               {"duckdb_seconds", "20"},
               {"peers_dir", ""}},
              "table_bench: flywheel table write/scan/take vs same-run baselines (see header of "
              "table_bench.cc)");
  TempDir tmp(flags.Str("tmp"), "fw_table_bench");
  const nlohmann::json machine = MachineInfo(tmp.path());
  std::printf("table_bench: %s, %lld CPUs, %s, %s, data in %s (%s)\n",
              machine["cpu_model"].get<std::string>().c_str(),
              static_cast<long long>(machine["nproc"].get<int64_t>()),
              machine["mem_total"].get<std::string>().c_str(),
              machine["kernel"].get<std::string>().c_str(), tmp.path().c_str(),
              machine["data_fs"].get<std::string>().c_str());
  std::printf("each figure: best of %s runs; a page fault costs %.2f us here\n",
              flags.Str("repeats").c_str(), machine["page_fault_us"].get<double>());
  for (const auto& b : flags.List("benchmarks")) {
    if (b == "write") {
      Report r("table_write", "Table::Create + Append throughput vs raw write()");
      RunWrite(flags, tmp, r);
      r.Write(flags.Str("out"), machine, flags.ToJson());
    } else if (b == "scan") {
      Report r("table_scan", "Table::Scan of uncompressed fixed-width columns vs read()");
      RunScan(flags, tmp, r);
      r.Write(flags.Str("out"), machine, flags.ToJson());
    } else if (b == "take") {
      Report r("table_take", "Table::Take of shuffled rows vs sequential and DuckDB/Parquet");
      RunTake(flags, tmp, r);
      r.Write(flags.Str("out"), machine, flags.ToJson());
    } else {
      std::fprintf(stderr, "unknown benchmark '%s' (write, scan, take)\n", b.c_str());
      return 2;
    }
  }
  return 0;
}
