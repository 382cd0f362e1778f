// The loader's resumable state: a few integers and the identity of what it reads.
//
// Because the order is a pure function of (seed, epoch, position) and
// batches are cut from the global order by position (partition.h), the
// position in the epoch — positions consumed over all ranks — is all a loader
// needs to resume, at any world size or batch size. The JSON form is what
// `state_dict()` returns; its fields are specified in docs/loader.md,
// "State". Parsing is strict: an unknown or missing key, a wrong type or an
// out-of-range value is an error naming the field.
//
// Thread-safety: value types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/loader/order.h"

namespace flywheel::loader {

inline constexpr int kLoaderStateVersion = 1;

// Identity of one table the loader reads, with what its order depends on.
struct TableState {
  std::string uri;
  int64_t version = 0;     // table version read
  int64_t rows = 0;        // live rows of that version
  int64_t block_rows = 0;  // block shuffle: rows per block; 0 in row/no shuffle

  bool operator==(const TableState&) const = default;
};

struct MixtureState {
  std::vector<double> weights;  // one per table, > 0
  std::vector<int64_t> drawn;   // draws each table has served so far (its stream position)

  bool operator==(const MixtureState&) const = default;
};

struct LoaderState {
  int format_version = kLoaderStateVersion;
  uint64_t seed = 0;
  int64_t epoch = 0;
  // Positions of `epoch` consumed over all ranks (the next global batch starts here).
  int64_t consumed = 0;
  bool shuffle = true;
  ShuffleMode shuffle_mode = ShuffleMode::kRow;
  int64_t window_blocks = 0;  // block shuffle only; 0 otherwise
  std::vector<TableState> tables;
  std::optional<MixtureState> mixture;  // present iff more than one table

  // Internal consistency (counts, ranges); FromJson calls it.
  Status Validate() const;
  std::string ToJson() const;
  static Result<LoaderState> FromJson(std::string_view json);

  bool operator==(const LoaderState&) const = default;
};

// Checks that `saved` can resume a loader whose own state is `current`: same
// seed, order settings, tables (uri, version, rows) and mixture weights.
// Epoch and position may differ. Errors name the field that differs.
Status CheckResumable(const LoaderState& saved, const LoaderState& current);

}  // namespace flywheel::loader
