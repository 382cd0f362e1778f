// erase_bench: the cost of Table::Erase (src/flywheel/table/erase.cc) against
// table size, retained versions and the fragments that hold the key (issue
// "Erasure": cost must scale with the fragments that hold the key, not with
// the number of versions or total rows). Results: <--out>/erase.json.
//
//   erase_bench [--quick] [--rows_per_fragment=20000] [--repeats=5]
//               [--fragments=8,32,128,512] [--versions=5,50,200,1000] [--key_fragments=1,4,16]
//               [--erase_sync=1] [--only=rows,versions,keys]
//
// Tables: user_id int64, payload string (--payload_bytes, 100), uncompressed
// shards (the default codec); one fragment (one data file) per part of
// --rows_per_fragment rows. Background users are unique (each in one
// fragment); a planted key has --key_rows rows in each fragment that holds
// it. Setup writes through PosixFileSystem{sync=false}, then syncfs() (so
// the erasures' fsyncs do not write back the setup's data). The erasures run
// on a handle opened with PosixFileSystem{sync=--erase_sync} (default on:
// the data and deletion files an erasure writes are fsynced; manifests are
// replaced durably by FileSystem::Replace, fsync of file and directory,
// either way), wrapped in a FileSystem that counts the calls: each erasure
// reports manifest reads / key-index reads / key-index writes / manifest
// replaces ("mread/iread/iput/repl") beside EraseResult's fragments
// scanned / skipped / rewritten. Every erasure is `user_id == K`, so the
// Bloom key index (_erase_index/) applies. "cold" = no key index yet (every
// key column is read, hashed and indexed); "warm" = every file already
// indexed. The page cache is warm in both (the files were just written).
// Every point is the median of --repeats erasures of different keys.
//
// Workloads:
//   rows/cold/<F>frag     F (--fragments) fragments committed as one append
//                         (2 versions), so only the row count varies; the key
//                         in 2 fragments. Erase of a key with _erase_index/
//                         removed first. Expected to grow with rows.
//   rows/warm/<F>frag     then Erase of another key (in 2 other fragments)
//                         with every file indexed. Should stay ~flat.
//   rows/absent/<F>frag   Erase of a key no row holds (warm): the lookup part
//                         alone (no rewrite, no manifest replaced).
//   versions/<where>/<V>v --versions_fragments (32) fragments, V retained
//                         versions in all: create, one append of the bulk,
//                         Delete commits of one row of fragment 0 (a new
//                         manifest + deletion vector each, no new fragment).
//                         <where> = early: the key's 2 fragments are in the
//                         bulk append, so V-1 versions reference them (each
//                         such manifest must be rewritten); late: they are
//                         appended in the last commit, so 1 version does.
//                         Warm erase per key. Reported with manifests
//                         rewritten.
//   versions/absent/<V>v  warm Erase of an absent key on the "late" table.
//   keys/<k>frag          --keys_table_fragments (64) fragments, one append;
//                         warm Erase of a key held by k (--key_fragments)
//                         fragments. Should grow ~linearly in k.
//   Scaling rows          growth of the median from the smallest to the
//                         largest point vs growth of rows / versions / k
//                         (ratio 1 = proportional, 1/N = flat).
// Baseline beside each point (same table, same run, median of --repeats):
// a full scan of the key column of the latest version, Table::Open + Scan
// with columns={"user_id"} summing every value. Ratio: erase / scan.
// Cost model in the results file (per table): one pass over every retained
// manifest (Table::Versions: list + read + decode) and one raw read of every
// _erase_index/ file, to compare with the erase times.
// --quick: a smoke run (~10 s: the same tables, points 8,128 fragments and
// 5,200 versions, 3 repeats) that writes no results file unless --out is given.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "flywheel/base/rng.h"
#include "flywheel/format/column.h"
#include "flywheel/io/file_system.h"
#include "flywheel/table/table.h"

namespace fb = flywheel::bench;
namespace ft = flywheel::table;
namespace fmt = flywheel::format;
using nlohmann::json;

namespace {

constexpr int64_t kBaseUser = 1'000'000'000;  // background users: kBaseUser + global row
constexpr int64_t kAbsentKey = 7;              // no row holds it
constexpr int64_t kFirstKey = 1000;            // planted keys: 1000, 1001, ...

struct Config {
  int64_t rows_per_fragment = 20000;
  int64_t key_rows = 10;
  int64_t payload_bytes = 100;
  int repeats = 3;
  bool erase_sync = true;
};

fmt::Schema TableSchema() { return fb::CheckResult(fmt::Schema::Parse("user_id:int64, payload:string"), "schema"); }

// Fragment `frag` of a table: unique background users, and --key_rows rows
// of each key in `keys` spread over the fragment.
fmt::RecordBatch MakeFragment(const Config& c, int64_t frag, const std::vector<int64_t>& keys) {
  const int64_t n = c.rows_per_fragment;
  std::vector<int64_t> users(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) users[i] = kBaseUser + frag * n + i;
  const int64_t planted = static_cast<int64_t>(keys.size()) * c.key_rows;
  if (planted > n) {
    std::fprintf(stderr, "erase_bench: %lld planted rows do not fit in a %lld-row fragment\n",
                 static_cast<long long>(planted), static_cast<long long>(n));
    std::exit(2);
  }
  const int64_t stride = planted > 0 ? n / planted : n;
  for (int64_t t = 0; t < planted; ++t) users[t * stride + stride / 2] = keys[t / c.key_rows];
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::vector<std::string> payload(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    std::string& s = payload[i];
    s.resize(static_cast<size_t>(c.payload_bytes));
    uint64_t h = flywheel::Mix64(static_cast<uint64_t>(frag * n + i));
    for (int64_t k = 0; k < c.payload_bytes; ++k) {
      if (k % 8 == 0) h = flywheel::Mix64(h + static_cast<uint64_t>(k));
      s[k] = kAlphabet[(h >> (k % 8 * 8)) % (sizeof kAlphabet - 1)];
    }
  }
  fmt::RecordBatch b;
  b.schema = TableSchema();
  b.num_rows = n;
  b.columns.push_back(fmt::MakeFixedColumn<int64_t>(fmt::DataType::Scalar(fmt::TypeId::kInt64), std::move(users)));
  b.columns.push_back(fmt::MakeStringColumn(payload));
  return b;
}

// Writes back the setup's unsynced data (syncfs of the table's file system),
// so the erasure's fsyncs do not pay for it; seconds.
double FlushSetup(const std::string& uri) {
  const double t0 = fb::Now();
  const int fd = ::open(uri.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)::syncfs(fd);
    ::close(fd);
  }
  return fb::Now() - t0;
}

ft::TableOptions SetupOptions() {
  ft::TableOptions o;
  o.fs = flywheel::io::PosixFileSystem(flywheel::io::PosixOptions{.sync = false});
  return o;
}

// Appends fragments [first, first+count) of the layout as one commit.
void AppendFragments(const Config& c, ft::Table& t, int64_t first, int64_t count,
                     const std::map<int64_t, std::vector<int64_t>>& keys_by_fragment) {
  auto tx = t.BeginAppend();
  for (int64_t f = first; f < first + count; ++f) {
    auto it = keys_by_fragment.find(f);
    fb::Check(tx->Write(MakeFragment(c, f, it == keys_by_fragment.end() ? std::vector<int64_t>{} : it->second)),
              "append");
  }
  fb::Check(tx->Commit(), "commit");
}

// What one erasure asked of the file system, by kind of file.
struct IoCounts {
  int64_t manifest_reads = 0, manifest_read_bytes = 0, index_reads = 0, index_read_bytes = 0, index_puts = 0,
          data_opens = 0, files_created = 0, replaces = 0, lists = 0, deletes = 0, other = 0;
  json ToJson() const {
    return json{{"manifest_reads", manifest_reads}, {"manifest_read_bytes", manifest_read_bytes},
                {"index_reads", index_reads},       {"index_read_bytes", index_read_bytes},
                {"index_puts", index_puts},         {"data_file_opens", data_opens},
                {"files_created", files_created},   {"replaces", replaces},
                {"lists", lists},                   {"deletes", deletes},
                {"other_calls", other}};
  }
};

// A FileSystem that forwards to another and counts the calls (the erasure
// handle's storage), so each erasure reports how many manifests and index
// files it read and how many manifests it replaced.
class CountingFs final : public flywheel::io::FileSystem {
 public:
  explicit CountingFs(std::shared_ptr<flywheel::io::FileSystem> base) : base_(std::move(base)) {}
  IoCounts counts;

  flywheel::Result<std::shared_ptr<flywheel::io::RandomAccessFile>> OpenRead(
      const std::string& path, const flywheel::io::FileOpenOptions& options) override {
    ++(Has(path, "/data/") ? counts.data_opens : counts.other);
    return base_->OpenRead(path, options);
  }
  flywheel::Result<std::string> ReadFile(const std::string& path) override {
    auto r = base_->ReadFile(path);
    const int64_t n = r.ok() ? static_cast<int64_t>(r->size()) : 0;
    if (Has(path, "/_versions/")) {
      ++counts.manifest_reads;
      counts.manifest_read_bytes += n;
    } else if (Has(path, "/_erase_index/")) {
      ++counts.index_reads;
      counts.index_read_bytes += n;
    } else {
      ++counts.other;
    }
    return r;
  }
  flywheel::Result<std::unique_ptr<flywheel::io::WritableFile>> NewWritable(const std::string& path) override {
    ++counts.files_created;
    return base_->NewWritable(path);
  }
  flywheel::Status PutIfAbsent(const std::string& path, std::string_view data) override {
    ++counts.files_created;
    return base_->PutIfAbsent(path, data);
  }
  flywheel::Status Put(const std::string& path, std::string_view data) override {
    ++(Has(path, "/_erase_index/") ? counts.index_puts : counts.other);
    return base_->Put(path, data);
  }
  flywheel::Status Replace(const std::string& path, std::string_view data) override {
    ++counts.replaces;
    return base_->Replace(path, data);
  }
  flywheel::Result<std::vector<flywheel::io::FileInfo>> List(const std::string& dir) override {
    ++counts.lists;
    return base_->List(dir);
  }
  flywheel::Result<flywheel::io::FileInfo> Stat(const std::string& path) override {
    ++counts.other;
    return base_->Stat(path);
  }
  flywheel::Status Delete(const std::string& path) override {
    ++counts.deletes;
    return base_->Delete(path);
  }
  flywheel::Status CreateDirs(const std::string& dir) override {
    ++counts.other;
    return base_->CreateDirs(dir);
  }

 private:
  static bool Has(const std::string& path, std::string_view part) { return path.find(part) != std::string::npos; }
  std::shared_ptr<flywheel::io::FileSystem> base_;
};

struct EraseHandle {
  std::shared_ptr<CountingFs> fs;
  std::shared_ptr<ft::Table> table;
};

EraseHandle OpenForErase(const Config& c, const std::string& uri) {
  EraseHandle h;
  h.fs = std::make_shared<CountingFs>(
      flywheel::io::PosixFileSystem(flywheel::io::PosixOptions{.sync = c.erase_sync}));
  ft::TableOptions o;
  o.fs = h.fs;
  h.table = fb::CheckResult(ft::Table::Open(uri, {}, o), "open " + uri);
  return h;
}

struct EraseSample {
  double ms = 0;
  ft::EraseResult r;
  IoCounts io;
  json ToJson() const {
    return json{{"ms", ms},
                {"rows_erased", r.rows_erased},
                {"fragments_scanned", r.fragments_scanned},
                {"fragments_skipped", r.fragments_skipped},
                {"fragments_rewritten", r.fragments_rewritten},
                {"manifests_rewritten", r.versions_rewritten.size()},
                {"files_written", r.files_written.size()},
                {"files_deleted", r.files_deleted.size()},
                {"io", io.ToJson()}};
  }
};

// Erases `key` and checks that exactly `expect_rows` physical rows went.
EraseSample EraseKey(EraseHandle& h, int64_t key, int64_t expect_rows) {
  ft::Predicate p{"user_id", "==", std::to_string(key)};
  EraseSample s;
  h.fs->counts = IoCounts{};
  const double t0 = fb::Now();
  s.r = fb::CheckResult(h.table->Erase(p), "erase user_id == " + std::to_string(key));
  s.ms = (fb::Now() - t0) * 1e3;
  s.io = h.fs->counts;
  if (s.r.rows_erased != expect_rows) {
    std::fprintf(stderr, "erase_bench: erasing user_id == %lld removed %lld rows, expected %lld\n",
                 static_cast<long long>(key), static_cast<long long>(s.r.rows_erased),
                 static_cast<long long>(expect_rows));
    std::exit(1);
  }
  return s;
}

// Table::Open + Scan of the key column of the latest version; ms.
double KeyScanMs(const std::string& uri, int64_t expect_rows) {
  const double t0 = fb::Now();
  auto t = fb::CheckResult(ft::Table::Open(uri, {}, SetupOptions()), "open");
  ft::ScanOptions so;
  so.columns = {"user_id"};
  auto it = fb::CheckResult(t->Scan(so), "scan");
  int64_t rows = 0;
  uint64_t sum = 0;
  while (true) {
    auto b = fb::CheckResult(it->Next(), "scan next");
    if (!b) break;
    const auto& col = b->columns[0];
    sum += fb::SumWords(col.values.data, static_cast<size_t>(col.length) * 8);
    rows += b->num_rows;
  }
  const double ms = (fb::Now() - t0) * 1e3;
  if (rows != expect_rows || sum == 0) {
    std::fprintf(stderr, "erase_bench: key scan read %lld rows, expected %lld\n", static_cast<long long>(rows),
                 static_cast<long long>(expect_rows));
    std::exit(1);
  }
  return ms;
}

double Median(std::vector<double> v) { return fb::Percentile(std::move(v), 50); }

struct Point {
  std::vector<EraseSample> samples;
  std::vector<double> scan_ms;
  double ms() const {
    std::vector<double> v;
    for (const auto& s : samples) v.push_back(s.ms);
    return Median(v);
  }
  double scan() const { return Median(scan_ms); }
  // The median sample's counters.
  const EraseSample& median_sample() const {
    std::vector<size_t> idx(samples.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return samples[a].ms < samples[b].ms; });
    return samples[idx[(idx.size() - 1) / 2]];
  }
  json ToJson() const {
    json s = json::array();
    for (const auto& x : samples) s.push_back(x.ToJson());
    return json{{"erase_ms_median", ms()}, {"key_scan_ms_median", scan()}, {"samples", s}, {"key_scan_ms", scan_ms}};
  }
};

// One pass over every retained manifest (what each of Erase's manifest
// passes costs at least: Table::Versions lists, reads and decodes them all),
// one read of every key-index file with FileSystem::ReadFile (as Erase reads
// them), and one FileSystem::Replace (what Erase does per manifest it
// rewrites) of a file the size of the largest manifest in a scratch directory
// beside the table; ms, medians of 5.
json CostModel(const std::string& uri, const std::shared_ptr<ft::Table>& t) {
  auto fs = flywheel::io::PosixFileSystem(flywheel::io::PosixOptions{.sync = false});
  std::vector<double> man, idx, rep;
  int64_t versions = 0, index_files = 0;
  uint64_t index_bytes = 0, manifest_bytes = 0, largest_manifest_bytes = 0;
  std::vector<std::string> index_paths;
  for (const auto& e : std::filesystem::directory_iterator(uri + "/_erase_index")) index_paths.push_back(e.path());
  for (const auto& e : std::filesystem::directory_iterator(uri + "/_versions")) {
    if (!e.is_regular_file()) continue;
    manifest_bytes += e.file_size();
    largest_manifest_bytes = std::max<uint64_t>(largest_manifest_bytes, e.file_size());
  }
  const std::string probe_dir = uri + "_replace_probe";
  std::filesystem::create_directories(probe_dir);
  const std::string probe_data(largest_manifest_bytes, 'm');
  for (int r = 0; r < 5; ++r) {
    double t0 = fb::Now();
    versions = static_cast<int64_t>(fb::CheckResult(t->Versions(), "versions").size());
    man.push_back((fb::Now() - t0) * 1e3);
    t0 = fb::Now();
    index_files = 0;
    index_bytes = 0;
    for (const auto& p : index_paths) {
      index_bytes += fb::CheckResult(fs->ReadFile(p), "read " + p).size();
      ++index_files;
    }
    idx.push_back((fb::Now() - t0) * 1e3);
    t0 = fb::Now();
    fb::Check(fs->Replace(probe_dir + "/m" + std::to_string(r % 2), probe_data), "replace");
    rep.push_back((fb::Now() - t0) * 1e3);
  }
  std::filesystem::remove_all(probe_dir);
  return json{{"retained_versions", versions},
              {"manifest_bytes_all_versions", manifest_bytes},
              {"read_all_manifests_ms", Median(man)},
              {"index_files", index_files},
              {"index_bytes", index_bytes},
              {"read_all_index_files_ms", Median(idx)},
              {"replace_one_manifest_ms", Median(rep)},
              {"replace_samples_ms", rep},
              {"table_bytes", fb::DirBytes(uri)}};
}

std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

void AddPoint(fb::Report& report, const std::string& name, const Point& p, const std::string& note, json details) {
  details["point"] = p.ToJson();
  const auto& m = p.median_sample().r;
  details["median_counters"] = p.median_sample().ToJson();
  report.Add(fb::Comparison{name, "ms", p.ms(), "full key-column scan (same table)", p.scan(), 0,
                            note + "; scanned/skipped/rewritten " + std::to_string(m.fragments_scanned) + "/" +
                                std::to_string(m.fragments_skipped) + "/" + std::to_string(m.fragments_rewritten) +
                                ", manifests rewritten " + std::to_string(m.versions_rewritten.size()),
                            std::move(details)});
}

void AddScaling(fb::Report& report, const std::string& name, double from, double to, const std::string& dim,
                double dim_from, double dim_to) {
  const double growth = to / from, dim_growth = dim_to / dim_from;
  report.Add(fb::Comparison{name, "x", growth, dim + " growth " + Fmt("%.0f", dim_from) + "->" + Fmt("%.0f", dim_to),
                            dim_growth, 0, "ratio 1 = proportional to " + dim + ", " + Fmt("%.3f", 1 / dim_growth) +
                                               " = flat",
                            json{{"from_ms", from}, {"to_ms", to}}});
}

// ---------------------------------------------------------------- rows

struct TablePrint {
  std::vector<std::vector<std::string>> rows;
  void Print(const std::vector<std::string>& header) const {
    std::vector<size_t> w(header.size());
    for (size_t i = 0; i < header.size(); ++i) w[i] = header[i].size();
    for (const auto& r : rows)
      for (size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
    auto line = [&](const std::vector<std::string>& r) {
      std::string s = " ";
      for (size_t i = 0; i < r.size(); ++i) s += " " + r[i] + std::string(w[i] - r[i].size() + 1, ' ');
      std::printf("%s\n", s.c_str());
    };
    line(header);
    std::vector<std::string> dash;
    for (size_t x : w) dash.push_back(std::string(x, '-'));
    line(dash);
    for (const auto& r : rows) line(r);
    std::fflush(stdout);
  }
};

std::string Counters(const EraseSample& s) {
  return std::to_string(s.r.fragments_scanned) + "/" + std::to_string(s.r.fragments_skipped) + "/" +
         std::to_string(s.r.fragments_rewritten);
}
// Manifest reads / key-index reads / key-index writes / manifest replaces.
std::string Io(const EraseSample& s) {
  return std::to_string(s.io.manifest_reads) + "/" + std::to_string(s.io.index_reads) + "/" +
         std::to_string(s.io.index_puts) + "/" + std::to_string(s.io.replaces);
}

void RunRows(const Config& c, const std::vector<int64_t>& fragment_counts, const fb::TempDir& tmp, fb::Report& report,
             json& extra) {
  std::printf("\n== rows: key in 2 fragments, table of F fragments x %lld rows, 2 versions\n",
              static_cast<long long>(c.rows_per_fragment));
  std::vector<std::pair<int64_t, double>> cold_pts, warm_pts, absent_pts;
  TablePrint tp;
  for (int64_t F : fragment_counts) {
    const std::string uri = tmp.Sub("rows_" + std::to_string(F));
    // Key j (cold keys even, warm keys odd) lives in fragments 2j and 2j+1 (mod F).
    std::map<int64_t, std::vector<int64_t>> kf;
    const int64_t nkeys = 2 * c.repeats;
    for (int64_t j = 0; j < nkeys; ++j) {
      kf[(2 * j) % F].push_back(kFirstKey + j);
      kf[(2 * j + 1) % F].push_back(kFirstKey + j);
    }
    double t0 = fb::Now();
    {
      auto t = fb::CheckResult(ft::Table::Create(uri, TableSchema(), SetupOptions()), "create");
      AppendFragments(c, *t, 0, F, kf);
    }
    const double setup_s = fb::Now() - t0;
    const double flush_s = FlushSetup(uri);
    EraseHandle h = OpenForErase(c, uri);
  auto& t = h.table;
    const int64_t rows = t->num_rows();
    Point cold, warm, absent;
    for (int r = 0; r < c.repeats; ++r) {
      std::filesystem::remove_all(uri + "/_erase_index");
      cold.samples.push_back(EraseKey(h, kFirstKey + 2 * r, 2 * c.key_rows));
      warm.samples.push_back(EraseKey(h, kFirstKey + 2 * r + 1, 2 * c.key_rows));
      absent.samples.push_back(EraseKey(h, kAbsentKey, 0));
      const double scan = KeyScanMs(uri, t->num_rows());
      cold.scan_ms.push_back(scan);
      warm.scan_ms.push_back(scan);
      absent.scan_ms.push_back(scan);
    }
    json model = CostModel(uri, t);
    json details{{"fragments", F}, {"rows", rows}, {"versions", 2}, {"key_fragments", 2},
                 {"setup_s", setup_s}, {"setup_flush_s", flush_s}, {"cost_model", model}};
    const std::string sfx = std::to_string(F) + "frag";
    AddPoint(report, "rows/cold/" + sfx, cold, std::to_string(rows) + " rows, no key index", details);
    AddPoint(report, "rows/warm/" + sfx, warm, std::to_string(rows) + " rows, indexed", details);
    AddPoint(report, "rows/absent/" + sfx, absent, "key held by no row, indexed", details);
    cold_pts.emplace_back(rows, cold.ms());
    warm_pts.emplace_back(rows, warm.ms());
    absent_pts.emplace_back(rows, absent.ms());
    for (const auto& [what, p] : std::vector<std::pair<std::string, const Point*>>{
             {"cold", &cold}, {"warm", &warm}, {"absent", &absent}}) {
      tp.rows.push_back({std::to_string(F), std::to_string(rows), what, Fmt("%.2f", p->ms()),
                         Counters(p->median_sample()), Io(p->median_sample()), Fmt("%.2f", p->scan()),
                         Fmt("%.0f%%", 100 * p->ms() / p->scan()),
                         Fmt("%.2f", model["read_all_index_files_ms"].get<double>()),
                         Fmt("%.2f", model["read_all_manifests_ms"].get<double>())});
    }
    extra["rows"][sfx] = details;
    t.reset();
    std::filesystem::remove_all(uri);
  }
  std::printf("\n");
  tp.Print({"frags", "rows", "erase", "ms", "scan/skip/rewr", "mread/iread/iput/repl", "keyscan ms", "erase/scan",
            "all idx read ms", "all manif read ms"});
  if (cold_pts.size() >= 2) {
    AddScaling(report, "rows/cold scaling", cold_pts.front().second, cold_pts.back().second, "rows",
               static_cast<double>(cold_pts.front().first), static_cast<double>(cold_pts.back().first));
    AddScaling(report, "rows/warm scaling", warm_pts.front().second, warm_pts.back().second, "rows",
               static_cast<double>(warm_pts.front().first), static_cast<double>(warm_pts.back().first));
    AddScaling(report, "rows/absent scaling", absent_pts.front().second, absent_pts.back().second, "rows",
               static_cast<double>(absent_pts.front().first), static_cast<double>(absent_pts.back().first));
  }
}

// ---------------------------------------------------------------- versions

void RunVersions(const Config& c, int64_t F, const std::vector<int64_t>& version_counts, const fb::TempDir& tmp,
                 fb::Report& report, json& extra) {
  std::printf("\n== versions: %lld fragments x %lld rows, key in 2 fragments, V versions (Delete commits)\n",
              static_cast<long long>(F), static_cast<long long>(c.rows_per_fragment));
  std::map<std::string, std::vector<std::pair<int64_t, double>>> pts;
  TablePrint tp;
  for (int64_t V : version_counts) {
    for (const std::string where : {"early", "late"}) {
      if (V < 4) {
        std::fprintf(stderr, "erase_bench: --versions must be >= 4\n");
        std::exit(2);
      }
      const std::string uri = tmp.Sub("versions_" + where + "_" + std::to_string(V));
      // Every repeat's key in the same 2 fragments (F-2, F-1).
      std::map<int64_t, std::vector<int64_t>> kf;
      for (int64_t j = 0; j < c.repeats; ++j) {
        kf[F - 2].push_back(kFirstKey + j);
        kf[F - 1].push_back(kFirstKey + j);
      }
      double t0 = fb::Now();
      {
        auto t = fb::CheckResult(ft::Table::Create(uri, TableSchema(), SetupOptions()), "create");  // v1
        const bool early = where == "early";
        AppendFragments(c, *t, 0, early ? F : F - 2, kf);  // v2
        const int64_t deletes = V - 2 - (early ? 0 : 1);
        for (int64_t d = 0; d < deletes; ++d) fb::Check(t->Delete({0}), "delete");  // fragment 0's first live row
        if (!early) AppendFragments(c, *t, F - 2, 2, kf);                         // v = V
        if (t->version() != V) {
          std::fprintf(stderr, "erase_bench: built %lld versions, wanted %lld\n", static_cast<long long>(t->version()),
                       static_cast<long long>(V));
          std::exit(1);
        }
      }
      const double setup_s = fb::Now() - t0;
      const double flush_s = FlushSetup(uri);
      EraseHandle h = OpenForErase(c, uri);
      auto& t = h.table;
      const EraseSample prime = EraseKey(h, kAbsentKey, 0);  // builds the key index (cold)
      Point warm, absent;
      for (int r = 0; r < c.repeats; ++r) {
        warm.samples.push_back(EraseKey(h, kFirstKey + r, 2 * c.key_rows));
        absent.samples.push_back(EraseKey(h, kAbsentKey, 0));
        const double scan = KeyScanMs(uri, t->num_rows());
        warm.scan_ms.push_back(scan);
        absent.scan_ms.push_back(scan);
      }
      json model = CostModel(uri, t);
      const int64_t holding = where == "early" ? V - 1 : 1;
      json details{{"fragments", F},          {"rows", t->num_rows()}, {"versions", V},
                   {"versions_holding_key", holding}, {"key_fragments", 2}, {"setup_s", setup_s}, {"setup_flush_s", flush_s},
                   {"cold_prime", prime.ToJson()},    {"cost_model", model}};
      const std::string sfx = std::to_string(V) + "v";
      AddPoint(report, "versions/" + where + "/" + sfx, warm,
               std::to_string(holding) + " of " + std::to_string(V) + " versions hold the key", details);
      pts[where].emplace_back(V, warm.ms());
      auto row = [&](const std::string& what, const Point& p) {
        tp.rows.push_back({std::to_string(V), std::to_string(holding), what, Fmt("%.2f", p.ms()),
                           Counters(p.median_sample()), Io(p.median_sample()),
                           Fmt("%.2f", p.scan()), Fmt("%.0f%%", 100 * p.ms() / p.scan()),
                           Fmt("%.2f", model["read_all_manifests_ms"].get<double>()),
                           Fmt("%.2f", model["replace_one_manifest_ms"].get<double>())});
      };
      row("warm/" + where, warm);
      if (where == "late") {
        AddPoint(report, "versions/absent/" + sfx, absent, "key held by no row, indexed", details);
        pts["absent"].emplace_back(V, absent.ms());
        row("absent", absent);
      }
      extra["versions"][where + "/" + sfx] = details;
      t.reset();
      std::filesystem::remove_all(uri);
    }
  }
  std::printf("\n");
  tp.Print({"versions", "holding key", "erase", "ms", "scan/skip/rewr", "mread/iread/iput/repl", "keyscan ms",
            "erase/scan", "all manif read ms", "1 Replace ms"});
  for (const auto& [where, p] : pts) {
    if (p.size() < 2) continue;
    AddScaling(report, "versions/" + where + " scaling", p.front().second, p.back().second, "versions",
               static_cast<double>(p.front().first), static_cast<double>(p.back().first));
  }
}

// ---------------------------------------------------------------- keys

void RunKeys(const Config& c, int64_t F, const std::vector<int64_t>& ks, const fb::TempDir& tmp, fb::Report& report,
             json& extra) {
  std::printf("\n== keys: %lld fragments x %lld rows, 2 versions, key in k fragments\n", static_cast<long long>(F),
              static_cast<long long>(c.rows_per_fragment));
  const std::string uri = tmp.Sub("keys");
  // Key (r, k) in k consecutive fragments, cycling through the table.
  std::map<int64_t, std::vector<int64_t>> kf;
  std::map<std::pair<int, int64_t>, int64_t> key_of;
  int64_t next_frag = 0, next_key = kFirstKey;
  for (int r = 0; r < c.repeats; ++r) {
    for (int64_t k : ks) {
      if (k > F) {
        std::fprintf(stderr, "erase_bench: --key_fragments %lld > table fragments %lld\n", static_cast<long long>(k),
                     static_cast<long long>(F));
        std::exit(2);
      }
      key_of[{r, k}] = next_key;
      for (int64_t i = 0; i < k; ++i) kf[(next_frag++) % F].push_back(next_key);
      ++next_key;
    }
  }
  double t0 = fb::Now();
  {
    auto t = fb::CheckResult(ft::Table::Create(uri, TableSchema(), SetupOptions()), "create");
    AppendFragments(c, *t, 0, F, kf);
  }
  const double setup_s = fb::Now() - t0;
  const double flush_s = FlushSetup(uri);
  EraseHandle h = OpenForErase(c, uri);
  auto& t = h.table;
  const EraseSample prime = EraseKey(h, kAbsentKey, 0);
  std::map<int64_t, Point> pts;
  for (int r = 0; r < c.repeats; ++r) {
    for (int64_t k : ks) pts[k].samples.push_back(EraseKey(h, key_of[{r, k}], k * c.key_rows));
    const double scan = KeyScanMs(uri, t->num_rows());
    for (int64_t k : ks) pts[k].scan_ms.push_back(scan);
  }
  json model = CostModel(uri, t);
  json details{{"fragments", F}, {"rows", t->num_rows()}, {"versions", 2}, {"setup_s", setup_s}, {"setup_flush_s", flush_s},
               {"cold_prime", prime.ToJson()}, {"cost_model", model}};
  TablePrint tp;
  for (int64_t k : ks) {
    const Point& p = pts[k];
    json d = details;
    d["key_fragments"] = k;
    AddPoint(report, "keys/" + std::to_string(k) + "frag", p,
             "key in " + std::to_string(k) + " of " + std::to_string(F) + " fragments", d);
    tp.rows.push_back({std::to_string(k), Fmt("%.2f", p.ms()), Fmt("%.2f", p.ms() / static_cast<double>(k)),
                       Counters(p.median_sample()), Io(p.median_sample()), Fmt("%.2f", p.scan()),
                       Fmt("%.0f%%", 100 * p.ms() / p.scan())});
    extra["keys"][std::to_string(k) + "frag"] = d;
  }
  std::printf("\n");
  tp.Print({"key frags", "erase ms", "ms/frag", "scan/skip/rewr", "mread/iread/iput/repl", "keyscan ms",
            "erase/scan"});
  if (ks.size() >= 2) {
    AddScaling(report, "keys scaling", pts[ks.front()].ms(), pts[ks.back()].ms(), "key fragments",
               static_cast<double>(ks.front()), static_cast<double>(ks.back()));
  }
  t.reset();
  std::filesystem::remove_all(uri);
}

std::vector<int64_t> Ints(const std::vector<std::string>& v) {
  std::vector<int64_t> out;
  for (const auto& s : v) out.push_back(std::stoll(s));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  // --quick changes the defaults, which flags given explicitly still override.
  const bool quick = fb::HasSwitch(argc, argv, "quick");
  std::map<std::string, std::string> defaults = {{"rows_per_fragment", "20000"},
                                                 {"key_rows", "10"},
                                                 {"payload_bytes", "100"},
                                                 {"repeats", "5"},
                                                 {"fragments", "8,32,128,512"},
                                                 {"versions", "5,50,200,1000"},
                                                 {"versions_fragments", "32"},
                                                 {"key_fragments", "1,4,16"},
                                                 {"keys_table_fragments", "64"},
                                                 {"erase_sync", "1"},
                                                 {"only", "rows,versions,keys"},
                                                 {"quick", "0"},
                                                 {"tmp", "/tmp"},
                                                 {"out", fb::SourceDir() + "/bench/results"}};
  if (quick) {
    defaults["repeats"] = "3";
    defaults["fragments"] = "8,128";
    defaults["versions"] = "5,200";
    defaults["out"] = "";  // a smoke run keeps no results unless asked
  }
  fb::Flags flags(argc, argv, defaults,
                  "erase_bench: Table::Erase cost vs total rows, retained versions and fragments holding the key,\n"
                  "beside a full scan of the key column (workloads: header of bench/erase_bench.cc).\n"
                  "  erase_bench [--quick] [--rows_per_fragment=N] [--repeats=N] [--fragments=8,32,128,512]\n"
                  "              [--versions=5,50,200,1000] [--key_fragments=1,4,16] [--erase_sync=1]\n"
                  "              [--only=rows,versions,keys] [--out=DIR]\n"
                  "--quick: smoke run (~10 s), no results file unless --out=DIR is given.");
  Config c;
  c.rows_per_fragment = flags.Int("rows_per_fragment");
  c.key_rows = flags.Int("key_rows");
  c.payload_bytes = flags.Int("payload_bytes");
  c.repeats = static_cast<int>(std::max<int64_t>(1, flags.Int("repeats")));
  c.erase_sync = flags.Bool("erase_sync");
  fb::TempDir tmp(flags.Str("tmp"), "fw_erase_bench");
  const json machine = fb::MachineInfo(tmp.path());
  fb::Report report("erase", "Table::Erase cost vs table size, retained versions and fragments holding the key");
  const std::string sync_note =
      std::string("erase fsync ") + (c.erase_sync ? "ON" : "OFF") +
      " (data/deletion files the erasure writes; manifests always replaced with fsync of file + directory); "
      "setup writes without fsync";
  std::printf("erase_bench: %s, %lld CPUs, load %s; data in %s (%s); %lld rows/fragment, %lld-byte payload, "
              "median of %d%s\n%s\n",
              machine["cpu_model"].get<std::string>().c_str(), static_cast<long long>(machine["nproc"].get<int64_t>()),
              machine["loadavg_at_start"].get<std::string>().c_str(), tmp.path().c_str(),
              machine.value("data_fs", std::string("?")).c_str(), static_cast<long long>(c.rows_per_fragment),
              static_cast<long long>(c.payload_bytes), c.repeats, quick ? " (--quick)" : "", sync_note.c_str());
  report.extra()["fsync"] = sync_note;
  report.extra()["method"] =
      "median of --repeats erasures of different keys per point; page cache warm; cold = _erase_index/ removed "
      "before the erasure; baseline = Table::Open + Scan(columns={user_id}) of the latest version, median of "
      "--repeats, same table, same run";
  const auto only = flags.List("only");
  auto wants = [&](const std::string& w) { return std::find(only.begin(), only.end(), w) != only.end(); };
  const double t0 = fb::Now();
  json extra = json::object();
  if (wants("rows")) RunRows(c, Ints(flags.List("fragments")), tmp, report, extra);
  if (wants("versions")) RunVersions(c, flags.Int("versions_fragments"), Ints(flags.List("versions")), tmp, report, extra);
  if (wants("keys")) RunKeys(c, flags.Int("keys_table_fragments"), Ints(flags.List("key_fragments")), tmp, report, extra);
  for (auto& [k, v] : extra.items()) report.extra()[k] = v;
  report.extra()["wall_s"] = fb::Now() - t0;
  std::printf("\nwall %.1f s\n", fb::Now() - t0);
  if (!flags.Str("out").empty()) report.Write(flags.Str("out"), machine, flags.ToJson());
  return 0;
}
