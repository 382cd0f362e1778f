// The C++ actor against a real replay + weight server on loopback: the
// unrolls it streams (shapes, chaining, behaviour log-probs, autoreset
// flags), on-policy waiting, async mode, and how it stops.
#include "flywheel/rl/actor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "flywheel/replay/selectors/interface.h"
#include "flywheel/replay/service/server.h"
#include "flywheel/rl/service/weight_service.h"

namespace flywheel::rl {
namespace {

Tensor Floats(const std::string& name, std::vector<int64_t> shape, std::vector<float> v) {
  Tensor t;
  t.name = name;
  t.type = format::DataType::Tensor(format::TypeId::kFloat32, std::move(shape));
  t.data.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  return t;
}

// obs_dim -> 8 -> out, small deterministic weights.
std::vector<Tensor> Mlp(int64_t obs_dim, int64_t out, bool gaussian = false, float scale = 0.3f) {
  std::vector<float> w0(8 * obs_dim), b0(8), w1(out * 8), b1(out);
  for (size_t i = 0; i < w0.size(); ++i) w0[i] = scale * std::sin(1.0f + static_cast<float>(i));
  for (size_t i = 0; i < w1.size(); ++i) w1[i] = scale * std::cos(2.0f + static_cast<float>(i));
  std::vector<Tensor> t = {Floats("layers.0.weight", {8, obs_dim}, w0), Floats("layers.0.bias", {8}, b0),
                           Floats("layers.1.weight", {out, 8}, w1), Floats("layers.1.bias", {out}, b1)};
  if (gaussian) t.push_back(Floats("log_std", {out}, std::vector<float>(out, -0.5f)));
  return t;
}

struct Server {
  std::shared_ptr<WeightStore> store = std::make_shared<WeightStore>();
  std::shared_ptr<replay::ReplayTable> table;
  std::unique_ptr<replay::Server> server;
  explicit Server(int64_t queue = 8) {
    replay::ReplayTableOptions t;
    t.name = "unrolls";
    t.sampler = replay::NewFifoSelector();
    t.remover = replay::NewFifoSelector();
    t.max_size = queue;
    t.max_times_sampled = 1;
    t.rate_limiter = replay::RateLimiterOptions::Queue(queue);
    table = std::shared_ptr<replay::ReplayTable>(*replay::ReplayTable::Create(std::move(t)));
    replay::ServerOptions o;
    o.tables.push_back(table);
    o.services.push_back(std::make_shared<WeightService>(store));
    auto s = replay::Server::Start(std::move(o));
    EXPECT_TRUE(s.ok()) << s.status();
    server = *std::move(s);
  }
};

ActorOptions Options(const Server& s, const std::string& env, int64_t unroll, int num_envs) {
  ActorOptions o;
  o.address = s.server->address();
  o.env_id = env;
  o.num_envs = num_envs;
  o.unroll_length = unroll;
  o.env_seed = 7;
  o.policy_seed = 11;
  o.connect_timeout = absl::Seconds(10);
  return o;
}

// One decoded column of a sampled item.
template <typename T>
std::vector<T> Column(const replay::SampledItem& s, const std::string& name) {
  for (const auto& c : s.item->columns) {
    if (c.name != name) continue;
    std::vector<T> out(static_cast<size_t>(c.length * c.step_type().fixed_width()) / sizeof(T));
    EXPECT_TRUE(c.Decode(out.data()).ok());
    return out;
  }
  ADD_FAILURE() << "no column " << name;
  return {};
}

const replay::TrajectoryColumn* Find(const replay::SampledItem& s, const std::string& name) {
  for (const auto& c : s.item->columns) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

replay::SampledItem SampleOne(replay::ReplayTable& t) {
  auto r = t.SampleBatch(1, false, absl::Seconds(20));
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok() || r->empty()) return {};
  return (*r)[0];
}

TEST(ActorTest, OnPolicyUnrollsChainCarryBehaviourLogProbsAndWaitForNewWeights) {
  Server s;
  ASSERT_TRUE(s.store->Publish("policy", Mlp(4, 2)).ok());
  const int64_t kT = 40;
  const int kE = 3;
  ActorOptions o = Options(s, "CartPole-v1", kT, kE);
  o.max_unrolls = 2;
  std::atomic<bool> stop{false};
  ActorStats last;
  Status result;
  std::thread actor([&] {
    result = RunActor(o, stop, [&](const ActorStats& st) { last = st; });
    if (!result.ok()) s.table->Close();  // fail fast instead of timing out below
  });

  replay::SampledItem first = SampleOne(*s.table);
  ASSERT_NE(first.item, nullptr);
  // Types and lengths.
  EXPECT_EQ(Find(first, "obs")->step_type().ToString(), "float32[3,4]");
  EXPECT_EQ(Find(first, "action")->step_type().ToString(), "int64[3]");
  EXPECT_EQ(Find(first, "terminated")->step_type().ToString(), "bool[3]");
  EXPECT_EQ(Find(first, "version")->step_type().ToString(), "int64");
  for (const char* c : {"obs", "action", "logprob", "reward", "terminated", "truncated", "next_obs",
                        "episode_return", "version"}) {
    EXPECT_EQ(Find(first, c)->length, kT) << c;
  }
  auto obs = Column<float>(first, "obs");
  auto action = Column<int64_t>(first, "action");
  auto logprob = Column<float>(first, "logprob");
  auto reward = Column<float>(first, "reward");
  auto term = Column<uint8_t>(first, "terminated");
  auto next_obs = Column<float>(first, "next_obs");
  auto ep_return = Column<float>(first, "episode_return");
  auto version = Column<int64_t>(first, "version");
  for (int64_t v : version) EXPECT_EQ(v, 1);
  // Behaviour log-probs are the policy's, for the observation acted on.
  auto policy = *MlpPolicy::FromWeights(**s.store->Get("policy"), Activation::kTanh, PolicyHead::kCategorical);
  int episodes_ended = 0;
  std::vector<float> running(kE, 0);
  for (int64_t t = 0; t < kT; ++t) {
    float lp[kE];
    policy.LogProb(&obs[t * kE * 4], kE, &action[t * kE], nullptr, lp);
    for (int i = 0; i < kE; ++i) {
      EXPECT_NEAR(lp[i], logprob[t * kE + i], 1e-5) << "t=" << t << " env " << i;
      EXPECT_TRUE(action[t * kE + i] == 0 || action[t * kE + i] == 1);
      EXPECT_EQ(reward[t * kE + i], 1.0f);
      running[i] += reward[t * kE + i];
      const float* fin = &next_obs[(t * kE + i) * 4];
      const float* next = t + 1 < kT ? &obs[((t + 1) * kE + i) * 4] : nullptr;
      if (term[t * kE + i]) {
        ++episodes_ended;
        // Same-step autoreset: next_obs is the terminal observation (pole
        // or cart out of bounds), the next step acts on a fresh start.
        EXPECT_TRUE(std::fabs(fin[0]) > 2.4f || std::fabs(fin[2]) > 0.2094f) << "t=" << t;
        for (int k = 0; next != nullptr && k < 4; ++k) EXPECT_LE(std::fabs(next[k]), 0.05f);
        EXPECT_EQ(ep_return[t * kE + i], running[i]);
        running[i] = 0;
      } else {
        for (int k = 0; next != nullptr && k < 4; ++k) EXPECT_EQ(fin[k], next[k]);
        EXPECT_TRUE(std::isnan(ep_return[t * kE + i]));
      }
    }
  }
  EXPECT_GT(episodes_ended, 0) << "40 steps of a near-random CartPole policy end some episode";

  // On-policy: no second unroll until a newer version exists.
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(s.table->Info().size, 0);
  ASSERT_TRUE(s.store->Publish("policy", Mlp(4, 2, false, 0.5f)).ok());
  replay::SampledItem second = SampleOne(*s.table);
  ASSERT_NE(second.item, nullptr);
  for (int64_t v : Column<int64_t>(second, "version")) EXPECT_EQ(v, 2);
  // The second unroll starts where the first ended.
  auto obs2 = Column<float>(second, "obs");
  for (int i = 0; i < kE; ++i) {
    if (term[(kT - 1) * kE + i]) continue;
    for (int k = 0; k < 4; ++k) EXPECT_EQ(obs2[i * 4 + k], next_obs[((kT - 1) * kE + i) * 4 + k]);
  }
  actor.join();
  EXPECT_TRUE(result.ok()) << result;
  EXPECT_EQ(last.unrolls, 2);
  EXPECT_EQ(last.env_steps, 2 * kT * kE);
  EXPECT_EQ(last.policy_version, 2);
  EXPECT_EQ(last.weight_updates, 1);
}

TEST(ActorTest, AsyncActorKeepsActingAndPicksUpNewWeightsBetweenUnrolls) {
  Server s(16);
  ASSERT_TRUE(s.store->Publish("policy", Mlp(4, 2)).ok());
  ActorOptions o = Options(s, "CartPole-v1", 8, 2);
  o.on_policy = false;
  o.max_unrolls = 3;
  std::atomic<bool> stop{false};
  Status r = RunActor(o, stop);
  ASSERT_TRUE(r.ok()) << r;
  EXPECT_EQ(s.table->Info().size, 3);  // never waited for weights
  ASSERT_TRUE(s.store->Publish("policy", Mlp(4, 2, false, 0.5f)).ok());
  o.max_unrolls = 2;
  ASSERT_TRUE(RunActor(o, stop).ok());
  auto items = s.table->SampleBatch(5, false, absl::Seconds(5));
  ASSERT_TRUE(items.ok()) << items.status();
  ASSERT_EQ(items->size(), 5u);
  EXPECT_EQ(Column<int64_t>((*items)[2], "version")[0], 1);
  EXPECT_EQ(Column<int64_t>((*items)[3], "version")[0], 2);
}

TEST(ActorTest, GaussianActorStoresUnclippedActionsAndTheirLogProbs) {
  Server s;
  ASSERT_TRUE(s.store->Publish("policy", Mlp(3, 1, /*gaussian=*/true, 2.0f)).ok());
  ActorOptions o = Options(s, "Pendulum-v1", 16, 4);
  o.max_unrolls = 1;
  std::atomic<bool> stop{false};
  Status r = RunActor(o, stop);
  ASSERT_TRUE(r.ok()) << r;
  replay::SampledItem item = SampleOne(*s.table);
  ASSERT_NE(item.item, nullptr);
  EXPECT_EQ(Find(item, "action")->step_type().ToString(), "float32[4,1]");
  auto obs = Column<float>(item, "obs");
  auto action = Column<float>(item, "action");
  auto logprob = Column<float>(item, "logprob");
  auto policy = *MlpPolicy::FromWeights(**s.store->Get("policy"), Activation::kTanh, PolicyHead::kGaussian);
  bool outside = false;
  for (int64_t t = 0; t < 16; ++t) {
    float lp[4];
    policy.LogProb(&obs[t * 4 * 3], 4, nullptr, &action[t * 4], lp);
    for (int i = 0; i < 4; ++i) {
      EXPECT_NEAR(lp[i], logprob[t * 4 + i], 1e-4);
      outside = outside || std::fabs(action[t * 4 + i]) > 2.0f;
    }
  }
  EXPECT_TRUE(outside) << "large weights give means beyond the action bounds; stored actions are unclipped";
}

TEST(ActorTest, WeightsThatDoNotFitTheEnvAreRefusedNamingBoth) {
  Server s;
  ASSERT_TRUE(s.store->Publish("policy", Mlp(3, 2)).ok());
  ActorOptions o = Options(s, "CartPole-v1", 4, 2);
  std::atomic<bool> stop{false};
  Status r = RunActor(o, stop);
  EXPECT_TRUE(absl::IsInvalidArgument(r)) << r;
  EXPECT_NE(r.message().find("maps 3 inputs to 2 outputs"), std::string::npos) << r;
  EXPECT_NE(r.message().find("'CartPole-v1' has 4 observation values"), std::string::npos) << r;
}

TEST(ActorTest, StopsCleanlyWhenStoppedWhileWaitingOrWhenTheTableCloses) {
  Server s(2);
  std::atomic<bool> stop{false};
  Status result;
  ActorOptions o = Options(s, "CartPole-v1", 4, 2);
  o.on_policy = false;
  std::thread waiting([&] { result = RunActor(o, stop); });  // no weights yet
  absl::SleepFor(absl::Milliseconds(300));
  stop = true;
  waiting.join();
  EXPECT_TRUE(result.ok()) << result;
  EXPECT_EQ(s.table->Info().size, 0);

  // A full queue, then the table closes: the actor ends without an error.
  ASSERT_TRUE(s.store->Publish("policy", Mlp(4, 2)).ok());
  stop = false;
  std::thread blocked([&] { result = RunActor(o, stop); });
  for (int i = 0; i < 200 && s.table->Info().size < 2; ++i) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(s.table->Info().size, 2);
  absl::SleepFor(absl::Milliseconds(100));
  s.table->Close();
  blocked.join();
  EXPECT_TRUE(result.ok()) << result;
}

}  // namespace
}  // namespace flywheel::rl
