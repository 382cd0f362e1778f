// TrajectoryWriter: turns a stream of steps into chunks and items.
//
// Append() adds one step (a value for some columns); every `chunk_length`
// steps of a column become one compressed Chunk. CreateItem() inserts an
// item into a table whose trajectory is the last k steps of chosen columns;
// steps still pending are chunked first, so items never copy steps and
// overlapping items (n-step, sequence windows) share chunks. EndEpisode()
// closes the episode: later items cannot reach back into it.
//
// This is the in-process writer (it inserts into replay::Table objects
// directly); the remote writer speaks the same calls over gRPC.
//
// Thread-safety: not thread-safe; one writer per actor thread.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "flywheel/base/status.h"
#include "flywheel/format/codec.h"
#include "flywheel/replay/table.h"

namespace flywheel::replay {

struct ReplayWriterOptions {
  // Steps per chunk (>= 1). Larger chunks compress better; smaller ones let
  // items be inserted sooner. Default 16.
  int64_t chunk_length = 16;
  format::Codec codec = format::Codec::kLz4;
  // How many past steps of a column stay referenceable (>= chunk_length).
  // Default 10000.
  int64_t max_history = 10000;

  Status Validate() const;
};

// One column's value for one step: `data` holds type.fixed_width() bytes.
struct StepValue {
  std::string column;
  format::DataType type;
  const void* data = nullptr;
};

// The step-to-chunk logic every writer shares (this in-process writer and
// the remote one): buffers steps per column, turns every `chunk_length`
// steps into a chunk, and slices the last k steps of a column into a
// TrajectoryColumn over those chunks.
//
// Thread-safety: not thread-safe.
class StepBuffer {
 public:
  explicit StepBuffer(ReplayWriterOptions options);

  // One step: every column of the episode gets exactly one value.
  Status Append(const std::vector<StepValue>& step);
  // Chunks pending steps of the listed columns and returns, for each,
  // its last `num_steps` steps.
  Result<std::vector<TrajectoryColumn>> Slice(const std::vector<std::pair<std::string, int64_t>>& trajectory);
  // Forgets the episode; returns the keys of the chunks it held.
  std::vector<ChunkKey> EndEpisode();
  // Keys of chunks that fell out of max_history since the last call.
  std::vector<ChunkKey> TakeDropped();
  // A fresh key for a chunk or an item (random base, counter).
  uint64_t NextKey();
  int64_t episode_steps() const { return episode_steps_; }

 private:
  struct ColumnState {
    format::DataType type;
    std::string pending;            // steps not yet chunked
    int64_t pending_steps = 0;
    std::deque<ChunkRef> chunks;    // oldest first
    int64_t first_step = 0;         // episode step index of chunks.front()'s first step
    int64_t total_steps = 0;        // steps appended this episode
  };
  Status FlushColumn(const std::string& name, ColumnState& c);

  ReplayWriterOptions options_;
  std::map<std::string, ColumnState> columns_;
  std::vector<ChunkKey> dropped_;
  int64_t episode_steps_ = 0;
  uint64_t key_base_;
  uint64_t key_counter_ = 0;
};

class TrajectoryWriter {
 public:
  // `tables` are looked up by name in CreateItem; they must outlive the writer.
  TrajectoryWriter(std::map<std::string, ReplayTable*> tables, ReplayWriterOptions options = {});

  // Appends one step. A column keeps the type of its first value.
  Status Append(const std::vector<StepValue>& step) { return steps_.Append(step); }
  // Inserts an item into `table` made of the last `num_steps` steps of each
  // listed column (column -> num_steps). Blocks on the table's rate limiter
  // up to `timeout`. Returns the new item's key.
  Result<ItemKey> CreateItem(const std::string& table, double priority,
                             const std::vector<std::pair<std::string, int64_t>>& trajectory,
                             absl::Duration timeout = absl::InfiniteDuration());
  // Chunks pending steps and forgets the episode's history.
  Status EndEpisode() {
    steps_.EndEpisode();
    return absl::OkStatus();
  }

  int64_t episode_steps() const { return steps_.episode_steps(); }

 private:
  std::map<std::string, ReplayTable*> tables_;
  StepBuffer steps_;
};

}  // namespace flywheel::replay
