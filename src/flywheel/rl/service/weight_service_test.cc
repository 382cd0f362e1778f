// The weight store served beside replay tables on one replay server port.
#include "flywheel/rl/service/weight_service.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#include "flywheel/replay/service/client.h"
#include "grpcpp/grpcpp.h"
#include "weights.grpc.pb.h"

namespace flywheel::rl {
namespace {

Tensor Floats(const std::string& name, std::vector<float> v) {
  Tensor t;
  t.name = name;
  t.type = format::DataType::Tensor(format::TypeId::kFloat32, {static_cast<int64_t>(v.size())});
  t.data.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  return t;
}

struct Fixture {
  std::shared_ptr<WeightStore> store = std::make_shared<WeightStore>();
  std::unique_ptr<replay::Server> server;
  Fixture() {
    replay::ReplayTableOptions t;
    t.name = "replay";
    replay::ServerOptions o;
    o.tables.push_back(std::shared_ptr<replay::ReplayTable>(*replay::ReplayTable::Create(std::move(t))));
    o.services.push_back(std::make_shared<WeightService>(store));
    auto s = replay::Server::Start(std::move(o));
    EXPECT_TRUE(s.ok()) << s.status();
    server = *std::move(s);
  }
};

TEST(WeightServiceTest, PublishFetchNotModifiedAndListOnTheReplayPort) {
  Fixture f;
  WeightClient learner(f.server->address());
  WeightClient actor(f.server->address());
  auto none = actor.Fetch("policy", 0);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, nullptr);  // never published: nothing newer
  auto v = learner.Publish("policy", {Floats("l0.weight", {1, 2, 3}), Floats("l0.bias", {0.5f})});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 1);
  EXPECT_EQ(f.store->Version("policy"), 1);
  auto w = actor.Fetch("policy", 0);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_NE(*w, nullptr);
  EXPECT_EQ((*w)->version, 1);
  ASSERT_NE((*w)->Find("l0.weight"), nullptr);
  EXPECT_EQ((*w)->Find("l0.weight")->type.ToString(), "float32[3]");
  const float* wt = reinterpret_cast<const float*>((*w)->Find("l0.weight")->data.data());
  EXPECT_EQ(wt[2], 3.0f);
  auto same = actor.Fetch("policy", 1);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(*same, nullptr);  // current: no bytes sent
  auto list = actor.List();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0], (std::pair<std::string, int64_t>{"policy", 1}));
  // The replay service on the same port still works.
  replay::Client replay_client(f.server->address());
  auto info = replay_client.Info();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ((*info)[0].info.name, "replay");
}

TEST(WeightServiceTest, FetchWaitsForTheNextVersion) {
  Fixture f;
  WeightClient client(f.server->address());
  ASSERT_TRUE(client.Publish("p", {Floats("w", {1})}).ok());
  std::thread learner([&] {
    absl::SleepFor(absl::Milliseconds(150));
    ASSERT_TRUE(f.store->Publish("p", {Floats("w", {2})}).ok());
  });
  const absl::Time start = absl::Now();
  auto w = client.Fetch("p", 1, absl::Seconds(20));
  learner.join();
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_NE(*w, nullptr);
  EXPECT_EQ((*w)->version, 2);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  auto timeout = client.Fetch("p", 2, absl::Milliseconds(200));
  ASSERT_TRUE(timeout.ok()) << timeout.status();
  EXPECT_EQ(*timeout, nullptr);
}

TEST(WeightServiceTest, BadPublishesAreRefusedNamingTheTensor) {
  Fixture f;
  WeightClient client(f.server->address());
  Tensor bad = Floats("w", {1, 2});
  bad.data.resize(3);
  auto s = client.Publish("p", {bad});
  EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << s.status();
  ASSERT_TRUE(client.Publish("p", {Floats("w", {1})}, 5).ok());
  auto stale = client.Publish("p", {Floats("w", {1})}, 3);
  EXPECT_TRUE(absl::IsFailedPrecondition(stale.status())) << stale.status();
  EXPECT_NE(std::string(stale.status().message()).find("current version 5"), std::string::npos);
}

// A loopback TCP proxy to `target` ("127.0.0.1:port") that, once, cuts
// every connection when `cut_after` bytes have passed through it (both
// directions counted), after calling `on_cut`. Later connections pass.
class CuttingProxy {
 public:
  CuttingProxy(const std::string& target, int64_t cut_after, std::function<void()> on_cut = {})
      : target_port_(std::stoi(target.substr(target.rfind(':') + 1))), cut_after_(cut_after), on_cut_(std::move(on_cut)) {
    listen_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(listen_, 16), 0);
    socklen_t len = sizeof a;
    getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    accept_ = std::thread([this] { AcceptLoop(); });
  }
  ~CuttingProxy() {
    stop_ = true;
    shutdown(listen_, SHUT_RDWR);
    close(listen_);
    accept_.join();
    std::lock_guard<std::mutex> l(mu_);
    for (auto& t : pipes_) t.join();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  bool cut() const { return cut_; }

 private:
  void AcceptLoop() {
    for (;;) {
      const int c = accept(listen_, nullptr, nullptr);
      if (c < 0) return;
      if (stop_) {
        close(c);
        return;
      }
      std::lock_guard<std::mutex> l(mu_);
      pipes_.emplace_back([this, c] { Pipe(c); });
    }
  }
  void Pipe(int client) {
    const int server = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(target_port_));
    if (connect(server, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      close(client);
      close(server);
      return;
    }
    char buf[1 << 16];
    pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
    while (!stop_) {
      if (poll(fds, 2, 100) < 0) break;
      bool done = false;
      for (int i = 0; i < 2 && !done; ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = read(fds[i].fd, buf, sizeof buf);
        if (n <= 0) {
          done = true;
          break;
        }
        if (!cut_ && (passed_ += n) > cut_after_ && !cut_.exchange(true)) {
          if (on_cut_) on_cut_();
          done = true;  // drop this connection mid-stream
          break;
        }
        for (ssize_t off = 0; off < n;) {
          const ssize_t w = write(fds[1 - i].fd, buf + off, static_cast<size_t>(n - off));
          if (w <= 0) {
            done = true;
            break;
          }
          off += w;
        }
      }
      if (done) break;
    }
    shutdown(client, SHUT_RDWR);
    shutdown(server, SHUT_RDWR);
    close(client);
    close(server);
  }

  int target_port_;
  int64_t cut_after_;
  std::function<void()> on_cut_;
  int listen_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false}, cut_{false};
  std::atomic<int64_t> passed_{0};
  std::thread accept_;
  std::mutex mu_;
  std::vector<std::thread> pipes_;
};

// `n` pseudo-random float32 tensors of `floats` values each.
std::vector<Tensor> Big(int n, int64_t floats, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Tensor> out;
  for (int i = 0; i < n; ++i) {
    std::vector<float> v(static_cast<size_t>(floats) + static_cast<size_t>(i));  // odd sizes: chunks span tensors
    for (float& x : v) x = static_cast<float>(rng()) / 4e9f;
    out.push_back(Floats("layer" + std::to_string(i) + ".weight", std::move(v)));
  }
  return out;
}

void ExpectSame(const std::vector<Tensor>& want, const Weights& got) {
  ASSERT_EQ(got.tensors.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got.tensors[i].name, want[i].name);
    EXPECT_EQ(got.tensors[i].type.ToString(), want[i].type.ToString());
    EXPECT_TRUE(got.tensors[i].data == want[i].data) << want[i].name;
  }
}

int64_t Bytes(const std::vector<Tensor>& ts) {
  int64_t n = 0;
  for (const Tensor& t : ts) n += static_cast<int64_t>(t.data.size());
  return n;
}

TEST(WeightServiceChunkedTest, PastTheMessageLimitInChunksSpanningTensors) {
  Fixture f;
  // A client whose messages are limited to 1 MiB moves 24 MB.
  WeightClient client(f.server->address(), int64_t{1} << 20);
  const auto tensors = Big(6, 1'000'000, 1);
  ChunkedOptions o;
  o.chunk_bytes = 300'000;  // not a divisor of any tensor
  TransferStats up;
  auto v = client.PublishChunked("lm", tensors, 0, o, &up);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 1);
  EXPECT_EQ(up.bytes, Bytes(tensors));
  EXPECT_EQ(up.wire_bytes, up.bytes);
  EXPECT_EQ(up.resumes, 0);
  EXPECT_GE(up.chunks, up.bytes / 300'000);
  ExpectSame(tensors, **f.store->Get("lm"));
  TransferStats down;
  auto w = client.FetchChunked("lm", 0, absl::ZeroDuration(), o, &down);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_NE(*w, nullptr);
  EXPECT_EQ((*w)->version, 1);
  ExpectSame(tensors, **w);
  EXPECT_EQ(down.bytes, up.bytes);
  EXPECT_GT(down.seconds, 0);
  // Current: nothing sent.
  auto same = client.FetchChunked("lm", 1, absl::ZeroDuration(), o, &down);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(*same, nullptr);
  EXPECT_EQ(down.bytes, 0);
  // The unary Fetch of the same version exceeds this client's limit ...
  auto unary = client.Fetch("lm", 0);
  EXPECT_TRUE(absl::IsResourceExhausted(unary.status())) << unary.status();
  // ... while the unary Publish switches to chunks on its own.
  auto v2 = client.Publish("lm", Big(3, 500'000, 2));
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(*v2, 2);
}

TEST(WeightServiceChunkedTest, AFetchThatLosesItsConnectionHalfWayResumes) {
  Fixture f;
  const auto tensors = Big(4, 2'000'000, 3);  // 32 MB
  ASSERT_TRUE(f.store->Publish("lm", tensors).ok());
  CuttingProxy proxy(f.server->address(), Bytes(tensors) / 2);
  WeightClient client(proxy.address());
  ChunkedOptions o;
  o.chunk_bytes = 1 << 20;
  TransferStats st;
  auto w = client.FetchChunked("lm", 0, absl::ZeroDuration(), o, &st);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(proxy.cut());
  EXPECT_GE(st.resumes, 1);
  EXPECT_EQ(st.restarts, 0);
  EXPECT_EQ(st.bytes, Bytes(tensors));
  EXPECT_LT(st.wire_bytes, 2 * st.bytes);  // resumed from the byte reached, not from zero
  ExpectSame(tensors, **w);
}

TEST(WeightServiceChunkedTest, AFetchWhoseVersionIsDroppedMidwayBeginsAgainAtTheLatest) {
  Fixture f;
  const auto v1 = Big(4, 1'000'000, 4);
  const auto v3 = Big(4, 1'000'000, 5);
  ASSERT_TRUE(f.store->Publish("lm", v1).ok());
  // While the connection is down, two versions are published: the store
  // keeps the latest and the one before, so version 1 is gone.
  CuttingProxy proxy(f.server->address(), Bytes(v1) / 2, [&] {
    ASSERT_TRUE(f.store->Publish("lm", Big(1, 10, 6)).ok());
    ASSERT_TRUE(f.store->Publish("lm", v3).ok());
  });
  WeightClient client(proxy.address());
  TransferStats st;
  auto w = client.FetchChunked("lm", 0, absl::ZeroDuration(), {}, &st);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(st.restarts, 1);
  EXPECT_EQ((*w)->version, 3);
  ExpectSame(v3, **w);
  // With one version published meanwhile, the begun one is still held.
  EXPECT_TRUE(f.store->GetExact("lm", 2).ok());
  EXPECT_TRUE(absl::IsNotFound(f.store->GetExact("lm", 1).status()));
}

TEST(WeightServiceChunkedTest, APublishThatLosesItsConnectionHalfWayResumes) {
  Fixture f;
  const auto tensors = Big(4, 2'000'000, 7);
  CuttingProxy proxy(f.server->address(), Bytes(tensors) / 2);
  WeightClient client(proxy.address());
  ChunkedOptions o;
  o.chunk_bytes = 1 << 20;
  TransferStats st;
  auto v = client.PublishChunked("lm", tensors, 0, o, &st);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(proxy.cut());
  EXPECT_GE(st.resumes, 1);
  EXPECT_LT(st.wire_bytes, 2 * st.bytes);
  EXPECT_EQ(*v, 1);
  ExpectSame(tensors, **f.store->Get("lm"));
}

TEST(WeightServiceChunkedTest, HostileUploadsAreRefusedBeforeAllocating) {
  Fixture f;
  auto channel = grpc::CreateChannel(f.server->address(), grpc::InsecureChannelCredentials());
  auto stub = proto::WeightStoreService::NewStub(channel);
  auto send = [&](const proto::PublishChunk& first, const std::vector<std::string>& more) {
    grpc::ClientContext ctx;
    proto::PublishResponse resp;
    auto w = stub->PublishChunked(&ctx, &resp);
    w->Write(first);
    int64_t off = static_cast<int64_t>(first.data().size());
    for (const std::string& d : more) {
      proto::PublishChunk c;
      c.set_offset(off);
      c.set_data(d);
      off += static_cast<int64_t>(d.size());
      w->Write(c);
    }
    w->WritesDone();
    return w->Finish();
  };
  proto::PublishChunk m;
  m.set_upload_id("u1");
  m.mutable_manifest()->set_model("lm");
  auto* t = m.mutable_manifest()->add_tensors();
  t->set_name("w");
  t->set_type("float32[1000000,1000000]");
  t->set_bytes(int64_t{4} << 40);
  m.mutable_manifest()->set_total_bytes(int64_t{4} << 40);
  grpc::Status s = send(m, {});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("too large"), std::string::npos) << s.error_message();
  // 65 tensors of 16 GiB each: past the 1 TiB a version may hold.
  {
    proto::PublishChunk huge;
    huge.set_upload_id("u0");
    huge.mutable_manifest()->set_model("lm");
    for (int i = 0; i < 65; ++i) {
      auto* ti = huge.mutable_manifest()->add_tensors();
      ti->set_name("w" + std::to_string(i));
      ti->set_type("float32[65536,65536]");
      ti->set_bytes(int64_t{16} << 30);
    }
    huge.mutable_manifest()->set_total_bytes(int64_t{65} * (int64_t{16} << 30));
    s = send(huge, {});
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_NE(s.error_message().find("more than"), std::string::npos) << s.error_message();
  }

  t->set_type("float32[4]");
  t->set_bytes(12);
  m.mutable_manifest()->set_total_bytes(12);
  m.set_upload_id("u2");
  s = send(m, {});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("needs 16"), std::string::npos) << s.error_message();

  t->set_bytes(16);
  m.mutable_manifest()->set_total_bytes(16);
  m.set_upload_id("u3");
  m.set_data(std::string(8, 'x'));
  s = send(m, {std::string(12, 'y')});  // 20 bytes for 16
  EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE) << s.error_message();

  m.set_upload_id("u4");
  s = send(m, {});  // 8 of 16, then the stream ends: kept for a resume
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED) << s.error_message();
  EXPECT_NE(s.error_message().find("ended at byte 8 of 16"), std::string::npos) << s.error_message();
  m.set_offset(8);
  m.set_data(std::string(8, 'z'));
  s = send(m, {});
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(f.store->Version("lm"), 1);
  EXPECT_EQ((*f.store->Get("lm"))->tensors[0].data, std::string(8, 'x') + std::string(8, 'z'));
}

}  // namespace
}  // namespace flywheel::rl
