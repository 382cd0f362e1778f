// flywheel doctor: what this machine can do, and where a loader's time goes.
//
// Two halves (docs/doctor.md):
//   - Machine limits measured with nothing but the OS: single-thread memcpy,
//     reading a file from the page cache, and reading it from the disk (after
//     fdatasync + POSIX_FADV_DONTNEED, checked with mincore, or with O_DIRECT).
//     Figures are single-thread, so they compare with the per-thread rate of a
//     loader stage. GB/s means 10^9 bytes per second.
//   - The bottleneck analysis: a pure function from a loader's stage times over
//     a wall interval (from LoaderStats deltas, or from two scrapes of a job's
//     /metrics) and the machine limits to each stage's throughput as a
//     fraction of its limit and the stage that holds the job back, in words.
//
// `flywheel doctor` (src/flywheel/cli/doctor_command.cc) puts them together
// with a loopback gRPC figure of the replay service, which this library
// (obs: base only) cannot measure itself; its numbers travel in GrpcLoopback.
//
// Thread-safety: stateless functions and value types. The measurements use
// the calling thread only and must not run concurrently with each other if
// their figures are to mean anything.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/obs/prometheus.h"
#include "nlohmann/json.hpp"

namespace flywheel::obs {

// ---------------------------------------------------------------------------
// Machine limits.

struct MachineOptions {
  // Directory for the temporary file of the page-cache and disk reads
  // (`.flywheel-doctor-XXXXXX`, removed at the end). Required. Put it on the
  // file system the data lives on: a tmpfs has no disk under it.
  std::string dir;
  // Size of that file, bytes (>= 1 MiB; rounded up to 4 KiB). Capped at half
  // of the free space in `dir` and half of the available memory (so the page
  // cache can hold it); a cap adds a note. Default 1 GiB.
  int64_t file_bytes = int64_t{1} << 30;
  // Size of each of memcpy's two buffers, bytes (>= 1 MiB). Capped so both
  // take at most half of the available memory. Default 256 MiB.
  int64_t memcpy_bytes = int64_t{256} << 20;
  // Timed repetitions of memcpy and of the page-cache read; the best counts
  // (>= 1). The disk read is timed once (a second read would hit the cache).
  int repetitions = 3;
  // read() size, bytes (>= 4 KiB, a multiple of 4 KiB). Default 4 MiB.
  int64_t read_block_bytes = int64_t{4} << 20;
  // Take the disk figure with O_DIRECT reads even when POSIX_FADV_DONTNEED
  // emptied the cache (by default O_DIRECT is the fallback: buffered reads
  // with the kernel's read-ahead are what the loader gets).
  bool prefer_o_direct = false;
  // Called with a line before each long step (e.g. to print it); may be empty.
  std::function<void(const std::string&)> progress;

  Status Validate() const;
};

struct MachineLimits {
  double memcpy_gbps = 0;  // bytes copied per second by one thread / 1e9
  int64_t memcpy_bytes = 0;
  int repetitions = 0;
  double page_cache_gbps = 0;  // read() of a cached file, one thread
  std::optional<double> disk_gbps;  // nullopt: not measured (see notes)
  // How the disk figure was taken: "fadvise" (buffered reads after
  // POSIX_FADV_DONTNEED emptied the cache), "o_direct", or "" when not.
  std::string disk_method;
  int64_t file_bytes = 0;
  std::string dir;
  // Caps applied, why the disk was not measured, page cache too small, ...
  std::vector<std::string> notes;
};

// Best-of-`repetitions` single-thread memcpy between two `buffer_bytes`
// buffers (touched first), in GB/s. InvalidArgument for sizes < 1 byte or
// repetitions < 1; ResourceExhausted when the buffers cannot be allocated.
Result<double> MeasureMemcpyGBps(int64_t buffer_bytes, int repetitions);

// Writes a `file_bytes` file into `dir`, then measures page-cache and disk
// reads of it (see MachineOptions); fills the page-cache and disk fields and
// notes of the result (memcpy fields untouched). Errors name `dir`: it does
// not exist, cannot be written, is full.
Result<MachineLimits> MeasureFileReads(const MachineOptions& options);

// Validates, caps the sizes (notes), and runs both measurements.
Result<MachineLimits> MeasureMachine(const MachineOptions& options);

// Bytes of memory available (MemAvailable of /proc/meminfo) and of free
// space in `dir` (statvfs, for unprivileged users).
Result<int64_t> AvailableMemoryBytes();
Result<int64_t> FreeDiskBytes(const std::string& dir);

// Loopback gRPC throughput of the replay service, measured by the CLI.
struct GrpcLoopback {
  int64_t items = 0;       // items streamed each way
  int64_t item_bytes = 0;  // bytes per item
  double insert_mbps = 0;  // client -> server, 10^6 bytes per second
  double sample_mbps = 0;  // server -> client
};

// ---------------------------------------------------------------------------
// Bottleneck analysis.

// A loader's figures over one wall interval (deltas of cumulative counters).
struct StageFigures {
  double wall_seconds = 0;  // > 0: the interval the rest was counted over
  // Worker time, summed over worker threads (can exceed wall_seconds):
  double io_seconds = 0;         // fetching uncompressed pages
  double decode_seconds = 0;     // fetching and decompressing compressed pages
  double transform_seconds = 0;  // decoding and transforming images
  double assemble_seconds = 0;   // locating rows and copying them into batches
  // Waits, wall time (each <= wall_seconds):
  double consumer_wait_seconds = 0;  // the trainer waiting for the loader
  double idle_seconds = 0;           // the loader waiting for the trainer (read-ahead full)
  int64_t rows = 0;   // handed out in the interval
  int64_t bytes = 0;  // bytes of column data handed out
  // Uncompressed bytes of the pages fetched (cache misses) in the interval,
  // -1 = unknown. When > 0, the io and decode throughputs are these bytes
  // per second of the stage (what the stage moved); otherwise, and for the
  // other stages, the bytes handed out per second of the stage.
  int64_t page_bytes = -1;
  int num_threads = 0;  // worker threads; 0 = unknown

  // InvalidArgument naming the field: wall time not > 0, a negative or
  // non-finite value, a wait longer than the interval (by more than 5%).
  Status Validate() const;
};

// Waits below this share of the wall interval do not make a side the
// bottleneck. The trainer waiting at least this much makes the loader the
// bottleneck (whatever the loader's idle time: a starving trainer is what
// costs training time); else the loader idling at least this much makes the
// trainer the bottleneck; else the two are balanced.
inline constexpr double kWaitShareThreshold = 0.10;

// A limit a stage's throughput is compared with.
struct StageLimit {
  std::string name;  // "page_cache", "disk", "memcpy"
  double gbps = 0;
  double fraction = 0;  // the stage's throughput / gbps
};

struct StageResult {
  std::string stage;  // io, decode, transform, assemble, consumer_wait, idle
  double seconds = 0;
  // seconds / wall: for worker stages thread-seconds per second (may be > 1).
  double fraction_of_wall = 0;
  // Worker stages: seconds / all worker seconds (nullopt for waits, or no worker time).
  std::optional<double> share_of_worker_time;
  // Worker stages: bytes / seconds, GB/s, per thread (nullopt for waits, or
  // when seconds or the bytes are 0). The bytes are those of `bytes_basis`.
  std::optional<double> throughput_gbps;
  // "page_bytes" (io and decode, when StageFigures::page_bytes > 0: the bytes
  // the stage read) or "delivered_bytes" (the bytes handed out: what one
  // thread doing only this stage would deliver); empty for waits.
  std::string bytes_basis;
  // Worker stages: the limits it is compared with, the first the main one
  // (io: page cache, then disk when measured; decode, transform, assemble:
  // memcpy). Empty for waits, when the throughput is unknown, or a limit is 0.
  std::vector<StageLimit> limits;
};

struct BottleneckAnalysis {
  double wall_seconds = 0;
  int64_t rows = 0;
  int64_t bytes = 0;
  double rows_per_second = 0;
  double delivered_gbps = 0;  // bytes / wall
  int num_threads = 0;
  // All worker seconds / (wall * num_threads); nullopt when threads unknown.
  std::optional<double> worker_utilization;
  std::vector<StageResult> stages;  // io, decode, transform, assemble, consumer_wait, idle
  // "trainer" (the loader waited on the consumer), one of io, decode,
  // transform, assemble (the trainer waited on the loader; the stage that
  // took most worker time), "loader" (the trainer waited, no worker time was
  // recorded), or "balanced" (neither side waited much).
  std::string bottleneck;
  std::string explanation;  // plain words, with the figures

  const StageResult* stage(const std::string& name) const;
};

// REQUIRES nothing; InvalidArgument for bad figures (StageFigures::Validate)
// or limits that are negative or not finite (0 means unknown).
Result<BottleneckAnalysis> AnalyzeBottleneck(const StageFigures& figures, const MachineLimits& limits);

// ---------------------------------------------------------------------------
// Figures from a running job's /metrics.

// Cumulative loader series of one table label.
struct LoaderCounters {
  std::map<std::string, double> stage_seconds;  // stage label -> seconds
  double rows = 0;
  double bytes = 0;
  // Loaders of the table alive in the process (flywheel_loader_instances):
  // the wall-time stages (consumer_wait, idle) are summed over them.
  double instances = 0;
};

// Cumulative replay series of one table label.
struct ReplayCounters {
  double inserts = 0;
  double samples = 0;
  double insert_blocked_seconds = 0;
  double insert_blocked_count = 0;
  double sample_blocked_seconds = 0;
  // flywheel_replay_blocked_seconds_total{op}: blocked time including waits
  // in progress (preferred over the histograms' sums when present).
  bool live_blocked = false;
  double insert_blocked_live = 0;
  double sample_blocked_live = 0;
};

struct JobCounters {
  std::map<std::string, LoaderCounters> loaders;  // by table label
  std::map<std::string, ReplayCounters> replay;   // by table label
  // The scrape had flywheel_loader_rows_total but no
  // flywheel_loader_stage_seconds_total (a flywheel without stage metrics).
  bool loader_without_stages = false;
};

// Reads the families doctor uses (docs/doctor.md, "Scraping a job"):
// flywheel_loader_stage_seconds_total{table,stage}, flywheel_loader_rows_total,
// flywheel_loader_bytes_total, flywheel_replay_{inserts,samples}_total,
// flywheel_replay_{insert,sample}_blocked_seconds_{sum,count}.
JobCounters CountersFromScrape(const PromScrape& scrape);

// GET `url` and parse it. Unavailable naming the url when it cannot be
// reached, FailedPrecondition for a non-200 answer or text that is not a
// Prometheus exposition.
Result<PromScrape> ScrapeMetrics(const std::string& url, int timeout_ms);

// The figures over `wall_seconds` between two scrapes of one loader.
// FailedPrecondition when a counter went down (the process restarted).
Result<StageFigures> LoaderFiguresFromDelta(const LoaderCounters& before, const LoaderCounters& after,
                                            double wall_seconds);

// A replay table's activity over an interval.
struct ReplayFigures {
  std::string table;
  double wall_seconds = 0;
  double inserts = 0;
  double samples = 0;
  double insert_blocked_seconds = 0;  // summed over callers
  double sample_blocked_seconds = 0;
  // blocked seconds / wall: callers blocked on average.
  double insert_blocked_callers() const;
  double sample_blocked_callers() const;
  // "replay_insert", "replay_sample" (blocked by the rate limiter at least
  // kWaitShareThreshold callers on average), or "" (not blocked).
  std::string Blocked() const;
  std::string Explain() const;
};

Result<ReplayFigures> ReplayFiguresFromDelta(const std::string& table, const ReplayCounters& before,
                                             const ReplayCounters& after, double wall_seconds);

// ---------------------------------------------------------------------------
// The report `flywheel doctor` prints.

struct LoaderReport {
  std::string source;  // "loader" (run by doctor) or "scrape"
  std::string table;
  std::string config;  // plain words: batch size, threads, shuffle, columns
  BottleneckAnalysis analysis;
};

struct DoctorReport {
  MachineLimits machine;
  std::optional<GrpcLoopback> grpc;
  std::string grpc_note;  // why there is no gRPC figure
  std::string scrape_url;
  std::vector<LoaderReport> loaders;
  std::vector<ReplayFigures> replay;
  std::vector<std::string> notes;
};

// One JSON object (docs/doctor.md, "JSON"): machine, grpc, loaders, replay,
// bottleneck {stage, explanation} (null when nothing was analysed), notes.
nlohmann::json DoctorReportJson(const DoctorReport& report);
// Tables of the figures, ending with "bottleneck: <stage> — <explanation>".
std::string DoctorReportText(const DoctorReport& report);

}  // namespace flywheel::obs
