// MLP policy inference in C++, so actors act without waiting on Python
// (docs/rl.md, "MLP policies"). The weights come from the weight store.
//
// Layout of the tensors (what python/flywheel/rl exports from a PyTorch MLP):
//   layers.0.weight  float32[h1, obs_dim]    layers.0.bias  float32[h1]
//   layers.1.weight  float32[h2, h1]         layers.1.bias  float32[h2]
//   ...              (the last layer gives the head's outputs)
//   log_std          float32[act_dim]        (Gaussian head only)
// Hidden layers apply the activation; the last layer does not.
//
// Heads: Categorical (outputs are logits over `n` actions; actions are
// sampled from softmax) and Gaussian (outputs are means; actions are
// mean + exp(log_std) * N(0, 1), not clipped; the caller clips to its action
// space, and the log-probability is that of the unclipped sample, as PPO
// implementations do).
//
// Thread-safety: an MlpPolicy is immutable after FromWeights; Act/Forward
// may be called from many threads, each with its own Rng and scratch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/base/rng.h"
#include "flywheel/base/status.h"
#include "flywheel/rl/weights.h"

namespace flywheel::rl {

enum class Activation { kTanh, kRelu };
enum class PolicyHead { kCategorical, kGaussian };

struct PolicyOutput {
  std::vector<int64_t> discrete;    // Categorical: batch actions
  std::vector<float> continuous;    // Gaussian: batch * act_dim actions
  std::vector<float> log_prob;      // batch
};

class MlpPolicy {
 public:
  // InvalidArgument naming the tensor when one is missing, not float32, or
  // its shape does not chain with the layer before.
  static Result<MlpPolicy> FromWeights(const Weights& weights, Activation activation, PolicyHead head);

  int64_t obs_dim() const { return obs_dim_; }
  int64_t out_dim() const { return dims_.back(); }  // actions (Categorical) or act_dim (Gaussian)
  int64_t version() const { return version_; }
  PolicyHead head() const { return head_; }

  // Head outputs (logits or means) for `batch` observations, row-major
  // [batch, obs_dim] -> [batch, out_dim].
  void Forward(const float* obs, int64_t batch, float* out) const;
  // Samples one action per observation and its log-probability under the
  // policy. Deterministic for a given rng state.
  void Act(const float* obs, int64_t batch, SplitMix64& rng, PolicyOutput* out) const;
  // log pi(action | obs) for given actions (Categorical: int64 ids;
  // Gaussian: float vectors), e.g. to check a learner's numbers.
  void LogProb(const float* obs, int64_t batch, const int64_t* discrete, const float* continuous,
               float* log_prob) const;

 private:
  MlpPolicy() = default;
  struct Layer {
    int64_t in = 0, out = 0;
    std::vector<float> w;  // [out, in]
    std::vector<float> b;  // [out]
  };
  Activation activation_ = Activation::kTanh;
  PolicyHead head_ = PolicyHead::kCategorical;
  int64_t obs_dim_ = 0;
  int64_t version_ = 0;
  std::vector<int64_t> dims_;  // obs_dim, h1, ..., out
  std::vector<Layer> layers_;
  std::vector<float> log_std_;
};

}  // namespace flywheel::rl
