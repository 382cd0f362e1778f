#include "flywheel/envs/internal/env_slot.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace flywheel::internal_envs {
namespace {

// A scripted env: episodes of `episode_len` steps (terminated on the last;
// 0 = never). Its one float observation is 100 * episode + step within it
// (episode 1 starts at the first Reset), its reward the action. Step number
// `fail_at` (counting every step) fails.
class ScriptedEnv : public envs::Env {
 public:
  explicit ScriptedEnv(int episode_len, int fail_at = -1)
      : episode_len_(episode_len), fail_at_(fail_at) {}

  const envs::Space& observation_space() const override { return obs_space_; }
  const envs::Space& action_space() const override { return action_space_; }
  int state_size() const override { return 0; }
  void Seed(uint64_t) override {}
  Status Reset(std::span<const double>, void* obs) override {
    ++episode_;
    t_ = 0;
    Write(obs);
    return absl::OkStatus();
  }
  Status Step(const void* action, void* obs, envs::StepResult* r) override {
    if (steps_++ == fail_at_) return absl::InternalError("scripted failure");
    const int64_t a = *static_cast<const int64_t*>(action);
    actions.push_back(a);
    ++t_;
    Write(obs);
    r->reward = static_cast<double>(a);
    r->terminated = episode_len_ > 0 && t_ == episode_len_;
    return absl::OkStatus();
  }
  void GetState(double*) const override {}

  int episode() const { return episode_; }
  std::vector<int64_t> actions;  // every action Step took, in order

 private:
  void Write(void* obs) const {
    *static_cast<float*>(obs) = static_cast<float>(100 * episode_ + t_);
  }

  const envs::Space obs_space_ = envs::Space::UniformBox(-1e9, 1e9, {1});
  const envs::Space action_space_ = envs::Space::Discrete(1000);
  const int episode_len_;
  const int fail_at_;
  int episode_ = 0;
  int t_ = 0;
  int steps_ = 0;
};

// What one Advance() wrote to its row, and returned.
struct StepOutcome {
  double reward = 0;
  bool terminated = false, truncated = false, final = false;
  Status status;
};

// Drives one slot as EnvPool does, into a one-row buffer.
struct Driver {
  Driver(int episode_len, int64_t max_steps, bool same_step, int fail_at = -1) {
    auto env = std::make_unique<ScriptedEnv>(episode_len, fail_at);
    scripted = env.get();
    slot.env = std::move(env);
    slot.obs_bytes = sizeof(float);
    slot.max_steps = max_steps;
    EXPECT_TRUE(slot.env->Reset({}, &obs).ok());  // EnvPool::Reset
    view.rows = 1;
    view.obs = &obs;
    view.reward = &reward;
    view.terminated = &terminated;
    view.truncated = &truncated;
    if (same_step) {
      view.final_obs = &final_obs;
      view.has_final_obs = &has_final;
    }
  }
  // One pool step with action `a`; the row starts as garbage.
  StepOutcome Advance(int64_t a) {
    obs = final_obs = -7.0f;
    reward = -7.0;
    terminated = truncated = has_final = true;
    actions.Store(0, reinterpret_cast<const std::byte*>(&a));
    StepOutcome out;
    out.status = slot.Advance(actions, 0, view, 0);
    out.reward = reward;
    out.terminated = terminated;
    out.truncated = truncated;
    out.final = view.has_final_obs != nullptr && has_final;
    return out;
  }

  EnvSlot slot;
  ScriptedEnv* scripted = nullptr;
  envs::BufferView view;
  const envs::Space action_space = envs::Space::Discrete(1000);
  std::vector<std::byte> action_memory =
      std::vector<std::byte>(ActionSlots::SlotBytes(action_space));
  ActionSlots actions{action_space, action_memory.data()};
  float obs = 0, final_obs = 0;
  double reward = 0;
  bool terminated = false, truncated = false, has_final = false;
};

TEST(EnvSlotTest, NextStepReportsTheEndThenResetsOnTheFollowingStepIgnoringItsAction) {
  Driver d(/*episode_len=*/3, /*max_steps=*/0, /*same_step=*/false);
  for (int t = 1; t <= 3; ++t) {
    const StepOutcome r = d.Advance(10 + t);
    ASSERT_TRUE(r.status.ok());
    EXPECT_EQ(d.obs, 100 + t);
    EXPECT_EQ(r.reward, 10 + t);
    EXPECT_EQ(r.terminated, t == 3);
    EXPECT_FALSE(r.truncated);
    EXPECT_FALSE(r.final);
    EXPECT_EQ(d.slot.elapsed, t);
  }
  EXPECT_TRUE(d.slot.needs_reset);
  // The autoreset step: the new episode's first observation, reward 0, no
  // flags, and the env does not see the action.
  const StepOutcome reset = d.Advance(99);
  EXPECT_EQ(d.obs, 200);
  EXPECT_EQ(reset.reward, 0);
  EXPECT_FALSE(reset.terminated || reset.truncated || reset.final);
  EXPECT_EQ(d.scripted->actions.size(), 3u);
  EXPECT_EQ(d.slot.elapsed, 0);
  EXPECT_FALSE(d.slot.needs_reset);
  const StepOutcome next = d.Advance(5);
  EXPECT_EQ(d.obs, 201);
  EXPECT_EQ(next.reward, 5);
  EXPECT_EQ(d.scripted->actions, (std::vector<int64_t>{11, 12, 13, 5}));
}

TEST(EnvSlotTest, TheTimeLimitTruncatesAndCountsFromEachEpisodesStart) {
  Driver d(/*episode_len=*/0, /*max_steps=*/2, /*same_step=*/false);
  std::vector<bool> truncated;
  std::vector<float> obs;
  for (int i = 0; i < 6; ++i) {
    const StepOutcome r = d.Advance(1);
    ASSERT_TRUE(r.status.ok());
    EXPECT_FALSE(r.terminated);
    truncated.push_back(r.truncated);
    obs.push_back(d.obs);
  }
  // step, step (limit), reset, step, step (limit), reset
  EXPECT_EQ(truncated, (std::vector<bool>{false, true, false, false, true, false}));
  EXPECT_EQ(obs, (std::vector<float>{101, 102, 200, 201, 202, 300}));
}

TEST(EnvSlotTest, TerminatedAndTruncatedOnTheSameStep) {
  Driver d(/*episode_len=*/2, /*max_steps=*/2, /*same_step=*/false);
  EXPECT_FALSE(d.Advance(0).truncated);
  const StepOutcome r = d.Advance(0);
  EXPECT_TRUE(r.terminated);
  EXPECT_TRUE(r.truncated);
  EXPECT_TRUE(d.slot.needs_reset);
}

TEST(EnvSlotTest, SameStepResetsInTheEndingStepAndKeepsTheTerminalObservation) {
  Driver d(/*episode_len=*/2, /*max_steps=*/0, /*same_step=*/true);
  StepOutcome r = d.Advance(4);
  EXPECT_EQ(d.obs, 101);
  EXPECT_FALSE(r.final);
  EXPECT_EQ(d.final_obs, 0.0f);  // zeroed, not left as it was
  r = d.Advance(6);
  ASSERT_TRUE(r.status.ok());
  EXPECT_TRUE(r.terminated);
  EXPECT_TRUE(r.final);
  EXPECT_EQ(r.reward, 6);        // the ending step's reward
  EXPECT_EQ(d.final_obs, 102);   // the terminal observation
  EXPECT_EQ(d.obs, 200);         // the new episode's first
  EXPECT_EQ(d.slot.elapsed, 0);
  EXPECT_FALSE(d.slot.needs_reset);
  // No extra reset step: the next step is the new episode's first.
  r = d.Advance(8);
  EXPECT_EQ(d.obs, 201);
  EXPECT_EQ(r.reward, 8);
  EXPECT_FALSE(r.final);
  EXPECT_EQ(d.final_obs, 0.0f);
  EXPECT_EQ(d.scripted->episode(), 2);
}

TEST(EnvSlotTest, SameStepTimeLimitCountsTheNewEpisodeFromZero) {
  Driver d(/*episode_len=*/0, /*max_steps=*/3, /*same_step=*/true);
  std::vector<bool> finals;
  for (int i = 0; i < 7; ++i) {
    const StepOutcome r = d.Advance(0);
    EXPECT_EQ(r.truncated, r.final);
    finals.push_back(r.final);
  }
  EXPECT_EQ(finals, (std::vector<bool>{false, false, true, false, false, true, false}));
  EXPECT_EQ(d.obs, 301);
}

TEST(EnvSlotTest, AStepErrorIsReturnedAndDoesNotAutoreset) {
  Driver d(/*episode_len=*/1, /*max_steps=*/0, /*same_step=*/true, /*fail_at=*/1);
  EXPECT_TRUE(d.Advance(0).final);
  const StepOutcome r = d.Advance(0);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(r.final);
  EXPECT_EQ(d.scripted->episode(), 2);  // the initial reset and one autoreset only
}

}  // namespace
}  // namespace flywheel::internal_envs
