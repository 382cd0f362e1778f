// MinHeap and MaxHeap selectors: always the key with the smallest / largest
// priority; among equal priorities, the one inserted first.
//
// An indexed binary heap: a dense array of (priority, insertion sequence,
// key) ordered as a heap, plus a key -> array position map kept in step on
// every move, so Update and Delete can find a key's node and re-sift it.
// Insert, Delete and Update are O(log n); Sample is O(1).
//
// Ties: a key keeps the sequence number of its Insert, so ties are broken by
// insertion order even after updates. (Reverb's HeapSelector re-stamps a key
// on every Update, making ties least-recently-inserted-or-updated first.)

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "flywheel/replay/selectors/interface.h"
#include "flywheel/replay/selectors/internal/errors.h"

namespace flywheel::replay {
namespace {

using internal_selectors::CheckPriority;
using internal_selectors::EmptyError;
using internal_selectors::KeyExistsError;
using internal_selectors::KeyNotFoundError;

class HeapSelector final : public ItemSelector {
 public:
  explicit HeapSelector(bool max_heap)
      : max_heap_(max_heap), name_(max_heap ? "MaxHeap" : "MinHeap") {}

  Status Insert(ItemKey key, double priority) override {
    FW_RETURN_IF_ERROR(CheckPriority(name_, key, priority));
    auto [it, inserted] = pos_.try_emplace(key, heap_.size());
    if (!inserted) return KeyExistsError(name_, key);
    heap_.push_back(Node{priority, next_seq_++, key});
    SiftUp(heap_.size() - 1);
    return absl::OkStatus();
  }

  Status Delete(ItemKey key) override {
    auto it = pos_.find(key);
    if (it == pos_.end()) return KeyNotFoundError(name_, "delete", key);
    const size_t i = it->second;
    pos_.erase(it);
    Node last = heap_.back();
    heap_.pop_back();
    if (i < heap_.size()) {  // Move the last node into the hole and restore order.
      Place(i, last);
      Resift(i);
    }
    return absl::OkStatus();
  }

  Status Update(ItemKey key, double priority) override {
    FW_RETURN_IF_ERROR(CheckPriority(name_, key, priority));
    auto it = pos_.find(key);
    if (it == pos_.end()) return KeyNotFoundError(name_, "update", key);
    const size_t i = it->second;
    heap_[i].priority = priority;  // `seq` stays: ties keep insertion order.
    Resift(i);
    return absl::OkStatus();
  }

  Result<KeyWithProbability> Sample() override {
    if (heap_.empty()) return EmptyError(name_);
    return KeyWithProbability{heap_.front().key, 1.0};
  }

  void Clear() override {
    heap_.clear();
    pos_.clear();
  }

  int64_t size() const override { return static_cast<int64_t>(heap_.size()); }
  std::string Describe() const override { return name_; }

 private:
  struct Node {
    double priority;
    uint64_t seq;  // insertion sequence number, unique
    ItemKey key;
  };

  // True if `a` must be sampled before `b`.
  bool Before(const Node& a, const Node& b) const {
    if (a.priority != b.priority)
      return max_heap_ ? a.priority > b.priority : a.priority < b.priority;
    return a.seq < b.seq;
  }

  void Place(size_t i, const Node& n) {
    heap_[i] = n;
    pos_[n.key] = i;
  }

  // Moves heap_[i] up or down to where it belongs.
  void Resift(size_t i) {
    if (i > 0 && Before(heap_[i], heap_[(i - 1) / 2])) {
      SiftUp(i);
    } else {
      SiftDown(i);
    }
  }

  void SiftUp(size_t i) {
    const Node n = heap_[i];
    while (i > 0) {
      const size_t parent = (i - 1) / 2;
      if (!Before(n, heap_[parent])) break;
      Place(i, heap_[parent]);
      i = parent;
    }
    Place(i, n);
  }

  void SiftDown(size_t i) {
    const Node n = heap_[i];
    const size_t size = heap_.size();
    while (true) {
      size_t child = 2 * i + 1;
      if (child >= size) break;
      if (child + 1 < size && Before(heap_[child + 1], heap_[child])) ++child;
      if (!Before(heap_[child], n)) break;
      Place(i, heap_[child]);
      i = child;
    }
    Place(i, n);
  }

  const bool max_heap_;
  const std::string name_;
  std::vector<Node> heap_;                    // heap_[0] is the next key to sample
  absl::flat_hash_map<ItemKey, size_t> pos_;  // key -> index in heap_
  uint64_t next_seq_ = 0;
};

}  // namespace

std::unique_ptr<ItemSelector> NewMinHeapSelector() {
  return std::make_unique<HeapSelector>(/*max_heap=*/false);
}

std::unique_ptr<ItemSelector> NewMaxHeapSelector() {
  return std::make_unique<HeapSelector>(/*max_heap=*/true);
}

}  // namespace flywheel::replay
