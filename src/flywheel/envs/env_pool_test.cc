#include "flywheel/envs/env_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "absl/synchronization/notification.h"
#include "flywheel/base/rng.h"
#include "flywheel/envs/registry.h"

namespace flywheel::envs {
namespace {

using ::testing::HasSubstr;

// Bound on any wait in these tests: a bug fails the test instead of hanging it.
constexpr absl::Duration kTestWait = absl::Seconds(10);

EnvPoolOptions Opts(int num_envs, int batch_size = 0, int num_threads = 1, uint64_t seed = 0) {
  EnvPoolOptions o;
  o.num_envs = num_envs;
  o.batch_size = batch_size;
  o.num_threads = num_threads;
  o.seed = seed;
  return o;
}

std::unique_ptr<EnvPool> MakePool(const char* id, EnvPoolOptions o,
                                  std::vector<EnvKwargs> kwargs = {}) {
  auto pool = EnvPool::Make(id, std::move(o), kwargs);
  EXPECT_TRUE(pool.ok()) << pool.status();
  return std::move(pool).value();
}

// One env's result, copied out of the pool's buffers.
struct Row {
  std::vector<float> obs;
  double reward = 0;
  bool terminated = false, truncated = false;
  std::vector<float> final_obs;
  bool has_final = false;
  bool operator==(const Row& o) const {
    return obs == o.obs && reward == o.reward && terminated == o.terminated &&
           truncated == o.truncated && final_obs == o.final_obs && has_final == o.has_final;
  }
};

Row RowOf(const EnvPool& pool, const BufferView& v, int row) {
  const int n = static_cast<int>(pool.observation_space().num_elements());
  Row r;
  const float* obs = static_cast<const float*>(v.obs) + row * n;
  r.obs.assign(obs, obs + n);
  r.reward = v.reward[row];
  r.terminated = v.terminated[row];
  r.truncated = v.truncated[row];
  if (v.has_final_obs != nullptr) {
    r.has_final = v.has_final_obs[row];
    const float* f = static_cast<const float*>(v.final_obs) + row * n;
    r.final_obs.assign(f, f + n);
  }
  return r;
}

// The action env `e` takes at its step `t` (any deterministic mix will do).
int64_t ActionFor(int e, int64_t t) { return static_cast<int64_t>(Mix64(e * 1000003ULL + t) & 1); }

// Runs `steps` sync steps of CartPole; returns every row, step-major.
std::vector<Row> RunSync(EnvPoolOptions o, int steps) {
  auto pool = MakePool("CartPole-v1", o);
  auto reset = pool->Reset();
  EXPECT_TRUE(reset.ok());
  std::vector<Row> rows;
  std::vector<int64_t> actions(o.num_envs);
  for (int t = 0; t < steps; ++t) {
    for (int e = 0; e < o.num_envs; ++e) actions[e] = ActionFor(e, t);
    auto b = pool->Step(actions.data());
    EXPECT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->view.rows, o.num_envs);
    for (int e = 0; e < o.num_envs; ++e) {
      EXPECT_EQ(b->view.env_id[e], e);  // env order
      rows.push_back(RowOf(*pool, b->view, e));
    }
  }
  return rows;
}

TEST(EnvPoolTest, OptionsAreValidated) {
  EXPECT_THAT(Opts(0).Validate().message(), HasSubstr("num_envs must be >= 1"));
  EXPECT_THAT(Opts(4, 5).Validate().message(),
              HasSubstr("batch_size must be in [1, num_envs = 4]"));
  EXPECT_THAT(Opts(4, 0, 0).Validate().message(), HasSubstr("num_threads must be in [1, 1024]"));
  auto o = Opts(4);
  o.max_episode_steps = {1, 2};
  EXPECT_THAT(o.Validate().message(),
              HasSubstr("max_episode_steps has 2 values; need 1 or num_envs = 4"));
  o.max_episode_steps = {-1};
  EXPECT_THAT(o.Validate().message(), HasSubstr("max_episode_steps[0] must be >= 0"));
  auto bad = EnvPool::Make("CartPole-v1", Opts(4, 8));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EnvPool::Make("NoSuchEnv-v0", Opts(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseAutoresetMode("same_step").value(), AutoresetMode::kSameStep);
  EXPECT_THAT(ParseAutoresetMode("disabled").status().message(), HasSubstr("next_step, same_step"));
}

TEST(EnvPoolTest, SyncResultsDoNotDependOnThreadCount) {
  const auto one = RunSync(Opts(64, 0, 1, 5), 300);
  EXPECT_EQ(RunSync(Opts(64, 0, 2, 5), 300), one);
  EXPECT_EQ(RunSync(Opts(64, 0, 4, 5), 300), one);
  EXPECT_NE(RunSync(Opts(64, 0, 2, 6), 300), one);  // the seed matters
  // More threads than envs: some home ranges are empty.
  EXPECT_EQ(RunSync(Opts(3, 0, 8, 5), 100), RunSync(Opts(3, 0, 1, 5), 100));
}

TEST(EnvPoolTest, EnvISeedsWithSeedPlusI) {
  auto pool = MakePool("Pendulum-v1", Opts(4, 0, 1, 100));
  auto all = pool->Reset();
  ASSERT_TRUE(all.ok());
  for (int i = 0; i < 4; ++i) {
    auto single = MakePool("Pendulum-v1", Opts(1, 0, 1, 100 + i));
    auto one = single->Reset();
    ASSERT_TRUE(one.ok());
    EXPECT_EQ(RowOf(*pool, all->view, i), RowOf(*single, one->view, 0)) << "env " << i;
  }
  // Reset(seeds) reseeds the same way; no seeds continues the streams.
  const uint64_t seed = 100;
  auto again = pool->Reset({&seed, 1});
  ASSERT_TRUE(again.ok());
  auto fresh = MakePool("Pendulum-v1", Opts(4, 0, 1, 100));
  auto first = fresh->Reset();
  ASSERT_TRUE(first.ok());
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(RowOf(*pool, again->view, i), RowOf(*fresh, first->view, i));
  auto next = fresh->Reset();
  ASSERT_TRUE(next.ok());
  EXPECT_NE(RowOf(*fresh, next->view, 0).obs, RowOf(*pool, again->view, 0).obs);
  // Per-env seeds.
  const std::vector<uint64_t> seeds = {103, 102, 101, 100};
  auto reversed = pool->Reset(seeds);
  ASSERT_TRUE(reversed.ok());
  auto plain = MakePool("Pendulum-v1", Opts(4, 0, 1, 100));
  auto forward = plain->Reset();
  ASSERT_TRUE(forward.ok());
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(RowOf(*pool, reversed->view, i), RowOf(*plain, forward->view, 3 - i));
}

TEST(EnvPoolTest, AsyncRecvReturnsBatchSizeRowsAndEveryEnvInOrder) {
  constexpr int kEnvs = 8, kBatch = 3, kStepsPerEnv = 60;
  for (int threads : {1, 2, 3}) {
    auto pool = MakePool("CartPole-v1", Opts(kEnvs, kBatch, threads, 11));
    ASSERT_TRUE(pool->Reset().ok());
    // What each env saw, to compare with the same env stepped alone.
    std::map<int, std::vector<Row>> got;
    std::vector<int64_t> t(kEnvs, 0);
    std::vector<int64_t> actions(kEnvs);
    for (int e = 0; e < kEnvs; ++e) actions[e] = ActionFor(e, 0);
    ASSERT_TRUE(pool->Send(actions.data()).ok());
    // Every received env is sent again at once, so all stay in flight.
    auto behind = [&] {
      for (int e = 0; e < kEnvs; ++e) {
        if (t[e] < kStepsPerEnv) return true;
      }
      return false;
    };
    while (behind()) {
      auto b = pool->Recv(kTestWait);
      ASSERT_TRUE(b.ok()) << b.status();
      ASSERT_EQ(b->view.rows, kBatch);
      std::vector<int32_t> ids;
      std::vector<int64_t> next;
      for (int r = 0; r < kBatch; ++r) {
        const int e = b->view.env_id[r];
        got[e].push_back(RowOf(*pool, b->view, r));
        ++t[e];
        ids.push_back(e);
        next.push_back(ActionFor(e, t[e]));
      }
      ASSERT_EQ(pool->pending(), kEnvs - kBatch);
      ASSERT_TRUE(pool->Send(next.data(), ids).ok());
    }
    // Every env got at least kStepsPerEnv results, and they are the results
    // of stepping that env alone with its own actions, in order.
    for (int e = 0; e < kEnvs; ++e) {
      ASSERT_GE(got[e].size(), static_cast<size_t>(kStepsPerEnv)) << "env " << e;
      auto single = MakePool("CartPole-v1", Opts(1, 0, 1, 11 + e));
      ASSERT_TRUE(single->Reset().ok());
      for (size_t k = 0; k < got[e].size(); ++k) {
        const int64_t a = ActionFor(e, static_cast<int64_t>(k));
        auto b = single->Step(&a);
        ASSERT_TRUE(b.ok());
        ASSERT_EQ(got[e][k], RowOf(*single, b->view, 0))
            << "env " << e << " step " << k << " threads " << threads;
      }
    }
  }
}

TEST(EnvPoolTest, PreviousBatchStaysIntactWhileTheCurrentOneIsHeld) {
  auto pool = MakePool("CartPole-v1", Opts(12, 4, 2, 3));
  ASSERT_TRUE(pool->Reset().ok());
  std::vector<int64_t> zeros(12, 0);
  ASSERT_TRUE(pool->Send(zeros.data()).ok());
  auto prev = pool->Recv(kTestWait);
  ASSERT_TRUE(prev.ok());
  std::vector<Row> prev_copy;
  for (int r = 0; r < 4; ++r) prev_copy.push_back(RowOf(*pool, prev->view, r));
  for (int i = 0; i < 50; ++i) {
    std::vector<int32_t> ids(prev->view.env_id, prev->view.env_id + 4);
    ASSERT_TRUE(pool->Send(zeros.data(), ids).ok());
    auto cur = pool->Recv(kTestWait);
    ASSERT_TRUE(cur.ok());
    for (int r = 0; r < 4; ++r)
      ASSERT_EQ(RowOf(*pool, prev->view, r), prev_copy[r]) << "batch " << i;
    prev = cur;
    prev_copy.clear();
    for (int r = 0; r < 4; ++r) prev_copy.push_back(RowOf(*pool, prev->view, r));
  }
}

TEST(EnvPoolTest, NextStepAutoresetAndTruncation) {
  auto o = Opts(2, 0, 1, 9);
  o.max_episode_steps = {5, 3};  // per env
  auto pool = MakePool("CartPole-v1", o);
  EXPECT_EQ(pool->max_episode_steps(0), 5);
  EXPECT_EQ(pool->max_episode_steps(1), 3);
  ASSERT_TRUE(pool->Reset().ok());
  // A twin env reset twice gives the observation the autoreset must return.
  auto twin = MakePool("CartPole-v1", Opts(1, 0, 1, 10));
  ASSERT_TRUE(twin->Reset().ok());
  auto second = twin->Reset();
  ASSERT_TRUE(second.ok());
  const Row second_start = RowOf(*twin, second->view, 0);
  std::vector<int64_t> a = {0, 1};
  std::vector<Row> env1;
  for (int t = 0; t < 5; ++t) {
    auto b = pool->Step(a.data());
    ASSERT_TRUE(b.ok());
    env1.push_back(RowOf(*pool, b->view, 1));
    EXPECT_EQ(b->view.truncated[0], t == 4);
  }
  EXPECT_TRUE(env1[2].truncated);  // its 3rd step
  EXPECT_FALSE(env1[2].terminated);
  EXPECT_EQ(env1[2].reward, 1.0);
  // The next step resets: reward 0, no flags, the new episode's first obs.
  EXPECT_FALSE(env1[3].truncated);
  EXPECT_FALSE(env1[3].terminated);
  EXPECT_EQ(env1[3].reward, 0.0);
  EXPECT_EQ(env1[3].obs, second_start.obs);
  EXPECT_FALSE(env1[4].truncated);
  EXPECT_EQ(env1[4].reward, 1.0);
}

TEST(EnvPoolTest, SameStepAutoresetPutsTheTerminalObservationInFinalObs) {
  auto next = MakePool("CartPole-v1", [] {
    auto o = Opts(3, 0, 2, 21);
    o.max_episode_steps = {40};
    return o;
  }());
  auto same = MakePool("CartPole-v1", [] {
    auto o = Opts(3, 0, 2, 21);
    o.max_episode_steps = {40};
    o.autoreset_mode = AutoresetMode::kSameStep;
    return o;
  }());
  ASSERT_TRUE(next->Reset().ok());
  ASSERT_TRUE(same->Reset().ok());
  // Always pushing right ends episodes (terminated) within ~10 steps; env 2
  // alternates and reaches the time limit instead.
  for (int t = 0; t < 120; ++t) {
    std::vector<int64_t> a = {1, 1, t % 2};
    auto bn = next->Step(a.data());
    ASSERT_TRUE(bn.ok());
    std::vector<Row> n(3);
    for (int e = 0; e < 3; ++e) n[e] = RowOf(*next, bn->view, e);
    std::vector<Row> s(3);
    auto bs = same->Step(a.data());
    ASSERT_TRUE(bs.ok());
    for (int e = 0; e < 3; ++e) s[e] = RowOf(*same, bs->view, e);
    for (int e = 0; e < 3; ++e) {
      ASSERT_EQ(s[e].reward, n[e].reward);
      ASSERT_EQ(s[e].terminated, n[e].terminated);
      ASSERT_EQ(s[e].truncated, n[e].truncated);
      if (n[e].terminated || n[e].truncated) {
        ASSERT_TRUE(s[e].has_final);
        ASSERT_EQ(s[e].final_obs, n[e].obs);  // the terminal observation
        // NEXT_STEP's reset step shows the observation SAME_STEP returned now.
        auto after = next->Step(a.data());
        ASSERT_TRUE(after.ok());
        ASSERT_EQ(RowOf(*next, after->view, e).obs, s[e].obs);
        ASSERT_EQ(RowOf(*next, after->view, e).reward, 0.0);
        return;  // the pools are no longer in step; one episode end is enough
      }
      ASSERT_FALSE(s[e].has_final);
      ASSERT_EQ(s[e].final_obs, std::vector<float>(4, 0.0f));
    }
  }
  FAIL() << "no episode ended in 120 steps";
}

TEST(EnvPoolTest, SameStepCountsFinalsAndTimeLimits) {
  auto o = Opts(4, 2, 2, 1);
  o.autoreset_mode = AutoresetMode::kSameStep;
  o.max_episode_steps = {10};
  auto pool = MakePool("Pendulum-v1", o);  // never terminates: every end is a truncation
  ASSERT_TRUE(pool->Reset().ok());
  std::vector<float> a(4, 0.5f);
  ASSERT_TRUE(pool->Send(a.data()).ok());
  std::map<int, int> steps;
  int ends = 0;
  for (int i = 0; i < 100; ++i) {
    auto b = pool->Recv(kTestWait);
    ASSERT_TRUE(b.ok());
    std::vector<int32_t> ids;
    for (int r = 0; r < 2; ++r) {
      const int e = b->view.env_id[r];
      ++steps[e];
      EXPECT_FALSE(b->view.terminated[r]);
      EXPECT_EQ(b->view.truncated[r], steps[e] % 10 == 0) << "env " << e << " step " << steps[e];
      EXPECT_EQ(b->view.has_final_obs[r], steps[e] % 10 == 0);
      ends += b->view.truncated[r];
      ids.push_back(e);
    }
    ASSERT_TRUE(pool->Send(a.data(), ids).ok());
  }
  EXPECT_GE(ends, 15);
}

TEST(EnvPoolTest, TerminatedAndTruncatedOnTheSameStep) {
  auto o = Opts(1);
  o.max_episode_steps = {1};
  auto pool = MakePool("CartPole-v1", o);
  const std::vector<double> edge = {2.39, 1.0, 0, 0};
  ASSERT_TRUE(pool->Reset({}, edge).ok());
  const int64_t a = 1;
  auto b = pool->Step(&a);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->view.terminated[0]);
  EXPECT_TRUE(b->view.truncated[0]);
}

TEST(EnvPoolTest, PerEnvKwargs) {
  std::vector<EnvKwargs> kwargs = {{{"g", 10.0}}, {{"g", 1.0}}, {}};
  auto pool = MakePool("Pendulum-v1", Opts(3), kwargs);
  const std::vector<double> start = {1.0, 0.0};
  auto r = pool->Reset({}, start);
  ASSERT_TRUE(r.ok());
  const std::vector<float> a(3, 0.0f);
  auto b = pool->Step(a.data());
  ASSERT_TRUE(b.ok());
  const Row e0 = RowOf(*pool, b->view, 0), e1 = RowOf(*pool, b->view, 1),
            e2 = RowOf(*pool, b->view, 2);
  EXPECT_EQ(e0, e2);                // g = 10 is the default
  EXPECT_LT(e1.obs[2], e0.obs[2]);  // weaker gravity, slower fall
  EXPECT_FLOAT_EQ(e1.obs[2], static_cast<float>(1.5 * std::sin(1.0) * 0.05));
  EXPECT_THAT(EnvPool::Make("Pendulum-v1", Opts(3), {{}, {}}).status().message(),
              HasSubstr("2 sets of env arguments; need 0, 1 or num_envs = 3"));
  EXPECT_THAT(EnvPool::Make("Pendulum-v1", Opts(2), {{{"G", 1}}}).status().message(),
              HasSubstr("env 0: Pendulum-v1: unknown argument 'G'"));
}

TEST(EnvPoolTest, ResetFromGivenStates) {
  auto pool = MakePool("MountainCar-v0", Opts(2));
  auto one = pool->Reset({}, std::vector<double>{-0.5, 0.01});
  ASSERT_TRUE(one.ok());
  const float* obs = static_cast<const float*>(one->view.obs);
  EXPECT_THAT(std::vector<float>(obs, obs + 4), ::testing::ElementsAre(-0.5f, 0.01f, -0.5f, 0.01f));
  auto two = pool->Reset({}, std::vector<double>{-0.5, 0.01, -0.4, -0.02});
  ASSERT_TRUE(two.ok());
  obs = static_cast<const float*>(two->view.obs);
  EXPECT_THAT(std::vector<float>(obs, obs + 4),
              ::testing::ElementsAre(-0.5f, 0.01f, -0.4f, -0.02f));
  EXPECT_THAT(pool->Reset({}, std::vector<double>{1, 2, 3}).status().message(),
              HasSubstr("state has 3 values; need 2 (one state for every env) or 4"));
  EXPECT_THAT(pool->Reset(std::vector<uint64_t>{1, 2, 3}).status().message(),
              HasSubstr("3 seeds; need 1 (env i gets seed + i) or num_envs = 2"));
}

TEST(EnvPoolTest, BadCallsAreErrorsNotCrashes) {
  auto pool = MakePool("CartPole-v1", Opts(4, 2));
  std::vector<int64_t> a = {0, 1, 0, 1};
  EXPECT_THAT(pool->Send(a.data()).message(), HasSubstr("call reset() first"));
  EXPECT_THAT(pool->Recv().status().message(), HasSubstr("call reset() first"));
  ASSERT_TRUE(pool->Reset().ok());
  auto none = pool->Recv();
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(), HasSubstr("0 steps are pending, fewer than batch_size = 2"));
  std::vector<int32_t> ids = {0, 9};
  EXPECT_THAT(pool->Send(a.data(), ids).message(),
              HasSubstr("env_ids[1] = 9 is out of range [0, 4)"));
  ids = {1, 1};
  EXPECT_THAT(pool->Send(a.data(), ids).message(), HasSubstr("env 1 appears twice"));
  std::vector<int64_t> bad = {0, 2};
  ids = {0, 1};
  EXPECT_THAT(pool->Send(bad.data(), ids).message(),
              HasSubstr("action 2 for env 1 is outside Discrete(2)"));
  bad = {-1, 0};
  EXPECT_EQ(pool->Send(bad.data(), ids).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->pending(), 0);  // nothing was queued by the failed sends
  ids = {2};
  ASSERT_TRUE(pool->Send(a.data(), ids).ok());
  EXPECT_THAT(pool->Send(a.data(), ids).message(), HasSubstr("env 2 is still stepping"));
  EXPECT_EQ(pool->Recv().status().code(), absl::StatusCode::kFailedPrecondition);  // 1 < 2 pending
  ids = {3};
  ASSERT_TRUE(pool->Send(a.data(), ids).ok());
  auto b = pool->Recv(kTestWait);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(std::set<int>(b->view.env_id, b->view.env_id + 2), (std::set<int>{2, 3}));
  pool->Close();
  EXPECT_THAT(pool->Send(a.data()).message(), HasSubstr("the pool is closed"));
  EXPECT_THAT(pool->Reset().status().message(), HasSubstr("the pool is closed"));
  pool->Close();  // idempotent

  auto sync = MakePool("CartPole-v1", Opts(4));
  ASSERT_TRUE(sync->Reset().ok());
  ids = {0, 1};
  EXPECT_THAT(sync->Send(a.data(), ids).message(), HasSubstr("in sync mode"));
  ids = {3, 2, 1, 0};  // any order of all envs is fine; results come in env order
  ASSERT_TRUE(sync->Send(a.data(), ids).ok());
  auto r = sync->Recv(kTestWait);
  ASSERT_TRUE(r.ok());
  for (int e = 0; e < 4; ++e) EXPECT_EQ(r->view.env_id[e], e);
}

// A Box-action env whose steps wait for a gate, or fail on request.
class GatedEnv final : public Env {
 public:
  GatedEnv(absl::Notification* gate, std::atomic<int>* fail_at) : gate_(gate), fail_at_(fail_at) {}
  const Space& observation_space() const override { return obs_; }
  const Space& action_space() const override { return act_; }
  int state_size() const override { return 1; }
  void Seed(uint64_t) override {}
  Status Reset(std::span<const double>, void* obs) override {
    t_ = 0;
    static_cast<float*>(obs)[0] = 0;
    return absl::OkStatus();
  }
  Status Step(const void* action, void* obs, StepResult* r) override {
    if (gate_ != nullptr && !gate_->WaitForNotificationWithTimeout(kTestWait)) {
      return absl::DeadlineExceededError("gate never opened");
    }
    if (++t_ == fail_at_->load()) return absl::InternalError("simulator exploded");
    static_cast<float*>(obs)[0] = *static_cast<const float*>(action) + static_cast<float>(t_);
    r->reward = 1;
    return absl::OkStatus();
  }
  void GetState(double* s) const override { s[0] = t_; }

 private:
  absl::Notification* gate_;
  std::atomic<int>* fail_at_;
  const Space obs_ = Space::UniformBox(-100, 100, {1});
  const Space act_ = Space::UniformBox(-1, 1, {1});
  int t_ = 0;
};

TEST(EnvPoolTest, RecvTimesOutWithoutLosingResults) {
  absl::Notification gate;
  std::atomic<int> never{-1};
  auto pool = EnvPool::Create([&](int) { return std::make_unique<GatedEnv>(&gate, &never); },
                              Opts(2, 1, 1));
  ASSERT_TRUE(pool.ok());
  ASSERT_TRUE((*pool)->Reset().ok());
  std::vector<float> a = {0.25f, 0.5f};
  ASSERT_TRUE((*pool)->Send(a.data()).ok());
  auto early = (*pool)->Recv(absl::Milliseconds(5));
  EXPECT_EQ(early.status().code(), absl::StatusCode::kDeadlineExceeded);
  gate.Notify();
  std::set<float> got;
  for (int i = 0; i < 2; ++i) {
    auto b = (*pool)->Recv(kTestWait);
    ASSERT_TRUE(b.ok()) << b.status();
    got.insert(static_cast<const float*>(b->view.obs)[0]);
  }
  EXPECT_EQ(got, (std::set<float>{1.25f, 1.5f}));
}

TEST(EnvPoolTest, AnEnvFailureIsReportedAndStopsThePool) {
  std::atomic<int> fail_at{3};
  for (int threads : {1, 2}) {
    auto pool = EnvPool::Create([&](int) { return std::make_unique<GatedEnv>(nullptr, &fail_at); },
                                Opts(4, 0, threads));
    ASSERT_TRUE(pool.ok());
    ASSERT_TRUE((*pool)->Reset().ok());
    std::vector<float> a(4, 0.0f);
    ASSERT_TRUE((*pool)->Step(a.data()).ok());
    ASSERT_TRUE((*pool)->Step(a.data()).ok());
    auto failed = (*pool)->Step(a.data());
    EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
    EXPECT_THAT(failed.status().message(), HasSubstr(": step: simulator exploded"));
    EXPECT_THAT((*pool)->Reset().status().message(), HasSubstr("the pool failed: env "));
  }
}

TEST(EnvPoolTest, FactoryEnvsMustAgreeOnSpaces) {
  auto mixed = EnvPool::Create(
      [](int i) { return MakeEnv(i == 0 ? "Pendulum-v1" : "MountainCarContinuous-v0"); }, Opts(2));
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mixed.status().message(), HasSubstr("every env of a pool must have the same spaces"));
  auto null = EnvPool::Create(
      [](int) -> Result<std::unique_ptr<Env>> { return std::unique_ptr<Env>(); }, Opts(1));
  EXPECT_THAT(null.status().message(), HasSubstr("the factory returned null"));
  auto error = EnvPool::Create(
      [](int i) {
        return MakeEnv("CartPole-v1", {{"tau", i == 1 ? -1.0 : 0.02}});
      },
      Opts(2));
  EXPECT_THAT(error.status().message(),
              HasSubstr("env 1: CartPole-v1: tau must be finite and > 0"));
}

TEST(EnvPoolTest, ResetDrainsStepsInFlight) {
  for (int threads : {1, 2}) {
    auto pool = MakePool("Acrobot-v1", Opts(6, 2, threads));
    ASSERT_TRUE(pool->Reset().ok());
    std::vector<int64_t> a(6, 1);
    ASSERT_TRUE(pool->Send(a.data()).ok());
    auto r = pool->Reset();  // 6 steps in flight: waited for and dropped
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(pool->pending(), 0);
    ASSERT_TRUE(pool->Send(a.data()).ok());  // every env is idle again
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(pool->Recv(kTestWait).ok());
  }
}

}  // namespace
}  // namespace flywheel::envs
