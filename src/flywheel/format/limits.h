// Limits shared by every flywheel writer and reader of tables and shards:
// writers refuse what readers would refuse, so every committed version stays
// readable. docs/format/limits.md lists them with the readers of foreign
// formats (Parquet, tar, JSONL/CSV, replay) and how each bounds allocation.
#pragma once

#include <cstdint>

namespace flywheel::format {

// Columns in one schema (Schema::Validate; the shard footer reader).
inline constexpr int64_t kMaxColumns = 100000;
// Tensor rank and elements per tensor value (DataType::Validate; the shard footer).
inline constexpr int kMaxTensorRank = 8;
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 32;
// Nesting depth of one type (lists, structs, maps inside each other;
// DataType::Validate, the type parser, the shard footer, Arrow import).
inline constexpr int kMaxNestingDepth = 32;
// Fields of one struct.
inline constexpr int64_t kMaxStructFields = 10000;
// Rows in one data file (shard footer).
inline constexpr int64_t kMaxRowsPerFile = int64_t{1} << 48;
// Bytes of one page section (values, offsets or validity) before compression.
inline constexpr int64_t kMaxPageSectionBytes = int64_t{1} << 40;

}  // namespace flywheel::format
