// Splitting an epoch's positions between ranks.
//
// Global batch g is the rank-ordered concatenation of the ranks' batches: the
// global batch that starts at position S (the number of positions consumed so
// far, over all ranks) covers [S, S + W*B), and rank r of W with batch size B
// serves [S + r*B, S + (r+1)*B). The tail of an epoch (fewer than W*B
// positions left) is split as evenly as possible in rank order, or dropped
// with drop_last. Nothing here depends on threads or timing: a rank's batches
// are a pure function of (served positions, S, B, W, r). docs/loader.md,
// "Partitioning".
//
// Thread-safety: pure functions and value types.
#pragma once

#include <cstdint>

#include "flywheel/base/status.h"

namespace flywheel::loader {

struct PartitionOptions {
  // Rows per rank per batch, >= 1.
  int64_t batch_size = 0;
  // This process's rank in [0, world_size).
  int rank = 0;
  // Number of ranks sharing the epoch, >= 1.
  int world_size = 1;
  // true: the epoch ends at the last full global batch (every rank's batch
  // has exactly batch_size rows). false: the tail is served, split evenly.
  bool drop_last = false;

  Status Validate() const;
  int64_t global_batch() const { return batch_size * world_size; }
};

// Positions [begin, end) of the epoch's order.
struct PositionRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// How many of an epoch's `n` positions are served: n, or with drop_last the
// largest multiple of world_size * batch_size not above n.
int64_t ServedPositions(int64_t n, const PartitionOptions& options);

// Number of global batches (= batches each rank yields) in an epoch that
// serves `served` positions: ceil(served / (world_size * batch_size)).
int64_t BatchesPerEpoch(int64_t served, const PartitionOptions& options);

// This rank's positions in the global batch starting at `start`, which covers
// R = min(W*B, served - start) positions: with q = R / W and m = R % W, rank r
// gets q + (r < m ? 1 : 0) positions starting at start + r*q + min(r, m).
// A full global batch gives every rank B; in the tail a rank may get fewer,
// or none when R < W. REQUIRES: 0 <= start <= served.
PositionRange RankBatch(int64_t served, int64_t start, const PartitionOptions& options);

// Start of the global batch after the one starting at `start`.
inline int64_t NextGlobalStart(int64_t served, int64_t start, const PartitionOptions& options) {
  const int64_t next = start + options.global_batch();
  return next < served ? next : served;
}

}  // namespace flywheel::loader
