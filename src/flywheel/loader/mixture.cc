#include "flywheel/loader/mixture.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "flywheel/base/rng.h"

namespace flywheel::loader {
namespace {
constexpr uint64_t kMixtureTag = 0x6d69'7874'7572'6506ULL;
constexpr uint64_t kOne = uint64_t{1} << 53;
}  // namespace

Result<Mixture> Mixture::Create(std::vector<double> weights, uint64_t seed) {
  if (weights.empty() || weights.size() > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("a mixture needs 1 to 65536 weights, got ", weights.size()));
  }
  double total = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!std::isfinite(weights[i]) || weights[i] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("mixture weight ", i, " must be finite and > 0, got ", weights[i]));
    }
    total += weights[i];
  }
  if (!std::isfinite(total)) return absl::InvalidArgumentError("mixture weights sum to infinity");
  Mixture m;
  m.key_ = Mix64(seed ^ kMixtureTag);
  double cum = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    cum += weights[i];
    uint64_t t =
        i + 1 == weights.size() ? kOne : static_cast<uint64_t>(std::ldexp(cum / total, 53));
    if (t > kOne) t = kOne;
    m.thresholds_.push_back(t);
  }
  m.weights_ = std::move(weights);
  return m;
}

uint64_t Mixture::EpochKey(int64_t epoch) const {
  return Mix64(key_ ^ Mix64(static_cast<uint64_t>(epoch)));
}

int Mixture::Pick(uint64_t epoch_key, int64_t position) const {
  const uint64_t u =
      Mix64(epoch_key ^ static_cast<uint64_t>(position)) >> 11;  // uniform in [0, 2^53)
  const int n = num_tables();
  if (n <= 8) {
    for (int t = 0; t < n - 1; ++t) {
      if (u < thresholds_[t]) return t;
    }
    return n - 1;
  }
  int lo = 0;
  int hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (u < thresholds_[mid])
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

int Mixture::TableAt(int64_t epoch, int64_t position) const {
  return Pick(EpochKey(epoch), position);
}

void Mixture::Fill(int64_t epoch, int64_t begin, int64_t end, int32_t* out) const {
  const uint64_t k = EpochKey(epoch);
  for (int64_t p = begin; p < end; ++p) *out++ = Pick(k, p);
}

void Mixture::Count(int64_t epoch, int64_t begin, int64_t end, int64_t* counts) const {
  const uint64_t k = EpochKey(epoch);
  for (int64_t p = begin; p < end; ++p) counts[Pick(k, p)]++;
}

}  // namespace flywheel::loader
