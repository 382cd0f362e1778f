// Shared pieces of the flywheel benchmark programs: flags, timing, scratch
// directories, the benchmark data set, the machine description and the
// results file (bench/results/<name>.json). See docs/benchmarks.md.
//
// Thread-safety: none needed (benchmarks drive it from one thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/format/column.h"

namespace flywheel::bench {

// --key=value flags. Unknown keys are an error listing the known ones. A
// bare --key is --key=1 (switches such as --quick).
class Flags {
 public:
  // `defaults` names every known flag with its default value.
  Flags(int argc, char** argv, std::map<std::string, std::string> defaults, std::string_view usage);
  const std::string& Str(const std::string& key) const;
  int64_t Int(const std::string& key) const;
  double Double(const std::string& key) const;
  bool Bool(const std::string& key) const;
  // Comma-separated list.
  std::vector<std::string> List(const std::string& key) const;
  // Every flag with its value (recorded in the results file).
  nlohmann::json ToJson() const;

 private:
  std::map<std::string, std::string> values_;
};

// Whether the switch --name (bare, =1 or =true) is among the arguments: for
// switches that change other flags' defaults before Flags is built.
bool HasSwitch(int argc, char** argv, std::string_view name);

// Seconds on a monotonic clock.
inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A fresh directory under `parent` (default /tmp), removed with its contents
// when this object is destroyed.
class TempDir {
 public:
  explicit TempDir(const std::string& parent = "/tmp", const std::string& prefix = "fw_bench");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Sub(std::string_view name) const;

 private:
  std::string path_;
};

// Aborts with a message when `s` is not OK (benchmarks have no error path).
void Check(const Status& s, std::string_view what);
template <typename T>
T CheckResult(Result<T> r, std::string_view what) {
  Check(r.status(), what);
  return std::move(r).value();
}

// The benchmark data set. Row i:
//   id   int64       = i
//   emb  float32[16] = i + k/16 for k in 0..15 (exact in float32 for i < 2^20)
//   name string      = 16..32 characters derived from Mix64(i)
// The DuckDB peer (bench/peers/duckdb_take.mjs) generates id and emb with
// the same formula.
inline constexpr int kEmbDim = 16;
format::Schema DataSchema(bool with_name);
format::RecordBatch MakeRows(int64_t start, int64_t n, bool with_name);
// Rows [0, n) split into batches of `batch_rows` (0 = one batch).
std::vector<format::RecordBatch> MakeBatches(int64_t n, int64_t batch_rows, bool with_name);

// Size of all regular files under `dir`, recursively.
uint64_t DirBytes(const std::string& dir);
// Regular files directly in `dir`, sorted.
std::vector<std::string> ListFiles(const std::string& dir);

// nproc, CPU model, memory, kernel, date, git commit, load average, the file
// system of `data_dir`, and the measured cost of one page fault.
nlohmann::json MachineInfo(const std::string& data_dir);

// Sum of the little-endian 8-byte words of [p, p+n) (a trailing partial word
// is zero-padded): the "touch every byte" work that scan benchmarks and their
// baselines both do. Four accumulators keep it memory-bound.
uint64_t SumWords(const uint8_t* p, size_t n);

// Best (largest) of rates; 0 when empty.
double Best(const std::vector<double>& v);
// p-th percentile (0..100, nearest rank) of `v`.
double Percentile(std::vector<double> v, double p);

// Human-readable number with a unit ("1.23 GB/s", "4.5 M rows/s").
std::string FormatRate(double v, std::string_view unit);

// One printed comparison line: figure, baseline, ratio; also kept for the
// results file.
struct Comparison {
  std::string name;  // e.g. "write/64k-batches"
  std::string unit;  // e.g. "MB/s"
  double value = 0;
  std::string baseline;  // e.g. "raw write()+fsync"
  double baseline_value = 0;
  double ratio = 0;  // value / baseline_value, or as documented by `note`
  std::string note;
  nlohmann::json details;  // samples, sizes, ...
};

class Report {
 public:
  Report(std::string name, std::string title) : name_(std::move(name)), title_(std::move(title)) {}
  // Prints the line and keeps it. When `ratio` is 0 it becomes
  // value / baseline_value.
  void Add(Comparison c);
  nlohmann::json& extra() { return extra_; }
  // Writes <out_dir>/<name>.json with the machine description and the flags.
  void Write(const std::string& out_dir, const nlohmann::json& machine,
             const nlohmann::json& flags) const;

 private:
  std::string name_;
  std::string title_;
  std::vector<Comparison> rows_;
  nlohmann::json extra_ = nlohmann::json::object();
};

// The source tree (for the git commit and the peers), from the build.
std::string SourceDir();

}  // namespace flywheel::bench
