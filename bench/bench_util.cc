#include <cstring>
#include "bench_util.h"

#include <sys/mman.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "flywheel/base/rng.h"

#ifndef FLYWHEEL_SOURCE_DIR
#define FLYWHEEL_SOURCE_DIR "."
#endif

namespace flywheel::bench {

namespace fs = std::filesystem;
using format::Column;
using format::DataType;
using format::RecordBatch;
using format::TypeId;

// ---------------------------------------------------------------- Flags

Flags::Flags(int argc, char** argv, std::map<std::string, std::string> defaults,
             std::string_view usage)
    : values_(std::move(defaults)) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << usage << "\nFlags (defaults):\n";
      for (const auto& [k, v] : values_) std::cout << "  --" << k << "=" << v << "\n";
      std::exit(0);
    }
    if (a.rfind("--", 0) == 0 && a.find('=') == std::string::npos) a += "=1";  // a bare switch
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) != 0 || eq == std::string::npos) {
      std::cerr << "bad argument '" << a << "' (expected --key=value; --help lists flags)\n";
      std::exit(2);
    }
    const std::string key = a.substr(2, eq - 2);
    if (!values_.count(key)) {
      std::cerr << "unknown flag --" << key << " (--help lists flags)\n";
      std::exit(2);
    }
    values_[key] = a.substr(eq + 1);
  }
}

bool HasSwitch(int argc, char** argv, std::string_view name) {
  const std::string bare = absl::StrCat("--", AsAbsl(name));
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == bare || a == bare + "=1" || a == bare + "=true") return true;
  }
  return false;
}

const std::string& Flags::Str(const std::string& key) const { return values_.at(key); }
int64_t Flags::Int(const std::string& key) const { return std::stoll(values_.at(key)); }
double Flags::Double(const std::string& key) const { return std::stod(values_.at(key)); }
bool Flags::Bool(const std::string& key) const {
  const std::string& v = values_.at(key);
  return v == "1" || v == "true" || v == "yes";
}
std::vector<std::string> Flags::List(const std::string& key) const {
  std::vector<std::string> out;
  std::stringstream ss(values_.at(key));
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}
nlohmann::json Flags::ToJson() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : values_) j[k] = v;
  return j;
}

// ---------------------------------------------------------------- TempDir

namespace {
// Live scratch directories, removed by an atexit handler when a benchmark
// fails with std::exit (which skips destructors of locals). Forked children
// leave with _exit, which does not run it.
std::vector<std::string>& LiveDirs() {
  static auto* dirs = new std::vector<std::string>;
  return *dirs;
}
void RemoveLiveDirs() {
  for (const auto& d : LiveDirs()) {
    std::error_code ec;
    fs::remove_all(d, ec);
  }
  LiveDirs().clear();
}
}  // namespace

TempDir::TempDir(const std::string& parent, const std::string& prefix) {
  std::string tmpl = parent + "/" + prefix + ".XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::perror(("mkdtemp " + tmpl).c_str());
    std::exit(1);
  }
  path_ = tmpl;
  static const bool registered = [] { return std::atexit(RemoveLiveDirs) == 0; }();
  (void)registered;
  LiveDirs().push_back(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
  auto& dirs = LiveDirs();
  dirs.erase(std::remove(dirs.begin(), dirs.end(), path_), dirs.end());
}

std::string TempDir::Sub(std::string_view name) const { return path_ + "/" + std::string(name); }

void Check(const Status& s, std::string_view what) {
  if (s.ok()) return;
  std::cerr << "FATAL: " << what << ": " << s << "\n";
  std::exit(1);
}

// ---------------------------------------------------------------- data

format::Schema DataSchema(bool with_name) {
  format::Schema s;
  s.fields.push_back(format::Field{"id", DataType::Scalar(TypeId::kInt64)});
  s.fields.push_back(format::Field{"emb", DataType::Tensor(TypeId::kFloat32, {kEmbDim})});
  if (with_name) s.fields.push_back(format::Field{"name", DataType::String()});
  return s;
}

RecordBatch MakeRows(int64_t start, int64_t n, bool with_name) {
  RecordBatch b;
  b.schema = DataSchema(with_name);
  b.num_rows = n;
  std::vector<int64_t> ids(static_cast<size_t>(n));
  std::vector<float> emb(static_cast<size_t>(n) * kEmbDim);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = start + i;
    ids[i] = row;
    for (int k = 0; k < kEmbDim; ++k) {
      emb[i * kEmbDim + k] = static_cast<float>(row) + 0.0625f * static_cast<float>(k);
    }
  }
  b.columns.push_back(format::MakeFixedColumn(DataType::Scalar(TypeId::kInt64), std::move(ids)));
  b.columns.push_back(
      format::MakeFixedColumn(DataType::Tensor(TypeId::kFloat32, {kEmbDim}), std::move(emb)));
  if (with_name) {
    static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789-_";
    std::string data;
    data.reserve(static_cast<size_t>(n) * 24);
    std::vector<int64_t> offsets(static_cast<size_t>(n) + 1, 0);
    for (int64_t i = 0; i < n; ++i) {
      uint64_t h = Mix64(static_cast<uint64_t>(start + i));
      const int len = 16 + static_cast<int>(h % 17);  // 16..32
      for (int k = 0; k < len; ++k) {
        if (k % 8 == 0) h = Mix64(h);
        data.push_back(kAlphabet[(h >> (k % 8 * 8)) % (sizeof kAlphabet - 1)]);
      }
      offsets[i + 1] = static_cast<int64_t>(data.size());
    }
    Column c;
    c.type = DataType::String();
    c.length = n;
    c.values = format::Buffer::FromString(std::move(data));
    c.offsets = format::Buffer::FromVector(std::move(offsets));
    b.columns.push_back(std::move(c));
  }
  return b;
}

std::vector<RecordBatch> MakeBatches(int64_t n, int64_t batch_rows, bool with_name) {
  if (batch_rows <= 0) batch_rows = n;
  std::vector<RecordBatch> out;
  for (int64_t s = 0; s < n; s += batch_rows)
    out.push_back(MakeRows(s, std::min(batch_rows, n - s), with_name));
  return out;
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) total += e.file_size();
  }
  return total;
}

std::vector<std::string> ListFiles(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file()) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// ---------------------------------------------------------------- machine

namespace {

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

// The value of the first "key : value" line of a /proc file.
std::string ProcField(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon != std::string::npos && Trim(line.substr(0, colon)) == key)
      return Trim(line.substr(colon + 1));
  }
  return "";
}

std::string Command(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return Trim(out);
}

std::string FsType(const std::string& dir) {
  struct statfs st;
  if (::statfs(dir.c_str(), &st) != 0) return "unknown";
  switch (static_cast<unsigned long>(st.f_type)) {
    case 0xEF53:
      return "ext4";
    case 0x01021994:
      return "tmpfs";
    case 0x58465342:
      return "xfs";
    case 0x9123683E:
      return "btrfs";
    case 0x794c7630:
      return "overlayfs";
    default: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "0x%lx", static_cast<unsigned long>(st.f_type));
      return buf;
    }
  }
}

// Microseconds per first touch of a fresh anonymous 4 KiB page (the kernel's
// page-fault cost, which virtual machines can make large): every fresh
// allocation a benchmark makes pays it.
double PageFaultMicros() {
  const size_t n = 32 << 20;
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return -1;
  volatile char* c = static_cast<volatile char*>(p);
  const double t0 = Now();
  for (size_t i = 0; i < n; i += 4096) c[i] = 1;
  const double el = Now() - t0;
  ::munmap(p, n);
  return el * 1e6 / static_cast<double>(n / 4096);
}

}  // namespace

std::string SourceDir() { return FLYWHEEL_SOURCE_DIR; }

nlohmann::json MachineInfo(const std::string& data_dir) {
  nlohmann::json m;
  m["nproc"] = static_cast<int64_t>(::sysconf(_SC_NPROCESSORS_ONLN));
  m["cpu_model"] = ProcField("/proc/cpuinfo", "model name");
  m["cpu_mhz"] = ProcField("/proc/cpuinfo", "cpu MHz");
  m["mem_total"] = ProcField("/proc/meminfo", "MemTotal");
  struct utsname u;
  if (::uname(&u) == 0) {
    m["kernel"] = std::string(u.sysname) + " " + u.release;
    m["hostname"] = u.nodename;
  }
  std::ifstream la("/proc/loadavg");
  std::string load;
  std::getline(la, load);
  m["loadavg_at_start"] = load;
  const std::time_t t = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  m["date"] = date;
  const std::string git = "git -C '" + SourceDir() + "' ";
  m["git_commit"] = Command(git + "rev-parse HEAD 2>/dev/null");
  m["git_dirty"] = !Command(git + "status --porcelain --untracked-files=no 2>/dev/null").empty();
  m["data_dir"] = data_dir;
  m["data_fs"] = FsType(data_dir);
  m["page_fault_us"] = PageFaultMicros();
#ifdef NDEBUG
  m["build"] = "optimized (NDEBUG)";
#else
  m["build"] = "assertions on";
#endif
  return m;
}

// ---------------------------------------------------------------- stats

double Best(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  rank = std::clamp<size_t>(rank, 1, v.size());
  return v[rank - 1];
}

std::string FormatRate(double v, std::string_view unit) {
  char buf[64];
  if (v >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2f G", v / 1e9);
  else if (v >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2f M", v / 1e6);
  else if (v >= 1e3)
    std::snprintf(buf, sizeof buf, "%.2f K", v / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.3g ", v);
  return std::string(buf) + std::string(unit);
}

// ---------------------------------------------------------------- Report

void Report::Add(Comparison c) {
  if (c.ratio == 0 && c.baseline_value != 0) c.ratio = c.value / c.baseline_value;
  std::printf("%-30s %14.4g %-9s | %-34s %14.4g | ratio %8.3f%s%s\n", c.name.c_str(), c.value,
              c.unit.c_str(), c.baseline.c_str(), c.baseline_value, c.ratio,
              c.note.empty() ? "" : "  ", c.note.c_str());
  std::fflush(stdout);
  rows_.push_back(std::move(c));
}

void Report::Write(const std::string& out_dir, const nlohmann::json& machine,
                   const nlohmann::json& flags) const {
  nlohmann::json j;
  j["benchmark"] = name_;
  j["title"] = title_;
  j["machine"] = machine;
  j["flags"] = flags;
  j["results"] = nlohmann::json::array();
  for (const auto& c : rows_) {
    j["results"].push_back({{"name", c.name},
                            {"unit", c.unit},
                            {"value", c.value},
                            {"baseline", c.baseline},
                            {"baseline_value", c.baseline_value},
                            {"ratio", c.ratio},
                            {"note", c.note},
                            {"details", c.details}});
  }
  j["extra"] = extra_;
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  const std::string path = out_dir + "/" + name_ + ".json";
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) {
    std::cerr << "cannot write " << path << "\n";
    std::exit(1);
  }
  std::printf("results: %s\n", path.c_str());
}

__attribute__((noinline)) uint64_t SumWords(const uint8_t* p, size_t n) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    uint64_t w[4];
    std::memcpy(w, p + i, 32);
    s0 += w[0];
    s1 += w[1];
    s2 += w[2];
    s3 += w[3];
  }
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    s0 += w;
  }
  if (i < n) {
    uint64_t w = 0;
    std::memcpy(&w, p + i, n - i);
    s0 += w;
  }
  return s0 + s1 + s2 + s3;
}

}  // namespace flywheel::bench
