#include "flywheel/format/types.h"

#include <algorithm>
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
    {TypeId::kList, "list", 0},       {TypeId::kStruct, "struct", 0},
    {TypeId::kMap, "map", 0},
};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
  return s;
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
  if (id == TypeId::kBinary || id == TypeId::kString) return TypeId::kUInt8;
  return TypeId::kNone;
}

int DataType::depth() const {
  int d = 0;
  for (const Field& c : children) d = std::max(d, c.type.depth());
  return id == TypeId::kList || id == TypeId::kStruct || id == TypeId::kMap ? d + 1 : 0;
}

DataType DataType::ListOf(DataType item, bool item_nullable) {
  if (!item_nullable && IsScalar(item.id) && item.shape.empty() && !item.is_nested()) {
    return List(item.id);
  }
  DataType t;
  t.id = TypeId::kList;
  t.children.push_back(Field{"item", std::move(item), item_nullable});
  return t;
}

DataType DataType::Struct(std::vector<Field> fields) {
  DataType t;
  t.id = TypeId::kStruct;
  t.children = std::move(fields);
  return t;
}

DataType DataType::Map(DataType key, DataType value, bool value_nullable) {
  DataType t;
  t.id = TypeId::kMap;
  t.children.push_back(Field{"key", std::move(key), false});
  t.children.push_back(Field{"value", std::move(value), value_nullable});
  return t;
}

std::string QuoteFieldName(std::string_view name) {
  bool bare = !name.empty();
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == '-' || c == '$' || static_cast<unsigned char>(c) >= 0x80;
    bare = bare && ok;
  }
  if (bare) return std::string(name);
  std::string out = "\"";
  for (char c : name) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

namespace {

std::string ChildText(const Field& f) { return f.type.ToString() + (f.nullable ? "?" : ""); }

}  // namespace

std::string DataType::ToString() const {
  if (id == TypeId::kList) {
    if (children.size() == 1) return absl::StrCat("list<", ChildText(children[0]), ">");
    return absl::StrCat("list<", AsAbsl(TypeIdName(elem)), ">");
  }
  if (id == TypeId::kStruct) {
    std::string out = "struct<";
    for (size_t i = 0; i < children.size(); ++i) {
      if (i) out += ", ";
      out += QuoteFieldName(children[i].name) + ": " + ChildText(children[i]);
    }
    return out + ">";
  }
  if (id == TypeId::kMap && children.size() == 2) {
    return absl::StrCat("map<", ChildText(children[0]), ", ", ChildText(children[1]), ">");
  }
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

namespace {

Status ValidateType(const DataType& t, int depth) {
  if (depth > kMaxNestingDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("types nest at most ", kMaxNestingDepth, " levels deep (lists, structs, maps)"));
  }
  const bool nested_id = t.id == TypeId::kStruct || t.id == TypeId::kMap ||
                         (t.id == TypeId::kList && !t.children.empty());
  if (!nested_id && !t.children.empty()) return absl::InvalidArgumentError("only nested types have child fields");
  if (nested_id) {
    if (t.elem != TypeId::kNone) return absl::InvalidArgumentError("only packed list types take an element type");
    if (!t.shape.empty()) return absl::InvalidArgumentError("nested types take no shape");
  }
  if (t.id == TypeId::kList) {
    if (t.children.empty()) {
      if (!IsScalar(t.elem)) {
        return absl::InvalidArgumentError("list element type must be a type (list<int32>, list<string?>, ...)");
      }
      if (!t.shape.empty()) return absl::InvalidArgumentError("list types take no shape");
      return absl::OkStatus();
    }
    if (t.children.size() != 1) return absl::InvalidArgumentError("a list has exactly one element field");
    const Field& item = t.children[0];
    if (!item.nullable && IsScalar(item.type.id) && item.type.shape.empty()) {
      return absl::InvalidArgumentError("a list of non-null scalars must use the packed form (DataType::List)");
    }
    return ValidateType(item.type, depth + 1);
  }
  if (t.id == TypeId::kStruct) {
    if (t.children.empty()) return absl::InvalidArgumentError("a struct needs at least one field");
    if (static_cast<int64_t>(t.children.size()) > kMaxStructFields) {
      return absl::InvalidArgumentError(absl::StrCat("a struct holds at most ", kMaxStructFields, " fields"));
    }
    absl::flat_hash_set<std::string_view> names;
    for (size_t i = 0; i < t.children.size(); ++i) {
      const Field& f = t.children[i];
      if (f.name.empty()) return absl::InvalidArgumentError(absl::StrCat("struct field ", i, " has no name"));
      if (!IsValidUtf8(f.name)) {
        return absl::InvalidArgumentError(absl::StrCat("struct field ", i, " name is not valid UTF-8"));
      }
      if (!names.insert(f.name).second) {
        return absl::InvalidArgumentError(absl::StrCat("duplicate struct field name '", f.name, "'"));
      }
      FW_RETURN_IF_ERROR_CTX(ValidateType(f.type, depth + 1), "struct field '", f.name, "'");
    }
    return absl::OkStatus();
  }
  if (t.id == TypeId::kMap) {
    if (t.children.size() != 2) return absl::InvalidArgumentError("a map has exactly a key and a value field");
    const Field& k = t.children[0];
    if (k.nullable) return absl::InvalidArgumentError("map keys cannot be null");
    if (!((IsScalar(k.type.id) && k.type.shape.empty()) || k.type.id == TypeId::kString ||
          k.type.id == TypeId::kBinary)) {
      return absl::InvalidArgumentError(
          absl::StrCat("map keys must be scalars, strings or binary, not ", k.type.ToString()));
    }
    return ValidateType(t.children[1].type, depth + 1);
  }
  if (t.id == TypeId::kBinary || t.id == TypeId::kString) {
    if (t.elem != TypeId::kNone) return absl::InvalidArgumentError("only list types take an element type");
    if (!t.shape.empty()) return absl::InvalidArgumentError("binary/string types take no shape");
    return absl::OkStatus();
  }
  if (!IsScalar(t.id)) return absl::InvalidArgumentError("invalid type id");
  if (t.elem != TypeId::kNone) return absl::InvalidArgumentError("only list types take an element type");
  if (t.shape.size() > static_cast<size_t>(kMaxTensorRank)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor rank must be at most ", kMaxTensorRank));
  }
  int64_t n = 1;
  for (int64_t d : t.shape) {
    if (d <= 0) return absl::InvalidArgumentError(absl::StrCat("tensor dimension ", d, " must be positive"));
    if (n > kMaxTensorElements / d) {
      return absl::InvalidArgumentError(absl::StrCat("tensor shape is too large (at most ", kMaxTensorElements,
                                                     " elements per value)"));
    }
    n *= d;
  }
  return absl::OkStatus();
}

// Recursive-descent parser of the type grammar (docs/format/types.md).
// Errors carry the 1-based character where parsing failed.
class TypeParser {
 public:
  explicit TypeParser(std::string_view text) : text_(text) {}

  Result<DataType> ParseWhole() {
    FW_ASSIGN_OR_RETURN(DataType t, ParseType(0));
    Skip();
    if (pos_ != text_.size()) return Error(absl::StrCat("unexpected '", AsAbsl(text_.substr(pos_, 1)), "'"));
    return t;
  }

 private:
  Status Error(std::string_view what) const { return ErrorAt(pos_, what); }
  Status ErrorAt(size_t at, std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("type '", AsAbsl(text_), "', character ", at + 1, ": ", AsAbsl(what)));
  }
  void Skip() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n')) ++pos_;
  }
  bool Eat(char c) {
    Skip();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  Status Expect(char c) {
    if (Eat(c)) return absl::OkStatus();
    if (pos_ >= text_.size()) return Error(absl::StrCat("missing '", std::string(1, c), "'"));
    return Error(absl::StrCat("expected '", std::string(1, c), "', found '", AsAbsl(text_.substr(pos_, 1)), "'"));
  }
  std::string_view Word() {
    Skip();
    const size_t start = pos_;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_') ++pos_;
      else break;
    }
    return text_.substr(start, pos_ - start);
  }
  // A value type followed by an optional '?'.
  Result<std::pair<DataType, bool>> ParseChild(int depth) {
    FW_ASSIGN_OR_RETURN(DataType t, ParseType(depth));
    return std::make_pair(std::move(t), Eat('?'));
  }
  Result<std::string> FieldName() {
    Skip();
    if (pos_ < text_.size() && text_[pos_] == '"') {
      const size_t open = pos_++;
      std::string name;
      while (pos_ < text_.size() && text_[pos_] != '"') {
        if (text_[pos_] == '\\' && pos_ + 1 < text_.size()) ++pos_;
        name += text_[pos_++];
      }
      if (pos_ >= text_.size()) return ErrorAt(open, "unterminated quoted field name");
      ++pos_;
      return name;
    }
    const size_t start = pos_;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == ':' || c == ',' || c == '<' || c == '>' || c == '?' || c == ' ' || c == '\t' || c == '\n' ||
          c == '"') {
        break;
      }
      ++pos_;
    }
    if (pos_ == start) return Error("expected a field name");
    return std::string(text_.substr(start, pos_ - start));
  }

  Result<DataType> ParseType(int depth) {
    Skip();
    const size_t at = pos_;
    if (depth > kMaxNestingDepth) {
      return ErrorAt(at, absl::StrCat("types nest at most ", kMaxNestingDepth, " levels deep"));
    }
    const std::string_view name = Word();
    if (name.empty()) {
      if (pos_ >= text_.size()) return Error(at == 0 ? "empty type name" : "unknown type ''");
      if (text_[pos_] == '>') return Error("unknown type ''");
      return Error(absl::StrCat("expected a type, found '", AsAbsl(text_.substr(pos_, 1)), "'"));
    }
    if (name == "list") {
      FW_RETURN_IF_ERROR(Expect('<'));
      FW_ASSIGN_OR_RETURN(auto item, ParseChild(depth + 1));
      FW_RETURN_IF_ERROR(Expect('>'));
      return DataType::ListOf(std::move(item.first), item.second);
    }
    if (name == "map") {
      FW_RETURN_IF_ERROR(Expect('<'));
      Skip();
      const size_t key_at = pos_;
      FW_ASSIGN_OR_RETURN(auto key, ParseChild(depth + 1));
      if (key.second) return ErrorAt(key_at, "map keys cannot be null");
      FW_RETURN_IF_ERROR(Expect(','));
      FW_ASSIGN_OR_RETURN(auto value, ParseChild(depth + 1));
      FW_RETURN_IF_ERROR(Expect('>'));
      DataType t = DataType::Map(std::move(key.first), std::move(value.first), value.second);
      if (Status s = ValidateType(t, depth); !s.ok()) return ErrorAt(key_at, std::string(s.message()));
      return t;
    }
    if (name == "struct") {
      FW_RETURN_IF_ERROR(Expect('<'));
      std::vector<Field> fields;
      absl::flat_hash_set<std::string> names;
      do {
        Skip();
        const size_t field_at = pos_;
        FW_ASSIGN_OR_RETURN(std::string fname, FieldName());
        if (!names.insert(fname).second) {
          return ErrorAt(field_at, absl::StrCat("duplicate struct field name '", fname, "'"));
        }
        FW_RETURN_IF_ERROR(Expect(':'));
        FW_ASSIGN_OR_RETURN(auto ft, ParseChild(depth + 1));
        fields.push_back(Field{std::move(fname), std::move(ft.first), ft.second});
      } while (Eat(','));
      FW_RETURN_IF_ERROR(Expect('>'));
      return DataType::Struct(std::move(fields));
    }
    DataType t;
    bool found = false;
    for (const auto& k : kTypes) {
      if (k.name == name && k.id != TypeId::kList) {
        t.id = k.id;
        found = true;
      }
    }
    if (!found) return ErrorAt(at, absl::StrCat("unknown type '", AsAbsl(name), "'"));
    if (Eat('[')) {
      while (true) {
        Skip();
        const size_t dim_at = pos_;
        size_t end = pos_;
        while (end < text_.size() && text_[end] != ',' && text_[end] != ']') ++end;
        std::string_view d = Trim(text_.substr(pos_, end - pos_));
        int64_t v = 0;
        auto [p, ec] = std::from_chars(d.data(), d.data() + d.size(), v);
        if (d.empty() || ec != std::errc() || p != d.data() + d.size()) {
          return ErrorAt(dim_at, absl::StrCat("bad dimension '", AsAbsl(d), "'"));
        }
        pos_ = end;
        t.shape.push_back(v);
        if (Eat(',')) continue;
        if (Eat(']')) break;
        return Error("missing ']'");
      }
      if (Status s = ValidateType(t, depth); !s.ok()) return ErrorAt(at, std::string(s.message()));
    }
    return t;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

Status DataType::Validate() const { return ValidateType(*this, 0); }

Result<DataType> DataType::Parse(std::string_view text) {
  text = Trim(text);
  if (text.empty()) return absl::InvalidArgumentError("type '': empty type name");
  FW_ASSIGN_OR_RETURN(DataType t, TypeParser(text).ParseWhole());
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
