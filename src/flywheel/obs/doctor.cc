// flywheel doctor: machine limits and the loader bottleneck analysis.
// docs/doctor.md describes what is measured and how to read it.
#include "flywheel/obs/doctor.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flywheel/obs/http_client.h"

namespace flywheel::obs {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kAlign = 4096;
constexpr long kTmpfsMagic = 0x01021994;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string Gbps(double v) { return Fmt("%.2f GB/s", v); }
std::string Pct(double fraction) { return Fmt("%.0f%%", 100 * fraction); }
std::string MiB(int64_t bytes) { return Fmt("%.0f MiB", static_cast<double>(bytes) / kMiB); }

Status Errno(const std::string& what) {
  const int e = errno;
  const std::string msg = absl::StrCat(what, ": ", std::strerror(e));
  switch (e) {
    case ENOENT: return absl::NotFoundError(msg);
    case EACCES:
    case EPERM: return absl::PermissionDeniedError(msg);
    case ENOSPC:
    case EDQUOT:
    case ENOMEM: return absl::ResourceExhaustedError(msg);
    default: return absl::InternalError(msg);
  }
}

// Keeps the compiler from treating a buffer's contents as unused.
void Clobber(void* p) { asm volatile("" : : "r"(p) : "memory"); }

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;

Result<Buffer> AlignedBuffer(int64_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, kAlign, static_cast<size_t>(bytes)) != 0 || p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", MiB(bytes), " of memory"));
  }
  return Buffer(static_cast<uint8_t*>(p));
}

// Not-quite-random bytes that no file system compresses or deduplicates.
void FillPattern(uint8_t* p, int64_t n, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(p + i, &x, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<uint8_t>(i);
}

// A temporary file, unlinked as soon as it is created (nothing is left
// behind if doctor is interrupted) and closed when this goes out of scope.
class TempFile {
 public:
  ~TempFile() {
    if (fd_ >= 0) close(fd_);
  }
  Status Create(const std::string& dir) {
    std::string pattern = absl::StrCat(dir, dir.empty() || dir.back() == '/' ? "" : "/", ".flywheel-doctor-XXXXXX");
    fd_ = mkstemp(pattern.data());
    if (fd_ < 0) return Errno(absl::StrCat("creating a temporary file in ", dir));
    path_ = pattern;
    if (unlink(path_.c_str()) != 0) return Errno(absl::StrCat("removing ", path_));
    return absl::OkStatus();
  }
  int fd() const { return fd_; }
  // The name it had, for messages.
  const std::string& path() const { return path_; }
  // Opens the file again (it has no name left) with `flags`.
  int Reopen(int flags) const { return open(absl::StrCat("/proc/self/fd/", fd_).c_str(), flags); }

 private:
  int fd_ = -1;
  std::string path_;
};

Status WriteAll(int fd, int64_t size, int64_t block, const std::string& path) {
  FW_ASSIGN_OR_RETURN(Buffer buf, AlignedBuffer(block));
  for (int64_t off = 0; off < size;) {
    const int64_t n = std::min(block, size - off);
    FillPattern(buf.get(), n, static_cast<uint64_t>(off / block) + 1);
    const ssize_t w = pwrite(fd, buf.get(), static_cast<size_t>(n), off);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Errno(absl::StrCat("writing ", path, " at offset ", off));
    }
    off += w;
  }
  if (fdatasync(fd) != 0) return Errno(absl::StrCat("fdatasync of ", path));
  return absl::OkStatus();
}

// Reads [0, size) with pread into `buf` (block bytes); the seconds it took.
Result<double> TimedRead(int fd, int64_t size, uint8_t* buf, int64_t block, const std::string& path) {
  const auto t0 = Clock::now();
  for (int64_t off = 0; off < size;) {
    const ssize_t r = pread(fd, buf, static_cast<size_t>(std::min(block, size - off)), off);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Errno(absl::StrCat("reading ", path, " at offset ", off));
    }
    if (r == 0) return absl::DataLossError(absl::StrCat(path, " ended at ", off, " of ", size, " bytes"));
    off += r;
  }
  const double s = SecondsSince(t0);
  Clobber(buf);
  return std::max(s, 1e-9);
}

// Share of the file's pages in the page cache (mincore of a mapping).
Result<double> ResidentFraction(int fd, int64_t size) {
  void* m = mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return Errno("mmap for mincore");
  const int64_t page = sysconf(_SC_PAGESIZE);
  std::vector<unsigned char> vec(static_cast<size_t>((size + page - 1) / page));
  const int rc = mincore(m, static_cast<size_t>(size), vec.data());
  const Status err = rc != 0 ? Errno("mincore") : Status();
  munmap(m, static_cast<size_t>(size));
  FW_RETURN_IF_ERROR(err);
  int64_t resident = 0;
  for (unsigned char c : vec) resident += c & 1;
  return static_cast<double>(resident) / static_cast<double>(vec.size());
}

bool IsTmpfs(const std::string& dir) {
  struct statfs s;
  return statfs(dir.c_str(), &s) == 0 && static_cast<long>(s.f_type) == kTmpfsMagic;
}

Status CheckFinite(const char* name, double v, bool non_negative = true) {
  if (!std::isfinite(v)) return absl::InvalidArgumentError(absl::StrCat(name, " is not finite (", v, ")"));
  if (non_negative && v < 0) return absl::InvalidArgumentError(absl::StrCat(name, " is negative (", v, ")"));
  return absl::OkStatus();
}

}  // namespace

// ---------------------------------------------------------------------------
// Machine limits.

Status MachineOptions::Validate() const {
  if (dir.empty()) return absl::InvalidArgumentError("doctor: a directory for the temporary file is required");
  if (file_bytes < kMiB) {
    return absl::InvalidArgumentError(absl::StrCat("doctor: file size ", file_bytes, " bytes is below 1 MiB"));
  }
  if (memcpy_bytes < kMiB) {
    return absl::InvalidArgumentError(absl::StrCat("doctor: memcpy size ", memcpy_bytes, " bytes is below 1 MiB"));
  }
  if (repetitions < 1) {
    return absl::InvalidArgumentError(absl::StrCat("doctor: repetitions must be >= 1, got ", repetitions));
  }
  if (read_block_bytes < kAlign || read_block_bytes % kAlign != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("doctor: read block ", read_block_bytes, " bytes is not a positive multiple of 4096"));
  }
  return absl::OkStatus();
}

Result<double> MeasureMemcpyGBps(int64_t buffer_bytes, int repetitions) {
  if (buffer_bytes < 1) return absl::InvalidArgumentError(absl::StrCat("memcpy size ", buffer_bytes, " < 1 byte"));
  if (repetitions < 1) return absl::InvalidArgumentError(absl::StrCat("repetitions ", repetitions, " < 1"));
  FW_ASSIGN_OR_RETURN(Buffer src, AlignedBuffer(buffer_bytes));
  FW_ASSIGN_OR_RETURN(Buffer dst, AlignedBuffer(buffer_bytes));
  // Touch every page so the timing has no page faults in it.
  FillPattern(src.get(), buffer_bytes, 7);
  std::memset(dst.get(), 0, static_cast<size_t>(buffer_bytes));
  double best = 0;
  for (int r = 0; r < repetitions; ++r) {
    const auto t0 = Clock::now();
    std::memcpy(dst.get(), src.get(), static_cast<size_t>(buffer_bytes));
    Clobber(dst.get());
    const double s = std::max(SecondsSince(t0), 1e-9);
    best = std::max(best, static_cast<double>(buffer_bytes) / s / 1e9);
  }
  return best;
}

Result<int64_t> AvailableMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  if (!in) return absl::UnavailableError("cannot read /proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kb * 1024;
  }
  return absl::UnavailableError("/proc/meminfo has no MemAvailable line");
}

Result<int64_t> FreeDiskBytes(const std::string& dir) {
  struct statvfs s;
  if (statvfs(dir.c_str(), &s) != 0) return Errno(absl::StrCat("statvfs of ", dir));
  return static_cast<int64_t>(s.f_bavail) * static_cast<int64_t>(s.f_frsize);
}

Result<MachineLimits> MeasureFileReads(const MachineOptions& o) {
  FW_RETURN_IF_ERROR(o.Validate());
  struct stat st;
  if (stat(o.dir.c_str(), &st) != 0) return Errno(absl::StrCat("directory ", o.dir));
  if (!S_ISDIR(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(o.dir, " is not a directory"));
  MachineLimits out;
  out.dir = o.dir;
  const int64_t size = (o.file_bytes + kAlign - 1) / kAlign * kAlign;
  out.file_bytes = size;
  const int64_t block = o.read_block_bytes;
  auto progress = [&](const std::string& line) {
    if (o.progress) o.progress(line);
  };

  TempFile file;
  FW_RETURN_IF_ERROR(file.Create(o.dir));
  progress(absl::StrCat("writing a ", MiB(size), " file in ", o.dir));
  FW_RETURN_IF_ERROR(WriteAll(file.fd(), size, block, file.path()));
  FW_ASSIGN_OR_RETURN(Buffer buf, AlignedBuffer(block));
  std::memset(buf.get(), 0, static_cast<size_t>(block));

  // Page cache: warm once, then the best of a few timed reads.
  progress(absl::StrCat("reading it from the page cache (best of ", o.repetitions, ")"));
  FW_RETURN_IF_ERROR(TimedRead(file.fd(), size, buf.get(), block, file.path()).status());
  auto warm = ResidentFraction(file.fd(), size);
  if (warm.ok() && *warm < 0.95) {
    out.notes.push_back(absl::StrCat("only ", Pct(*warm), " of the ", MiB(size),
                                     " file stayed in the page cache (memory is short): the page-cache figure "
                                     "includes disk reads"));
  }
  double best = 0;
  for (int r = 0; r < o.repetitions; ++r) {
    FW_ASSIGN_OR_RETURN(double s, TimedRead(file.fd(), size, buf.get(), block, file.path()));
    best = std::max(best, static_cast<double>(size) / s / 1e9);
  }
  out.page_cache_gbps = best;

  // Disk: drop the file's pages and read it once more. mincore says whether
  // the drop worked; if not, O_DIRECT bypasses the cache.
  progress("reading it from the disk");
  const bool tmpfs = IsTmpfs(o.dir);
  if (fdatasync(file.fd()) != 0) return Errno(absl::StrCat("fdatasync of ", file.path()));
  const int adv = posix_fadvise(file.fd(), 0, 0, POSIX_FADV_DONTNEED);
  auto resident = ResidentFraction(file.fd(), size);
  std::optional<double> disk_seconds;
  std::string why_not;
  if (!o.prefer_o_direct && adv == 0 && resident.ok() && *resident <= 0.02) {
    FW_ASSIGN_OR_RETURN(double s, TimedRead(file.fd(), size, buf.get(), block, file.path()));
    disk_seconds = s;
    out.disk_method = "fadvise";
  } else {
    std::string kept = "O_DIRECT was asked for";
    if (!o.prefer_o_direct) {
      kept = resident.ok() ? absl::StrCat("the page cache kept ", Pct(*resident), " of the file after POSIX_FADV_DONTNEED")
                           : absl::StrCat("could not check the page cache (", resident.status().message(), ")");
    }
    const int dfd = file.Reopen(O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (dfd < 0) {
      why_not = absl::StrCat(kept, " and ", o.dir, " does not support O_DIRECT (", std::strerror(errno), ")");
    } else {
      auto s = TimedRead(dfd, size, buf.get(), block, file.path());
      close(dfd);
      if (s.ok()) {
        disk_seconds = *s;
        out.disk_method = "o_direct";
      } else {
        why_not = absl::StrCat(kept, " and an O_DIRECT read failed (", s.status().message(), ")");
      }
    }
  }
  if (disk_seconds) {
    const double gbps = static_cast<double>(size) / *disk_seconds / 1e9;
    if (gbps >= 0.9 * out.page_cache_gbps) {
      why_not = absl::StrCat("the disk read ran at ", Gbps(gbps), ", as fast as the page cache (",
                             Gbps(out.page_cache_gbps), "): the data still came from a cache (",
                             out.disk_method == "o_direct" ? "O_DIRECT" : "after POSIX_FADV_DONTNEED",
                             "), so that is not the disk's figure");
    } else {
      out.disk_gbps = gbps;
    }
  }
  if (!out.disk_gbps) {
    if (tmpfs) {
      why_not = absl::StrCat(o.dir, " is a tmpfs (memory): there is no disk under it; give --dir on the "
                                    "file system of the data");
    }
    out.notes.push_back(absl::StrCat("disk read not measured: ", why_not));
    out.disk_method.clear();
  }
  return out;
}

Result<MachineLimits> MeasureMachine(const MachineOptions& options) {
  FW_RETURN_IF_ERROR(options.Validate());
  MachineOptions o = options;
  std::vector<std::string> notes;
  auto mem = AvailableMemoryBytes();
  if (mem.ok()) {
    const int64_t memcpy_cap = *mem / 4;  // two buffers, half of what is free
    if (o.memcpy_bytes > memcpy_cap) {
      o.memcpy_bytes = std::max<int64_t>(memcpy_cap / kMiB * kMiB, kMiB);
      notes.push_back(absl::StrCat("memcpy buffers capped at ", MiB(o.memcpy_bytes), " (", MiB(*mem),
                                   " of memory available)"));
    }
    if (o.file_bytes > *mem / 2) {
      o.file_bytes = *mem / 2 / kAlign * kAlign;
      notes.push_back(absl::StrCat("file capped at ", MiB(o.file_bytes), ": half of the ", MiB(*mem),
                                   " of memory available, so the page cache can hold it"));
    }
  } else {
    notes.push_back(absl::StrCat("available memory unknown (", mem.status().message(), "): sizes not capped"));
  }
  auto disk = FreeDiskBytes(o.dir);
  if (!disk.ok()) return Annotate(disk.status(), "doctor");
  if (o.file_bytes > *disk / 2) {
    o.file_bytes = *disk / 2 / kAlign * kAlign;
    notes.push_back(absl::StrCat("file capped at ", MiB(o.file_bytes), ": half of the ", MiB(*disk), " free in ",
                                 o.dir));
  }
  if (o.file_bytes < kMiB) {
    return absl::ResourceExhaustedError(absl::StrCat("doctor: not enough room for a 1 MiB test file in ", o.dir,
                                                     " (", *disk, " bytes free)"));
  }
  if (o.progress) {
    o.progress(absl::StrCat("measuring memcpy (", MiB(o.memcpy_bytes), " buffers, best of ", o.repetitions, ")"));
  }
  FW_ASSIGN_OR_RETURN(double memcpy_gbps, MeasureMemcpyGBps(o.memcpy_bytes, o.repetitions));
  FW_ASSIGN_OR_RETURN(MachineLimits out, MeasureFileReads(o));
  out.memcpy_gbps = memcpy_gbps;
  out.memcpy_bytes = o.memcpy_bytes;
  out.repetitions = o.repetitions;
  notes.insert(notes.end(), out.notes.begin(), out.notes.end());
  out.notes = std::move(notes);
  return out;
}

// ---------------------------------------------------------------------------
// Bottleneck analysis.

Status StageFigures::Validate() const {
  if (!std::isfinite(wall_seconds) || wall_seconds <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage figures: wall_seconds must be > 0 and finite, got ", wall_seconds));
  }
  const std::pair<const char*, double> fields[] = {
      {"io_seconds", io_seconds},
      {"decode_seconds", decode_seconds},
      {"transform_seconds", transform_seconds},
      {"assemble_seconds", assemble_seconds},
      {"consumer_wait_seconds", consumer_wait_seconds},
      {"idle_seconds", idle_seconds}};
  for (const auto& [name, v] : fields) {
    FW_RETURN_IF_ERROR(Annotate(CheckFinite(name, v), "stage figures"));
  }
  if (rows < 0) return absl::InvalidArgumentError(absl::StrCat("stage figures: rows is negative (", rows, ")"));
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("stage figures: bytes is negative (", bytes, ")"));
  if (page_bytes < -1) {
    return absl::InvalidArgumentError(absl::StrCat("stage figures: page_bytes is negative (", page_bytes, ")"));
  }
  if (num_threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat("stage figures: num_threads is negative (", num_threads, ")"));
  }
  // One consumer and one read-ahead: each wait is at most the interval
  // (5% slack for two scrapes' timing).
  for (const auto& [name, v] : {std::pair<const char*, double>{"consumer_wait_seconds", consumer_wait_seconds},
                                {"idle_seconds", idle_seconds}}) {
    if (v > wall_seconds * 1.05) {
      return absl::InvalidArgumentError(absl::StrCat("stage figures: ", name, " (", v,
                                                     " s) is longer than the wall interval (", wall_seconds, " s)"));
    }
  }
  return absl::OkStatus();
}

const StageResult* BottleneckAnalysis::stage(const std::string& name) const {
  for (const auto& s : stages) {
    if (s.stage == name) return &s;
  }
  return nullptr;
}

namespace {

std::string LimitWords(const std::string& name) {
  if (name == "page_cache") return "the page-cache read limit";
  if (name == "disk") return "the disk read";
  if (name == "memcpy") return "memcpy";
  return name;
}

std::string StageHint(const std::string& stage) {
  if (stage == "io") {
    return "reads are far slower than the page cache: many small random reads; block shuffle "
           "(shuffle_mode=block), larger pages, or more worker threads help";
  }
  if (stage == "decode") return "decompression costs far more than a copy: a faster codec (lz4, or none) or more worker threads";
  if (stage == "transform") return "image decoding and transforms cost far more than a copy: more worker threads or smaller images";
  return "gathering rows costs far more than a copy: larger batches, block shuffle instead of row shuffle, fewer "
         "or wider columns, or more worker threads";
}

}  // namespace

Result<BottleneckAnalysis> AnalyzeBottleneck(const StageFigures& f, const MachineLimits& limits) {
  FW_RETURN_IF_ERROR(f.Validate());
  FW_RETURN_IF_ERROR(Annotate(CheckFinite("memcpy_gbps", limits.memcpy_gbps), "machine limits"));
  FW_RETURN_IF_ERROR(Annotate(CheckFinite("page_cache_gbps", limits.page_cache_gbps), "machine limits"));
  if (limits.disk_gbps) FW_RETURN_IF_ERROR(Annotate(CheckFinite("disk_gbps", *limits.disk_gbps), "machine limits"));

  BottleneckAnalysis a;
  a.wall_seconds = f.wall_seconds;
  a.rows = f.rows;
  a.bytes = f.bytes;
  a.num_threads = f.num_threads;
  a.rows_per_second = static_cast<double>(f.rows) / f.wall_seconds;
  a.delivered_gbps = static_cast<double>(f.bytes) / f.wall_seconds / 1e9;
  const double worker = f.io_seconds + f.decode_seconds + f.transform_seconds + f.assemble_seconds;
  if (f.num_threads > 0) a.worker_utilization = worker / (f.wall_seconds * f.num_threads);

  auto worker_stage = [&](const char* name, double seconds, std::vector<std::pair<std::string, double>> lims) {
    StageResult s;
    s.stage = name;
    s.seconds = seconds;
    s.fraction_of_wall = seconds / f.wall_seconds;
    if (worker > 0) s.share_of_worker_time = seconds / worker;
    const bool pages = f.page_bytes > 0 && (s.stage == "io" || s.stage == "decode");
    const int64_t bytes = pages ? f.page_bytes : f.bytes;
    s.bytes_basis = pages ? "page_bytes" : "delivered_bytes";
    if (seconds > 0 && bytes > 0) {
      s.throughput_gbps = static_cast<double>(bytes) / seconds / 1e9;
      for (auto& [lname, gbps] : lims) {
        if (gbps > 0) s.limits.push_back({lname, gbps, *s.throughput_gbps / gbps});
      }
    }
    a.stages.push_back(std::move(s));
  };
  std::vector<std::pair<std::string, double>> io_limits = {{"page_cache", limits.page_cache_gbps}};
  if (limits.disk_gbps) io_limits.emplace_back("disk", *limits.disk_gbps);
  worker_stage("io", f.io_seconds, io_limits);
  worker_stage("decode", f.decode_seconds, {{"memcpy", limits.memcpy_gbps}});
  worker_stage("transform", f.transform_seconds, {{"memcpy", limits.memcpy_gbps}});
  worker_stage("assemble", f.assemble_seconds, {{"memcpy", limits.memcpy_gbps}});
  for (const auto& [name, seconds] : {std::pair<const char*, double>{"consumer_wait", f.consumer_wait_seconds},
                                      {"idle", f.idle_seconds}}) {
    StageResult s;
    s.stage = name;
    s.seconds = seconds;
    s.fraction_of_wall = seconds / f.wall_seconds;
    a.stages.push_back(std::move(s));
  }

  const double wait = f.consumer_wait_seconds / f.wall_seconds;
  const double idle = f.idle_seconds / f.wall_seconds;
  // The worker stage that took the most time (ties: the earlier in the pipeline).
  const StageResult* top = nullptr;
  for (size_t i = 0; i < 4; ++i) {
    if (a.stages[i].seconds > 0 && (top == nullptr || a.stages[i].seconds > top->seconds)) top = &a.stages[i];
  }
  auto top_words = [&]() {
    std::string w = absl::StrCat(top->stage, " took ", Pct(*top->share_of_worker_time), " of the workers' time");
    if (!top->throughput_gbps) return absl::StrCat(w, " (no bytes were delivered)");
    absl::StrAppend(&w, top->bytes_basis == "page_bytes" ? ", reading pages at " : ", delivering ",
                    Gbps(*top->throughput_gbps), " per thread");
    std::vector<std::string> parts;
    for (const auto& l : top->limits) {
      parts.push_back(absl::StrCat(Pct(l.fraction), " of ", LimitWords(l.name), " (", Gbps(l.gbps), ")"));
    }
    if (!parts.empty()) absl::StrAppend(&w, ": ", absl::StrJoin(parts, " and "));
    return w;
  };

  // The trainer waiting is what costs training time, so it decides first;
  // the loader's idle time (read-ahead full) only blames the trainer when
  // the trainer hardly waited.
  if (wait >= kWaitShareThreshold) {
    if (top == nullptr) {
      a.bottleneck = "loader";
      a.explanation = absl::StrCat("the loader: the trainer waited for batches ", Pct(wait),
                                   " of the time, and the workers recorded no stage time in the interval");
    } else {
      a.bottleneck = top->stage;
      a.explanation = absl::StrCat("the loader's ", top->stage, " stage: the trainer waited for batches ",
                                   Pct(wait), " of the time; ", top_words());
      if (!top->limits.empty()) {
        if (top->limits.front().fraction >= 0.5) {
          absl::StrAppend(&a.explanation,
                          "; that is near what one thread can do on this machine: more worker threads "
                          "(num_threads) help until the machine runs out");
        } else {
          absl::StrAppend(&a.explanation, "; ", StageHint(top->stage));
        }
      }
      if (a.worker_utilization && *a.worker_utilization < 0.5) {
        absl::StrAppend(&a.explanation, "; the ", f.num_threads, " worker thread(s) were busy only ",
                        Pct(*a.worker_utilization),
                        " of the time: the read-ahead (prefetch_bytes) may be too small to keep them going, or "
                        "they lack free CPUs");
      }
    }
    if (idle >= kWaitShareThreshold) {
      absl::StrAppend(&a.explanation, "; the loader's read-ahead was also full ", Pct(idle),
                      " of the time (batches queued behind busy workers, or delivered in bursts)");
    }
  } else if (idle >= kWaitShareThreshold) {
    a.bottleneck = "trainer";
    a.explanation = absl::StrCat("the trainer: the loader waited on the consumer ", Pct(idle),
                                 " of the time (read-ahead full) while the trainer waited for batches only ",
                                 Pct(wait), "; the loader can deliver more than the ",
                                 Fmt("%.0f", a.rows_per_second), " rows/s (", Gbps(a.delivered_gbps),
                                 ") the trainer took");
  } else {
    a.bottleneck = "balanced";
    a.explanation = absl::StrCat("neither side waited much: the trainer waited for batches ", Pct(wait),
                                 " of the time, the loader for the trainer ", Pct(idle));
    if (top != nullptr) absl::StrAppend(&a.explanation, "; the largest worker stage: ", top_words());
  }
  return a;
}

// ---------------------------------------------------------------------------
// Figures from /metrics.

JobCounters CountersFromScrape(const PromScrape& scrape) {
  JobCounters c;
  bool rows_seen = false;
  bool stages_seen = false;
  for (const PromSample& s : scrape.samples) {
    auto t = s.labels.find("table");
    if (t == s.labels.end()) continue;
    const std::string& table = t->second;
    if (s.name == "flywheel_loader_stage_seconds_total") {
      auto st = s.labels.find("stage");
      if (st == s.labels.end()) continue;
      c.loaders[table].stage_seconds[st->second] += s.value;
      stages_seen = true;
    } else if (s.name == "flywheel_loader_rows_total") {
      c.loaders[table].rows += s.value;
      rows_seen = true;
    } else if (s.name == "flywheel_loader_bytes_total") {
      c.loaders[table].bytes += s.value;
    } else if (s.name == "flywheel_loader_instances") {
      c.loaders[table].instances += s.value;
    } else if (s.name == "flywheel_replay_inserts_total") {
      c.replay[table].inserts += s.value;
    } else if (s.name == "flywheel_replay_samples_total") {
      c.replay[table].samples += s.value;
    } else if (s.name == "flywheel_replay_insert_blocked_seconds_sum") {
      c.replay[table].insert_blocked_seconds += s.value;
    } else if (s.name == "flywheel_replay_insert_blocked_seconds_count") {
      c.replay[table].insert_blocked_count += s.value;
    } else if (s.name == "flywheel_replay_sample_blocked_seconds_sum") {
      c.replay[table].sample_blocked_seconds += s.value;
    } else if (s.name == "flywheel_replay_blocked_seconds_total") {
      auto op = s.labels.find("op");
      if (op == s.labels.end()) continue;
      ReplayCounters& r = c.replay[table];
      r.live_blocked = true;
      (op->second == "insert" ? r.insert_blocked_live : r.sample_blocked_live) += s.value;
    }
  }
  if (rows_seen && !stages_seen) {
    c.loader_without_stages = true;
    c.loaders.clear();
  } else {
    // A table with rows but no stage series (or the reverse) cannot be analysed.
    for (auto it = c.loaders.begin(); it != c.loaders.end();) {
      it = it->second.stage_seconds.empty() ? c.loaders.erase(it) : std::next(it);
    }
  }
  return c;
}

Result<PromScrape> ScrapeMetrics(const std::string& url, int timeout_ms) {
  auto r = HttpGet(url, timeout_ms);
  if (!r.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot scrape ", url, ": ", r.status().message()));
  }
  if (r->status != 200) {
    return absl::FailedPreconditionError(absl::StrCat("scraping ", url, ": HTTP status ", r->status));
  }
  auto p = ParsePrometheusText(r->body);
  if (!p.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(url, " did not answer with Prometheus metrics: ", p.status().message()));
  }
  return p;
}

namespace {

Result<double> Delta(const char* what, double before, double after) {
  if (!std::isfinite(before) || !std::isfinite(after)) {
    return absl::FailedPreconditionError(absl::StrCat(what, " is not finite"));
  }
  if (after < before) {
    return absl::FailedPreconditionError(absl::StrCat(what, " went down from ", before, " to ", after,
                                                      " between the scrapes: did the process restart?"));
  }
  return after - before;
}

double StageOf(const LoaderCounters& c, const std::string& stage) {
  auto it = c.stage_seconds.find(stage);
  return it == c.stage_seconds.end() ? 0 : it->second;
}

}  // namespace

Result<StageFigures> LoaderFiguresFromDelta(const LoaderCounters& before, const LoaderCounters& after,
                                            double wall_seconds) {
  StageFigures f;
  f.wall_seconds = wall_seconds;
  const std::pair<const char*, double*> stages[] = {{"io", &f.io_seconds},
                                                    {"decode", &f.decode_seconds},
                                                    {"transform", &f.transform_seconds},
                                                    {"assemble", &f.assemble_seconds},
                                                    {"consumer_wait", &f.consumer_wait_seconds},
                                                    {"idle", &f.idle_seconds}};
  for (const auto& [stage, out] : stages) {
    const std::string what = absl::StrCat("flywheel_loader_stage_seconds_total{stage=\"", stage, "\"}");
    FW_ASSIGN_OR_RETURN(*out, Delta(what.c_str(), StageOf(before, stage), StageOf(after, stage)));
  }
  // consumer_wait and idle are wall time per loader, summed over the
  // table's loaders: per loader on average.
  const double loaders = std::max(1.0, std::max(before.instances, after.instances));
  f.consumer_wait_seconds /= loaders;
  f.idle_seconds /= loaders;
  FW_ASSIGN_OR_RETURN(double rows, Delta("flywheel_loader_rows_total", before.rows, after.rows));
  FW_ASSIGN_OR_RETURN(double bytes, Delta("flywheel_loader_bytes_total", before.bytes, after.bytes));
  f.rows = static_cast<int64_t>(std::llround(rows));
  f.bytes = static_cast<int64_t>(std::llround(bytes));
  FW_RETURN_IF_ERROR(f.Validate());
  return f;
}

double ReplayFigures::insert_blocked_callers() const {
  return wall_seconds > 0 ? insert_blocked_seconds / wall_seconds : 0;
}
double ReplayFigures::sample_blocked_callers() const {
  return wall_seconds > 0 ? sample_blocked_seconds / wall_seconds : 0;
}

std::string ReplayFigures::Blocked() const {
  const double i = insert_blocked_callers();
  const double s = sample_blocked_callers();
  if (std::max(i, s) < kWaitShareThreshold) return "";
  return i >= s ? "replay_insert" : "replay_sample";
}

std::string ReplayFigures::Explain() const {
  const std::string b = Blocked();
  const std::string rates = absl::StrCat(Fmt("%.1f", inserts / wall_seconds), " inserts/s, ",
                                         Fmt("%.1f", samples / wall_seconds), " samples/s");
  if (b == "replay_insert") {
    return absl::StrCat("replay table '", table, "': inserts waited for the rate limiter (",
                        Fmt("%.2f", insert_blocked_callers()),
                        " callers blocked on average): the learner samples too slowly for the actors (", rates,
                        ")");
  }
  if (b == "replay_sample") {
    return absl::StrCat("replay table '", table, "': samples waited for the rate limiter (",
                        Fmt("%.2f", sample_blocked_callers()),
                        " callers blocked on average): the actors insert too slowly for the learner (", rates,
                        ")");
  }
  return absl::StrCat("replay table '", table, "': not held back by its rate limiter (", rates, ")");
}

Result<ReplayFigures> ReplayFiguresFromDelta(const std::string& table, const ReplayCounters& before,
                                             const ReplayCounters& after, double wall_seconds) {
  if (!std::isfinite(wall_seconds) || wall_seconds <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("replay figures: wall_seconds must be > 0, got ", wall_seconds));
  }
  ReplayFigures f;
  f.table = table;
  f.wall_seconds = wall_seconds;
  FW_ASSIGN_OR_RETURN(f.inserts, Delta("flywheel_replay_inserts_total", before.inserts, after.inserts));
  FW_ASSIGN_OR_RETURN(f.samples, Delta("flywheel_replay_samples_total", before.samples, after.samples));
  if (before.live_blocked && after.live_blocked) {
    // Waits in progress included: a call blocked through the whole interval counts.
    FW_ASSIGN_OR_RETURN(f.insert_blocked_seconds, Delta("flywheel_replay_blocked_seconds_total{op=\"insert\"}",
                                                        before.insert_blocked_live, after.insert_blocked_live));
    FW_ASSIGN_OR_RETURN(f.sample_blocked_seconds, Delta("flywheel_replay_blocked_seconds_total{op=\"sample\"}",
                                                        before.sample_blocked_live, after.sample_blocked_live));
    return f;
  }
  FW_ASSIGN_OR_RETURN(f.insert_blocked_seconds, Delta("flywheel_replay_insert_blocked_seconds_sum",
                                                      before.insert_blocked_seconds, after.insert_blocked_seconds));
  FW_ASSIGN_OR_RETURN(f.sample_blocked_seconds, Delta("flywheel_replay_sample_blocked_seconds_sum",
                                                      before.sample_blocked_seconds, after.sample_blocked_seconds));
  return f;
}

// ---------------------------------------------------------------------------
// The report.

namespace {

nlohmann::json Opt(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

nlohmann::json AnalysisJson(const BottleneckAnalysis& a) {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : a.stages) {
    nlohmann::json lims = nlohmann::json::array();
    for (const auto& l : s.limits) lims.push_back({{"name", l.name}, {"gbps", l.gbps}, {"fraction", l.fraction}});
    stages.push_back({{"stage", s.stage},
                      {"seconds", s.seconds},
                      {"fraction_of_wall", s.fraction_of_wall},
                      {"share_of_worker_time", Opt(s.share_of_worker_time)},
                      {"throughput_gbps", Opt(s.throughput_gbps)},
                      {"bytes_basis", s.bytes_basis.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.bytes_basis)},
                      {"limits", lims}});
  }
  return {{"wall_seconds", a.wall_seconds},
          {"rows", a.rows},
          {"bytes", a.bytes},
          {"rows_per_second", a.rows_per_second},
          {"delivered_gbps", a.delivered_gbps},
          {"num_threads", a.num_threads > 0 ? nlohmann::json(a.num_threads) : nlohmann::json(nullptr)},
          {"worker_utilization", Opt(a.worker_utilization)},
          {"stages", stages},
          {"bottleneck", a.bottleneck},
          {"explanation", a.explanation}};
}

// The report's headline: the first loader held back by one of its stages,
// else a replay table blocked by its rate limiter, else the first loader.
std::optional<std::pair<std::string, std::string>> Headline(const DoctorReport& r) {
  auto label = [&](const LoaderReport& l) {
    return r.loaders.size() > 1 ? absl::StrCat(" (table ", l.table, ")") : std::string();
  };
  for (const auto& l : r.loaders) {
    if (l.analysis.bottleneck != "balanced") {
      return std::make_pair(l.analysis.bottleneck, l.analysis.explanation + label(l));
    }
  }
  for (const auto& t : r.replay) {
    if (!t.Blocked().empty()) return std::make_pair(t.Blocked(), t.Explain());
  }
  if (!r.loaders.empty()) {
    return std::make_pair(r.loaders[0].analysis.bottleneck, r.loaders[0].analysis.explanation + label(r.loaders[0]));
  }
  if (!r.replay.empty()) return std::make_pair(std::string("none"), r.replay[0].Explain());
  return std::nullopt;
}

}  // namespace

nlohmann::json DoctorReportJson(const DoctorReport& r) {
  const MachineLimits& m = r.machine;
  nlohmann::json j;
  j["machine"] = {{"memcpy_gbps", m.memcpy_gbps},
                  {"memcpy_bytes", m.memcpy_bytes},
                  {"repetitions", m.repetitions},
                  {"page_cache_gbps", m.page_cache_gbps},
                  {"disk_gbps", Opt(m.disk_gbps)},
                  {"disk_method", m.disk_method.empty() ? nlohmann::json(nullptr) : nlohmann::json(m.disk_method)},
                  {"file_bytes", m.file_bytes},
                  {"dir", m.dir},
                  {"notes", m.notes}};
  if (r.grpc) {
    j["grpc"] = {{"items", r.grpc->items},
                 {"item_bytes", r.grpc->item_bytes},
                 {"insert_mbps", r.grpc->insert_mbps},
                 {"sample_mbps", r.grpc->sample_mbps}};
  } else {
    j["grpc"] = nullptr;
    j["grpc_note"] = r.grpc_note;
  }
  if (!r.scrape_url.empty()) j["scrape_url"] = r.scrape_url;
  j["loaders"] = nlohmann::json::array();
  for (const auto& l : r.loaders) {
    nlohmann::json a = AnalysisJson(l.analysis);
    a["source"] = l.source;
    a["table"] = l.table;
    a["config"] = l.config;
    j["loaders"].push_back(std::move(a));
  }
  j["replay"] = nlohmann::json::array();
  for (const auto& t : r.replay) {
    j["replay"].push_back({{"table", t.table},
                           {"wall_seconds", t.wall_seconds},
                           {"inserts", t.inserts},
                           {"samples", t.samples},
                           {"inserts_per_second", t.inserts / t.wall_seconds},
                           {"samples_per_second", t.samples / t.wall_seconds},
                           {"insert_blocked_seconds", t.insert_blocked_seconds},
                           {"sample_blocked_seconds", t.sample_blocked_seconds},
                           {"insert_blocked_callers", t.insert_blocked_callers()},
                           {"sample_blocked_callers", t.sample_blocked_callers()},
                           {"blocked", t.Blocked().empty() ? nlohmann::json(nullptr) : nlohmann::json(t.Blocked())},
                           {"explanation", t.Explain()}});
  }
  if (auto h = Headline(r)) {
    j["bottleneck"] = {{"stage", h->first}, {"explanation", h->second}};
  } else {
    j["bottleneck"] = nullptr;
  }
  j["notes"] = r.notes;
  return j;
}

std::string DoctorReportText(const DoctorReport& r) {
  std::ostringstream out;
  char line[512];
  const MachineLimits& m = r.machine;
  out << "machine limits (one thread; GB/s = 10^9 bytes/s)\n";
  std::snprintf(line, sizeof line, "  %-17s %8.2f GB/s   %s buffers, best of %d\n", "memcpy", m.memcpy_gbps,
                MiB(m.memcpy_bytes).c_str(), m.repetitions);
  out << line;
  std::snprintf(line, sizeof line, "  %-17s %8.2f GB/s   %s file in %s, read(), best of %d\n", "page-cache read",
                m.page_cache_gbps, MiB(m.file_bytes).c_str(), m.dir.c_str(), m.repetitions);
  out << line;
  if (m.disk_gbps) {
    std::snprintf(line, sizeof line, "  %-17s %8.2f GB/s   %s\n", "disk read", *m.disk_gbps,
                  m.disk_method == "o_direct" ? "O_DIRECT reads"
                                              : "after fdatasync + POSIX_FADV_DONTNEED (checked with mincore)");
  } else {
    std::snprintf(line, sizeof line, "  %-17s %13s   see notes\n", "disk read", "not measured");
  }
  out << line;
  if (r.grpc) {
    std::snprintf(line, sizeof line, "  %-17s insert %.1f MB/s, sample %.1f MB/s (%lld items of %s, loopback)\n",
                  "gRPC replay", r.grpc->insert_mbps, r.grpc->sample_mbps, static_cast<long long>(r.grpc->items),
                  Fmt("%.1f MiB", static_cast<double>(r.grpc->item_bytes) / kMiB).c_str());
  } else {
    std::snprintf(line, sizeof line, "  %-17s not measured: %s\n", "gRPC replay", r.grpc_note.c_str());
  }
  out << line;

  for (const auto& l : r.loaders) {
    const BottleneckAnalysis& a = l.analysis;
    out << "\nloader on " << l.table << " (" << (l.source == "scrape" ? "scraped" : "run by doctor")
        << (l.config.empty() ? "" : ": " + l.config) << "), " << Fmt("%.2f", a.wall_seconds) << " s\n";
    out << "  delivered " << Fmt("%.0f", a.rows_per_second) << " rows/s, " << Gbps(a.delivered_gbps);
    if (a.worker_utilization) {
      out << "; " << a.num_threads << " worker thread(s) busy " << Pct(*a.worker_utilization) << " of the time";
    }
    out << "\n";
    std::snprintf(line, sizeof line, "  %-14s %9s %8s %8s %12s  %-24s %8s\n", "stage", "seconds", "of wall",
                  "of work", "GB/s/thread", "limit", "of limit");
    out << line;
    for (const auto& s : a.stages) {
      const std::string work = s.share_of_worker_time ? Pct(*s.share_of_worker_time) : "-";
      const std::string tput = s.throughput_gbps ? Fmt("%.2f", *s.throughput_gbps) : "-";
      std::string lim = "-", frac = "-";
      if (!s.limits.empty()) {
        lim = absl::StrCat(s.limits[0].name, " ", Gbps(s.limits[0].gbps));
        frac = Pct(s.limits[0].fraction);
      }
      std::snprintf(line, sizeof line, "  %-14s %9.3f %8s %8s %12s  %-24s %8s\n", s.stage.c_str(), s.seconds,
                    Pct(s.fraction_of_wall).c_str(), work.c_str(), tput.c_str(), lim.c_str(), frac.c_str());
      out << line;
      for (size_t i = 1; i < s.limits.size(); ++i) {
        const std::string more = absl::StrCat(s.limits[i].name, " ", Gbps(s.limits[i].gbps));
        std::snprintf(line, sizeof line, "  %-14s %9s %8s %8s %12s  %-24s %8s\n", "", "", "", "", "", more.c_str(),
                      Pct(s.limits[i].fraction).c_str());
        out << line;
      }
    }
  }

  if (!r.replay.empty()) {
    out << "\nreplay tables (callers blocked by the rate limiter, on average)\n";
    std::snprintf(line, sizeof line, "  %-20s %11s %11s %15s %15s\n", "table", "inserts/s", "samples/s",
                  "insert blocked", "sample blocked");
    out << line;
    for (const auto& t : r.replay) {
      std::snprintf(line, sizeof line, "  %-20s %11.1f %11.1f %15.2f %15.2f\n", t.table.c_str(),
                    t.inserts / t.wall_seconds, t.samples / t.wall_seconds, t.insert_blocked_callers(),
                    t.sample_blocked_callers());
      out << line;
    }
  }

  std::vector<std::string> notes = m.notes;
  notes.insert(notes.end(), r.notes.begin(), r.notes.end());
  if (!notes.empty()) {
    out << "\nnotes\n";
    for (const auto& n : notes) out << "  - " << n << "\n";
  }
  out << "\n";
  if (auto h = Headline(r)) {
    out << "bottleneck: " << h->first << " \u2014 " << h->second << "\n";
  } else {
    out << "bottleneck: not analysed \u2014 give --table URI (run a loader here) or --scrape URL (a running "
           "job's /metrics) to find a job's bottleneck\n";
  }
  return out.str();
}

}  // namespace flywheel::obs
