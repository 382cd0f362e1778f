#include "flywheel/table/deletion_vector.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "flywheel/base/checksum.h"
#include "flywheel/format/internal/coding.h"

namespace flywheel::table {

using internal_format::Decoder;

namespace {
constexpr char kMagic[8] = {'F', 'W', 'D', 'V', '0', '0', '0', '1'};
}

bool DeletionVector::Contains(int64_t row) const {
  return std::binary_search(rows_.begin(), rows_.end(), row);
}

int64_t DeletionVector::LiveToPhysical(int64_t live) const {
  // rows_[j] - j is non-decreasing: the number of deleted rows before the
  // answer is the first j with rows_[j] - j > live.
  size_t lo = 0, hi = rows_.size();
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (rows_[mid] - static_cast<int64_t>(mid) > live) hi = mid;
    else lo = mid + 1;
  }
  return live + static_cast<int64_t>(lo);
}

DeletionVector DeletionVector::Union(const DeletionVector& other, bool* overlapped) const {
  std::vector<int64_t> out;
  out.reserve(rows_.size() + other.rows_.size());
  std::set_union(rows_.begin(), rows_.end(), other.rows_.begin(), other.rows_.end(),
                 std::back_inserter(out));
  if (overlapped) *overlapped = out.size() != rows_.size() + other.rows_.size();
  return DeletionVector(std::move(out));
}

std::string DeletionVector::Encode() const {
  std::string body;
  int64_t prev = -1;
  for (int64_t r : rows_) {
    internal_format::PutVarint(&body, static_cast<uint64_t>(r - prev));
    prev = r;
  }
  std::string out(kMagic, 8);
  internal_format::PutFixed64(&out, rows_.size());
  internal_format::PutFixed64(&out, Checksum64(body));
  return out + body;
}

Result<DeletionVector> DeletionVector::Decode(std::string_view data, int64_t num_rows,
                                              std::string_view what) {
  const std::string where = absl::StrCat("deletion vector ", AsAbsl(what));
  if (data.size() < 24 || std::string_view(data.data(), 8) != std::string_view(kMagic, 8)) {
    return absl::DataLossError(absl::StrCat(where, ": bad header"));
  }
  Decoder d(reinterpret_cast<const uint8_t*>(data.data()), data.size(), where);
  uint64_t skip = 0, count = 0, checksum = 0;
  FW_RETURN_IF_ERROR(d.Fixed64(&skip));
  FW_RETURN_IF_ERROR(d.Fixed64(&count));
  FW_RETURN_IF_ERROR(d.Fixed64(&checksum));
  if (Checksum64(data.data() + 24, data.size() - 24) != checksum) {
    return absl::DataLossError(absl::StrCat(where, ": checksum mismatch"));
  }
  if (count > static_cast<uint64_t>(num_rows)) {
    return absl::DataLossError(absl::StrCat(where, ": ", count, " rows exceed fragment size ", num_rows));
  }
  std::vector<int64_t> rows;
  rows.reserve(count);
  int64_t prev = -1;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t delta = 0;
    FW_RETURN_IF_ERROR(d.Varint(&delta));
    if (delta == 0 || delta > static_cast<uint64_t>(num_rows)) return d.Error("bad row delta");
    prev += static_cast<int64_t>(delta);
    if (prev >= num_rows) return d.Error("row past the fragment end");
    rows.push_back(prev);
  }
  if (!d.done()) return d.Error("trailing bytes");
  return DeletionVector(std::move(rows));
}

}  // namespace flywheel::table
