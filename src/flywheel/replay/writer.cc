#include "flywheel/replay/writer.h"

#include <sys/random.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "flywheel/base/rng.h"

namespace flywheel::replay {

Status ReplayWriterOptions::Validate() const {
  if (chunk_length < 1) return absl::InvalidArgumentError("chunk_length must be >= 1");
  if (max_history < chunk_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_history (", max_history, ") must be >= chunk_length (", chunk_length, ")"));
  }
  return absl::OkStatus();
}

StepBuffer::StepBuffer(ReplayWriterOptions options) : options_(options) {
  uint64_t seed = 0;
  if (getrandom(&seed, sizeof seed, 0) != static_cast<ssize_t>(sizeof seed)) {
    seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  key_base_ = seed;
}

uint64_t StepBuffer::NextKey() { return Mix64(key_base_ ^ Mix64(++key_counter_)); }

Status StepBuffer::Append(const std::vector<StepValue>& step) {
  FW_RETURN_IF_ERROR(options_.Validate());
  for (const auto& v : step) {
    if (!v.type.is_fixed_width() || v.data == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("append: column '", v.column, "' needs a fixed-width value, got ",
                                                     v.type.ToString()));
    }
    auto it = columns_.find(v.column);
    if (it == columns_.end()) continue;
    const ColumnState& c = it->second;
    if (!(c.type == v.type)) {
      return absl::InvalidArgumentError(absl::StrCat("append: column '", v.column, "' holds ", c.type.ToString(),
                                                     ", got a value of ", v.type.ToString()));
    }
  }
  // Every column of the episode gets a value at every step, so items never
  // pair misaligned steps (regression: a column missing from a step went
  // unnoticed until its next value).
  for (const auto& entry : columns_) {
    const std::string& name = entry.first;
    const bool present = std::any_of(step.begin(), step.end(), [&](const StepValue& v) { return v.column == name; });
    if (!present) {
      return absl::InvalidArgumentError(absl::StrCat("append: step ", episode_steps_, " has no value for column '",
                                                     name, "'; give every column a value at every step"));
    }
  }
  for (const auto& v : step) {
    auto [it, inserted] = columns_.try_emplace(v.column);
    if (inserted && episode_steps_ > 0) {
      columns_.erase(it);
      return absl::InvalidArgumentError(absl::StrCat("append: column '", v.column, "' is new at step ", episode_steps_,
                                                     "; an episode's columns are fixed by its first step"));
    }
    if (inserted) it->second.type = v.type;
  }
  for (const auto& v : step) {
    ColumnState& c = columns_[v.column];
    c.pending.append(static_cast<const char*>(v.data), v.type.fixed_width());
    c.pending_steps++;
    c.total_steps++;
    if (c.pending_steps >= options_.chunk_length) FW_RETURN_IF_ERROR(FlushColumn(v.column, c));
  }
  episode_steps_++;
  return absl::OkStatus();
}

Status StepBuffer::FlushColumn(const std::string& name, ColumnState& c) {
  if (c.pending_steps == 0) return absl::OkStatus();
  ChunkRef chunk;
  if (options_.codec == format::Codec::kNone) {
    // The buffered steps are the chunk's bytes: hand them over instead of
    // copying them, and start a buffer for the next chunk (one allocation
    // per chunk either way).
    FW_ASSIGN_OR_RETURN_CTX(
        chunk, Chunk::FromCompressed(NextKey(), c.type, c.pending_steps, format::Codec::kNone, std::move(c.pending)),
        "column '", name, "'");
    c.pending = std::string();
    c.pending.reserve(c.type.fixed_width() * static_cast<size_t>(options_.chunk_length));
  } else {
    FW_ASSIGN_OR_RETURN_CTX(chunk,
                            Chunk::Make(NextKey(), c.type, c.pending_steps, c.pending.data(), options_.codec),
                            "column '", name, "'");
    c.pending.clear();
  }
  c.chunks.push_back(std::move(chunk));
  c.pending_steps = 0;
  // Forget chunks that lie entirely beyond max_history.
  while (c.chunks.size() > 1 && c.total_steps - (c.first_step + c.chunks.front()->num_steps()) >= options_.max_history) {
    c.first_step += c.chunks.front()->num_steps();
    dropped_.push_back(c.chunks.front()->key());
    c.chunks.pop_front();
  }
  return absl::OkStatus();
}

Result<std::vector<TrajectoryColumn>> StepBuffer::Slice(
    const std::vector<std::pair<std::string, int64_t>>& trajectory) {
  if (trajectory.empty()) return absl::InvalidArgumentError("create_item: empty trajectory");
  std::vector<TrajectoryColumn> out;
  for (const auto& [name, num_steps] : trajectory) {
    auto it = columns_.find(name);
    if (it == columns_.end()) {
      return absl::NotFoundError(absl::StrCat("create_item: no column '", name, "' has been appended"));
    }
    ColumnState& c = it->second;
    if (num_steps < 1 || num_steps > c.total_steps) {
      return absl::InvalidArgumentError(absl::StrCat("create_item: column '", name, "' has ", c.total_steps,
                                                     " steps this episode; cannot take the last ", num_steps));
    }
    FW_RETURN_IF_ERROR(FlushColumn(name, c));
    const int64_t start = c.total_steps - num_steps;
    if (start < c.first_step) {
      return absl::OutOfRangeError(absl::StrCat("create_item: column '", name, "' step ", start,
                                                " was already dropped (max_history ", options_.max_history, ")"));
    }
    TrajectoryColumn col;
    col.name = name;
    int64_t chunk_start = c.first_step;
    for (const auto& chunk : c.chunks) {
      const int64_t chunk_end = chunk_start + chunk->num_steps();
      if (chunk_end > start) {
        if (col.chunks.empty()) col.offset = start - chunk_start;
        col.chunks.push_back(chunk);
      }
      chunk_start = chunk_end;
    }
    col.length = num_steps;
    out.push_back(std::move(col));
  }
  return out;
}

std::vector<ChunkKey> StepBuffer::EndEpisode() {
  std::vector<ChunkKey> keys = TakeDropped();
  for (const auto& [name, c] : columns_) {
    for (const auto& chunk : c.chunks) keys.push_back(chunk->key());
  }
  columns_.clear();
  episode_steps_ = 0;
  return keys;
}

std::vector<ChunkKey> StepBuffer::TakeDropped() { return std::exchange(dropped_, {}); }

TrajectoryWriter::TrajectoryWriter(std::map<std::string, ReplayTable*> tables, ReplayWriterOptions options)
    : tables_(std::move(tables)), steps_(options) {}

Result<ItemKey> TrajectoryWriter::CreateItem(const std::string& table, double priority,
                                             const std::vector<std::pair<std::string, int64_t>>& trajectory,
                                             absl::Duration timeout) {
  auto t = tables_.find(table);
  if (t == tables_.end()) return absl::NotFoundError(absl::StrCat("create_item: no table '", table, "'"));
  Item item;
  FW_ASSIGN_OR_RETURN(item.columns, steps_.Slice(trajectory));
  (void)steps_.TakeDropped();  // in process, dropped chunks need no notice
  item.key = steps_.NextKey();
  item.priority = priority;
  const ItemKey key = item.key;
  FW_RETURN_IF_ERROR(t->second->Insert(std::move(item), timeout));
  return key;
}

}  // namespace flywheel::replay
