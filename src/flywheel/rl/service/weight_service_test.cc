// The weight store served beside replay tables on one replay server port.
#include "flywheel/rl/service/weight_service.h"

#include <gtest/gtest.h>

#include <thread>

#include "flywheel/replay/service/client.h"

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
    replay::TableOptions t;
    t.name = "replay";
    replay::ServerOptions o;
    o.tables.push_back(std::shared_ptr<replay::Table>(*replay::Table::Create(std::move(t))));
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

}  // namespace
}  // namespace flywheel::rl
