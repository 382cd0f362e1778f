// A replay table: items (key, priority, trajectory of shared chunks) that
// writers insert and learners sample, under a rate limiter. Semantics follow
// Reverb's Table: a sampler selector picks what to sample, a remover selector
// picks what to evict at max_size, items are deleted after
// max_times_sampled samples (0 = unlimited). See docs/replay.md.
//
// Blocking calls (Insert, Sample, SampleBatch) take a timeout and an
// optional cancellation flag; while blocked longer than the watchdog
// threshold they log Explain() once per threshold.
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flywheel/base/status.h"
#include "flywheel/replay/chunk.h"
#include "flywheel/replay/rate_limiter.h"
#include "flywheel/replay/selectors/interface.h"

namespace flywheel::replay {

struct Item {
  ItemKey key = 0;
  double priority = 0;
  int32_t times_sampled = 0;
  std::vector<TrajectoryColumn> columns;
};

// Expected trajectory columns: names and per-step types.
struct Signature {
  std::vector<std::pair<std::string, format::DataType>> columns;
};

struct ReplayTableOptions {
  std::string name;
  std::unique_ptr<ItemSelector> sampler;  // default: Uniform
  std::unique_ptr<ItemSelector> remover;  // default: Fifo
  int64_t max_size = 1000000;             // items; inserting beyond evicts one (remover)
  int32_t max_times_sampled = 0;          // delete after this many samples; 0 = unlimited
  RateLimiterOptions rate_limiter = RateLimiterOptions::MinSize(1);
  std::optional<Signature> signature;     // checked on insert when set
  // Log Explain() when a call has been blocked this long (0 = never).
  absl::Duration watchdog = absl::Seconds(10);

  Status Validate() const;
};

struct SampledItem {
  // The item as inserted (shared, never copied); its `priority` and
  // `times_sampled` fields are those at insert time. The current values are
  // the fields below.
  std::shared_ptr<const Item> item;
  double priority = 0;
  double probability = 0;
  int64_t table_size = 0;
  int32_t times_sampled = 0;         // including this sample
};

struct TableInfo {
  std::string name;
  int64_t size = 0;
  int64_t max_size = 0;
  int32_t max_times_sampled = 0;
  RateLimiterState limiter;
  RateLimiterOptions limiter_options;
  int blocked_inserts = 0;
  int blocked_samples = 0;
  std::string sampler;
  std::string remover;
  int64_t num_episodes_evicted = 0;  // items removed by the remover
  int64_t num_deleted = 0;           // all deletions (evict, max_times_sampled, by key)
};

class ReplayTable {
 public:
  static Result<std::unique_ptr<ReplayTable>> Create(ReplayTableOptions options);
  ~ReplayTable();

  const std::string& name() const { return name_; }
  // The signature inserts are checked against (nullopt: none).
  const std::optional<Signature>& signature() const { return signature_; }

  // Inserts an item, waiting for the rate limiter. AlreadyExists for a key
  // already present; InvalidArgument when the trajectory does not match the
  // signature or is malformed.
  Status Insert(Item item, absl::Duration timeout = absl::InfiniteDuration(),
                const bool* cancelled = nullptr);
  // Samples one item, waiting for the rate limiter.
  Result<SampledItem> Sample(absl::Duration timeout = absl::InfiniteDuration(),
                             const bool* cancelled = nullptr);
  // Samples up to `n` items under one lock. Waits (up to timeout) for the
  // first; with `flexible`, returns what may proceed without waiting again;
  // otherwise waits for all n.
  Result<std::vector<SampledItem>> SampleBatch(int64_t n, bool flexible,
                                               absl::Duration timeout = absl::InfiniteDuration(),
                                               const bool* cancelled = nullptr);
  // Priority updates and deletions by key; unknown keys are ignored (they
  // may have been evicted) and counted in the returned value.
  Result<int64_t> MutatePriorities(const std::vector<std::pair<ItemKey, double>>& updates,
                                   const std::vector<ItemKey>& deletes);
  // Removes every item and zeroes the rate limiter.
  void Reset();
  // Wakes every blocked call with Cancelled; later calls fail too.
  void Close();
  // Cancels the calls that passed `flag` as their `cancelled` argument: sets
  // it under the table lock and wakes waiters, which return Cancelled.
  void Cancel(bool* flag);

  TableInfo Info() const;
  // Plain words: size, blocked callers and why (the rate limiter's reasons).
  std::string Explain() const;

  // One item of a snapshot: current priority and sample count, plus the item
  // as inserted (shared).
  struct SnapshotItem {
    ItemKey key = 0;
    uint64_t insert_seq = 0;  // snapshot items are in insertion order
    double priority = 0;
    int32_t times_sampled = 0;
    std::shared_ptr<const Item> item;
  };
  struct Snapshot {
    std::vector<SnapshotItem> items;
    TableInfo info;
    absl::Duration lock_held;  // how long the table was locked to take it
  };
  // A consistent snapshot for checkpoints. Holds the lock only to copy one
  // small record per item (a reference count bump; no trajectory copies).
  Snapshot TakeSnapshot() const;
  // All items with their current priority and times_sampled (copies each
  // item's metadata outside the lock).
  std::vector<std::shared_ptr<const Item>> Items() const;

  // Restoring from a checkpoint: inserts `item` as is (keeps times_sampled,
  // bypasses and does not count in the rate limiter). AlreadyExists for a
  // present key, ResourceExhausted when the table is full.
  Status RestoreItem(Item item);
  // Sets the rate limiter's counters (after RestoreItem calls).
  void SetRateLimiterState(const RateLimiterState& state);

  struct TableMetrics;  // series in the process metrics registry

 private:
  ReplayTable() = default;
  // Refreshes the blocked-callers gauges and blocked-seconds counters (a
  // registry collector, run at each scrape).
  void PublishBlocked();
  Status AwaitLocked(bool insert, absl::Duration timeout, const bool* cancelled)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status DeleteLocked(ItemKey key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  TableInfo InfoLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Result<SampledItem> SampleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::string name_;
  int64_t max_size_ = 0;
  int32_t max_times_sampled_ = 0;
  std::optional<Signature> signature_;
  absl::Duration watchdog_;
  std::unique_ptr<TableMetrics> metrics_;

  mutable absl::Mutex mu_;
  std::unique_ptr<ItemSelector> sampler_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<ItemSelector> remover_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<RateLimiter> limiter_ ABSL_GUARDED_BY(mu_);
  struct Entry {
    uint64_t seq = 0;  // insertion order (restores keep Fifo/Lifo order and heap ties)
    double priority = 0;
    int32_t times_sampled = 0;
    std::shared_ptr<const Item> item;  // immutable after insert
  };
  Status AddLocked(Item item) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::flat_hash_map<ItemKey, Entry> items_ ABSL_GUARDED_BY(mu_);
  int64_t evicted_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t deleted_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  int waiting_batches_ ABSL_GUARDED_BY(mu_) = 0;
  // Time calls spent blocked by the rate limiter, [0] inserts, [1] samples:
  // finished waits (whatever their outcome) and the waits in progress (how
  // many, and the sum of their start times), so the total is live.
  double blocked_done_[2] ABSL_GUARDED_BY(mu_) = {0, 0};
  int blocked_now_[2] ABSL_GUARDED_BY(mu_) = {0, 0};
  double blocked_start_sum_[2] ABSL_GUARDED_BY(mu_) = {0, 0};
  // Seconds blocked so far, waits in progress included.
  double BlockedSecondsLocked(int op, double now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;  // all-or-nothing batches waiting for n
};

}  // namespace flywheel::replay
