#include "flywheel/loader/page_source.h"

#include <atomic>
#include <chrono>
#include <list>
#include <tuple>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/base/rng.h"

namespace flywheel::loader {
namespace {

struct Key {
  const format::ShardReader* reader;
  int column;
  int page;
  bool operator==(const Key& o) const {
    return reader == o.reader && column == o.column && page == o.page;
  }
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    return static_cast<size_t>(Mix64(reinterpret_cast<uintptr_t>(k.reader) ^
                                     (static_cast<uint64_t>(k.column) << 32) ^
                                     static_cast<uint32_t>(k.page)));
  }
};

class CachingPageSource final : public PageSource {
 public:
  explicit CachingPageSource(int64_t cache_bytes) : capacity_(cache_bytes) {}

  Result<format::Column> Page(const format::ShardReader& reader, int column, int page) override {
    const Key key{&reader, column, page};
    const auto& info = reader.pages(column)[page];
    if (info.codec == format::Codec::kNone && reader.mapped()) {
      // A view into the mapped file: nothing to cache, and no lock to take
      // (row shuffles touch a new page for nearly every row).
      const auto t0 = std::chrono::steady_clock::now();
      FW_ASSIGN_OR_RETURN(format::Column col, reader.ReadPage(column, page));
      io_nanos_.fetch_add(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count(),
          std::memory_order_relaxed);
      views_.fetch_add(1, std::memory_order_relaxed);
      return col;
    }
    if (capacity_ > 0) {
      absl::MutexLock lock(&mu_);
      auto it = index_.find(key);
      if (it != index_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second);
        hits_.fetch_add(1, std::memory_order_relaxed);
        return it->second->column;
      }
    }
    // Decode outside the lock; two threads missing the same page both decode
    // it (rare: batches are spread over pages) and the second insert is dropped.
    const auto t0 = std::chrono::steady_clock::now();
    FW_ASSIGN_OR_RETURN(format::Column col, reader.ReadPage(column, page));
    const int64_t nanos =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    const int64_t bytes = static_cast<int64_t>(info.uncompressed_size());
    (info.codec == format::Codec::kNone ? io_nanos_ : decode_nanos_)
        .fetch_add(nanos, std::memory_order_relaxed);
    fetched_.fetch_add(1, std::memory_order_relaxed);
    bytes_fetched_.fetch_add(bytes, std::memory_order_relaxed);
    if (capacity_ > 0 && bytes <= capacity_) {
      absl::MutexLock lock(&mu_);
      if (index_.find(key) == index_.end()) {
        lru_.push_front(Entry{key, col, bytes});
        index_.emplace(key, lru_.begin());
        size_ += bytes;
        while (size_ > capacity_ && !lru_.empty()) {
          size_ -= lru_.back().bytes;
          index_.erase(lru_.back().key);
          lru_.pop_back();
        }
      }
    }
    return col;
  }

  PageSourceStats stats() const override {
    PageSourceStats s;
    s.fetched = fetched_.load(std::memory_order_relaxed);
    s.hits = hits_.load(std::memory_order_relaxed);
    s.bytes_fetched = bytes_fetched_.load(std::memory_order_relaxed);
    s.io_nanos = io_nanos_.load(std::memory_order_relaxed);
    s.decode_nanos = decode_nanos_.load(std::memory_order_relaxed);
    s.views = views_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  struct Entry {
    Key key;
    format::Column column;
    int64_t bytes;
  };
  const int64_t capacity_;
  absl::Mutex mu_;
  std::list<Entry> lru_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<Key, std::list<Entry>::iterator, KeyHash> index_ ABSL_GUARDED_BY(mu_);
  int64_t size_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> fetched_{0}, hits_{0}, bytes_fetched_{0}, io_nanos_{0}, decode_nanos_{0}, views_{0};
};

}  // namespace

std::unique_ptr<PageSource> NewCachingPageSource(int64_t cache_bytes) {
  return std::make_unique<CachingPageSource>(cache_bytes);
}

}  // namespace flywheel::loader
