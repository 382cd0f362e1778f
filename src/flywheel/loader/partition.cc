#include "flywheel/loader/partition.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace flywheel::loader {

Status PartitionOptions::Validate() const {
  if (batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch_size must be >= 1, got ", batch_size));
  }
  if (world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("world_size must be >= 1, got ", world_size));
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank must be in [0, world_size = ", world_size, "), got ", rank));
  }
  if (batch_size > (int64_t{1} << 40) / world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size * world_size is too large (", batch_size, " * ", world_size, ")"));
  }
  return absl::OkStatus();
}

int64_t ServedPositions(int64_t n, const PartitionOptions& options) {
  if (!options.drop_last) return n;
  return n / options.global_batch() * options.global_batch();
}

int64_t BatchesPerEpoch(int64_t served, const PartitionOptions& options) {
  return (served + options.global_batch() - 1) / options.global_batch();
}

PositionRange RankBatch(int64_t served, int64_t start, const PartitionOptions& options) {
  const int64_t w = options.world_size;
  const int64_t r = options.rank;
  const int64_t left = std::max<int64_t>(0, served - start);
  const int64_t total = std::min(options.global_batch(), left);
  const int64_t q = total / w;
  const int64_t m = total % w;
  PositionRange out;
  out.begin = start + r * q + std::min(r, m);
  out.end = out.begin + q + (r < m ? 1 : 0);
  return out;
}

}  // namespace flywheel::loader
