#include "flywheel/rl/mlp_policy.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace flywheel::rl {
namespace {

constexpr double kLogSqrt2Pi = 0.91893853320467274178;  // log(sqrt(2*pi))

Result<std::vector<float>> Floats(const Weights& w, const std::string& name, const std::vector<int64_t>& shape) {
  const Tensor* t = w.Find(name);
  if (t == nullptr) return absl::InvalidArgumentError(absl::StrCat("policy weights: no tensor '", name, "'"));
  const format::DataType want = format::DataType::Tensor(format::TypeId::kFloat32, shape);
  const format::DataType want_scalar = format::DataType::Scalar(format::TypeId::kFloat32);
  const bool scalar_ok = shape.size() == 1 && shape[0] == 1 && t->type == want_scalar;
  if (!(t->type == want) && !scalar_ok) {
    return absl::InvalidArgumentError(absl::StrCat("policy weights: tensor '", name, "' is ", t->type.ToString(),
                                                   ", expected ", want.ToString()));
  }
  std::vector<float> v(t->data.size() / sizeof(float));
  std::memcpy(v.data(), t->data.data(), v.size() * sizeof(float));
  return v;
}

// Standard normal by Box-Muller from two uniforms in (0, 1].
double Normal(SplitMix64& rng) {
  const double u1 = 1.0 - rng.UniformDouble();
  const double u2 = rng.UniformDouble();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// log-softmax of `n` logits into `out`.
void LogSoftmax(const float* logits, int64_t n, double* out) {
  double m = logits[0];
  for (int64_t i = 1; i < n; ++i) m = std::max<double>(m, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(logits[i] - m);
  const double lse = m + std::log(sum);
  for (int64_t i = 0; i < n; ++i) out[i] = logits[i] - lse;
}

}  // namespace

Result<MlpPolicy> MlpPolicy::FromWeights(const Weights& weights, Activation activation, PolicyHead head) {
  MlpPolicy p;
  p.activation_ = activation;
  p.head_ = head;
  p.version_ = weights.version;
  for (int64_t i = 0;; ++i) {
    const std::string prefix = absl::StrCat("layers.", i, ".");
    const Tensor* w = weights.Find(prefix + "weight");
    if (w == nullptr) {
      if (i == 0) return absl::InvalidArgumentError("policy weights: no tensor 'layers.0.weight'");
      break;
    }
    if (w->type.shape.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat("policy weights: tensor '", prefix, "weight' is ",
                                                     w->type.ToString(), ", expected float32[out,in]"));
    }
    Layer l;
    l.out = w->type.shape[0];
    l.in = w->type.shape[1];
    if (i > 0 && l.in != p.layers_.back().out) {
      return absl::InvalidArgumentError(absl::StrCat("policy weights: tensor '", prefix, "weight' takes ", l.in,
                                                     " inputs, but layer ", i - 1, " gives ", p.layers_.back().out));
    }
    FW_ASSIGN_OR_RETURN(l.w, Floats(weights, prefix + "weight", {l.out, l.in}));
    FW_ASSIGN_OR_RETURN(l.b, Floats(weights, prefix + "bias", {l.out}));
    if (i == 0) p.dims_.push_back(l.in);
    p.dims_.push_back(l.out);
    p.layers_.push_back(std::move(l));
  }
  p.obs_dim_ = p.dims_.front();
  if (head == PolicyHead::kGaussian) {
    FW_ASSIGN_OR_RETURN(p.log_std_, Floats(weights, "log_std", {p.out_dim()}));
  } else if (p.out_dim() < 1) {
    return absl::InvalidArgumentError("policy weights: the last layer has no outputs");
  }
  return p;
}

void MlpPolicy::Forward(const float* obs, int64_t batch, float* out) const {
  const int64_t widest = *std::max_element(dims_.begin(), dims_.end());
  std::vector<float> a(static_cast<size_t>(widest)), b(static_cast<size_t>(widest));
  for (int64_t r = 0; r < batch; ++r) {
    std::memcpy(a.data(), obs + r * obs_dim_, static_cast<size_t>(obs_dim_) * sizeof(float));
    for (size_t li = 0; li < layers_.size(); ++li) {
      const Layer& l = layers_[li];
      const bool last = li + 1 == layers_.size();
      float* dst = last ? out + r * l.out : b.data();
      for (int64_t o = 0; o < l.out; ++o) {
        const float* wrow = l.w.data() + o * l.in;
        float acc = l.b[static_cast<size_t>(o)];
        for (int64_t i = 0; i < l.in; ++i) acc += wrow[i] * a[static_cast<size_t>(i)];
        if (!last) acc = activation_ == Activation::kTanh ? std::tanh(acc) : std::max(acc, 0.0f);
        dst[o] = acc;
      }
      if (!last) std::swap(a, b);
    }
  }
}

void MlpPolicy::Act(const float* obs, int64_t batch, SplitMix64& rng, PolicyOutput* out) const {
  const int64_t n = out_dim();
  std::vector<float> head(static_cast<size_t>(batch * n));
  Forward(obs, batch, head.data());
  out->log_prob.assign(static_cast<size_t>(batch), 0.0f);
  if (head_ == PolicyHead::kCategorical) {
    out->discrete.assign(static_cast<size_t>(batch), 0);
    out->continuous.clear();
    std::vector<double> lp(static_cast<size_t>(n));
    for (int64_t r = 0; r < batch; ++r) {
      LogSoftmax(head.data() + r * n, n, lp.data());
      // Inverse CDF: the first action whose cumulative probability exceeds u.
      const double u = rng.UniformDouble();
      double cum = 0;
      int64_t a = n - 1;
      for (int64_t i = 0; i < n; ++i) {
        cum += std::exp(lp[static_cast<size_t>(i)]);
        if (u < cum) {
          a = i;
          break;
        }
      }
      out->discrete[static_cast<size_t>(r)] = a;
      out->log_prob[static_cast<size_t>(r)] = static_cast<float>(lp[static_cast<size_t>(a)]);
    }
    return;
  }
  out->discrete.clear();
  out->continuous.assign(static_cast<size_t>(batch * n), 0.0f);
  for (int64_t r = 0; r < batch; ++r) {
    double lp = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double z = Normal(rng);
      const double ls = log_std_[static_cast<size_t>(j)];
      out->continuous[static_cast<size_t>(r * n + j)] = static_cast<float>(head[static_cast<size_t>(r * n + j)] + std::exp(ls) * z);
      lp += -0.5 * z * z - ls - kLogSqrt2Pi;
    }
    out->log_prob[static_cast<size_t>(r)] = static_cast<float>(lp);
  }
}

void MlpPolicy::LogProb(const float* obs, int64_t batch, const int64_t* discrete, const float* continuous,
                        float* log_prob) const {
  const int64_t n = out_dim();
  std::vector<float> head(static_cast<size_t>(batch * n));
  Forward(obs, batch, head.data());
  std::vector<double> lp(static_cast<size_t>(n));
  for (int64_t r = 0; r < batch; ++r) {
    if (head_ == PolicyHead::kCategorical) {
      LogSoftmax(head.data() + r * n, n, lp.data());
      const int64_t a = std::clamp<int64_t>(discrete[r], 0, n - 1);
      log_prob[r] = static_cast<float>(lp[static_cast<size_t>(a)]);
      continue;
    }
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double ls = log_std_[static_cast<size_t>(j)];
      const double z = (continuous[r * n + j] - head[static_cast<size_t>(r * n + j)]) / std::exp(ls);
      sum += -0.5 * z * z - ls - kLogSqrt2Pi;
    }
    log_prob[r] = static_cast<float>(sum);
  }
}

}  // namespace flywheel::rl
