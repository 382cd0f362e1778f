// Deletion vectors: the sorted set of deleted row offsets of one fragment.
//
// Deletes never rewrite data files; a new version points the fragment at a
// new deletion-vector file (docs/format/table.md, "Deletion vectors").
//
// Thread-safety: value type.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flywheel/base/status.h"

namespace flywheel::table {

class DeletionVector {
 public:
  DeletionVector() = default;
  // REQUIRES: `rows` sorted ascending, unique.
  explicit DeletionVector(std::vector<int64_t> rows) : rows_(std::move(rows)) {}

  const std::vector<int64_t>& rows() const { return rows_; }
  int64_t count() const { return static_cast<int64_t>(rows_.size()); }
  bool Contains(int64_t row) const;
  // Physical offset of the `live`-th non-deleted row. O(log n).
  int64_t LiveToPhysical(int64_t live) const;
  // Union; reports whether the two sets overlapped.
  DeletionVector Union(const DeletionVector& other, bool* overlapped) const;

  std::string Encode() const;
  // `what` names the file in errors; rows must be < num_rows.
  static Result<DeletionVector> Decode(std::string_view data, int64_t num_rows, std::string_view what);

 private:
  std::vector<int64_t> rows_;
};

}  // namespace flywheel::table
