// Item selectors: the strategies a replay table uses to pick which item to
// sample (its "sampler") and which item to evict when full (its "remover").
// Semantics follow Reverb's selectors so existing configs mean the same.
//
// Thread-safety: not thread-safe; the owning replay table calls every method
// with its mutex held.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "flywheel/base/status.h"

namespace flywheel::replay {

using ItemKey = uint64_t;

struct KeyWithProbability {
  ItemKey key = 0;
  // The probability with which this key was selected (for importance
  // weights): 1/size for uniform, p_i^a / sum p^a for prioritized, 1 for the
  // deterministic selectors.
  double probability = 0;
};

class ItemSelector {
 public:
  virtual ~ItemSelector() = default;
  // Adds `key`. AlreadyExists if present. Priority must be finite and >= 0
  // (InvalidArgument otherwise); ignored by selectors that do not use it.
  virtual Status Insert(ItemKey key, double priority) = 0;
  // Removes `key`; NotFound if absent.
  virtual Status Delete(ItemKey key) = 0;
  // Changes the priority of `key`; NotFound if absent.
  virtual Status Update(ItemKey key, double priority) = 0;
  // Picks one key. REQUIRES: size() > 0 (FailedPrecondition otherwise).
  virtual Result<KeyWithProbability> Sample() = 0;
  virtual void Clear() = 0;
  virtual int64_t size() const = 0;
  // e.g. "Prioritized(priority_exponent=0.6)".
  virtual std::string Describe() const = 0;
};

// Uniform over current keys; O(1) insert, delete and sample.
std::unique_ptr<ItemSelector> NewUniformSelector(uint64_t seed = 0);
// P(i) = p_i^exponent / sum_j p_j^exponent via a sum tree: O(log n) insert,
// update, delete and sample; stays accurate under millions of updates. If
// every priority is zero, samples uniformly.
std::unique_ptr<ItemSelector> NewPrioritizedSelector(double priority_exponent, uint64_t seed = 0);
// Oldest inserted first / newest inserted first.
std::unique_ptr<ItemSelector> NewFifoSelector();
std::unique_ptr<ItemSelector> NewLifoSelector();
// Smallest / largest priority first (ties: oldest inserted first).
std::unique_ptr<ItemSelector> NewMinHeapSelector();
std::unique_ptr<ItemSelector> NewMaxHeapSelector();

}  // namespace flywheel::replay
