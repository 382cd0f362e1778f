// The replay server's write-ahead log of inserts (docs/replay.md,
// "Durability"): with ServerOptions::insert_log, every item is appended here
// after the table took it and before it is acknowledged, so an acknowledged
// item survives kill -9 of the server (the bytes are in the kernel once
// write() returns) and, with sync = kAlways or kInterval, a power loss up to
// that policy. On Start the server restores the newest checkpoint and then
// re-inserts the items logged after it.
//
// Layout: CHECKPOINT_DIR/inserts/
//   segment-<n>.log   n = 0, 1, ...: records, appended; a new segment starts
//                     on every Open and before every checkpoint's snapshot
//   covered-<id>      a checkpoint `id` holds every item of segments <= the
//                     number this file names (written when it completed)
// Segment file: "FWINSLG1" then records [u32 length][u64 XXH3-64][payload];
// payload 'C' (a chunk: key, step type, steps, codec, stored bytes), written
// once per segment before the first item that uses it, or 'I' (an item:
// table, key, priority, columns as chunk keys + offset + length). Replay stops
// at the first torn or damaged record (the tail a crash cut short) and says
// how many bytes it left.
//
// What is not logged: samples, priority updates and deletions after the
// checkpoint; replayed items come back with times_sampled 0, and items
// removed since the checkpoint come back from it.
//
// Thread-safety: Append, Rotate and Covered may be called concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flywheel/base/status.h"
#include "flywheel/replay/table.h"

namespace flywheel::replay {

enum class InsertLogSync {
  kNone,      // write() only: survives kill -9, not a power loss
  kInterval,  // fdatasync every `sync_interval` from a background thread
  kAlways,    // fdatasync before each item is acknowledged
};

// "none", "interval", "always".
Result<InsertLogSync> ParseInsertLogSync(std::string_view text);

struct InsertLogReplay {
  int64_t segments = 0;
  int64_t items = 0;        // item records read
  int64_t chunks = 0;       // chunk records read
  int64_t torn_bytes = 0;   // bytes after the last good record of the last segment
};

class InsertLog {
 public:
  // Opens `dir` (created if absent) for appending: a new segment after the
  // highest one present.
  static Result<std::unique_ptr<InsertLog>> Open(const std::string& dir, InsertLogSync sync,
                                                 absl::Duration sync_interval = absl::Milliseconds(100));
  ~InsertLog();

  // Appends `item` of table `table` (and those of its chunks this segment
  // lacks); returns once the sync policy is met.
  Status Append(const std::string& table, const Item& item);
  // Starts a new segment; returns the number of the last one closed (every
  // item appended before this call is in a segment <= it).
  Result<int64_t> Rotate();
  // Checkpoint `checkpoint_id` completed after Rotate() returned `segment`:
  // records it and deletes the segments it covers.
  Status Covered(int64_t checkpoint_id, int64_t segment);

  // Items logged after checkpoint `checkpoint_id` (-1: none restored, every
  // segment), in log order, each with its table name. Stops at a torn tail.
  static Result<InsertLogReplay> Replay(const std::string& dir, int64_t checkpoint_id,
                                        const std::function<Status(const std::string& table, Item item)>& fn);

  // One segment's bytes (`path` names it in errors; `last`: the newest
  // segment, where a torn tail is expected): decodes its records, calling
  // `fn` for each item. The fuzz target (fuzz/insert_log_fuzz.cc) passes
  // verify_checksums = false to reach the decoders.
  static Status ReplaySegment(std::string_view data, const std::string& path, bool last, InsertLogReplay* out,
                              const std::function<Status(const std::string& table, Item item)>& fn,
                              bool verify_checksums = true);

  int64_t items_appended() const { return items_appended_.load(); }
  int64_t bytes_appended() const { return bytes_appended_.load(); }

 private:
  InsertLog(std::string dir, InsertLogSync sync, absl::Duration interval);
  Status OpenSegmentLocked(int64_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SyncLoop();

  const std::string dir_;
  const InsertLogSync sync_;
  const absl::Duration interval_;
  absl::Mutex mu_;
  int fd_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t segment_ ABSL_GUARDED_BY(mu_) = -1;
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;
  // Group commit: appenders queue their records in pending_; one of them
  // (the leader) writes everything queued with one write() (and one
  // fdatasync under kAlways) while the others wait for written_seq_.
  std::string pending_ ABSL_GUARDED_BY(mu_);
  uint64_t queued_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t written_seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  Status broken_ ABSL_GUARDED_BY(mu_);  // a failed write: every later append fails
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_set<uint64_t> logged_chunks_ ABSL_GUARDED_BY(mu_);  // of this segment
  std::thread syncer_;
  std::atomic<int64_t> items_appended_{0}, bytes_appended_{0};
};

}  // namespace flywheel::replay
