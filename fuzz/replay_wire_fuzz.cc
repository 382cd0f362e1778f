// Fuzzes the replay service with malformed wire messages
// (docs/protocol/replay.md): a real replay::Server on a unix socket in this
// process gets the fuzzer's messages over real streams, and must answer
// each with an error or a result, never crash, hang or leak. Also fuzzes the
// chunk decoding the server and clients share.
//
// Input: byte 0 picks the mode; the rest is a sequence of messages, each a
// 2-byte little-endian length and that many bytes of serialized protobuf
// (messages that do not parse are skipped).
//   mode 0: InsertStreamRequest messages on one insert stream
//   mode 1: SampleStreamRequest messages on one sample stream
//   mode 2: one MutatePrioritiesRequest, then Reset/Close of a named table
//   mode 3: proto::Chunk messages decoded as the server decodes them
// The tables are reset after every input, so inputs are independent.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/replay/service/server.h"
#include "flywheel/replay/service/wire.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/grpcpp.h"
#include "replay.grpc.pb.h"

namespace {

using namespace flywheel;
using namespace flywheel::replay;

struct Fixture {
  std::vector<std::shared_ptr<ReplayTable>> tables;
  std::unique_ptr<Server> server;
  std::unique_ptr<proto::ReplayService::Stub> stub;
};

std::shared_ptr<ReplayTable> MakeTable(const std::string& name, bool prioritized, bool signature) {
  ReplayTableOptions o;
  o.name = name;
  o.sampler = prioritized ? NewPrioritizedSelector(0.7) : NewFifoSelector();
  o.max_size = 64;  // bounded memory whatever the fuzzer inserts
  o.rate_limiter = RateLimiterOptions::MinSize(1);
  o.watchdog = absl::ZeroDuration();
  if (signature) {
    o.signature = Signature{{{"obs", *format::DataType::Parse("float32[2]")},
                             {"action", *format::DataType::Parse("int32")}}};
  }
  auto t = ReplayTable::Create(std::move(o));
  if (!t.ok()) std::abort();
  return std::shared_ptr<ReplayTable>(*std::move(t));
}

Fixture& Get() {
  static Fixture* f = [] {
    auto* fx = new Fixture;
    fx->tables = {MakeTable("fifo", false, true), MakeTable("prio", true, false)};
    ServerOptions o;
    static std::string socket = "/tmp/fw_replay_wire_fuzz." + std::to_string(getpid());
    std::atexit([] { unlink(socket.c_str()); });
    o.address = "unix:" + socket;
    o.tables = fx->tables;
    o.max_message_bytes = 1 << 20;
    auto s = Server::Start(std::move(o));
    if (!s.ok()) std::abort();
    fx->server = *std::move(s);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(1 << 20);
    args.SetMaxSendMessageSize(1 << 20);
    fx->stub = proto::ReplayService::NewStub(
        grpc::CreateCustomChannel(fx->server->address(), grpc::InsecureChannelCredentials(), args));
    return fx;
  }();
  return *f;
}

// A valid insert: chunks of 4 steps of obs (float32[2]) and action (int32),
// and items over them for both tables.
proto::InsertStreamRequest ValidInsert(ItemKey first_key) {
  proto::InsertStreamRequest req;
  float obs[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  int32_t action[4] = {0, 1, 2, 3};
  auto o = Chunk::Make(first_key * 10 + 1, *format::DataType::Parse("float32[2]"), 4, obs);
  auto a = Chunk::Make(first_key * 10 + 2, *format::DataType::Parse("int32"), 4, action, format::Codec::kZstd);
  if (!o.ok() || !a.ok()) std::abort();
  internal_service::ChunkToProto(**o, req.add_chunks());
  internal_service::ChunkToProto(**a, req.add_chunks());
  for (int i = 0; i < 4; ++i) {
    proto::Item* item = req.add_items();
    item->set_table(i % 2 ? "prio" : "fifo");
    item->set_key(first_key + i);
    item->set_priority(0.5 + i);
    for (const auto& [name, chunk] : {std::pair{"obs", (*o)->key()}, std::pair{"action", (*a)->key()}}) {
      proto::Column* c = item->add_columns();
      c->set_name(name);
      c->add_chunk_keys(chunk);
      c->set_offset(i / 2);
      c->set_length(2);
    }
  }
  return req;
}

void AddMessage(std::string* out, const google::protobuf::MessageLite& m) {
  const std::string b = m.SerializeAsString();
  out->push_back(static_cast<char>(b.size() & 0xff));
  out->push_back(static_cast<char>(b.size() >> 8));
  *out += b;
}

// FW_FUZZ_WRITE_SEEDS=DIR ./replay_wire_fuzz writes the seed corpus
// (fuzz/corpus/replay_wire/) and exits.
void WriteSeeds(const std::string& dir) {
  auto write = [&](const std::string& name, char mode, const std::vector<const google::protobuf::MessageLite*>& ms) {
    std::string body(1, mode);
    for (const auto* m : ms) AddMessage(&body, *m);
    FILE* f = std::fopen((dir + "/" + name).c_str(), "wb");
    if (f == nullptr) std::abort();
    std::fwrite(body.data(), 1, body.size(), f);
    std::fclose(f);
  };
  const proto::InsertStreamRequest ins = ValidInsert(100);
  proto::InsertStreamRequest release;
  release.add_release_chunk_keys(1001);
  *release.add_items() = ins.items(0);
  write("insert", 0, {&ins, &release});
  proto::SampleStreamRequest s1, s2;
  s1.set_table("fifo");
  s1.set_num_samples(2);
  s1.set_chunk_cache_capacity(2);
  s2.set_table("prio");
  s2.set_num_samples(3);
  s2.set_flexible(true);
  write("sample", 1, {&s1, &s2});
  proto::MutatePrioritiesRequest m;
  m.set_table("prio");
  m.add_update_keys(1);
  m.add_update_priorities(2.5);
  m.add_delete_keys(3);
  write("mutate", 2, {&m});
  write("chunks", 3, {&ins.chunks(0), &ins.chunks(1)});
}

template <typename M>
std::vector<M> Messages(const uint8_t* data, size_t size) {
  std::vector<M> out;
  size_t i = 0;
  while (i + 2 <= size && out.size() < 16) {
    const size_t n = data[i] | (static_cast<size_t>(data[i + 1]) << 8);
    i += 2;
    if (n > size - i) break;
    M m;
    if (m.ParseFromArray(data + i, static_cast<int>(n))) out.push_back(std::move(m));
    i += n;
  }
  return out;
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return ctx;
}

void Insert(Fixture& f, std::vector<proto::InsertStreamRequest> reqs) {
  auto ctx = Context();
  auto stream = f.stub->InsertStream(ctx.get());
  for (auto& r : reqs) {
    // Bounded waits: a full table must not stall the input.
    r.set_timeout_ms(r.timeout_ms() == 0 ? 5 : 1 + r.timeout_ms() % 20);
    if (!stream->Write(r)) break;
  }
  stream->WritesDone();
  proto::InsertStreamResponse resp;
  while (stream->Read(&resp)) {
  }
  stream->Finish().ok();
}

void Sample(Fixture& f, std::vector<proto::SampleStreamRequest> reqs) {
  Insert(f, {ValidInsert(1)});  // something to sample
  auto ctx = Context();
  auto stream = f.stub->SampleStream(ctx.get());
  for (auto& r : reqs) {
    r.set_timeout_ms(r.timeout_ms() == 0 ? 5 : 1 + r.timeout_ms() % 20);
    r.set_num_samples(r.num_samples() % 128);  // keeps negative and zero counts
    if (!stream->Write(r)) break;
    proto::SampleStreamResponse resp;
    while (stream->Read(&resp) && !resp.end_of_batch()) {
    }
  }
  stream->WritesDone();
  proto::SampleStreamResponse resp;
  while (stream->Read(&resp)) {
  }
  stream->Finish().ok();
}

void Unary(Fixture& f, std::vector<proto::MutatePrioritiesRequest> reqs) {
  Insert(f, {ValidInsert(1)});
  for (const auto& r : reqs) {
    proto::MutatePrioritiesResponse resp;
    auto ctx = Context();
    f.stub->MutatePriorities(ctx.get(), r, &resp).ok();
    proto::InfoResponse info;
    auto ictx = Context();
    f.stub->Info(ictx.get(), proto::InfoRequest(), &info).ok();
  }
}

void DecodeChunks(std::vector<proto::Chunk> chunks) {
  for (auto& pc : chunks) {
    auto c = internal_service::ChunkFromProto(&pc);
    if (!c.ok()) continue;
    if ((*c)->uncompressed_bytes() > (size_t{64} << 20)) continue;
    TrajectoryColumn col;
    col.name = "x";
    col.chunks = {*c};
    col.length = (*c)->num_steps();
    if (!col.Validate().ok()) continue;
    std::string out((*c)->uncompressed_bytes(), '\0');
    col.Decode(out.data()).IgnoreError();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Invalid UTF-8 in string fields is refused (good) and logged (noise).
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int, const std::string&) {});
  if (const char* dir = std::getenv("FW_FUZZ_WRITE_SEEDS")) {
    WriteSeeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  Fixture& f = Get();
  const uint8_t* body = data + 1;
  const size_t n = size - 1;
  switch (data[0] % 4) {
    case 0: Insert(f, Messages<proto::InsertStreamRequest>(body, n)); break;
    case 1: Sample(f, Messages<proto::SampleStreamRequest>(body, n)); break;
    case 2: Unary(f, Messages<proto::MutatePrioritiesRequest>(body, n)); break;
    default: DecodeChunks(Messages<proto::Chunk>(body, n)); break;
  }
  for (auto& t : f.tables) t->Reset();
  return 0;
}
