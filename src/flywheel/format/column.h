// In-memory columns and record batches.
//
// A Column is an Arrow-like view: a values buffer, int64 offsets for
// variable-length types, and an optional validity bitmap, each a Buffer that
// keeps whatever owns its bytes alive (a heap vector, a decoded page, or a
// memory-mapped shard file). Columns are immutable once built and cheap to
// copy (buffers are shared).
//
// Layout per type (docs/format/shard.md, "Page body", uses the same):
//  - fixed-width: values = length * type.fixed_width() bytes, row-major.
//  - binary/string/list<T>: offsets = int64[length + 1], non-decreasing; row i
//    is values[offsets[i] .. offsets[i+1]) in bytes (binary/string) or in
//    elements of T (list). offsets[0] may be non-zero (slices).
//  - validity: bit i (LSB first) is 1 when row i is valid; empty = all valid.
//  - nested types hold child columns, as Arrow does:
//    - list<T> (T not a non-null scalar): offsets = int64[length + 1] into
//      children[0], the elements (a column of T of any length);
//    - map<K, V>: offsets as a list's, into children[0] (the keys, never
//      null) and children[1] (the values), which have the same length;
//    - struct: children[i] is field i, each of `length` rows; no offsets or
//      values. A null struct row's children hold whatever the writer put
//      there; readers must not interpret it.
//
// Thread-safety: immutable; safe to share across threads.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/format/types.h"

namespace flywheel::format {

struct Buffer {
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> owner;

  template <typename T>
  const T* as() const { return reinterpret_cast<const T*>(data); }
  bool empty() const { return size == 0; }

  static Buffer Copy(const void* data, size_t size);
  // `size` uninitialised bytes, 64-byte aligned; *data receives the writable
  // pointer. Gathers fill every byte, so zero-filling would be wasted work.
  static Buffer Allocate(size_t size, uint8_t** data);
  static Buffer FromString(std::string s);
  template <typename T>
  static Buffer FromVector(std::vector<T> v) {
    auto holder = std::make_shared<std::vector<T>>(std::move(v));
    return Buffer{reinterpret_cast<const uint8_t*>(holder->data()), holder->size() * sizeof(T),
                  holder};
  }
};

struct Column {
  DataType type;
  int64_t length = 0;
  int64_t null_count = 0;
  Buffer values;
  Buffer offsets;
  Buffer validity;
  // Child columns of nested types (above); empty otherwise.
  std::vector<Column> children;

  bool IsValid(int64_t i) const {
    return validity.empty() || ((validity.data[i >> 3] >> (i & 7)) & 1);
  }
  const int64_t* offsets_data() const { return offsets.as<int64_t>(); }
  // Row i of a binary/string column. REQUIRES: type is binary or string.
  std::string_view GetBytes(int64_t i) const {
    const int64_t* o = offsets_data();
    return {reinterpret_cast<const char*>(values.data) + o[i], static_cast<size_t>(o[i + 1] - o[i])};
  }
  // Raw bytes of row i of a fixed-width column.
  const uint8_t* FixedRow(int64_t i) const { return values.data + i * type.fixed_width(); }

  // Rows [offset, offset+length) sharing buffers where possible.
  Column Slice(int64_t offset, int64_t length) const;
  // Checks buffer sizes and offsets against the type and length; `what` names
  // the column in the error.
  Status Validate(std::string_view what) const;
  // Number of value elements (fixed: rows*elements; var: offsets span;
  // struct: rows).
  int64_t num_values() const;
  // Rows [first, last) of the elements of list/map rows [offset, offset+n)
  // as offsets give them. REQUIRES: a list or map column.
  std::pair<int64_t, int64_t> ChildRange(int64_t offset, int64_t n) const {
    const int64_t* o = offsets_data();
    return {o[offset], o[offset + n]};
  }
};

// Columns of one schema with the same number of rows.
struct RecordBatch {
  Schema schema;
  std::vector<Column> columns;
  int64_t num_rows = 0;

  // Checks that columns match the schema (types, nullability) and lengths.
  Status Validate() const;
};

// Builders for tests, examples and the CLI.
template <typename T>
Column MakeFixedColumn(const DataType& type, std::vector<T> values) {
  Column c;
  c.type = type;
  const size_t width = type.fixed_width();
  c.length = width == 0 ? 0 : static_cast<int64_t>(values.size() * sizeof(T) / width);
  c.values = Buffer::FromVector(std::move(values));
  return c;
}
Column MakeStringColumn(const std::vector<std::string>& values, bool binary = false);
template <typename T>
Column MakeListColumn(TypeId elem, const std::vector<std::vector<T>>& rows) {
  std::vector<int64_t> offsets{0};
  std::vector<T> values;
  for (const auto& r : rows) {
    values.insert(values.end(), r.begin(), r.end());
    offsets.push_back(static_cast<int64_t>(values.size()));
  }
  Column c;
  c.type = DataType::List(elem);
  c.length = static_cast<int64_t>(rows.size());
  c.values = Buffer::FromVector(std::move(values));
  c.offsets = Buffer::FromVector(std::move(offsets));
  return c;
}
// Sets validity from one bool per row (true = valid).
void SetValidity(Column& c, const std::vector<bool>& valid);
// A column of `length` nulls (or zero/empty values when !nullable).
Column MakeNullColumn(const DataType& type, int64_t length, bool nullable);

// For a struct column: nulls that a non-nullable field holds only in rows
// where the struct itself is null are not values (Arrow and Parquet readers
// give them so); clears them. InvalidArgument naming the field when such a
// field is null in a row where the struct is valid.
Status ClearChildNullsUnderNullRows(Column* c, std::string_view what);

// Schema evolution of nested columns: whether values of type `from` read as
// `to` because fields were added at the end of structs (at any depth, also
// inside lists and maps), each added field nullable.
bool IsWidening(const DataType& from, const DataType& to);
// `c` as type `to` (REQUIRES: IsWidening(c.type, to)): the added struct
// fields read null. Shares c's buffers.
Column WidenColumn(const Column& c, const DataType& to);

// Concatenates columns of one type into a new column.
Column ConcatColumns(const std::vector<Column>& parts);
// Gathers rows `indices` (each in [0, c.length)) into a new column.
Column TakeColumn(const Column& c, const int64_t* indices, size_t n);

}  // namespace flywheel::format
