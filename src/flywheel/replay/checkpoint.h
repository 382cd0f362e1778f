// Checkpoints of replay tables, written as flywheel tables.
//
// Checkpoint() snapshots a set of replay tables and writes them under
// `root/<id>/` (id: 20 zero-padded decimal digits, increasing) as three
// ordinary flywheel tables, `items`, `chunks` and `tables`, then publishes
// `root/<id>/CHECKPOINT` with put-if-absent. Only a directory with that marker
// is a checkpoint; Restore() ignores the rest and the next Checkpoint() deletes
// them. Layout and rules: docs/replay.md, "Checkpoints".
//
// Checkpoint() does not block the tables: it holds each table's lock only for
// ReplayTable::TakeSnapshot() (one small record per item, chunks shared, not
// copied) and encodes and writes in the caller's thread while inserts and
// samples continue. Each table's snapshot is consistent; snapshots of
// different tables are taken one after the other, before any writing.
//
// Restored tables hold the same items, priorities, times_sampled, options and
// rate limiter counters; see docs/replay.md "Limitations" for what is not
// kept (insertion order of items with non-increasing keys, selector seeds).
//
// Thread-safety: Checkpoint() and Restore() may run concurrently with any
// calls on the tables. At most one process may checkpoint into one `root` at
// a time: a checkpoint deletes the incomplete directories it finds below its
// own id, and would delete another writer's checkpoint in progress.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "flywheel/base/status.h"
#include "flywheel/io/file_system.h"
#include "flywheel/replay/table.h"

namespace flywheel::replay {

struct CheckpointOptions {
  // Storage; default: the local file system with fsync on publish.
  std::shared_ptr<io::FileSystem> fs;
  // Complete checkpoints to keep, counting the new one; older ones are
  // deleted after the new one is published. >= 1; 0 keeps all. Default 3.
  int keep_last = 3;
  // Rows are appended to the `chunks` and `items` tables in batches of at
  // most max_batch_rows rows (and, for chunks, about max_batch_bytes bytes
  // of chunk data), bounding the extra memory a checkpoint needs. Each batch
  // is one commit of that table. Both >= 1.
  int64_t max_batch_bytes = int64_t{64} << 20;
  int64_t max_batch_rows = int64_t{1} << 16;
  Status Validate() const;
};

struct CheckpointResult {
  int64_t id = 0;
  std::string path;  // root/<id>
  // Longest ReplayTable::Snapshot::lock_held of this checkpoint's snapshots: about
  // the most any insert or sample waited for it (the figure also counts the
  // snapshot's own wait to acquire the lock).
  absl::Duration max_pause;
  // The same per table, in the order given.
  std::vector<std::pair<std::string, absl::Duration>> pauses;
  int64_t num_items = 0;   // over all tables
  int64_t num_chunks = 0;  // distinct chunks written
  uint64_t chunk_bytes = 0;
  absl::Duration duration;       // whole call, including cleanup
  std::vector<int64_t> deleted;  // checkpoint ids removed (retention and incomplete ones)
};

// Snapshots `tables` and writes checkpoint `root/<next id>`. InvalidArgument
// for a null table, repeated table names or bad options; IO errors name the
// file. An error leaves an incomplete directory that restores ignore.
Result<CheckpointResult> Checkpoint(const std::vector<ReplayTable*>& tables, const std::string& root,
                                    const CheckpointOptions& options = {});

struct CheckpointListing {
  int64_t id = 0;
  std::string path;
  bool complete = false;  // has its CHECKPOINT marker
};
// Checkpoint directories under `root`, oldest first. An absent root is empty.
Result<std::vector<CheckpointListing>> ListCheckpoints(
    const std::string& root, std::shared_ptr<io::FileSystem> fs = nullptr);

inline constexpr int64_t kLatestCheckpoint = -1;

struct RestoreOptions {
  // Storage; default: the local file system.
  std::shared_ptr<io::FileSystem> fs;
  // Seed of restored Uniform and Prioritized samplers (descriptions carry none).
  uint64_t seed = 0;
  // ReplayTableOptions::watchdog of the restored tables (not checkpointed).
  absl::Duration watchdog = absl::Seconds(10);
};

struct RestoredCheckpoint {
  int64_t id = 0;
  // In the order they were given to Checkpoint().
  std::vector<std::unique_ptr<ReplayTable>> tables;
  // Each table's signature as checkpointed (nullopt: none), by name; the
  // tables were created with them.
  std::map<std::string, std::optional<Signature>> signatures;
};

// Rebuilds the tables of checkpoint `id` (kLatestCheckpoint: the newest
// complete one): options from the `tables` table, every item with its
// priority and times_sampled (in the checkpoint's row order), each chunk once
// and shared, then the rate limiter counters. NotFound when there is no such
// (complete) checkpoint; DataLoss naming the checkpoint and what is wrong when
// its data are inconsistent (e.g. an item references a chunk the `chunks`
// table lacks); FailedPrecondition for a newer format version.
Result<RestoredCheckpoint> Restore(const std::string& root, int64_t id = kLatestCheckpoint,
                                   const RestoreOptions& options = {});

// The selector a Describe() text names: "Uniform", "Prioritized(priority_exponent=X)",
// "Fifo", "Lifo", "MinHeap", "MaxHeap". InvalidArgument quoting the text otherwise.
Result<std::unique_ptr<ItemSelector>> SelectorFromDescription(std::string_view text,
                                                              uint64_t seed = 0);

// Signatures as the `tables` table stores them: JSON text
// [{"name": "obs", "type": "float32[4]"}, ...]. Column names must be UTF-8.
Result<std::string> SignatureToJson(const Signature& signature);
Result<Signature> SignatureFromJson(std::string_view json);

}  // namespace flywheel::replay
