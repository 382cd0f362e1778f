// Statistics per leaf of nested columns (docs/format/shard.md, "Leaf
// statistics"): for every leaf path of a struct, map or nested list column
// (`meta.lang`, `messages[].role`, `scores[key]`), how many values it holds,
// how many are null, and bounds for numbers and short strings. Shard writers
// store them in the footer metadata key `flywheel.leaf_stats`; tables merge
// them over their data files (Table::LeafStatistics).
//
// Only values that exist are counted: the slots of a struct's fields in rows
// where the struct is null, and elements of null lists, are not values.
//
// Thread-safety: value types and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "flywheel/base/status.h"
#include "flywheel/format/column.h"

namespace flywheel::format {

inline constexpr char kLeafStatsKey[] = "flywheel.leaf_stats";
// Strings longer than this get no bounds (as Parquet writers do).
inline constexpr size_t kMaxStatsStringBytes = 64;

struct LeafStats {
  int64_t values = 0;  // slots under valid parents, nulls included
  int64_t nulls = 0;
  // Numbers (as float64; NaN never counts) or strings (bytes, compared
  // unsigned), when any non-null value had bounds.
  bool has_bounds = false;
  bool text = false;
  double min = 0, max = 0;
  std::string min_text, max_text;
  // Some string was too long for bounds: min/max_text are then not bounds.
  bool bounds_incomplete = false;
};

// Leaf path -> statistics.
using LeafStatsMap = std::map<std::string, LeafStats>;

// Adds the leaves of nested column `c` (named `name`) to *out.
void AccumulateLeafStats(const Column& c, const std::string& name, LeafStatsMap* out);
// Merges `from` into *into (counts add, bounds widen).
void MergeLeafStats(const LeafStatsMap& from, LeafStatsMap* into);
std::string LeafStatsToJson(const LeafStatsMap& stats);
Result<LeafStatsMap> LeafStatsFromJson(std::string_view json);

}  // namespace flywheel::format
