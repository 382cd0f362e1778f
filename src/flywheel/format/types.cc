#include "flywheel/format/types.h"

#include <charconv>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "flywheel/base/utf8.h"
#include "flywheel/format/limits.h"

namespace flywheel::format {
namespace {

struct TypeName {
  TypeId id;
  std::string_view name;
  size_t size;
};
constexpr TypeName kTypes[] = {
    {TypeId::kBool, "bool", 1},       {TypeId::kInt8, "int8", 1},
    {TypeId::kInt16, "int16", 2},     {TypeId::kInt32, "int32", 4},
    {TypeId::kInt64, "int64", 8},     {TypeId::kUInt8, "uint8", 1},
    {TypeId::kUInt16, "uint16", 2},   {TypeId::kUInt32, "uint32", 4},
    {TypeId::kUInt64, "uint64", 8},   {TypeId::kFloat16, "float16", 2},
    {TypeId::kFloat32, "float32", 4}, {TypeId::kFloat64, "float64", 8},
    {TypeId::kBinary, "binary", 0},   {TypeId::kString, "string", 0},
    {TypeId::kList, "list", 0},
};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

Result<TypeId> ParseTypeId(std::string_view name) {
  for (const auto& t : kTypes) {
    if (t.name == name) return t.id;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown type '", AsAbsl(name), "'"));
}

}  // namespace

bool IsScalar(TypeId id) {
  const auto v = static_cast<uint8_t>(id);
  return v >= 1 && v <= 12;
}

size_t ScalarSize(TypeId id) {
  for (const auto& t : kTypes) {
    if (t.id == id) return t.size;
  }
  return 0;
}

std::string_view TypeIdName(TypeId id) {
  for (const auto& t : kTypes) {
    if (t.id == id) return t.name;
  }
  return "none";
}

int64_t DataType::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

TypeId DataType::value_type() const {
  if (IsScalar(id)) return id;
  if (id == TypeId::kList) return elem;
  return TypeId::kUInt8;
}

std::string DataType::ToString() const {
  if (id == TypeId::kList) return absl::StrCat("list<", AsAbsl(TypeIdName(elem)), ">");
  std::string out(TypeIdName(id));
  if (!shape.empty()) {
    out += "[";
    for (size_t i = 0; i < shape.size(); ++i) {
      if (i) out += ",";
      out += std::to_string(shape[i]);
    }
    out += "]";
  }
  return out;
}

Status DataType::Validate() const {
  if (id == TypeId::kList) {
    if (!IsScalar(elem)) {
      return absl::InvalidArgumentError("list element type must be a fixed-width scalar");
    }
    if (!shape.empty()) return absl::InvalidArgumentError("list types take no shape");
    return absl::OkStatus();
  }
  if (id == TypeId::kBinary || id == TypeId::kString) {
    if (elem != TypeId::kNone) return absl::InvalidArgumentError("only list types take an element type");
    if (!shape.empty()) return absl::InvalidArgumentError("binary/string types take no shape");
    return absl::OkStatus();
  }
  if (!IsScalar(id)) return absl::InvalidArgumentError("invalid type id");
  if (elem != TypeId::kNone) return absl::InvalidArgumentError("only list types take an element type");
  if (shape.size() > static_cast<size_t>(kMaxTensorRank)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor rank must be at most ", kMaxTensorRank));
  }
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0) return absl::InvalidArgumentError(absl::StrCat("tensor dimension ", d, " must be positive"));
    if (n > kMaxTensorElements / d) {
      return absl::InvalidArgumentError(absl::StrCat("tensor shape is too large (at most ", kMaxTensorElements,
                                                     " elements per value)"));
    }
    n *= d;
  }
  return absl::OkStatus();
}

Result<DataType> DataType::Parse(std::string_view text) {
  text = Trim(text);
  if (text.empty()) return absl::InvalidArgumentError("type '': empty type name");
  DataType t;
  if (text.substr(0, 5) == "list<") {
    if (text.back() != '>') {
      return absl::InvalidArgumentError(absl::StrCat("type '", AsAbsl(text), "': missing '>'"));
    }
    FW_ASSIGN_OR_RETURN_CTX(t.elem, ParseTypeId(Trim(text.substr(5, text.size() - 6))),
                            "type '", AsAbsl(text), "'");
    t.id = TypeId::kList;
  } else {
    const size_t bracket = text.find('[');
    FW_ASSIGN_OR_RETURN_CTX(t.id, ParseTypeId(Trim(text.substr(0, bracket))), "type '",
                            AsAbsl(text), "'");
    if (bracket != std::string_view::npos) {
      if (text.back() != ']') {
        return absl::InvalidArgumentError(absl::StrCat("type '", AsAbsl(text), "': missing ']'"));
      }
      std::string_view dims = text.substr(bracket + 1, text.size() - bracket - 2);
      while (true) {
        const size_t comma = dims.find(',');
        std::string_view d = Trim(dims.substr(0, comma));
        int64_t v = 0;
        auto [p, ec] = std::from_chars(d.data(), d.data() + d.size(), v);
        if (ec != std::errc() || p != d.data() + d.size()) {
          return absl::InvalidArgumentError(
              absl::StrCat("type '", AsAbsl(text), "': bad dimension '", AsAbsl(d), "'"));
        }
        t.shape.push_back(v);
        if (comma == std::string_view::npos) break;
        dims.remove_prefix(comma + 1);
      }
    }
  }
  FW_RETURN_IF_ERROR_CTX(t.Validate(), "type '", AsAbsl(text), "'");
  return t;
}

int Schema::FieldIndex(std::string_view name) const {
  for (size_t i = 0; i < fields.size(); ++i) {
    if (fields[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

std::unordered_map<std::string_view, int> Schema::NameIndex() const {
  std::unordered_map<std::string_view, int> out;
  out.reserve(fields.size());
  for (size_t i = 0; i < fields.size(); ++i) out.emplace(fields[i].name, static_cast<int>(i));
  return out;
}

Status Schema::Validate() const {
  if (fields.empty()) return absl::InvalidArgumentError("schema has no fields");
  if (static_cast<int64_t>(fields.size()) > kMaxColumns) {
    return absl::InvalidArgumentError(
        absl::StrCat("schema has ", fields.size(), " columns; flywheel tables hold at most ", kMaxColumns));
  }
  absl::flat_hash_set<std::string_view> names;
  names.reserve(fields.size());
  for (size_t i = 0; i < fields.size(); ++i) {
    const Field& f = fields[i];
    if (f.name.empty()) return absl::InvalidArgumentError(absl::StrCat("field ", i, " has no name"));
    if (!IsValidUtf8(f.name)) {
      return absl::InvalidArgumentError(absl::StrCat("field ", i, " name is not valid UTF-8"));
    }
    if (!names.insert(f.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate field name '", f.name, "'"));
    }
    FW_RETURN_IF_ERROR_CTX(f.type.Validate(), "field '", f.name, "'");
  }
  return absl::OkStatus();
}

std::string Schema::ToString() const {
  std::string out;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) out += ", ";
    out += fields[i].name + ":" + fields[i].type.ToString() + (fields[i].nullable ? "?" : "");
  }
  return out;
}

Result<Schema> Schema::Parse(std::string_view text) {
  Schema schema;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ',';
    if (c == '[' || c == '<') depth++;
    if (c == ']' || c == '>') depth--;
    if (c != ',' || depth > 0) continue;
    std::string_view item = Trim(text.substr(start, i - start));
    start = i + 1;
    if (item.empty()) continue;
    const size_t colon = item.find(':');
    if (colon == std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("schema item '", AsAbsl(item), "' is not name:type"));
    }
    Field f;
    f.name = std::string(Trim(item.substr(0, colon)));
    std::string_view type = Trim(item.substr(colon + 1));
    if (!type.empty() && type.back() == '?') {
      f.nullable = true;
      type.remove_suffix(1);
    }
    FW_ASSIGN_OR_RETURN_CTX(f.type, DataType::Parse(type), "field '", f.name, "'");
    schema.fields.push_back(std::move(f));
  }
  FW_RETURN_IF_ERROR(schema.Validate());
  return schema;
}

}  // namespace flywheel::format
