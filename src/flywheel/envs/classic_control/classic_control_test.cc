// Unit checks of the classic control envs: constants, termination rules,
// rewards, reset ranges and arguments. The full dynamics are compared with
// an independent Python implementation of Gymnasium's equations in
// tests/python/test_envs.py.
#include "flywheel/envs/classic_control/classic_control.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "flywheel/envs/registry.h"

namespace flywheel::envs {
namespace {

using ::testing::HasSubstr;
constexpr double kPi = std::numbers::pi;

std::unique_ptr<Env> Make(const char* id, EnvKwargs kwargs = {}) {
  auto env = MakeEnv(id, kwargs);
  EXPECT_TRUE(env.ok()) << env.status();
  return std::move(env).value();
}

std::vector<double> State(const Env& env) {
  std::vector<double> s(env.state_size());
  env.GetState(s.data());
  return s;
}

struct Out {
  std::vector<float> obs;
  StepResult r;
};

Out Step(Env& env, int64_t discrete) {
  Out o;
  o.obs.resize(env.observation_space().num_elements());
  EXPECT_TRUE(env.Step(&discrete, o.obs.data(), &o.r).ok());
  return o;
}

Out StepBox(Env& env, float a) {
  Out o;
  o.obs.resize(env.observation_space().num_elements());
  EXPECT_TRUE(env.Step(&a, o.obs.data(), &o.r).ok());
  return o;
}

std::vector<float> Reset(Env& env, std::vector<double> state = {}) {
  std::vector<float> obs(env.observation_space().num_elements());
  EXPECT_TRUE(env.Reset(state, obs.data()).ok());
  return obs;
}

TEST(RegistryTest, KnowsGymnasiumIdsAndTimeLimits) {
  std::vector<std::pair<std::string, int64_t>> got;
  for (const auto& spec : RegisteredEnvs()) got.emplace_back(spec.id, spec.max_episode_steps);
  EXPECT_THAT(
      got, ::testing::ElementsAre(std::pair<std::string, int64_t>{"CartPole-v1", 500},
                                  std::pair<std::string, int64_t>{"Acrobot-v1", 500},
                                  std::pair<std::string, int64_t>{"MountainCar-v0", 200},
                                  std::pair<std::string, int64_t>{"MountainCarContinuous-v0", 999},
                                  std::pair<std::string, int64_t>{"Pendulum-v1", 200}));
  auto bad = MakeEnv("CartPole-v0");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(),
              HasSubstr("unknown environment 'CartPole-v0' (known: CartPole-v1, "));
}

TEST(RegistryTest, KwargsAreCheckedByName) {
  auto unknown = MakeEnv("Pendulum-v1", {{"gravity", 9.81}});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(),
              HasSubstr("Pendulum-v1: unknown argument 'gravity' (known: g, m, l)"));
  EXPECT_THAT(MakeEnv("Acrobot-v1", {{"g", 1}}).status().message(), HasSubstr("it takes none"));
  EXPECT_THAT(MakeEnv("CartPole-v1", {{"length", -1}}).status().message(),
              HasSubstr("length must be finite and > 0, got -1"));
  EXPECT_THAT(MakeEnv("Pendulum-v1", {{"g", NAN}}).status().message(),
              HasSubstr("g must be finite"));
  EXPECT_TRUE(MakeEnv("Pendulum-v1", {{"g", 9.81}}).ok());
}

TEST(CartPoleTest, SpacesMatchGymnasium) {
  auto env = Make("CartPole-v1");
  EXPECT_EQ(env->action_space().ToString(), "Discrete(2)");
  const Space& o = env->observation_space();
  EXPECT_EQ(o.shape, std::vector<int64_t>{4});
  EXPECT_EQ(o.dtype, DType::kFloat32);
  EXPECT_EQ(o.high[0], static_cast<float>(4.8));
  EXPECT_EQ(o.high[1], std::numeric_limits<float>::max());
  EXPECT_EQ(o.high[2], static_cast<float>(2 * 12 * 2 * kPi / 360));
  EXPECT_EQ(o.low[3], -std::numeric_limits<float>::max());
}

TEST(CartPoleTest, OneStepFromRestMatchesTheEquations) {
  auto env = Make("CartPole-v1");
  Reset(*env, {0, 0, 0, 0});
  const Out o = Step(*env, 1);  // push right with 10 N
  // theta = 0: temp = F / (M + m); thetaacc = -temp / (l (4/3 - m / (M + m)));
  // xacc = temp - m l thetaacc / (M + m); Euler moves only the velocities.
  const double temp = 10.0 / 1.1;
  const double thetaacc = (9.8 * 0.0 - 1.0 * temp) / (0.5 * (4.0 / 3.0 - 0.1 * 1.0 / 1.1));
  const double xacc = temp - 0.05 * thetaacc * 1.0 / 1.1;
  EXPECT_THAT(State(*env), ::testing::ElementsAre(0.0, 0.02 * xacc, 0.0, 0.02 * thetaacc));
  EXPECT_EQ(o.obs[1], static_cast<float>(0.02 * xacc));
  EXPECT_EQ(o.r.reward, 1.0);
  EXPECT_FALSE(o.r.terminated);
}

TEST(CartPoleTest, TerminatesPastTwelveDegreesAndPaysTheTerminalStep) {
  const double limit = 12 * 2 * kPi / 360;
  auto env = Make("CartPole-v1");
  Reset(*env, {0, 0, limit, 0});  // exactly at the limit: not terminal
  EXPECT_FALSE(Step(*env, 0).r.terminated);
  Reset(*env, {0, 0, limit, 1.0});  // theta grows past it in this step
  const Out o = Step(*env, 0);
  EXPECT_TRUE(o.r.terminated);
  EXPECT_EQ(o.r.reward, 1.0);
  Reset(*env, {2.4, 1.0, 0, 0});  // the cart leaves [-2.4, 2.4]
  EXPECT_TRUE(Step(*env, 1).r.terminated);
}

TEST(CartPoleTest, ResetDrawsUniformlyInTheDocumentedRangeFromTheSeed) {
  auto a = Make("CartPole-v1"), b = Make("CartPole-v1");
  a->Seed(7);
  b->Seed(7);
  double lo = 1, hi = -1;
  for (int i = 0; i < 2000; ++i) {
    const auto oa = Reset(*a), ob = Reset(*b);
    EXPECT_EQ(oa, ob);
    for (double v : State(*a)) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  EXPECT_GE(lo, -0.05);
  EXPECT_LT(hi, 0.05);
  EXPECT_LT(lo, -0.049);  // 8000 draws cover the range
  EXPECT_GT(hi, 0.049);
  b->Seed(8);
  EXPECT_NE(Reset(*a), Reset(*b));
}

TEST(CartPoleTest, ArgumentsChangeTheDynamics) {
  auto earth = Make("CartPole-v1"), moon = Make("CartPole-v1", {{"gravity", 1.62}});
  Reset(*earth, {0, 0, 0.1, 0});
  Reset(*moon, {0, 0, 0.1, 0});
  Step(*earth, 0);
  Step(*moon, 0);
  Step(*earth, 0);
  Step(*moon, 0);
  EXPECT_GT(State(*earth)[3], State(*moon)[3]);  // the pole falls faster on Earth
}

TEST(AcrobotTest, HangingStillStaysStillAndPaysMinusOne) {
  auto env = Make("Acrobot-v1");
  EXPECT_EQ(env->action_space().ToString(), "Discrete(3)");
  const auto obs = Reset(*env, {0, 0, 0, 0});
  EXPECT_THAT(obs, ::testing::ElementsAre(1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0.0f));
  for (int i = 0; i < 10; ++i) {
    const Out o = Step(*env, 1);  // zero torque
    EXPECT_EQ(o.r.reward, -1.0);
    EXPECT_FALSE(o.r.terminated);
  }
  for (double v : State(*env)) EXPECT_NEAR(v, 0.0, 1e-12);
}

TEST(AcrobotTest, TorqueMovesTheJointsAndUpIsTerminal) {
  auto env = Make("Acrobot-v1");
  Reset(*env, {0, 0, 0, 0});
  Step(*env, 2);  // +1 torque on the second joint
  const auto s = State(*env);
  EXPECT_GT(s[3], 0.0);         // the second link swings forward...
  EXPECT_LT(s[2], 0.0);         // ...and the first one back
  Reset(*env, {kPi, 0, 0, 0});  // both links up: -cos(t1) - cos(t1 + t2) = 2 > 1
  const Out o = Step(*env, 1);
  EXPECT_TRUE(o.r.terminated);
  EXPECT_EQ(o.r.reward, 0.0);
  // Angles are wrapped into [-pi, pi] and speeds bounded by 4 pi and 9 pi.
  for (double v : State(*env)) EXPECT_TRUE(std::isfinite(v));
  Reset(*env, {0, 0, 100, -100});
  Step(*env, 0);
  const auto b = State(*env);
  EXPECT_GE(b[0], -kPi);
  EXPECT_LE(b[0], kPi);
  EXPECT_LE(std::abs(b[2]), 4 * kPi);
  EXPECT_LE(std::abs(b[3]), 9 * kPi);
}

TEST(AcrobotTest, RandomStartIsFloat32InRange) {
  auto env = Make("Acrobot-v1");
  env->Seed(3);
  for (int i = 0; i < 100; ++i) {
    Reset(*env);
    for (double v : State(*env)) {
      EXPECT_EQ(v, static_cast<double>(static_cast<float>(v)));  // drawn as float32, as Gymnasium
      EXPECT_LE(std::abs(v), 0.1);
    }
  }
}

TEST(MountainCarTest, WallIsInelasticAndGoalTerminates) {
  auto env = Make("MountainCar-v0");
  Reset(*env, {-1.19, -0.07});
  Step(*env, 0);
  EXPECT_THAT(State(*env), ::testing::ElementsAre(-1.2, 0.0));
  Reset(*env, {0.49, 0.07});
  const Out o = Step(*env, 2);
  EXPECT_TRUE(o.r.terminated);
  EXPECT_EQ(o.r.reward, -1.0);
  // Speed is clipped to 0.07.
  Reset(*env, {-0.5, 0.0699});
  Step(*env, 2);
  EXPECT_LE(State(*env)[1], 0.07);
  // goal_velocity: reaching 0.5 too slowly is not enough.
  auto strict = Make("MountainCar-v0", {{"goal_velocity", 0.05}});
  Reset(*strict, {0.49, 0.02});
  EXPECT_FALSE(Step(*strict, 1).r.terminated);
}

TEST(MountainCarTest, ResetStartsInTheValleyAtRest) {
  auto env = Make("MountainCar-v0");
  env->Seed(1);
  for (int i = 0; i < 200; ++i) {
    const auto obs = Reset(*env);
    EXPECT_GE(obs[0], -0.6f);
    EXPECT_LE(obs[0], -0.4f);
    EXPECT_EQ(obs[1], 0.0f);
  }
}

TEST(MountainCarContinuousTest, RewardIsGoalBonusMinusActionCost) {
  auto env = Make("MountainCarContinuous-v0");
  EXPECT_EQ(env->action_space().ToString(), "Box(-1, 1, (1,), float32)");
  Reset(*env, {-0.5, 0.0});
  Out o = StepBox(*env, 3.0f);  // clipped to 1 for the force, not for the cost
  EXPECT_FALSE(o.r.terminated);
  EXPECT_EQ(o.r.reward, -0.9);
  Reset(*env, {0.44, 0.07});
  o = StepBox(*env, 0.5f);
  EXPECT_TRUE(o.r.terminated);
  EXPECT_EQ(o.r.reward, 100.0 - 0.025);
  // The state is kept in float32 after a step, as Gymnasium does.
  for (double v : State(*env)) EXPECT_EQ(v, static_cast<double>(static_cast<float>(v)));
}

TEST(PendulumTest, CostUsesTheNormalizedAngleAndClippedTorque) {
  auto env = Make("Pendulum-v1");
  EXPECT_EQ(env->action_space().ToString(), "Box(-2, 2, (1,), float32)");
  Reset(*env, {0.0, 0.0});
  EXPECT_EQ(StepBox(*env, 0.0f).r.reward, 0.0);  // upright, still: no cost
  // Hanging down at full speed with full torque: the documented minimum.
  Reset(*env, {kPi, 8.0});
  const Out o = StepBox(*env, 5.0f);  // clipped to 2
  EXPECT_NEAR(o.r.reward, -16.2736044, 1e-7);
  EXPECT_FALSE(o.r.terminated);
  // Angles 2 pi apart cost the same.
  Reset(*env, {0.3 + 4 * kPi, 0.0});
  const double far = StepBox(*env, 0.0f).r.reward;
  Reset(*env, {0.3, 0.0});
  EXPECT_NEAR(StepBox(*env, 0.0f).r.reward, far, 1e-12);
  // Speed is clipped to 8.
  Reset(*env, {kPi / 2, 7.9});
  StepBox(*env, 2.0f);
  EXPECT_EQ(State(*env)[1], 8.0);
}

TEST(PendulumTest, GravityArgument) {
  auto light = Make("Pendulum-v1", {{"g", 1.0}}), heavy = Make("Pendulum-v1");
  Reset(*light, {1.0, 0.0});
  Reset(*heavy, {1.0, 0.0});
  StepBox(*light, 0.0f);
  StepBox(*heavy, 0.0f);
  // thdot += 3 g / 2 sin(th) dt
  EXPECT_DOUBLE_EQ(State(*light)[1], 3 * 1.0 / 2 * std::sin(1.0) * 0.05);
  EXPECT_DOUBLE_EQ(State(*heavy)[1], 3 * 10.0 / 2 * std::sin(1.0) * 0.05);
}

}  // namespace
}  // namespace flywheel::envs
