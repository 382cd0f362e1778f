// Prioritized selector: samples key i with probability
//   P(i) = w_i / sum_j w_j,  w_i = p_i^priority_exponent,
// and uniformly over all keys if every weight is zero.
//
// Layout: keys occupy a dense array of leaves 0..n-1 (a key -> leaf map finds
// them; Delete moves the last leaf into the hole). Weights sit in a sum tree
// stored as an implicit complete binary tree over `capacity_` leaves (a power
// of two): tree_[capacity_ + i] is leaf i's weight, tree_[j] = tree_[2j] +
// tree_[2j+1], tree_[1] is the total. Leaves n..capacity_-1 hold 0. The
// capacity doubles when full and halves when a quarter full, each an O(n)
// rebuild, so Insert and Delete are amortised O(log n); Update and Sample are
// O(log n).
//
// Numerical stability: a changed leaf's ancestors are recomputed from their
// children; nothing is ever adjusted by a delta. So every inner node is a pure
// function of the current leaf values (the same bits a from-scratch build
// would give) and rounding error never accumulates over updates: the total
// is within about log2(capacity) ulps-relative of the exact sum no matter how
// many updates came before.

#include <charconv>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "flywheel/base/rng.h"
#include "flywheel/replay/selectors/interface.h"
#include "flywheel/replay/selectors/internal/errors.h"

namespace flywheel::replay {
namespace {

using internal_selectors::CheckPriority;
using internal_selectors::EmptyError;
using internal_selectors::KeyExistsError;
using internal_selectors::KeyNotFoundError;

// Below this capacity the tree never shrinks (avoids rebuild churn on tiny
// tables).
constexpr size_t kMinShrinkCapacity = 64;

// The shortest decimal text that reads back as exactly `v`, so Describe()
// (and checkpoints, which store it) keep the exponent bit for bit.
std::string ShortestRoundTrip(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

class PrioritizedSelector final : public ItemSelector {
 public:
  PrioritizedSelector(double priority_exponent, uint64_t seed)
      : exponent_(priority_exponent),
        exponent_ok_(std::isfinite(priority_exponent) && priority_exponent >= 0),
        name_(absl::StrCat("Prioritized(priority_exponent=", ShortestRoundTrip(priority_exponent), ")")),
        rng_(seed) {}

  Status Insert(ItemKey key, double priority) override {
    FW_ASSIGN_OR_RETURN(const double w, CheckedWeight(key, priority));
    if (index_.contains(key)) return KeyExistsError(name_, key);
    const size_t leaf = keys_.size();
    if (leaf == capacity_) Rebuild(capacity_ == 0 ? 1 : 2 * capacity_);
    keys_.push_back(key);
    index_.emplace(key, leaf);
    if (!SetWeight(leaf, w)) {  // The total overflowed: undo.
      SetWeight(leaf, 0);
      keys_.pop_back();
      index_.erase(key);
      return TotalOverflowError(key, priority);
    }
    return absl::OkStatus();
  }

  Status Delete(ItemKey key) override {
    auto it = index_.find(key);
    if (it == index_.end()) return KeyNotFoundError(name_, "delete", key);
    const size_t leaf = it->second;
    index_.erase(it);
    const size_t last = keys_.size() - 1;
    if (leaf != last) {  // Move the last leaf into the hole.
      keys_[leaf] = keys_[last];
      index_[keys_[leaf]] = leaf;
      SetWeight(leaf, tree_[capacity_ + last]);
    }
    SetWeight(last, 0);
    keys_.pop_back();
    if (capacity_ > kMinShrinkCapacity && keys_.size() <= capacity_ / 4) Rebuild(capacity_ / 2);
    return absl::OkStatus();
  }

  Status Update(ItemKey key, double priority) override {
    FW_ASSIGN_OR_RETURN(const double w, CheckedWeight(key, priority));
    auto it = index_.find(key);
    if (it == index_.end()) return KeyNotFoundError(name_, "update", key);
    const size_t leaf = it->second;
    const double old = tree_[capacity_ + leaf];
    if (!SetWeight(leaf, w)) {
      // Restoring the leaf restores every sum bit for bit (they are
      // recomputed from children), so a failed Update changes nothing.
      SetWeight(leaf, old);
      return TotalOverflowError(key, priority);
    }
    return absl::OkStatus();
  }

  Result<KeyWithProbability> Sample() override {
    const size_t n = keys_.size();
    if (n == 0) return EmptyError(name_);
    const double total = tree_[1];
    if (total == 0) {  // Every weight is zero: uniform over all keys.
      return KeyWithProbability{keys_[rng_.Uniform(n)], 1.0 / static_cast<double>(n)};
    }
    // Descend towards the leaf whose cumulative-weight interval holds
    // `target`. Invariant: the current node's sum is > 0, so at least one
    // child is > 0; we never step into a zero-sum child, so rounding (which
    // can leave `target` at or past a subtree's sum) can never end on a
    // zero-weight or unused leaf.
    double target = rng_.UniformDouble() * total;
    size_t node = 1;
    while (node < capacity_) {
      const double left = tree_[2 * node];
      const double right = tree_[2 * node + 1];
      if (left > 0 && (target < left || right == 0)) {
        node = 2 * node;
      } else {
        target = target > left ? target - left : 0;
        node = 2 * node + 1;
      }
    }
    return KeyWithProbability{keys_[node - capacity_], tree_[node] / total};
  }

  void Clear() override {
    keys_.clear();
    index_.clear();
    tree_.clear();
    capacity_ = 0;
  }

  int64_t size() const override { return static_cast<int64_t>(keys_.size()); }
  std::string Describe() const override { return name_; }

 private:
  // p^exponent, with 0^0 = 1: exponent 0 samples uniformly over all keys,
  // zero priorities included. (Reverb instead gives priority 0 weight 0 for
  // every exponent.)
  double Weight(double priority) const {
    return exponent_ == 0 ? 1.0 : std::pow(priority, exponent_);
  }

  Result<double> CheckedWeight(ItemKey key, double priority) const {
    if (!exponent_ok_) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_, ": priority_exponent must be finite and >= 0"));
    }
    FW_RETURN_IF_ERROR(CheckPriority(name_, key, priority));
    const double w = Weight(priority);
    if (!std::isfinite(w)) {
      return absl::InvalidArgumentError(absl::StrCat(name_, ": key ", key, " has priority ",
                                                     priority, ", whose weight priority^",
                                                     exponent_, " overflows a double"));
    }
    return w;
  }

  Status TotalOverflowError(ItemKey key, double priority) const {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": key ", key, " with priority ", priority,
                     " would make the sum of weights overflow a double"));
  }

  // Sets leaf `leaf`'s weight and recomputes its ancestors from their
  // children. Returns false if the total is no longer finite.
  bool SetWeight(size_t leaf, double w) {
    size_t node = capacity_ + leaf;
    tree_[node] = w;
    for (node /= 2; node >= 1; node /= 2) tree_[node] = tree_[2 * node] + tree_[2 * node + 1];
    return std::isfinite(tree_[1]);
  }

  // Rebuilds the tree over `capacity` leaves (a power of two >= size()).
  void Rebuild(size_t capacity) {
    std::vector<double> tree(2 * capacity, 0.0);
    for (size_t i = 0; i < keys_.size(); ++i) tree[capacity + i] = tree_[capacity_ + i];
    for (size_t node = capacity - 1; node >= 1; --node) {
      tree[node] = tree[2 * node] + tree[2 * node + 1];
    }
    tree_ = std::move(tree);
    capacity_ = capacity;
  }

  const double exponent_;
  const bool exponent_ok_;
  const std::string name_;
  SplitMix64 rng_;
  size_t capacity_ = 0;                         // leaves in tree_; 0 or a power of two
  std::vector<double> tree_;                    // 2 * capacity_ entries; tree_[0] unused
  std::vector<ItemKey> keys_;                   // keys_[i] is leaf i's key
  absl::flat_hash_map<ItemKey, size_t> index_;  // key -> leaf
};

}  // namespace

std::unique_ptr<ItemSelector> NewPrioritizedSelector(double priority_exponent, uint64_t seed) {
  return std::make_unique<PrioritizedSelector>(priority_exponent, seed);
}

}  // namespace flywheel::replay
