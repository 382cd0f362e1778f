// Columns from JSON values and back, for every type, nested ones included:
// what `flywheel table append` (JSON lines), `table head`, JSONL ingest and
// tests use.
//
// The mapping (docs/format/types.md, "JSON"):
//  - null (or an absent struct key) is null; a non-nullable value that is
//    null is an error naming its path;
//  - numbers and booleans are scalars (range-checked for the integer type);
//    tensors are (nested) arrays of exactly their element count;
//  - string is a JSON string; binary is {"hex": "..."} (a plain string is
//    taken as its UTF-8 bytes);
//  - list is an array; struct an object (keys outside the struct are an
//    error); map an object when its keys are strings, otherwise an array of
//    [key, value] pairs.
//
// Thread-safety: a builder is used by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "flywheel/base/status.h"
#include "flywheel/format/column.h"
#include "flywheel/format/types.h"

namespace flywheel::format {

class JsonColumnBuilder {
 public:
  explicit JsonColumnBuilder(Field field);
  ~JsonColumnBuilder();
  JsonColumnBuilder(JsonColumnBuilder&&) noexcept;
  JsonColumnBuilder& operator=(JsonColumnBuilder&&) noexcept;

  // Appends one row given as JSON text. Errors name the path inside the
  // value ("messages[2].role: expected a string, got 3"); after an error the
  // builder must not be used again.
  Status AppendText(std::string_view json_text);
  // Appends a null row (a default value when the field is not nullable:
  // zero, empty; never used for rows a user gave).
  Status AppendNull();
  int64_t length() const;
  // The column built so far; the builder is then empty.
  Column Finish();

  // For readers that parse JSON themselves (internal/json_column.h).
  struct Impl;
  Impl* impl() { return impl_.get(); }

 private:
  std::unique_ptr<Impl> impl_;
};

// Row `row` of `c` as JSON text (null for a null row).
std::string ValueToJson(const Column& c, int64_t row);

// The type that JSON values call for, merged over many values (JSONL
// schema inference): objects are structs (fields in first-seen order, a
// field some objects lack is nullable), arrays lists (of the merged element
// type), integers int64 (uint64 above int64's range), numbers with a
// fraction or exponent float64 (integers and floats together: float64),
// strings string, true/false bool; a value seen null somewhere is nullable;
// a type seen only as null (or as elements of empty arrays) is string.
// Values whose shapes conflict (an object and an array, a string and a
// number at the same path) are an error naming the path.
class JsonTypeInferrer {
 public:
  JsonTypeInferrer();
  ~JsonTypeInferrer();
  Status AddText(std::string_view json_text);
  // The merged type and whether a null was seen at the top.
  DataType type() const;
  bool nullable() const;

  struct Shape;
  Shape* shape() { return shape_.get(); }

 private:
  std::unique_ptr<Shape> shape_;
};

}  // namespace flywheel::format
