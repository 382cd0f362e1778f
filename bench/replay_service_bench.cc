// The replay service over loopback gRPC, next to a raw gRPC stream in the
// same program (the replay issue's "Over loopback gRPC" figures).
//
// Everything runs in this one process: a replay::Server, the raw peer (an
// Echo service from bench/echo.proto on gRPC's synchronous API, like the
// replay server, with the same max message size and channel arguments as
// replay::Client / replay::Server) and 1, 2, 4, 8 client threads, all on
// 127.0.0.1. Channels with equal arguments share gRPC's global subchannel
// pool, so all clients of a run share one TCP connection (raw and flywheel
// alike).
//
// Workloads (--benchmarks=roundtrip,oneway,latency,roundtrip_keep,insert_log):
//   roundtrip  Each client runs one RemoteWriter (chunk_length 1, so every
//              item's step is one chunk sent once; max_in_flight_items
//              --window=64) that inserts items into a Queue table (Fifo,
//              max_times_sampled 1, Queue(--queue=1024)) and one
//              RemoteSampler that samples them back in requests of
//              --sample_batch=64 items: each item's payload goes up once and
//              comes down once. Items/s = items that reached a sampler per
//              second. Peer: per client one raw bidi stream; the client sends
//              messages, the server echoes each back, with up to --window
//              messages in flight. GB/s counts payload bytes once (one
//              direction) on both sides. --sizes:
//                small       1-step items of 4 float32, lz4 (the writer's
//                            default codec); raw payload = the same lz4
//                            chunk bytes. Compared in items/s.
//                large       1-step items of one 84x84x4 uint8 frame (smooth
//                            image + noise, as replay_bench), lz4. Raw
//                            payload = the same compressed frames (equal
//                            bytes on the wire; GB/s of those bytes); second
//                            peer: raw echo of the uncompressed frames
//                            (GB/s of frame bytes delivered).
//                large_none  the same frames with Codec::kNone vs the raw
//                            echo of the uncompressed frames (equal bytes).
//   oneway     Informative (--oneway_sizes=large,large_none (small works too) at
//              --oneway_clients=1,4): insert-only (RemoteWriters into a
//              MinSize(1) table) vs a raw upload with one empty ack per
//              message (same window); sample-only (RemoteSamplers with a
//              1-chunk cache from a prefilled Uniform table, so every item
//              brings its chunk) vs a raw download of --sample_batch
//              messages per request. Same message pattern on both sides.
//              --oneway_directions=insert,sample picks the directions (for
//              profiling one of them; with --peer=0, flywheel alone).
//   latency    A Prioritized(0.6) table of --latency_items (1M) small items,
//              filled in process before the server starts; single
//              Client::Sample(1) calls + decode, p50/p99/p99.9, interleaved
//              with in-process Table::Sample + decode and a raw round trip
//              (request and response of the replay messages' sizes).
//   insert_log Insert-only items/s (--insert_log_sizes=small,large at
//              --oneway_clients) with the write-ahead log of inserts off (the
//              baseline) and on with sync none / interval / always; written to
//              bench/results/replay_insert_log.json.
//   roundtrip_keep  roundtrip again (--keep_sizes=large,large_none) after
//              mallopt() makes malloc keep freed memory: separates the cost
//              of page faults (very high on VMs) from the rest. Runs last,
//              as the setting stays for the process.
// Every figure is the best of --repeats; flywheel and raw runs alternate.
// Each run also records CPU time, context switches and page faults per item
// and CPU by thread (--verbose=1 prints them).
// Results: bench/results/replay_service.json (see docs/benchmarks.md).
#include <dirent.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "bench_util.h"
#include "echo.grpc.pb.h"
#include "echo_server.h"
#include "flywheel/base/rng.h"
#include "flywheel/format/codec.h"
#include "flywheel/replay/service/client.h"
#include "flywheel/replay/service/server.h"
#include "flywheel/replay/table.h"
#include "grpcpp/grpcpp.h"
#include "replay.pb.h"

namespace flywheel::bench {
namespace {

using format::DataType;
using format::TypeId;
using replay::Chunk;
using replay::Item;
using replay::ReplayTable;
using replay::ReplayTableOptions;
using replay::TrajectoryColumn;

constexpr int64_t kMaxMessageBytes = int64_t{64} << 20;  // replay::{Client,Server}Options default
constexpr size_t kFrameBytes = 84 * 84 * 4;

Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

void NameThread(const char* name) { pthread_setname_np(pthread_self(), name); }

// ------------------------------------------------------------ CPU accounting

// CPU seconds (user + system) of this process's threads, summed by thread
// name. Threads inherit their creator's name, so naming a thread before it
// starts a library's helper thread labels that helper too.
std::map<std::string, double> ThreadCpu() {
  std::map<std::string, double> out;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(absl::StrCat("/proc/self/task/", e->d_name, "/stat"));
    std::string line;
    if (!std::getline(f, line)) continue;
    const size_t open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    std::string name = line.substr(open + 1, close - open - 1);
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    uint64_t utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {  // fields 14, 15: utime, stime
      if (i == 14) utime = std::stoull(field);
      if (i == 15) stime = std::stoull(field);
    }
    // gRPC names its pool threads with a per-thread suffix; group them.
    while (!name.empty() && (std::isdigit(static_cast<unsigned char>(name.back())) ||
                             name.back() == '-' || name.back() == '_')) {
      name.pop_back();
    }
    out[name] += static_cast<double>(utime + stime) / tick;
  }
  closedir(dir);
  return out;
}

struct Usage {
  double cpu_s = 0;      // process user + system
  int64_t switches = 0;  // voluntary + involuntary context switches
  int64_t faults = 0;    // minor page faults
  std::map<std::string, double> by_thread;
};

Usage TakeUsage() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  Usage u;
  u.cpu_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
            static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  u.switches = ru.ru_nvcsw + ru.ru_nivcsw;
  u.faults = ru.ru_minflt;
  u.by_thread = ThreadCpu();
  return u;
}

// ------------------------------------------------------------- measurement

struct Timing {
  double warmup_s = 0.5;
  double seconds = 2;
};

// One measured point: items/s over the window, with the process's CPU time
// and context switches per item in it.
struct Point {
  double items_s = 0;
  double cpu_us_per_item = 0;
  double switches_per_item = 0;
  double faults_per_item = 0;
  nlohmann::json cpu_by_thread = nlohmann::json::object();  // % of one core over the window
  nlohmann::json counters = nlohmann::json::object();
};

// Per-client counters of completed items, updated by the client threads.
class Counters {
 public:
  explicit Counters(int n) : v_(static_cast<size_t>(n)) {}
  std::atomic<int64_t>& operator[](int i) { return v_[static_cast<size_t>(i)].n; }
  int64_t Sum() const {
    int64_t s = 0;
    for (const auto& c : v_) s += c.n.load(std::memory_order_relaxed);
    return s;
  }

 private:
  struct alignas(64) Slot {
    std::atomic<int64_t> n{0};
  };
  std::vector<Slot> v_;
};

// Lets the clients warm up, then counts completed items over the window.
Point Measure(const Counters& done, const Timing& t) {
  std::this_thread::sleep_for(std::chrono::duration<double>(t.warmup_s));
  const Usage u0 = TakeUsage();
  const int64_t c0 = done.Sum();
  const double t0 = Now();
  std::this_thread::sleep_for(std::chrono::duration<double>(t.seconds));
  const int64_t c1 = done.Sum();
  const double t1 = Now();
  const Usage u1 = TakeUsage();
  Point p;
  const double items = static_cast<double>(c1 - c0);
  p.items_s = items / (t1 - t0);
  if (items > 0) {
    p.cpu_us_per_item = (u1.cpu_s - u0.cpu_s) * 1e6 / items;
    p.switches_per_item = static_cast<double>(u1.switches - u0.switches) / items;
    p.faults_per_item = static_cast<double>(u1.faults - u0.faults) / items;
  }
  for (const auto& [name, s] : u1.by_thread) {
    auto it = u0.by_thread.find(name);
    const double d = s - (it == u0.by_thread.end() ? 0 : it->second);
    if (d > 0) p.cpu_by_thread[name] = std::round(d / (t1 - t0) * 1000) / 10;
  }
  return p;
}

// ------------------------------------------------------------ workloads

// Same frame as replay_bench: a smooth gradient with sparse small noise
// (compressible like an Atari screen).
std::string Frame(uint64_t seed) {
  std::string f(kFrameBytes, '\0');
  SplitMix64 rng(seed);
  for (size_t i = 0; i < f.size(); ++i) {
    const size_t x = (i / 4) % 84, y = (i / 4) / 84;
    f[i] = static_cast<char>((x + y + seed) / 3 + ((rng.Next() & 15) == 0 ? rng.Next() & 7 : 0));
  }
  return f;
}

struct Workload {
  std::string name;  // "small", "large", "large_none"
  std::string column;
  DataType type;
  format::Codec codec = format::Codec::kLz4;
  std::vector<std::string> steps;    // 64 distinct step values
  std::vector<std::string> encoded;  // each step as flywheel stores it (the chunk bytes)
};

constexpr int kDistinctSteps = 64;

Workload MakeWorkload(const std::string& name) {
  Workload w;
  w.name = name;
  if (name == "small") {
    w.column = "obs";
    w.type = DataType::Tensor(TypeId::kFloat32, {4});
    for (int k = 0; k < kDistinctSteps; ++k) {
      const float v[4] = {static_cast<float>(k), 1, 2, 3};
      w.steps.emplace_back(reinterpret_cast<const char*>(v), sizeof v);
    }
  } else if (name == "large" || name == "large_none") {
    w.column = "frame";
    w.type = DataType::Tensor(TypeId::kUInt8, {84, 84, 4});
    if (name == "large_none") w.codec = format::Codec::kNone;
    for (int k = 0; k < kDistinctSteps; ++k) w.steps.push_back(Frame(static_cast<uint64_t>(k)));
  } else {
    std::fprintf(stderr, "replay_service_bench: unknown size '%s' (small, large, large_none)\n",
                 name.c_str());
    std::exit(2);
  }
  for (const auto& s : w.steps) {
    auto c = CheckResult(Chunk::Make(1, w.type, 1, s.data(), w.codec), "chunk");
    w.encoded.push_back(c->compressed());
  }
  return w;
}

double MeanSize(const std::vector<std::string>& v) {
  double s = 0;
  for (const auto& x : v) s += static_cast<double>(x.size());
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// ------------------------------------------------------------ raw peer

// EchoService and EchoServer (the raw peer) are in echo_server.h.

// A channel as replay::Client makes one.
std::shared_ptr<grpc::Channel> NewChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(kMaxMessageBytes));
  args.SetMaxSendMessageSize(static_cast<int>(kMaxMessageBytes));
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

// One raw client: sends `payloads` (cycled) in `mode` on one stream, with
// up to `window` messages unanswered (as RemoteWriter's max_in_flight_items:
// a mutex-guarded count and a reader thread), counting replies in `done`.
void RawWindowedClient(const std::string& address, echo::EchoRequest::Mode mode,
                       const std::vector<std::string>& payloads, int64_t window, size_t first,
                       const std::atomic<bool>& stop, std::atomic<int64_t>& done) {
  auto stub = echo::Echo::NewStub(NewChannel(address));
  grpc::ClientContext ctx;
  auto stream = stub->Stream(&ctx);
  absl::Mutex mu;
  int64_t in_flight = 0;
  bool ended = false;
  NameThread("raw-acks");  // the reader inherits it
  std::thread reader([&] {
    echo::EchoResponse resp;
    while (stream->Read(&resp)) {
      {
        absl::MutexLock lock(&mu);
        --in_flight;
      }
      done.fetch_add(1, std::memory_order_relaxed);
    }
    absl::MutexLock lock(&mu);
    ended = true;
  });
  NameThread("raw-writer");
  echo::EchoRequest req;
  req.set_mode(mode);
  auto room = [&] { return in_flight < window || ended; };
  for (size_t i = first; !stop.load(std::memory_order_relaxed); ++i) {
    {
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(&room));
      if (ended) break;
      ++in_flight;
    }
    req.set_payload(payloads[i % payloads.size()]);  // a copy, as ChunkToProto makes
    if (!stream->Write(req)) break;
  }
  stream->WritesDone();
  reader.join();
  Check(FromGrpc(stream->Finish()), "raw stream");
}

// One raw downloader: asks for `batch` messages at a time (as RemoteSampler
// asks for a batch of samples) and counts them when the batch is complete.
void RawDownloadClient(const std::string& address, int32_t batch, const std::atomic<bool>& stop,
                       std::atomic<int64_t>& done) {
  NameThread("raw-reader");
  auto stub = echo::Echo::NewStub(NewChannel(address));
  grpc::ClientContext ctx;
  auto stream = stub->Stream(&ctx);
  echo::EchoRequest req;
  req.set_mode(echo::EchoRequest::SEND);
  req.set_count(batch);
  echo::EchoResponse resp;
  while (!stop.load(std::memory_order_relaxed)) {
    if (!stream->Write(req)) break;
    int64_t n = 0;
    do {
      if (!stream->Read(&resp)) {
        Check(FromGrpc(stream->Finish()), "raw download stream");
        return;
      }
      ++n;
    } while (!resp.end_of_batch());
    done.fetch_add(n, std::memory_order_relaxed);
  }
  stream->WritesDone();
  Check(FromGrpc(stream->Finish()), "raw download stream");
}

Point RunRaw(const std::string& address, echo::EchoRequest::Mode mode,
             const std::vector<std::string>& payloads, int clients, int64_t window,
             const Timing& t) {
  std::atomic<bool> stop{false};
  Counters done(clients);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      RawWindowedClient(address, mode, payloads, window, static_cast<size_t>(c) * 7, stop, done[c]);
    });
  }
  Point p = Measure(done, t);
  stop = true;
  for (auto& th : threads) th.join();
  return p;
}

Point RunRawDownload(EchoServer& echo, const std::vector<std::string>& payloads, int clients,
                     int32_t batch, const Timing& t) {
  echo.service().SetPayloads(payloads);
  std::atomic<bool> stop{false};
  Counters done(clients);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] { RawDownloadClient(echo.address(), batch, stop, done[c]); });
  }
  Point p = Measure(done, t);
  stop = true;
  for (auto& th : threads) th.join();
  return p;
}

// ------------------------------------------------------------ flywheel

std::shared_ptr<ReplayTable> MakeTable(const std::string& name,
                                 std::unique_ptr<replay::ItemSelector> sampler, int64_t max_size,
                                 int32_t max_times_sampled, replay::RateLimiterOptions limiter) {
  ReplayTableOptions o;
  o.name = name;
  o.sampler = std::move(sampler);
  o.max_size = max_size;
  o.max_times_sampled = max_times_sampled;
  o.rate_limiter = limiter;
  return std::shared_ptr<ReplayTable>(CheckResult(ReplayTable::Create(std::move(o)), "create table"));
}

// With `log_dir`, the write-ahead log of inserts is on (its checkpoint_dir)
// with sync policy `log_sync`.
std::unique_ptr<replay::Server> StartServer(std::shared_ptr<ReplayTable> table, const std::string& log_dir = "",
                                            const std::string& log_sync = "none") {
  replay::ServerOptions o;
  o.tables = {std::move(table)};
  o.max_message_bytes = kMaxMessageBytes;
  if (!log_dir.empty()) {
    o.checkpoint_dir = log_dir;
    o.insert_log = true;
    o.insert_log_sync = log_sync;
  }
  return CheckResult(replay::Server::Start(std::move(o)), "start replay server");
}

replay::RemoteWriterOptions WriterOptionsFor(const Workload& w, int64_t window) {
  replay::RemoteWriterOptions o;
  o.writer.chunk_length = 1;  // every item's step is its own chunk, sent once
  o.writer.max_history = 1;   // the server's per-stream cache keeps only the last chunk
  o.writer.codec = w.codec;
  o.max_in_flight_items = window;
  return o;
}

// Checks that a sampled item holds one of the workload's steps.
void Verify(const replay::SampledItem& s, const Workload& w) {
  std::string got(w.type.fixed_width(), '\0');
  Check(s.item->columns.at(0).Decode(got.data()), "decode sampled item");
  if (std::find(w.steps.begin(), w.steps.end(), got) == w.steps.end()) {
    std::fprintf(stderr, "FATAL: a sampled %s item does not hold any step that was written\n",
                 w.name.c_str());
    std::exit(1);
  }
}

// Writes `steps` (cycled) as 1-step items into `table` until `stop`.
void WriteItems(replay::Client& client, const Workload& w, const std::string& table, int64_t window,
                size_t first, const std::atomic<bool>& stop, std::atomic<int64_t>* done) {
  NameThread("fw-acks");  // RemoteWriter's ack reader and sender inherit it
  auto writer = CheckResult(client.NewWriter(WriterOptionsFor(w, window)), "new writer");
  NameThread("fw-writer");
  for (size_t i = first; !stop.load(std::memory_order_relaxed); ++i) {
    Check(writer->Append({{w.column, w.type, w.steps[i % w.steps.size()].data()}}), "append");
    CheckResult(writer->CreateItem(table, 1.0, {{w.column, 1}}), "create_item");
    if (done != nullptr) done->fetch_add(1, std::memory_order_relaxed);
  }
  Check(writer->Close(), "close writer");
}

// Samples batches from `table` until the table is closed (Cancelled).
void SampleItems(replay::RemoteSampler& sampler, const Workload& w, const std::string& table,
                 int64_t batch, std::atomic<int64_t>& done) {
  NameThread("fw-sampler");
  bool verified = false;
  while (true) {
    auto r = sampler.Sample(table, batch);
    if (!r.ok() && absl::IsCancelled(r.status())) return;
    Check(r.status(), "sample");
    if (!verified && !r->empty()) {
      Verify(r->front(), w);
      verified = true;
    }
    done.fetch_add(static_cast<int64_t>(r->size()), std::memory_order_relaxed);
  }
}

void AddServerStats(const replay::ServerStats& s, Point& p) {
  p.counters = {
      {"chunks_received", s.chunks_received}, {"chunk_bytes_received", s.chunk_bytes_received},
      {"items_inserted", s.items_inserted},   {"chunks_sent", s.chunks_sent},
      {"items_sent", s.items_sent},           {"item_errors", s.item_errors}};
}

struct FlywheelOptions {
  int64_t window = 64;
  int64_t sample_batch = 64;
  int64_t queue = 1024;
  int64_t sampler_cache = 0;  // RemoteSampler chunk-cache capacity (0 = the default, 4096)
};

// Round trip: per client one writer thread and one sampler thread over a
// Queue table.
Point RunFlywheelRoundTrip(const Workload& w, int clients, const FlywheelOptions& fo,
                           const Timing& t) {
  auto table = MakeTable("rt", replay::NewFifoSelector(), fo.queue, 1,
                         replay::RateLimiterOptions::Queue(fo.queue));
  auto server = StartServer(table);
  std::vector<std::unique_ptr<replay::Client>> cl;
  for (int c = 0; c < clients; ++c)
    cl.push_back(std::make_unique<replay::Client>(server->address()));
  std::atomic<bool> stop{false};
  Counters done(clients);
  std::vector<std::thread> writers, samplers;
  for (int c = 0; c < clients; ++c) {
    writers.emplace_back([&, c] {
      WriteItems(*cl[c], w, "rt", fo.window, static_cast<size_t>(c) * 7, stop, nullptr);
    });
    samplers.emplace_back([&, c] {
      auto sampler = cl[c]->NewSampler(fo.sampler_cache);
      SampleItems(*sampler, w, "rt", fo.sample_batch, done[c]);
    });
  }
  Point p = Measure(done, t);
  stop = true;
  for (auto& th : writers) th.join();  // Close() flushes: samplers still drain the queue
  table->Close();                      // wakes the samplers' last requests with Cancelled
  for (auto& th : samplers) th.join();
  const replay::ServerStats s = server->stats();
  if (s.item_errors != 0 || s.items_sent > s.items_inserted) {
    std::fprintf(stderr, "FATAL: round trip: %lld item errors, %lld sent > %lld inserted\n",
                 static_cast<long long>(s.item_errors), static_cast<long long>(s.items_sent),
                 static_cast<long long>(s.items_inserted));
    std::exit(1);
  }
  AddServerStats(s, p);
  return p;
}

// Insert only: writers into a MinSize(1) table that evicts Fifo at max_size.
Point RunFlywheelInsert(const Workload& w, int clients, const FlywheelOptions& fo,
                        const Timing& t, const std::string& log_dir = "", const std::string& log_sync = "none") {
  auto table = MakeTable("in", replay::NewUniformSelector(1), fo.queue, 0,
                         replay::RateLimiterOptions::MinSize(1));
  auto server = StartServer(table, log_dir, log_sync);
  std::vector<std::unique_ptr<replay::Client>> cl;
  for (int c = 0; c < clients; ++c)
    cl.push_back(std::make_unique<replay::Client>(server->address()));
  std::atomic<bool> stop{false};
  Counters done(clients);
  std::vector<std::thread> writers;
  for (int c = 0; c < clients; ++c) {
    writers.emplace_back([&, c] {
      WriteItems(*cl[c], w, "in", fo.window, static_cast<size_t>(c) * 7, stop, &done[c]);
    });
  }
  Point p = Measure(done, t);
  stop = true;
  for (auto& th : writers) th.join();
  AddServerStats(server->stats(), p);
  return p;
}

// Sample only: a Uniform table prefilled in process with `prefill` items
// (each its own chunk); samplers with a 1-chunk cache, so every sampled item
// brings its chunk.
Point RunFlywheelSample(const Workload& w, int clients, int64_t prefill, const FlywheelOptions& fo,
                        const Timing& t) {
  auto table = MakeTable("out", replay::NewUniformSelector(1), prefill, 0,
                         replay::RateLimiterOptions::MinSize(1));
  for (int64_t i = 0; i < prefill; ++i) {
    const uint64_t key = static_cast<uint64_t>(i) + 1;
    auto chunk =
        CheckResult(Chunk::Make(key, w.type, 1,
                                w.steps[static_cast<size_t>(i) % w.steps.size()].data(), w.codec),
                    "chunk");
    Check(table->Insert(Item{key, 1.0, 0, {TrajectoryColumn{w.column, {std::move(chunk)}, 0, 1}}}),
          "prefill");
  }
  auto server = StartServer(table);
  std::vector<std::unique_ptr<replay::Client>> cl;
  for (int c = 0; c < clients; ++c)
    cl.push_back(std::make_unique<replay::Client>(server->address()));
  std::atomic<bool> stop{false};
  Counters done(clients);
  std::vector<std::thread> samplers;
  for (int c = 0; c < clients; ++c) {
    samplers.emplace_back([&, c] {
      auto sampler = cl[c]->NewSampler(1);
      NameThread("fw-sampler");
      bool verified = false;
      while (!stop.load(std::memory_order_relaxed)) {
        auto r = CheckResult(sampler->Sample("out", fo.sample_batch), "sample");
        if (!verified) {
          Verify(r.front(), w);
          verified = true;
        }
        done[c].fetch_add(static_cast<int64_t>(r.size()), std::memory_order_relaxed);
      }
    });
  }
  Point p = Measure(done, t);
  stop = true;
  for (auto& th : samplers) th.join();
  AddServerStats(server->stats(), p);
  return p;
}

// ------------------------------------------------------------ reporting

// All runs of one figure: best items/s, every sample, and the best run's
// CPU and counters.
struct Series {
  std::vector<double> items_s;
  Point best;
  void Add(const Point& p) {
    if (items_s.empty() || p.items_s > best.items_s) best = p;
    items_s.push_back(p.items_s);
  }
  double Best() const { return best.items_s; }
  nlohmann::json Json() const {
    return {{"items_per_s", items_s},
            {"best_cpu_us_per_item", best.cpu_us_per_item},
            {"best_context_switches_per_item", best.switches_per_item},
            {"best_page_faults_per_item", best.faults_per_item},
            {"best_cpu_percent_of_one_core_by_thread", best.cpu_by_thread},
            {"best_server_counters", best.counters}};
  }
};

void PrintPoint(bool verbose, const std::string& what, const Point& p) {
  std::printf("  %-34s %10.0f items/s  %7.1f us CPU/item  %5.2f switches/item  %5.2f faults/item\n",
              what.c_str(), p.items_s, p.cpu_us_per_item, p.switches_per_item, p.faults_per_item);
  if (verbose) std::printf("    cpu %% of a core by thread: %s\n", p.cpu_by_thread.dump().c_str());
  std::fflush(stdout);
}

std::string Key(const std::string& what, int clients) { return absl::StrCat(what, "/c", clients); }

double GBs(double items_s, double bytes) { return items_s * bytes / 1e9; }

std::vector<int> ClientCounts(const Flags& flags, const std::string& key) {
  std::vector<int> out;
  for (const auto& s : flags.List(key)) out.push_back(std::stoi(s));
  return out;
}

// `prefix` names the figures ("roundtrip", or "roundtrip-malloc-keep" for
// the run after KeepFreedMemory()).
void RunRoundTrip(const Flags& flags, EchoServer& echo, Report& report, const std::string& prefix,
                  const std::vector<std::string>& sizes) {
  const Timing t{flags.Double("warmup"), flags.Double("seconds")};
  const FlywheelOptions fo{flags.Int("window"), flags.Int("sample_batch"), flags.Int("queue"),
                           flags.Int("sampler_cache")};
  const bool verbose = flags.Bool("verbose");
  const bool peer = flags.Bool("peer");
  std::vector<Workload> wls;
  for (const auto& s : sizes) wls.push_back(MakeWorkload(s));
  const std::vector<int> clients = ClientCounts(flags, "clients");
  std::map<std::string, Series> runs;
  std::map<std::string, double> chunk_bytes;  // per workload, from the server's counters
  const std::vector<std::string> frames = MakeWorkload("large_none").steps;
  for (int64_t r = 0; r < flags.Int("repeats"); ++r) {
    for (int n : clients) {
      std::printf("%s: repeat %lld, %d client(s)\n", prefix.c_str(), static_cast<long long>(r + 1),
                  n);
      bool raw_frames_done = false;
      for (const Workload& w : wls) {
        Point fw = RunFlywheelRoundTrip(w, n, fo, t);
        PrintPoint(verbose, absl::StrCat("flywheel ", w.name), fw);
        const double received = fw.counters["chunks_received"].get<double>();
        if (received > 0)
          chunk_bytes[w.name] = fw.counters["chunk_bytes_received"].get<double>() / received;
        runs[Key("fw-" + w.name, n)].Add(fw);
        if (!peer) continue;  // profiling flywheel alone
        if (w.name != "large_none") {
          Point raw = RunRaw(echo.address(), echo::EchoRequest::ECHO, w.encoded, n, fo.window, t);
          PrintPoint(verbose, absl::StrCat("raw echo of ", w.name, " chunk bytes"), raw);
          runs[Key("raw-" + w.name, n)].Add(raw);
        }
        if (w.name != "small" && !raw_frames_done) {
          Point raw = RunRaw(echo.address(), echo::EchoRequest::ECHO, frames, n, fo.window, t);
          PrintPoint(verbose, "raw echo of uncompressed frames", raw);
          runs[Key("raw-frames", n)].Add(raw);
          raw_frames_done = true;
        }
      }
    }
  }
  std::printf("\n");
  for (const Workload& w : wls) {
    const double wire = MeanSize(w.encoded);
    const double fw_bytes = chunk_bytes.count(w.name) ? chunk_bytes[w.name] : wire;
    for (int n : clients) {
      const Series& fw = runs[Key("fw-" + w.name, n)];
      nlohmann::json details = {
          {"clients", n},
          {"payload_bytes_flywheel_chunks", fw_bytes},
          {"payload_bytes_raw", w.name == "large_none" ? double(kFrameBytes) : wire},
          {"step_bytes", w.type.fixed_width()},
          {"flywheel", fw.Json()}};
      if (w.name == "small") {
        const Series& raw = runs[Key("raw-small", n)];
        details["raw"] = raw.Json();
        report.Add(
            {absl::StrCat(prefix, "/small/c", n), "items/s", fw.Best(),
             absl::StrFormat("raw gRPC echo, %.0f B payload", wire), raw.Best(), 0,
             absl::StrFormat(
                 "%.0f B lz4 chunks of 16 B steps; %.4f vs %.4f GB/s; CPU/item %.1f vs %.1f us",
                 fw_bytes, GBs(fw.Best(), fw_bytes), GBs(raw.Best(), wire), fw.best.cpu_us_per_item,
                 raw.best.cpu_us_per_item),
             details});
      } else if (w.name == "large") {
        const Series& raw = runs[Key("raw-large", n)];
        const Series& rawf = runs[Key("raw-frames", n)];
        details["raw"] = raw.Json();
        report.Add({absl::StrCat(prefix, "/large/c", n), "GB/s", GBs(fw.Best(), fw_bytes),
                    absl::StrFormat("raw gRPC echo, same %.0f B lz4 frames", wire),
                    GBs(raw.Best(), wire), 0,
                    absl::StrFormat(
                        "%.0f vs %.0f items/s; wire bytes (lz4); CPU/item %.1f vs %.1f us",
                        fw.Best(), raw.Best(), fw.best.cpu_us_per_item, raw.best.cpu_us_per_item),
                    details});
        nlohmann::json d2 = details;
        d2["raw"] = rawf.Json();
        d2["payload_bytes_raw"] = static_cast<double>(kFrameBytes);
        report.Add({absl::StrCat(prefix, "/large-vs-frames/c", n), "GB/s",
                    GBs(fw.Best(), kFrameBytes), "raw gRPC echo, uncompressed 28224 B frames",
                    GBs(rawf.Best(), kFrameBytes), 0,
                    absl::StrFormat("frame bytes delivered/s; %.0f vs %.0f items/s", fw.Best(),
                                    rawf.Best()),
                    d2});
      } else {
        const Series& rawf = runs[Key("raw-frames", n)];
        details["raw"] = rawf.Json();
        report.Add({absl::StrCat(prefix, "/large-nocodec/c", n), "GB/s",
                    GBs(fw.Best(), kFrameBytes), "raw gRPC echo, same 28224 B frames",
                    GBs(rawf.Best(), kFrameBytes), 0,
                    absl::StrFormat("Codec::kNone; %.0f vs %.0f items/s; CPU/item %.1f vs %.1f us",
                                    fw.Best(), rawf.Best(), fw.best.cpu_us_per_item,
                                    rawf.best.cpu_us_per_item),
                    details});
      }
    }
  }
  // lz4 on these frames in this process: what the writer pays per item.
  if (prefix == "roundtrip" &&
      std::any_of(wls.begin(), wls.end(), [](const Workload& w) { return w.name == "large"; })) {
    std::string out;
    const int kN = 2000;
    const double t0 = Now();
    for (int i = 0; i < kN; ++i) {
      out.clear();
      Check(format::Compress(format::Codec::kLz4, 1, frames[i % frames.size()].data(), kFrameBytes,
                             &out),
            "lz4");
    }
    const double us = (Now() - t0) * 1e6 / kN;
    report.extra()["lz4_frame"] = {
        {"compress_us_per_frame", us},
        {"compressed_bytes_mean", MeanSize(MakeWorkload("large").encoded)},
        {"frame_bytes", kFrameBytes}};
    std::printf("lz4 of one frame in process: %.1f us (%.0f -> %.0f B)\n", us, double(kFrameBytes),
                MeanSize(MakeWorkload("large").encoded));
  }
  nlohmann::json all = nlohmann::json::object();
  for (const auto& [k, s] : runs) all[k] = s.Json();
  report.extra()[prefix + "_runs"] = all;
}

void RunOneWay(const Flags& flags, EchoServer& echo, Report& report) {
  const Timing t{flags.Double("warmup"), flags.Double("seconds")};
  const FlywheelOptions fo{flags.Int("window"), flags.Int("sample_batch"), flags.Int("queue"),
                           flags.Int("sampler_cache")};
  const bool verbose = flags.Bool("verbose");
  const bool peer = flags.Bool("peer");
  const std::vector<int> clients = ClientCounts(flags, "oneway_clients");
  std::vector<Workload> wls;
  for (const auto& s : flags.List("oneway_sizes")) wls.push_back(MakeWorkload(s));
  bool insert = false, sample = false;
  for (const auto& d : flags.List("oneway_directions")) {
    if (d == "insert") {
      insert = true;
    } else if (d == "sample") {
      sample = true;
    } else {
      std::fprintf(stderr,
                   "replay_service_bench: unknown --oneway_directions '%s' (insert, sample)\n",
                   d.c_str());
      std::exit(2);
    }
  }
  std::map<std::string, Series> runs;
  for (int64_t r = 0; r < flags.Int("repeats"); ++r) {
    for (int n : clients) {
      std::printf("oneway: repeat %lld, %d client(s)\n", static_cast<long long>(r + 1), n);
      for (const Workload& w : wls) {
        if (insert) {
          Point p = RunFlywheelInsert(w, n, fo, t);
          PrintPoint(verbose, "flywheel insert-only " + w.name, p);
          runs[Key("fw-insert-" + w.name, n)].Add(p);
          if (peer) {
            p = RunRaw(echo.address(), echo::EchoRequest::ACK, w.encoded, n, fo.window, t);
            PrintPoint(verbose, "raw upload + empty acks", p);
            runs[Key("raw-upload-" + w.name, n)].Add(p);
          }
        }
        if (sample) {
          Point p = RunFlywheelSample(w, n, flags.Int("sample_only_items"), fo, t);
          PrintPoint(verbose, "flywheel sample-only " + w.name, p);
          runs[Key("fw-sample-" + w.name, n)].Add(p);
          if (peer) {
            p = RunRawDownload(echo, w.encoded, n, static_cast<int32_t>(fo.sample_batch), t);
            PrintPoint(verbose, "raw download", p);
            runs[Key("raw-download-" + w.name, n)].Add(p);
          }
        }
      }
    }
  }
  std::printf("\n");
  for (const Workload& w : wls) {
    const double wire = MeanSize(w.encoded);
    const std::string what = w.name == "large_none" ? "large-nocodec" : w.name;
    for (int n : clients) {
      if (insert) {
        const Series &fi = runs[Key("fw-insert-" + w.name, n)],
                     &ru = runs[Key("raw-upload-" + w.name, n)];
        report.Add({absl::StrCat("insert-only/", what, "/c", n),
                    "GB/s",
                    GBs(fi.Best(), wire),
                    absl::StrFormat("raw upload, %.0f B + empty ack each", wire),
                    GBs(ru.Best(), wire),
                    0,
                    absl::StrFormat("%.0f vs %.0f items/s; CPU/item %.1f vs %.1f us", fi.Best(),
                                    ru.Best(), fi.best.cpu_us_per_item, ru.best.cpu_us_per_item),
                    {{"clients", n},
                     {"payload_bytes", wire},
                     {"flywheel", fi.Json()},
                     {"raw", ru.Json()}}});
      }
      if (sample) {
        const Series &fs = runs[Key("fw-sample-" + w.name, n)],
                     &rd = runs[Key("raw-download-" + w.name, n)];
        report.Add({absl::StrCat("sample-only/", what, "/c", n),
                    "GB/s",
                    GBs(fs.Best(), wire),
                    absl::StrFormat("raw download, %.0f B, %lld per request", wire,
                                    static_cast<long long>(fo.sample_batch)),
                    GBs(rd.Best(), wire),
                    0,
                    absl::StrFormat("%.0f vs %.0f items/s; CPU/item %.1f vs %.1f us", fs.Best(),
                                    rd.Best(), fs.best.cpu_us_per_item, rd.best.cpu_us_per_item),
                    {{"clients", n},
                     {"payload_bytes", wire},
                     {"flywheel", fs.Json()},
                     {"raw", rd.Json()}}});
      }
    }
  }
}

// From here on malloc keeps freed memory instead of returning it to the
// kernel (which costs a page fault per 4 KiB page on reuse, 10-30 us each
// on the VM these figures were taken on), as a long-running service tuned
// with these settings would.
void KeepFreedMemory() {
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
}

// The size of the SampleStream messages for one sampled item (the server
// builds the same fields).
std::pair<size_t, size_t> SampleMessageSizes(const std::string& table,
                                             const replay::SampledItem& s) {
  replay::proto::SampleStreamRequest req;
  req.set_table(table);
  req.set_num_samples(1);
  replay::proto::SampleStreamResponse resp;
  const TrajectoryColumn& col = s.item->columns.at(0);
  for (const auto& c : col.chunks) {
    auto* pc = resp.add_chunks();
    pc->set_key(c->key());
    pc->set_step_type(c->step_type().ToString());
    pc->set_num_steps(c->num_steps());
    pc->set_codec(static_cast<uint32_t>(c->codec()));
    pc->set_compressed(c->compressed());
  }
  auto* item = resp.mutable_item()->mutable_item();
  item->set_table(table);
  item->set_key(s.item->key);
  item->set_priority(s.item->priority);
  auto* pcol = item->add_columns();
  pcol->set_name(col.name);
  for (const auto& c : col.chunks) pcol->add_chunk_keys(c->key());
  pcol->set_offset(col.offset);
  pcol->set_length(col.length);
  resp.mutable_item()->set_priority(s.priority);
  resp.mutable_item()->set_probability(s.probability);
  resp.mutable_item()->set_table_size(s.table_size);
  resp.mutable_item()->set_times_sampled(s.times_sampled);
  resp.set_end_of_batch(true);
  return {req.ByteSizeLong(), resp.ByteSizeLong()};
}

// Insert-only items/s with the write-ahead log of inserts (docs/replay.md,
// "Durability") off (the same-run baseline) and on with each sync policy:
// none (write() only: survives kill -9), interval (fdatasync every 100 ms),
// always (fdatasync before each acknowledgement). --insert_log_sizes,
// --oneway_clients; bench/results/replay_insert_log.json.
void RunInsertLog(const Flags& flags, Report& report) {
  const Timing t{flags.Double("warmup"), flags.Double("seconds")};
  const FlywheelOptions fo{flags.Int("window"), flags.Int("sample_batch"), flags.Int("queue"),
                           flags.Int("sampler_cache")};
  const std::vector<int> clients = ClientCounts(flags, "oneway_clients");
  const std::vector<std::string> modes = {"off", "none", "interval", "always"};
  for (const auto& size : flags.List("insert_log_sizes")) {
    const Workload w = MakeWorkload(size);
    for (int n : clients) {
      std::map<std::string, Series> runs;
      for (int64_t r = 0; r < flags.Int("repeats"); ++r) {
        for (const auto& mode : modes) {
          TempDir dir("/tmp", "fw_insert_log");
          Point p = mode == "off" ? RunFlywheelInsert(w, n, fo, t)
                                  : RunFlywheelInsert(w, n, fo, t, dir.path() + "/ckpt", mode);
          std::printf("insert_log: %s, %d client(s), log %-8s %10.0f items/s\n", size.c_str(), n, mode.c_str(),
                      p.items_s);
          runs[mode].Add(p);
        }
      }
      const double off = runs["off"].Best();
      for (const auto& mode : modes) {
        if (mode == "off") continue;
        report.Add({absl::StrCat("insert-log/", size, "/", mode, "/c", n), "items/s", runs[mode].Best(),
                    "the same inserts without the log", off, runs[mode].Best() / off,
                    absl::StrFormat("sync %s; CPU/item %.1f vs %.1f us", mode, runs[mode].best.cpu_us_per_item,
                                    runs["off"].best.cpu_us_per_item),
                    {{"clients", n}, {"with_log", runs[mode].Json()}, {"without_log", runs["off"].Json()}}});
      }
    }
  }
}

void RunLatency(const Flags& flags, EchoServer& echo, Report& report) {
  const int64_t n = flags.Int("latency_items");
  const int64_t samples = flags.Int("latency_samples");
  auto table = MakeTable("latency", replay::NewPrioritizedSelector(0.6, 3), n, 0,
                         replay::RateLimiterOptions::MinSize(1));
  double t0 = Now();
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t key = static_cast<uint64_t>(i) + 1;
    const float v[4] = {static_cast<float>(key), 1, 2, 3};
    auto chunk = CheckResult(
        Chunk::Make(key, DataType::Tensor(TypeId::kFloat32, {4}), 1, v, format::Codec::kNone),
        "chunk");
    Check(table->Insert(Item{key,
                             0.1 + static_cast<double>(i % 997),
                             0,
                             {TrajectoryColumn{"obs", {std::move(chunk)}, 0, 1}}}),
          "insert");
  }
  std::printf("latency: filled %lld items in %.1f s\n", static_cast<long long>(n), Now() - t0);
  auto server = StartServer(table);
  replay::Client client(server->address());
  const auto [req_bytes, resp_bytes] =
      SampleMessageSizes("latency", CheckResult(table->Sample(), "sample"));
  echo.service().SetPayloads({std::string(resp_bytes, 'x')});
  auto stub = echo::Echo::NewStub(NewChannel(echo.address()));
  grpc::ClientContext ctx;
  auto stream = stub->Stream(&ctx);
  echo::EchoRequest raw_req;
  raw_req.set_mode(echo::EchoRequest::SEND);
  raw_req.set_count(1);
  raw_req.set_payload(std::string(req_bytes, 'x'));
  echo::EchoResponse raw_resp;
  float out[4];
  auto remote = [&] {
    auto r = CheckResult(client.Sample("latency", 1), "remote sample");
    Check(r.at(0).item->columns[0].Decode(out), "decode");
  };
  auto local = [&] {
    auto s = CheckResult(table->Sample(), "sample");
    Check(s.item->columns[0].Decode(out), "decode");
  };
  auto raw = [&] {
    if (!stream->Write(raw_req) || !stream->Read(&raw_resp)) {
      Check(FromGrpc(stream->Finish()), "raw round trip");
      Check(absl::UnavailableError("the stream ended"), "raw round trip");
    }
  };
  for (int i = 0; i < 2000; ++i) {  // warm up connections and caches
    remote();
    local();
    raw();
  }
  const replay::ServerStats s0 = server->stats();
  std::vector<double> fw(static_cast<size_t>(samples)), in(static_cast<size_t>(samples)),
      rt(static_cast<size_t>(samples));
  for (int64_t i = 0; i < samples; ++i) {
    double a = Now();
    remote();
    double b = Now();
    fw[static_cast<size_t>(i)] = (b - a) * 1e6;
    local();
    a = Now();
    in[static_cast<size_t>(i)] = (a - b) * 1e6;
    raw();
    rt[static_cast<size_t>(i)] = (Now() - a) * 1e6;
  }
  const replay::ServerStats s1 = server->stats();
  stream->WritesDone();
  Check(FromGrpc(stream->Finish()), "raw round trip stream");
  const double chunk_share =
      static_cast<double>(s1.chunks_sent - s0.chunks_sent) /
      static_cast<double>(std::max<int64_t>(1, s1.items_sent - s0.items_sent));
  for (double p : {50.0, 99.0, 99.9}) {
    const std::string ps = p == 99.9 ? "p999" : absl::StrCat("p", static_cast<int>(p));
    nlohmann::json d = {{"table_items", n},
                        {"samples", samples},
                        {"request_bytes", req_bytes},
                        {"response_bytes", resp_bytes},
                        {"chunks_sent_per_item", chunk_share},
                        {"remote_us", Percentile(fw, p)},
                        {"in_process_us", Percentile(in, p)},
                        {"raw_us", Percentile(rt, p)}};
    report.Add(
        {absl::StrCat("latency/remote-prioritized-", ps), "us", Percentile(fw, p),
         absl::StrFormat("raw gRPC round trip, %zu B up / %zu B down", req_bytes, resp_bytes),
         Percentile(rt, p), 0,
         absl::StrCat("Client::Sample(1) + decode, table of ", n,
                      "; ratio = flywheel/raw (lower is better)"),
         d});
    report.Add({absl::StrCat("latency/remote-vs-in-process-", ps), "us", Percentile(fw, p),
                "Table::Sample + decode in process", Percentile(in, p), 0,
                "ratio = remote/in-process", d});
  }
}

}  // namespace
}  // namespace flywheel::bench

int main(int argc, char** argv) {
  using namespace flywheel::bench;
  Flags flags(
      argc, argv,
      {{"benchmarks", "roundtrip,oneway,latency,insert_log,roundtrip_keep"},
       {"sizes", "small,large,large_none"},
       {"clients", "1,2,4,8"},
       {"oneway_clients", "1,4"},
       {"oneway_sizes", "large,large_none"},
       {"oneway_directions", "insert,sample"},
       {"insert_log_sizes", "small,large"},
       {"keep_sizes", "large,large_none"},
       {"seconds", "2"},
       {"warmup", "0.5"},
       {"repeats", "3"},
       {"window", "64"},
       {"sample_batch", "64"},
       {"queue", "1024"},
       {"sampler_cache", "0"},
       {"sample_only_items", "4096"},
       {"latency_items", "1000000"},
       {"latency_samples", "20000"},
       {"verbose", "0"},
       {"peer", "1"},
       {"out", SourceDir() + "/bench/results"}},
      "replay_service_bench [--benchmarks=roundtrip,oneway,latency,insert_log] "
      "[--sizes=small,large,large_none]\n"
      "  [--clients=1,2,4,8] [--seconds=S] [--repeats=N] [--verbose=1] [--out=DIR]\n"
      "  [--oneway_directions=insert,sample]\n"
      "  --verbose=1 prints CPU by thread per run; --peer=0 skips the raw runs (for profiling)");
  Report report("replay_service",
                "replay over loopback gRPC vs a raw gRPC bidi stream, same process");
  EchoServer echo;
  // The insert log's cost has its own results file.
  Report log_report("replay_insert_log", "replay inserts with the write-ahead log of inserts vs without, same run");
  bool log_ran = false;
  for (const auto& b : flags.List("benchmarks")) {
    if (b == "roundtrip") {
      RunRoundTrip(flags, echo, report, "roundtrip", flags.List("sizes"));
    } else if (b == "roundtrip_keep") {
      KeepFreedMemory();
      report.extra()["malloc_keep"] =
          "mallopt M_TRIM_THRESHOLD 1 GiB, M_TOP_PAD 64 MiB, M_MMAP_THRESHOLD 32 MiB";
      RunRoundTrip(flags, echo, report, "roundtrip-malloc-keep", flags.List("keep_sizes"));
    } else if (b == "oneway") {
      RunOneWay(flags, echo, report);
    } else if (b == "latency") {
      RunLatency(flags, echo, report);
    } else if (b == "insert_log") {
      RunInsertLog(flags, log_report);
      log_ran = true;
    } else {
      std::fprintf(stderr, "replay_service_bench: unknown benchmark '%s'\n", b.c_str());
      return 2;
    }
  }
  TempDir tmp;
  if (log_ran) log_report.Write(flags.Str("out"), MachineInfo(tmp.path()), flags.ToJson());
  if (!log_ran || flags.List("benchmarks").size() > 1) {
    report.Write(flags.Str("out"), MachineInfo(tmp.path()), flags.ToJson());
  }
  return 0;
}
