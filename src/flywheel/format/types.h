// Column types, fields and schemas of flywheel shard files and tables.
//
// A DataType is a scalar (bool, ints, floats), a fixed-shape tensor of a
// scalar ("uint8[32,32,3]": every row holds exactly that many elements),
// variable-length binary or utf8 string, or a nested type: a list of any type
// ("list<int32>", "list<string?>", "list<list<int64>>"), a struct
// ("struct<role: string, content: string?>") or a map ("map<string, float64>").
// '?' after a type marks that value nullable, at every level: a null list, an
// empty list and a list holding a null are three different values. Text forms
// are what the CLI, Python and the table manifest use; docs/format/types.md
// gives the grammar and docs/format/shard.md the byte layout.
//
// A list of non-null scalars ("list<int32>", token ids) keeps the packed
// form it always had: `elem` names the scalar and the values are one flat
// buffer. Every other list, and every struct and map, holds child Fields
// (is_nested()); there is one representation per type, so == compares types.
//
// Thread-safety: value types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "flywheel/base/status.h"

namespace flywheel::format {

enum class TypeId : uint8_t {
  kNone = 0,
  kBool = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kUInt8 = 6,
  kUInt16 = 7,
  kUInt32 = 8,
  kUInt64 = 9,
  kFloat16 = 10,
  kFloat32 = 11,
  kFloat64 = 12,
  kBinary = 20,
  kString = 21,
  kList = 22,
  kStruct = 23,
  kMap = 24,
};

bool IsScalar(TypeId id);
// Bytes per element of a scalar type (bool is one byte, 0 or 1); 0 otherwise.
size_t ScalarSize(TypeId id);
std::string_view TypeIdName(TypeId id);

struct Field;

struct DataType {
  TypeId id = TypeId::kNone;
  TypeId elem = TypeId::kNone;   // element type of a packed kList (a non-null scalar)
  std::vector<int64_t> shape;    // tensor shape of a scalar type; empty = one value
  // Child fields of a nested type: a list's element ("item"), a struct's
  // fields, a map's "key" and "value". Empty for every other type.
  std::vector<Field> children;

  // (Defined below Field, which `children` needs complete.)
  static DataType Scalar(TypeId id);
  static DataType Tensor(TypeId id, std::vector<int64_t> shape);
  static DataType List(TypeId elem);
  static DataType String();
  static DataType Binary();
  // A list of `item` values; the packed form when they are non-null scalars.
  static DataType ListOf(DataType item, bool item_nullable);
  static DataType Struct(std::vector<Field> fields);
  // Keys are never null; values may be.
  static DataType Map(DataType key, DataType value, bool value_nullable);

  // Struct, map, or a list of anything but non-null scalars.
  bool is_nested() const;
  // Nesting depth: 0 for scalars, tensors, strings and binary; 1 for a list
  // of scalars, a struct of scalars; and so on.
  int depth() const;

  // Fixed-width types store `fixed_width()` bytes per row.
  bool is_fixed_width() const { return IsScalar(id); }
  bool is_variable_length() const { return !IsScalar(id); }
  // Elements per row of a fixed-width type (product of the shape).
  int64_t num_elements() const;
  size_t fixed_width() const { return ScalarSize(id) * static_cast<size_t>(num_elements()); }
  // Element type of the values buffer: the scalar itself, a packed list's
  // element, or uint8 (string, binary); kNone for nested types (no values).
  TypeId value_type() const;

  std::string ToString() const;
  // Parses the text form: "int64", "float32[16]", "uint8[32,32,3]", "string",
  // "binary", "list<int32>", "list<struct<role: string, content: string?>?>",
  // "map<string, float64>". Errors quote the text and give the 1-based
  // character where parsing failed.
  static Result<DataType> Parse(std::string_view text);
  Status Validate() const;

  bool operator==(const DataType& o) const;
};

struct Field {
  std::string name;
  DataType type;
  bool nullable = false;
  // Stable id used by tables for schema evolution; -1 when unassigned.
  int32_t id = -1;
  // JSON text of the value that rows written before this field existed read
  // as (tables only; empty = null). E.g. "0", "1.5", "\"unknown\"".
  std::string default_json;

  bool operator==(const Field& o) const = default;
};

inline DataType DataType::Scalar(TypeId id) {
  DataType t;
  t.id = id;
  return t;
}
inline DataType DataType::Tensor(TypeId id, std::vector<int64_t> shape) {
  DataType t;
  t.id = id;
  t.shape = std::move(shape);
  return t;
}
inline DataType DataType::List(TypeId elem) {
  DataType t;
  t.id = TypeId::kList;
  t.elem = elem;
  return t;
}
inline DataType DataType::String() { return Scalar(TypeId::kString); }
inline DataType DataType::Binary() { return Scalar(TypeId::kBinary); }
inline bool DataType::is_nested() const { return !children.empty(); }

inline bool DataType::operator==(const DataType& o) const {
  return id == o.id && elem == o.elem && shape == o.shape && children == o.children;
}

// A field name as the type grammar writes it: bare when it is made of
// letters, digits, '_', '.', '-' and '$', otherwise double-quoted with '"'
// and '\' escaped.
std::string QuoteFieldName(std::string_view name);

struct Schema {
  std::vector<Field> fields;

  int num_fields() const { return static_cast<int>(fields.size()); }
  // Index of the field with `name`, or -1 (a linear scan).
  int FieldIndex(std::string_view name) const;
  // Name -> index of every field, for looking up many names (a loop of
  // FieldIndex calls is quadratic in the column count). Views into `fields`:
  // valid while they are unchanged.
  std::unordered_map<std::string_view, int> NameIndex() const;
  // Names unique and non-empty, types valid.
  Status Validate() const;
  // "x:int64, emb:float32[16], name:string?" ('?' marks nullable).
  std::string ToString() const;
  static Result<Schema> Parse(std::string_view text);

  bool operator==(const Schema& o) const = default;
};

}  // namespace flywheel::format
