// Fifo and Lifo selectors: the oldest / newest inserted key, by insertion
// order only (priorities are checked but otherwise ignored, and Update does
// not move a key).
//
// Keys sit in a doubly linked list in insertion order, with a key -> list
// node map, so insert, delete (anywhere in the list), update and sample are
// all O(1) (expected, for the hash map).

#include <cstdint>
#include <list>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "flywheel/replay/selectors/interface.h"
#include "flywheel/replay/selectors/internal/errors.h"

namespace flywheel::replay {
namespace {

using internal_selectors::CheckPriority;
using internal_selectors::EmptyError;
using internal_selectors::KeyExistsError;
using internal_selectors::KeyNotFoundError;

class InsertionOrderSelector final : public ItemSelector {
 public:
  // `newest_first`: Lifo if true, Fifo otherwise.
  explicit InsertionOrderSelector(bool newest_first)
      : newest_first_(newest_first), name_(newest_first ? "Lifo" : "Fifo") {}

  Status Insert(ItemKey key, double priority) override {
    FW_RETURN_IF_ERROR(CheckPriority(name_, key, priority));
    auto [it, inserted] = nodes_.try_emplace(key);
    if (!inserted) return KeyExistsError(name_, key);
    it->second = order_.insert(order_.end(), key);
    return absl::OkStatus();
  }

  Status Delete(ItemKey key) override {
    auto it = nodes_.find(key);
    if (it == nodes_.end()) return KeyNotFoundError(name_, "delete", key);
    order_.erase(it->second);
    nodes_.erase(it);
    return absl::OkStatus();
  }

  Status Update(ItemKey key, double priority) override {
    FW_RETURN_IF_ERROR(CheckPriority(name_, key, priority));
    if (!nodes_.contains(key)) return KeyNotFoundError(name_, "update", key);
    return absl::OkStatus();
  }

  Result<KeyWithProbability> Sample() override {
    if (order_.empty()) return EmptyError(name_);
    return KeyWithProbability{newest_first_ ? order_.back() : order_.front(), 1.0};
  }

  void Clear() override {
    nodes_.clear();
    order_.clear();
  }

  int64_t size() const override { return static_cast<int64_t>(nodes_.size()); }
  std::string Describe() const override { return name_; }

 private:
  const bool newest_first_;
  const std::string name_;
  std::list<ItemKey> order_;  // oldest insert at the front
  absl::flat_hash_map<ItemKey, std::list<ItemKey>::iterator> nodes_;
};

}  // namespace

std::unique_ptr<ItemSelector> NewFifoSelector() {
  return std::make_unique<InsertionOrderSelector>(/*newest_first=*/false);
}

std::unique_ptr<ItemSelector> NewLifoSelector() {
  return std::make_unique<InsertionOrderSelector>(/*newest_first=*/true);
}

}  // namespace flywheel::replay
