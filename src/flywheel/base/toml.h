// A strict TOML parser for flywheel's configuration files.
//
// Parses the subset of TOML v1.0 that configs need: comments, bare, quoted and
// dotted keys, [table] and [[array.of.tables]] headers, all four string forms
// (with escapes, \uXXXX / \UXXXXXXXX and the line-ending backslash), integers
// (decimal, 0x, 0o, 0b, with _ separators), floats (including inf and nan),
// booleans, arrays and inline tables. Dates and times are rejected with an
// error. Anything the spec forbids is an error, never a guess: every failure is
// InvalidArgument "source:line:column: what", with the column counted in
// characters (UTF-8 code points) from 1.
//
// Every value remembers where it was defined, so a config reader can report
// its own errors the same way:
//
//   FW_ASSIGN_OR_RETURN(toml::Value root, toml::ParseFile(path));
//   FW_ASSIGN_OR_RETURN(int64_t max_size, toml::GetInt(table, "max_size"));
//   if (max_size <= 0) return table.Find("max_size")->Error("max_size must be > 0");
//   // -> InvalidArgument "tables.toml:12:12: max_size must be > 0"
//
// Limits: containers nest at most kMaxDepth levels (tables, arrays and dotted
// key parts together); floats must fit a double (1e400 is an error).
//
// Thread-safety: Parse is stateless; a Value is immutable once returned and may
// be read from any number of threads.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "flywheel/base/status.h"

namespace flywheel::toml {

namespace internal_toml {
class Parser;
}

// How deep containers may nest; deeper input is an error, so walking a parsed
// tree recursively is safe.
inline constexpr int kMaxDepth = 128;

enum class Type { kString, kInt, kDouble, kBool, kArray, kTable };

// "string", "integer", "float", "boolean", "array" or "table".
std::string_view TypeName(Type type);

class Value {
 public:
  using Array = std::vector<Value>;
  // Key/value pairs in the order they appear in the file.
  using Table = std::vector<std::pair<std::string, Value>>;

  // An empty table with no location. Values are normally made by Parse.
  Value();

  Type type() const { return static_cast<Type>(data_.index()); }
  bool is_string() const { return type() == Type::kString; }
  bool is_int() const { return type() == Type::kInt; }
  bool is_double() const { return type() == Type::kDouble; }
  bool is_bool() const { return type() == Type::kBool; }
  bool is_array() const { return type() == Type::kArray; }
  bool is_table() const { return type() == Type::kTable; }

  // REQUIRES: the matching is_*() is true (checked; a wrong type aborts).
  const std::string& as_string() const;
  int64_t as_int() const;
  double as_double() const;
  bool as_bool() const;
  const Array& as_array() const;
  const Table& as_table() const;

  // The value stored under `key` if this is a table that has it, else nullptr.
  const Value* Find(std::string_view key) const;

  // Where the value was defined: the first character of a literal value, the
  // '[' of a table header, the key that implicitly created a table; 1:1 for
  // the root table. 0:0 for values not made by Parse.
  int line() const { return line_; }
  int column() const { return column_; }
  // The source name given to Parse (the path for ParseFile).
  std::string_view source() const;
  // "source:line:column".
  std::string Location() const;
  // InvalidArgument "source:line:column: message", for config readers.
  Status Error(std::string_view message) const;

 private:
  friend class internal_toml::Parser;
  // How a table came to be; TOML's redefinition rules depend on it.
  enum class Origin : uint8_t { kImplicit, kHeader, kDotted, kInline };

  std::variant<std::string, int64_t, double, bool, Array, Table> data_;
  // Position in `table` by key; maintained for tables only.
  std::map<std::string, size_t, std::less<>> index_;
  std::shared_ptr<const std::string> source_;
  int line_ = 0;
  int column_ = 0;
  Origin origin_ = Origin::kImplicit;  // tables only
  bool array_of_tables_ = false;       // arrays only: made by [[header]]
};

// Parses a whole document and returns its root table. `source_name` prefixes
// error messages and is kept in every value's location.
Result<Value> Parse(std::string_view text, std::string_view source_name = "<input>");

// Reads and parses the file at `path` (named by `path` in messages). A file
// that cannot be read returns the errno-derived status (NotFound, ...).
Result<Value> ParseFile(const std::string& path);

// Typed lookups for config readers. Each returns `table[key]` converted to the
// C++ type; if the key is missing, `default_value` when given, else
// InvalidArgument "<table location>: missing key \"key\"". A value of another
// type is InvalidArgument "<value location>: key: expected integer, got string".
// GetDouble also accepts an integer that a double represents exactly
// (`samples_per_insert = 4`).
// REQUIRES: table.is_table().
Result<std::string> GetString(const Value& table, std::string_view key,
                              std::optional<std::string_view> default_value = std::nullopt);
Result<int64_t> GetInt(const Value& table, std::string_view key,
                       std::optional<int64_t> default_value = std::nullopt);
Result<double> GetDouble(const Value& table, std::string_view key,
                         std::optional<double> default_value = std::nullopt);
Result<bool> GetBool(const Value& table, std::string_view key,
                     std::optional<bool> default_value = std::nullopt);

// Catches misspelt options: InvalidArgument at the first key of `table` that is
// not in `known` ("tables.toml:7:1: unknown key \"max_sise\" in table").
// REQUIRES: table.is_table().
Status CheckKeys(const Value& table, const std::vector<std::string_view>& known);

}  // namespace flywheel::toml
