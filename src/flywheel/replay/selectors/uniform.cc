// Uniform selector: every current key is equally likely.
//
// Keys live in a dense vector (so sampling is one index draw) plus a
// key -> position map; deletion moves the last key into the hole. Every
// operation is O(1) (expected, for the hash map).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "flywheel/base/rng.h"
#include "flywheel/replay/selectors/interface.h"
#include "flywheel/replay/selectors/internal/errors.h"

namespace flywheel::replay {
namespace {

using internal_selectors::CheckPriority;
using internal_selectors::EmptyError;
using internal_selectors::KeyExistsError;
using internal_selectors::KeyNotFoundError;

constexpr std::string_view kName = "Uniform";

class UniformSelector final : public ItemSelector {
 public:
  explicit UniformSelector(uint64_t seed) : rng_(seed) {}

  Status Insert(ItemKey key, double priority) override {
    FW_RETURN_IF_ERROR(CheckPriority(kName, key, priority));
    auto [it, inserted] = index_.try_emplace(key, keys_.size());
    if (!inserted) return KeyExistsError(kName, key);
    keys_.push_back(key);
    return absl::OkStatus();
  }

  Status Delete(ItemKey key) override {
    auto it = index_.find(key);
    if (it == index_.end()) return KeyNotFoundError(kName, "delete", key);
    const size_t pos = it->second;
    index_.erase(it);
    const ItemKey last = keys_.back();
    keys_.pop_back();
    if (pos < keys_.size()) {  // `key` was not the last one: fill its slot.
      keys_[pos] = last;
      index_[last] = pos;
    }
    return absl::OkStatus();
  }

  Status Update(ItemKey key, double priority) override {
    FW_RETURN_IF_ERROR(CheckPriority(kName, key, priority));
    if (!index_.contains(key)) return KeyNotFoundError(kName, "update", key);
    return absl::OkStatus();
  }

  Result<KeyWithProbability> Sample() override {
    if (keys_.empty()) return EmptyError(kName);
    const uint64_t n = keys_.size();
    return KeyWithProbability{keys_[rng_.Uniform(n)], 1.0 / static_cast<double>(n)};
  }

  void Clear() override {
    keys_.clear();
    index_.clear();
  }

  int64_t size() const override { return static_cast<int64_t>(keys_.size()); }
  std::string Describe() const override { return std::string(kName); }

 private:
  SplitMix64 rng_;
  std::vector<ItemKey> keys_;                   // dense, in no particular order
  absl::flat_hash_map<ItemKey, size_t> index_;  // key -> position in keys_
};

}  // namespace

std::unique_ptr<ItemSelector> NewUniformSelector(uint64_t seed) {
  return std::make_unique<UniformSelector>(seed);
}

}  // namespace flywheel::replay
