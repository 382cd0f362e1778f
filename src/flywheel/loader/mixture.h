// Deterministic interleaving of several tables by weight.
//
// Mixture position p of epoch e draws from table t = TableAt(e, p): a keyed
// hash of (seed, e, p) compared against the cumulative weights (fixed-point,
// so every machine agrees), i.e. independent draws with P(t) = w_t / sum(w).
// Each table walks its own endless stream of samples: its k-th draw serves
// position k mod n_t of its own order for stream epoch k / n_t
// (SampleOrder with seed StreamSeed(seed, t)), so a table's rows are served
// exactly once per pass whatever the weights. The state of a mixture is the
// number of draws each table has served so far. docs/loader.md, "Mixtures".
//
// Thread-safety: value type; const methods are safe to call concurrently.
#pragma once

#include <cstdint>
#include <vector>

#include "flywheel/base/status.h"

namespace flywheel::loader {

class Mixture {
 public:
  // REQUIRES: 1..65536 weights, each finite and > 0 (checked).
  static Result<Mixture> Create(std::vector<double> weights, uint64_t seed);

  int num_tables() const { return static_cast<int>(weights_.size()); }
  const std::vector<double>& weights() const { return weights_; }

  // The table drawn at `position` of `epoch`.
  int TableAt(int64_t epoch, int64_t position) const;
  // Draws of positions [begin, end) of `epoch`: out[i] = TableAt(epoch, begin + i).
  void Fill(int64_t epoch, int64_t begin, int64_t end, int32_t* out) const;
  // Adds to counts[t] the number of positions in [begin, end) of `epoch`
  // drawing from t. `counts` has num_tables() entries.
  void Count(int64_t epoch, int64_t begin, int64_t end, int64_t* counts) const;

 private:
  Mixture() = default;
  uint64_t EpochKey(int64_t epoch) const;
  int Pick(uint64_t epoch_key, int64_t position) const;

  std::vector<double> weights_;
  // thresholds_[t] = 2^53 * (w_0 + ... + w_t) / sum(w); the last is 2^53.
  std::vector<uint64_t> thresholds_;
  uint64_t key_ = 0;
};

}  // namespace flywheel::loader
