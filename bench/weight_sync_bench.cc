// Weight sync: seconds from a learner's publish to every rollout engine
// serving the new version, against a raw loopback gRPC stream of the same
// bytes in the same pattern (docs/benchmarks.md, "Weight sync").
//
// flywheel: the learner publishes the model's float32 tensors in chunks
// (WeightClient::PublishChunked) to the weight service; each of --engines
// engines waits in WeightClient::FetchChunked, receives the version and swaps
// it in (Engine::UpdateWeights: conversion into the engine's layout). The
// clock runs from the publish call to the last engine's swap.
//
// Raw peer (bench/echo.proto): the same bytes uploaded as chunk-sized
// messages on one stream, then downloaded by --engines streams at once
// (store and forward, as the service does), with no manifest, no store and
// no conversion.
//
//   weight_sync_bench [--model=DIR] [--engines=2] [--runs=3] [--chunk_bytes=4194304] [--out=bench/results]
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench_util.h"
#include "echo.grpc.pb.h"
#include "echo_server.h"
#include "flywheel/base/half.h"
#include "flywheel/llm/engine.h"
#include "flywheel/llm/safetensors.h"
#include "flywheel/replay/service/server.h"
#include "flywheel/rl/service/weight_service.h"

namespace fb = flywheel::bench;
using flywheel::bench::Check;
using flywheel::bench::CheckResult;
namespace llm = flywheel::llm;
namespace rl = flywheel::rl;

namespace {

constexpr int64_t kMaxMessage = int64_t{64} << 20;

std::string DefaultModel() {
  const char* env = std::getenv("FLYWHEEL_MODELS");
  if (env != nullptr && *env) return absl::StrCat(env, "/smollm2-135m-instruct");
  const char* home = std::getenv("HOME");
  return absl::StrCat(home == nullptr ? "/root" : home, "/.cache/flywheel/models/smollm2-135m-instruct");
}

// The checkpoint's tensors as float32, as a learner publishes them.
std::vector<rl::Tensor> Float32Tensors(const std::string& dir) {
  auto ck = CheckResult(llm::Checkpoint::Open(dir), "open the checkpoint (run `make model`)");
  std::vector<rl::Tensor> out;
  for (const llm::TensorView* t : ck->tensors()) {
    rl::Tensor r;
    r.name = t->name;
    r.type = flywheel::format::DataType::Tensor(flywheel::format::TypeId::kFloat32, t->shape);
    const int64_t n = t->elements();
    r.data.resize(static_cast<size_t>(n) * 4);
    float* dst = reinterpret_cast<float*>(r.data.data());
    for (int64_t i = 0; i < n; ++i) {
      if (t->dtype == llm::DType::kF32) {
        std::memcpy(dst + i, t->data + 4 * i, 4);
      } else {  // BF16
        uint16_t h;
        std::memcpy(&h, t->data + 2 * i, 2);
        dst[i] = flywheel::Bf16ToFloat(h);
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<const llm::TensorView*> Views(const rl::Weights& w, std::vector<llm::TensorView>* storage) {
  storage->clear();
  storage->reserve(w.tensors.size());
  for (const rl::Tensor& t : w.tensors) {
    llm::TensorView v;
    v.name = t.name;
    v.dtype = llm::DType::kF32;
    v.shape = t.type.shape;
    v.data = reinterpret_cast<const uint8_t*>(t.data.data());
    v.bytes = t.data.size();
    storage->push_back(std::move(v));
  }
  std::vector<const llm::TensorView*> out;
  for (const auto& v : *storage) out.push_back(&v);
  return out;
}

struct SyncTiming {
  double total = 0;    // publish call -> last engine swapped
  double publish = 0;  // the publish call
  double fetch = 0;    // slowest engine: publish returned -> fetched
  double swap = 0;     // slowest engine's UpdateWeights
};

SyncTiming FlywheelSync(const std::string& address, const std::vector<rl::Tensor>& tensors,
                        std::vector<std::unique_ptr<llm::Engine>>& engines, std::vector<rl::WeightsRef>& last,
                        int64_t version, int64_t chunk) {
  rl::ChunkedOptions o;
  o.chunk_bytes = chunk;
  std::atomic<double> publish_done{0};
  std::vector<double> fetched(engines.size()), swapped(engines.size()), swap_s(engines.size());
  std::vector<std::thread> threads;
  std::atomic<int> waiting{0};
  for (size_t e = 0; e < engines.size(); ++e) {
    threads.emplace_back([&, e] {
      rl::WeightClient client(address);
      ++waiting;
      rl::TransferStats st;
      // The version fetched last time lends its buffers, as a rollout
      // worker's loop does.
      auto w = CheckResult(client.FetchChunked("policy", version - 1, absl::Seconds(60), o, &st, std::move(last[e])),
                           "engine fetch");
      if (w == nullptr || w->version != version) {
        std::fprintf(stderr, "weight_sync_bench: engine %zu got no version %lld\n", e, static_cast<long long>(version));
        std::exit(1);
      }
      fetched[e] = fb::Now();
      std::vector<llm::TensorView> storage;
      Check(engines[e]->UpdateWeights(Views(*w, &storage), w->version), "engine swap");
      swapped[e] = fb::Now();
      swap_s[e] = swapped[e] - fetched[e];
      last[e] = std::move(w);
    });
  }
  while (waiting.load() < static_cast<int>(engines.size())) std::this_thread::yield();
  absl::SleepFor(absl::Milliseconds(200));  // the engines' fetches are waiting on the server
  rl::WeightClient learner(address);
  const double t0 = fb::Now();
  Check(learner.PublishChunked("policy", tensors, version, o).status(), "publish");
  publish_done = fb::Now();
  for (auto& t : threads) t.join();
  SyncTiming out;
  for (size_t e = 0; e < engines.size(); ++e) {
    out.total = std::max(out.total, swapped[e] - t0);
    out.fetch = std::max(out.fetch, fetched[e] - publish_done.load());
    out.swap = std::max(out.swap, swap_s[e]);
  }
  out.publish = publish_done.load() - t0;
  return out;
}

std::shared_ptr<grpc::Channel> Channel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(kMaxMessage));
  args.SetMaxSendMessageSize(static_cast<int>(kMaxMessage));
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

// The raw peer: upload `total` bytes in `chunk` messages on one stream
// (acknowledged per message, read by a second thread), then `engines`
// streams download them at once. Seconds.
double RawSync(fb::EchoServer& server, const std::string& payload, int64_t total, int engines) {
  namespace echo = flywheel::bench::echo;
  const int32_t chunks = static_cast<int32_t>((total + static_cast<int64_t>(payload.size()) - 1) /
                                              static_cast<int64_t>(payload.size()));
  const double t0 = fb::Now();
  {
    auto stub = echo::Echo::NewStub(Channel(server.address()));
    grpc::ClientContext ctx;
    auto stream = stub->Stream(&ctx);
    std::thread acks([&] {
      echo::EchoResponse r;
      for (int32_t i = 0; i < chunks && stream->Read(&r); ++i) {
      }
    });
    echo::EchoRequest req;
    req.set_mode(echo::EchoRequest::ACK);
    for (int32_t i = 0; i < chunks; ++i) {
      req.set_payload(payload);  // a copy per message, as the chunked client gathers one
      if (!stream->Write(req)) break;
    }
    acks.join();
    stream->WritesDone();
    Check(flywheel::Status(stream->Finish().ok() ? absl::OkStatus() : absl::UnavailableError("raw upload")), "raw upload");
  }
  std::vector<std::thread> downloads;
  for (int e = 0; e < engines; ++e) {
    downloads.emplace_back([&] {
      auto stub = echo::Echo::NewStub(Channel(server.address()));
      grpc::ClientContext ctx;
      auto stream = stub->Stream(&ctx);
      echo::EchoRequest req;
      req.set_mode(echo::EchoRequest::SEND);
      req.set_count(chunks);
      stream->Write(req);
      stream->WritesDone();
      echo::EchoResponse r;
      std::string sink;
      while (stream->Read(&r)) sink.swap(*r.mutable_payload());  // received and kept, as a fetch keeps its bytes
      stream->Finish();
    });
  }
  for (auto& t : downloads) t.join();
  return fb::Now() - t0;
}

}  // namespace

int main(int argc, char** argv) {
  fb::Flags flags(argc, argv,
                  {{"model", DefaultModel()}, {"engines", "2"}, {"runs", "3"}, {"chunk_bytes", "4194304"}, {"out", ""},
                   {"threads", "1"}},
                  "weight_sync_bench [--model=DIR] [--engines=2] [--runs=3] [--chunk_bytes=N] [--threads=1] [--out=DIR]");
  const std::string dir = flags.Str("model");
  const int engines_n = static_cast<int>(flags.Int("engines"));
  const int runs = static_cast<int>(flags.Int("runs"));
  const int64_t chunk = flags.Int("chunk_bytes");
  std::printf("loading %s ...\n", dir.c_str());
  const std::vector<rl::Tensor> tensors = Float32Tensors(dir);
  int64_t total = 0;
  for (const auto& t : tensors) total += static_cast<int64_t>(t.data.size());
  llm::EngineOptions eo;
  eo.threads = static_cast<int>(flags.Int("threads"));
  eo.kv_cache_bytes = int64_t{16} << 20;
  std::vector<std::unique_ptr<llm::Engine>> engines;
  for (int e = 0; e < engines_n; ++e) engines.push_back(CheckResult(llm::Engine::Open(dir, eo, 1), "open an engine"));

  auto store = std::make_shared<rl::WeightStore>();
  flywheel::replay::ServerOptions so;
  so.services.push_back(std::make_shared<rl::WeightService>(store));
  auto server = CheckResult(flywheel::replay::Server::Start(std::move(so)), "start the weight server");
  fb::EchoServer echo_server(kMaxMessage);
  const std::string payload(static_cast<size_t>(std::min(chunk, total)), 'w');
  echo_server.service().SetPayloads({payload});

  std::vector<double> ours, raw, publish, fetch, swap;
  std::vector<rl::WeightsRef> last(engines.size());
  for (int r = 0; r < runs; ++r) {
    const SyncTiming t = FlywheelSync(server->address(), tensors, engines, last, r + 2, chunk);
    ours.push_back(t.total);
    publish.push_back(t.publish);
    fetch.push_back(t.fetch);
    swap.push_back(t.swap);
    raw.push_back(RawSync(echo_server, payload, total, engines_n));
    std::printf("run %d: flywheel %.3f s (publish %.3f, fetch %.3f, swap %.3f), raw stream %.3f s\n", r + 1, t.total,
                t.publish, t.fetch, t.swap, raw.back());
  }
  for (const auto& e : engines) {
    if (e->weight_version() != runs + 1) {
      std::fprintf(stderr, "weight_sync_bench: an engine serves version %lld, not %d\n",
                   static_cast<long long>(e->weight_version()), runs + 1);
      return 1;
    }
  }
  const double best = *std::min_element(ours.begin(), ours.end());
  const double best_raw = *std::min_element(raw.begin(), raw.end());
  fb::Report report("weight_sync", "publish -> every engine serving the new version vs a raw loopback gRPC stream");
  fb::Comparison c;
  c.name = absl::StrFormat("publish to %d engines serving, %.0f MB", engines_n, total / 1e6);
  c.unit = "s";
  c.value = best;
  c.baseline = "raw gRPC: upload once, download per engine, same bytes and chunks";
  c.baseline_value = best_raw;
  c.ratio = best_raw / best;
  c.note = "ratio = raw seconds / flywheel seconds (>= 0.5 is the target)";
  c.details = {{"bytes", total},
               {"engines", engines_n},
               {"chunk_bytes", chunk},
               {"flywheel_s", ours},
               {"raw_s", raw},
               {"publish_s", publish},
               {"fetch_s", fetch},
               {"swap_s", swap},
               {"flywheel_GBps_per_engine", total / best / 1e9}};
  report.Add(c);
  if (!flags.Str("out").empty()) report.Write(flags.Str("out"), fb::MachineInfo("/tmp"), flags.ToJson());
  return 0;
}
