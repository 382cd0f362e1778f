// `flywheel run` configuration: defaults, and errors that name file:line:column.
#include "flywheel/rl/run_config.h"

#include <gtest/gtest.h>

namespace flywheel::rl {
namespace {

TEST(RunConfigTest, DefaultsAndValues) {
  auto c = ParseRunConfig(R"(
[run]
seed = 3
[env]
id = "CartPole-v1"
num_envs = 16
[actor]
count = 2
unroll_length = 64
[policy]
hidden = [32, 32, 16]
activation = "relu"
[learner]
algorithm = "ppo"
lr = 0.001   # the learner's own keys are not checked here
)",
                          "cfg/cartpole.toml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "cartpole");
  EXPECT_EQ(c->resolved_run_dir(), "runs/cartpole");
  EXPECT_EQ(c->seed, 3u);
  EXPECT_EQ(c->host, "127.0.0.1");
  EXPECT_EQ(c->num_envs, 16);
  EXPECT_EQ(c->actors, 2);
  EXPECT_EQ(c->unroll_length, 64);
  EXPECT_EQ(c->hidden, (std::vector<int64_t>{32, 32, 16}));
  EXPECT_EQ(c->activation, Activation::kRelu);
  EXPECT_TRUE(c->on_policy);          // ppo's default
  EXPECT_EQ(c->batch_unrolls, 2);     // one per actor
  EXPECT_EQ(c->resolved_queue_size(), 4);

  auto impala = ParseRunConfig("[env]\nid = \"Pendulum-v1\"\n[learner]\nalgorithm = \"impala\"\nbatch_unrolls = 4\n",
                               "i.toml");
  ASSERT_TRUE(impala.ok()) << impala.status();
  EXPECT_FALSE(impala->on_policy);  // impala's default: async actors
  EXPECT_EQ(impala->resolved_queue_size(), 8);
}

TEST(RunConfigTest, ErrorsNameTheLocation) {
  auto expect = [](const std::string& text, const std::string& message) {
    auto c = ParseRunConfig(text, "run.toml");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
    EXPECT_NE(c.status().message().find(message), std::string::npos) << c.status();
  };
  expect("[env]\nid = \"CartPole-v1\"\nnum_env = 4\n", "run.toml:3:11: unknown key \"num_env\"");
  expect("[env]\nid = \"CartPole-v7\"\n", "run.toml:2:6:");
  expect("[env]\nid = \"CartPole-v1\"\nnum_envs = 0\n", "run.toml:3:12: num_envs = 0 must be in [1, 65536]");
  expect("[env]\nid = \"CartPole-v1\"\n[policy]\nhidden = [64, -1]\n", "run.toml:4:15: hidden");
  expect("[env]\nid = \"CartPole-v1\"\n[policy]\nactivation = \"gelu\"\n", "activation \"gelu\"");
  expect("[env]\nid = \"CartPole-v1\"\n[learner]\nalgorithm = \"dqn\"\n", "run.toml:4:13: algorithm \"dqn\"");
  expect("[env]\nid = \"CartPole-v1\"\n[actor]\ncount = 2\n[learner]\nbatch_unrolls = 3\n",
         "run.toml:6:17: batch_unrolls = 3 exceeds actor count = 2");
  expect("[env]\nid = \"CartPole-v1\"\n[actor]\nmode = \"sync\"\n", "mode \"sync\"");
  expect("[run]\nport = 70000\n[env]\nid = \"CartPole-v1\"\n", "run.toml:2:8: port = 70000");
  expect("[runn]\n", "unknown key \"runn\"");
  expect("[env]\n", "missing key \"id\"");
}

}  // namespace
}  // namespace flywheel::rl
