#include "flywheel/rl/mlp_policy.h"

#include <gtest/gtest.h>

#include <cmath>

namespace flywheel::rl {
namespace {

Tensor T(const std::string& name, std::vector<int64_t> shape, std::vector<float> v) {
  Tensor t;
  t.name = name;
  t.type = format::DataType::Tensor(format::TypeId::kFloat32, std::move(shape));
  t.data.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  return t;
}

// 2 -> 3 (tanh) -> 2: small enough to compute by hand.
Weights TwoLayer() {
  Weights w;
  w.version = 7;
  w.tensors = {T("layers.0.weight", {3, 2}, {1, 0, 0, 1, 1, -1}), T("layers.0.bias", {3}, {0, 0.5f, 0}),
               T("layers.1.weight", {2, 3}, {1, 1, 0, 0, -1, 2}), T("layers.1.bias", {2}, {0.1f, -0.1f})};
  return w;
}

TEST(MlpPolicyTest, ForwardMatchesTheHandComputedNetwork) {
  auto p = MlpPolicy::FromWeights(TwoLayer(), Activation::kTanh, PolicyHead::kCategorical);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->obs_dim(), 2);
  EXPECT_EQ(p->out_dim(), 2);
  EXPECT_EQ(p->version(), 7);
  const float obs[4] = {0.3f, -0.2f, 1.0f, 2.0f};
  float out[4];
  p->Forward(obs, 2, out);
  for (int r = 0; r < 2; ++r) {
    const double x0 = obs[2 * r], x1 = obs[2 * r + 1];
    const double h0 = std::tanh(x0), h1 = std::tanh(x1 + 0.5), h2 = std::tanh(x0 - x1);
    EXPECT_NEAR(out[2 * r], h0 + h1 + 0.1, 1e-6);
    EXPECT_NEAR(out[2 * r + 1], -h1 + 2 * h2 - 0.1, 1e-6);
  }
  auto relu = MlpPolicy::FromWeights(TwoLayer(), Activation::kRelu, PolicyHead::kCategorical);
  ASSERT_TRUE(relu.ok());
  relu->Forward(obs, 1, out);
  EXPECT_NEAR(out[0], 0.3 + 0.3 + 0.1, 1e-6);  // h = (0.3, 0.3, 0.5)
  EXPECT_NEAR(out[1], -0.3 + 2 * 0.5 - 0.1, 1e-6);
}

TEST(MlpPolicyTest, CategoricalSamplesFollowTheSoftmaxAndReportTheirLogProb) {
  auto p = *MlpPolicy::FromWeights(TwoLayer(), Activation::kTanh, PolicyHead::kCategorical);
  const float one[2] = {0.3f, -0.2f};
  float logits[2];
  p.Forward(one, 1, logits);
  const double p1 = 1.0 / (1.0 + std::exp(logits[0] - logits[1]));
  const int n = 20000;
  std::vector<float> obs(2 * n);
  for (int i = 0; i < n; ++i) {
    obs[2 * i] = one[0];
    obs[2 * i + 1] = one[1];
  }
  SplitMix64 rng(3);
  PolicyOutput out;
  p.Act(obs.data(), n, rng, &out);
  ASSERT_EQ(out.discrete.size(), static_cast<size_t>(n));
  int ones = 0;
  for (int i = 0; i < n; ++i) {
    ones += out.discrete[i] == 1;
    const double want = out.discrete[i] == 1 ? std::log(p1) : std::log(1 - p1);
    ASSERT_NEAR(out.log_prob[i], want, 1e-5);
  }
  // Binomial: within 5 standard deviations.
  EXPECT_NEAR(ones, n * p1, 5 * std::sqrt(n * p1 * (1 - p1)));
  // Same seed, same actions.
  SplitMix64 again(3);
  PolicyOutput out2;
  p.Act(obs.data(), n, again, &out2);
  EXPECT_EQ(out.discrete, out2.discrete);
  std::vector<float> lp(n);
  p.LogProb(obs.data(), n, out.discrete.data(), nullptr, lp.data());
  EXPECT_EQ(lp, out.log_prob);
}

TEST(MlpPolicyTest, GaussianSamplesHaveTheMeanStdAndLogProbOfTheHead) {
  Weights w = TwoLayer();
  w.tensors.push_back(T("log_std", {2}, {std::log(0.5f), 0.0f}));
  auto p = *MlpPolicy::FromWeights(w, Activation::kTanh, PolicyHead::kGaussian);
  const float one[2] = {1.0f, 2.0f};
  float mean[2];
  p.Forward(one, 1, mean);
  const int n = 20000;
  std::vector<float> obs(2 * n);
  for (int i = 0; i < n; ++i) {
    obs[2 * i] = one[0];
    obs[2 * i + 1] = one[1];
  }
  SplitMix64 rng(11);
  PolicyOutput out;
  p.Act(obs.data(), n, rng, &out);
  ASSERT_EQ(out.continuous.size(), static_cast<size_t>(2 * n));
  double s0 = 0, s1 = 0, q0 = 0;
  for (int i = 0; i < n; ++i) {
    s0 += out.continuous[2 * i];
    s1 += out.continuous[2 * i + 1];
    q0 += (out.continuous[2 * i] - mean[0]) * (out.continuous[2 * i] - mean[0]);
  }
  EXPECT_NEAR(s0 / n, mean[0], 5 * 0.5 / std::sqrt(n));
  EXPECT_NEAR(s1 / n, mean[1], 5 * 1.0 / std::sqrt(n));
  EXPECT_NEAR(std::sqrt(q0 / n), 0.5, 0.02);
  std::vector<float> lp(n);
  p.LogProb(obs.data(), n, nullptr, out.continuous.data(), lp.data());
  for (int i = 0; i < n; i += 997) EXPECT_NEAR(lp[i], out.log_prob[i], 1e-4);
  // The density at the mean: -log(0.5) - log(1) - 2 log(sqrt(2 pi)).
  float at_mean[1];
  p.LogProb(one, 1, nullptr, mean, at_mean);
  EXPECT_NEAR(at_mean[0], -std::log(0.5) - 2 * 0.91893853320467274, 1e-5);
}

TEST(MlpPolicyTest, BadWeightsAreRefusedNamingTheTensor) {
  auto expect = [](Weights w, PolicyHead head, const std::string& text) {
    auto p = MlpPolicy::FromWeights(w, Activation::kTanh, head);
    ASSERT_FALSE(p.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(p.status()));
    EXPECT_NE(std::string(p.status().message()).find(text), std::string::npos) << p.status();
  };
  expect(Weights{}, PolicyHead::kCategorical, "no tensor 'layers.0.weight'");
  Weights no_bias = TwoLayer();
  no_bias.tensors.erase(no_bias.tensors.begin() + 1);
  expect(no_bias, PolicyHead::kCategorical, "no tensor 'layers.0.bias'");
  Weights chain = TwoLayer();
  chain.tensors[2] = T("layers.1.weight", {2, 4}, std::vector<float>(8, 0));
  expect(chain, PolicyHead::kCategorical, "takes 4 inputs, but layer 0 gives 3");
  Weights bad_bias = TwoLayer();
  bad_bias.tensors[3] = T("layers.1.bias", {3}, {0, 0, 0});
  expect(bad_bias, PolicyHead::kCategorical, "tensor 'layers.1.bias' is float32[3], expected float32[2]");
  expect(TwoLayer(), PolicyHead::kGaussian, "no tensor 'log_std'");
}

}  // namespace
}  // namespace flywheel::rl
