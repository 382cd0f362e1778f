#include "flywheel/base/toml.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <system_error>
#include <type_traits>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "flywheel/base/utf8.h"

namespace flywheel::toml {
namespace {

constexpr size_t kMaxFileBytes = size_t{64} << 20;

bool IsBareKeyChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsHexDigit(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
int HexValue(char c) {
  if (IsDigit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return c - 'A' + 10;
}
// Control characters TOML forbids in strings and comments (tab is allowed).
bool IsForbiddenControl(unsigned char c) { return (c < 0x20 && c != '\t') || c == 0x7f; }


// `s` as a double-quoted TOML basic string, for messages.
std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (IsForbiddenControl(c)) {
          out += absl::StrFormat("\\u%04X", c);
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
  return out;
}

// A key part as TOML would write it: bare if it can be, else quoted.
std::string KeyPartText(std::string_view part) {
  bool bare = !part.empty();
  for (const char c : part) bare = bare && IsBareKeyChar(c);
  return bare ? std::string(part) : Quote(part);
}

[[noreturn]] void DieWrongType(const Value& v, Type wanted) {
  static constexpr const char* kAccessor[] = {"string", "int", "double", "bool", "array", "table"};
  std::fprintf(stderr, "flywheel::toml: as_%s() called on a value of type %s at %s\n",
               kAccessor[static_cast<int>(wanted)], std::string(TypeName(v.type())).c_str(),
               v.Location().c_str());
  std::abort();
}

}  // namespace

std::string_view TypeName(Type type) {
  switch (type) {
    case Type::kString:
      return "string";
    case Type::kInt:
      return "integer";
    case Type::kDouble:
      return "float";
    case Type::kBool:
      return "boolean";
    case Type::kArray:
      return "array";
    case Type::kTable:
      return "table";
  }
  return "unknown";
}

Value::Value() : data_(Table{}) {}

// Vectors of values grow by moving them, not by copying subtrees.
static_assert(std::is_nothrow_move_constructible_v<Value>);

const std::string& Value::as_string() const {
  if (!is_string()) DieWrongType(*this, Type::kString);
  return *std::get_if<std::string>(&data_);
}
int64_t Value::as_int() const {
  if (!is_int()) DieWrongType(*this, Type::kInt);
  return *std::get_if<int64_t>(&data_);
}
double Value::as_double() const {
  if (!is_double()) DieWrongType(*this, Type::kDouble);
  return *std::get_if<double>(&data_);
}
bool Value::as_bool() const {
  if (!is_bool()) DieWrongType(*this, Type::kBool);
  return *std::get_if<bool>(&data_);
}
const Value::Array& Value::as_array() const {
  if (!is_array()) DieWrongType(*this, Type::kArray);
  return *std::get_if<Array>(&data_);
}
const Value::Table& Value::as_table() const {
  if (!is_table()) DieWrongType(*this, Type::kTable);
  return *std::get_if<Table>(&data_);
}

const Value* Value::Find(std::string_view key) const {
  const Table* table = std::get_if<Table>(&data_);
  if (table == nullptr) return nullptr;
  const auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  return &(*table)[it->second].second;
}

std::string_view Value::source() const {
  if (source_ == nullptr) return {};
  return *source_;
}

std::string Value::Location() const {
  if (line_ == 0) return std::string(source());
  return absl::StrCat(AsAbsl(source()), ":", line_, ":", column_);
}

Status Value::Error(std::string_view message) const {
  const std::string where = Location();
  if (where.empty()) return absl::InvalidArgumentError(AsAbsl(message));
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", AsAbsl(message)));
}

namespace internal_toml {

struct Loc {
  int line = 1;
  int column = 1;
};

struct KeyPart {
  std::string name;
  Loc loc;
};

// The key path of the value being parsed, for messages. A chain of nodes on the
// stack, turned into text ("a.b[2].c") only when an error needs it.
struct Path {
  std::string_view base;  // used when parent is null
  const Path* parent = nullptr;
  const std::vector<KeyPart>* parts = nullptr;  // key parts below parent, or
  size_t index = 0;                             // the array index, if parts is null
  std::string ToString() const;
};

// Recursive-descent parser over the whole document. Positions only move
// forward, so line:column is kept incrementally (LocAt).
class Parser {
 public:
  Parser(std::string_view text, std::string_view source)
      : text_(text), source_(std::make_shared<const std::string>(source)) {}

  Result<Value> Run();

 private:
  // --- positions and errors ---
  Loc LocAt(size_t pos);
  Status ErrorAt(Loc loc, std::string_view message) const {
    return absl::InvalidArgumentError(
        absl::StrCat(AsAbsl(*source_), ":", loc.line, ":", loc.column, ": ", AsAbsl(message)));
  }
  Status ErrorHere(std::string_view message) { return ErrorAt(LocAt(pos_), message); }
  // What is at `pos`, for messages: "'x'", "U+0007", "a newline", "end of input".
  std::string Describe(size_t pos) const;
  static std::string At(const Value& v) { return absl::StrCat(v.line_, ":", v.column_); }

  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  bool LookingAt(std::string_view s) const {
    return pos_ <= text_.size() && text_.size() - pos_ >= s.size() &&
           text_.substr(pos_, s.size()) == s;
  }
  // Length of the newline at `pos` (1 for LF, 2 for CRLF), 0 if none.
  size_t NewlineAt(size_t pos) const {
    if (pos < text_.size() && text_[pos] == '\n') return 1;
    if (pos + 1 < text_.size() && text_[pos] == '\r' && text_[pos + 1] == '\n') return 2;
    return 0;
  }

  // --- whitespace, comments, line ends ---
  void SkipWs() {
    while (!AtEnd() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
  }
  Status SkipComment();
  Status SkipWsCommentsNewlines();
  Status ExpectLineEnd(std::string_view after);

  // --- values ---
  Value Make(Loc loc) const {
    Value v;
    v.source_ = source_;
    v.line_ = loc.line;
    v.column_ = loc.column;
    return v;
  }
  Status ParseKey(std::vector<KeyPart>* parts);
  // `path` is the value's key path, for messages.
  Status ParseValue(Value* out, int depth, const Path& path);
  Status ParseArray(Value* out, int depth, const Path& path);
  Status ParseInlineTable(Value* out, int depth, const Path& path);
  Status ParseScalarToken(Value* out);
  Status ParseNumber(std::string_view token, Loc loc, Value* out);
  Status ParseBasicString(std::string* out);
  Status ParseMultilineBasicString(std::string* out);
  Status ParseLiteralString(std::string* out);
  Status ParseMultilineLiteralString(std::string* out);
  Status ParseEscape(std::string* out);

  // --- tables ---
  static Value* Lookup(Value* table, std::string_view key) {
    auto& entries = *std::get_if<Value::Table>(&table->data_);
    const auto it = table->index_.find(key);
    return it == table->index_.end() ? nullptr : &entries[it->second].second;
  }
  static Value* Insert(Value* table, std::string key, Value value) {
    auto& entries = *std::get_if<Value::Table>(&table->data_);
    table->index_.emplace(key, entries.size());
    entries.emplace_back(std::move(key), std::move(value));
    return &entries.back().second;
  }
  // Parses `key = value` into `table`, whose key path is `path` ("" for the root).
  Status ParseKeyValue(Value* table, int depth, const Path& path);
  Status AssignDotted(Value* table, const Path& path, const std::vector<KeyPart>& parts,
                      Value value);
  Status ParseHeader();

  std::string_view text_;
  size_t pos_ = 0;
  std::shared_ptr<const std::string> source_;
  // LocAt's cursor: the line and column of byte loc_pos_.
  size_t loc_pos_ = 0;
  Loc loc_;

  Value root_;
  Value* current_ = nullptr;  // the table the latest header opened
  int current_depth_ = 0;
  std::string current_path_;
};

Loc Parser::LocAt(size_t pos) {
  if (pos < loc_pos_) {  // only on some error paths
    loc_pos_ = 0;
    loc_ = Loc{};
  }
  pos = std::min(pos, text_.size());
  for (; loc_pos_ < pos; ++loc_pos_) {
    const unsigned char c = static_cast<unsigned char>(text_[loc_pos_]);
    if (c == '\n') {
      ++loc_.line;
      loc_.column = 1;
    } else if ((c & 0xc0) != 0x80) {  // count code points, not bytes
      ++loc_.column;
    }
  }
  return loc_;
}

std::string Parser::Describe(size_t pos) const {
  if (pos >= text_.size()) return "end of input";
  if (NewlineAt(pos) != 0) return "a newline";
  const unsigned char c = static_cast<unsigned char>(text_[pos]);
  if (c >= 0x20 && c < 0x7f) return absl::StrCat("'", std::string(1, static_cast<char>(c)), "'");
  if (c < 0x80) return absl::StrFormat("U+%04X", c);
  // Valid UTF-8 (checked up front): decode one code point.
  uint32_t cp = 0;
  size_t len = 0;
  if ((c & 0xe0) == 0xc0) {
    cp = c & 0x1f;
    len = 2;
  } else if ((c & 0xf0) == 0xe0) {
    cp = c & 0x0f;
    len = 3;
  } else {
    cp = c & 0x07;
    len = 4;
  }
  for (size_t k = 1; k < len && pos + k < text_.size(); ++k) {
    cp = (cp << 6) | (static_cast<unsigned char>(text_[pos + k]) & 0x3f);
  }
  return absl::StrFormat("U+%04X", cp);
}

Status Parser::SkipComment() {
  ++pos_;  // '#'
  while (!AtEnd()) {
    const unsigned char c = static_cast<unsigned char>(text_[pos_]);
    if (c == '\n' || NewlineAt(pos_) == 2) return absl::OkStatus();
    if (IsForbiddenControl(c)) {
      return ErrorHere(
          absl::StrCat("control character ", Describe(pos_), " is not allowed in a comment"));
    }
    ++pos_;
  }
  return absl::OkStatus();
}

Status Parser::SkipWsCommentsNewlines() {
  while (!AtEnd()) {
    const char c = text_[pos_];
    if (c == ' ' || c == '\t') {
      ++pos_;
    } else if (const size_t nl = NewlineAt(pos_); nl != 0) {
      pos_ += nl;
    } else if (c == '#') {
      FW_RETURN_IF_ERROR(SkipComment());
    } else {
      break;
    }
  }
  return absl::OkStatus();
}

Status Parser::ExpectLineEnd(std::string_view after) {
  SkipWs();
  if (!AtEnd() && text_[pos_] == '#') FW_RETURN_IF_ERROR(SkipComment());
  if (AtEnd()) return absl::OkStatus();
  if (const size_t nl = NewlineAt(pos_); nl != 0) {
    pos_ += nl;
    return absl::OkStatus();
  }
  return ErrorHere(
      absl::StrCat("expected a newline after ", AsAbsl(after), ", found ", Describe(pos_)));
}

Result<Value> Parser::Run() {
  if (LookingAt("\xEF\xBB\xBF")) text_.remove_prefix(3);  // UTF-8 byte order mark
  if (const size_t bad = FirstInvalidUtf8(text_); bad != std::string_view::npos) {
    return ErrorAt(LocAt(bad), "invalid UTF-8");
  }
  root_ = Make(Loc{});
  root_.origin_ = Value::Origin::kHeader;
  current_ = &root_;
  current_depth_ = 0;
  while (true) {
    SkipWs();
    if (AtEnd()) break;
    const char c = text_[pos_];
    if (c == '#') {
      FW_RETURN_IF_ERROR(SkipComment());
    } else if (const size_t nl = NewlineAt(pos_); nl != 0) {
      pos_ += nl;
    } else if (c == '\r') {
      return ErrorHere("a carriage return must be followed by a newline");
    } else if (c == '[') {
      FW_RETURN_IF_ERROR(ParseHeader());
      FW_RETURN_IF_ERROR(ExpectLineEnd("the table header"));
    } else {
      FW_RETURN_IF_ERROR(ParseKeyValue(current_, current_depth_, Path{current_path_}));
      FW_RETURN_IF_ERROR(ExpectLineEnd("the value"));
    }
  }
  return std::move(root_);
}

Status Parser::ParseKey(std::vector<KeyPart>* parts) {
  while (true) {
    if (parts->size() >= static_cast<size_t>(kMaxDepth)) {
      return ErrorHere(absl::StrCat("key has more than ", kMaxDepth, " parts"));
    }
    KeyPart part;
    part.loc = LocAt(pos_);
    const char c = Peek();
    if (AtEnd()) {
      return ErrorHere("expected a key, found end of input");
    } else if (c == '"' || c == '\'') {
      if (LookingAt("\"\"\"") || LookingAt("'''")) {
        return ErrorHere("a multi-line string cannot be a key");
      }
      FW_RETURN_IF_ERROR(c == '"' ? ParseBasicString(&part.name) : ParseLiteralString(&part.name));
    } else if (IsBareKeyChar(c)) {
      const size_t start = pos_;
      while (!AtEnd() && IsBareKeyChar(text_[pos_])) ++pos_;
      part.name = std::string(text_.substr(start, pos_ - start));
    } else {
      return ErrorHere(absl::StrCat("expected a key, found ", Describe(pos_)));
    }
    parts->push_back(std::move(part));
    SkipWs();
    if (Peek() != '.' || AtEnd()) return absl::OkStatus();
    ++pos_;
    SkipWs();
  }
}

namespace {
// The first `count` parts of `parts` under `prefix`, as TOML writes a dotted
// key: a.b."c d".
std::string KeyPath(std::string_view prefix, const std::vector<KeyPart>& parts, size_t count) {
  std::string out(prefix);
  for (size_t i = 0; i < count && i < parts.size(); ++i) {
    if (!out.empty()) out.push_back('.');
    out += KeyPartText(parts[i].name);
  }
  return out;
}
// The same, in quotes for a message: 'a.b'.
std::string JoinKey(std::string_view prefix, const std::vector<KeyPart>& parts, size_t count) {
  return absl::StrCat("'", KeyPath(prefix, parts, count), "'");
}
}  // namespace

std::string Path::ToString() const {
  if (parent == nullptr) return std::string(base);
  std::string out = parent->ToString();
  if (parts == nullptr) return absl::StrCat(out, "[", index, "]");
  return KeyPath(out, *parts, parts->size());
}

Status Parser::ParseKeyValue(Value* table, int depth, const Path& path) {
  std::vector<KeyPart> parts;
  FW_RETURN_IF_ERROR(ParseKey(&parts));
  if (Peek() != '=' || AtEnd()) {
    return ErrorHere(absl::StrCat("expected '=' after key ", JoinKey("", parts, parts.size()),
                                  ", found ", Describe(pos_)));
  }
  ++pos_;
  SkipWs();
  Value value;
  const Path value_path{{}, &path, &parts};
  FW_RETURN_IF_ERROR(ParseValue(&value, depth + static_cast<int>(parts.size()), value_path));
  return AssignDotted(table, path, parts, std::move(value));
}

// Depth needs no check here: ParseValue bounded depth + parts.size().
Status Parser::AssignDotted(Value* table, const Path& table_path, const std::vector<KeyPart>& parts,
                            Value value) {
  const auto path = [&table_path] { return table_path.ToString(); };
  Value* t = table;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    Value* child = Lookup(t, parts[i].name);
    if (child == nullptr) {
      Value sub = Make(parts[i].loc);
      sub.origin_ = Value::Origin::kDotted;
      child = Insert(t, parts[i].name, std::move(sub));
    } else if (!child->is_table()) {
      return ErrorAt(parts[i].loc,
                     absl::StrCat("key ", JoinKey(path(), parts, i + 1), " is already defined as ",
                                  AsAbsl(TypeName(child->type())), " at ", At(*child),
                                  " and cannot also be a table"));
    } else if (child->origin_ == Value::Origin::kInline) {
      return ErrorAt(parts[i].loc,
                     absl::StrCat("cannot add keys to inline table ", JoinKey(path(), parts, i + 1),
                                  " defined at ", At(*child)));
    } else if (child->origin_ != Value::Origin::kDotted) {
      return ErrorAt(
          parts[i].loc,
          absl::StrCat("cannot add to table ", JoinKey(path(), parts, i + 1),
                       " with dotted keys: it was created by a [table] header at ", At(*child)));
    }
    t = child;
  }
  const KeyPart& last = parts.back();
  if (const Value* existing = Lookup(t, last.name); existing != nullptr) {
    return ErrorAt(last.loc, absl::StrCat("duplicate key ", JoinKey(path(), parts, parts.size()),
                                          " (first defined at ", At(*existing), ")"));
  }
  Insert(t, last.name, std::move(value));
  return absl::OkStatus();
}

Status Parser::ParseHeader() {
  const Loc loc = LocAt(pos_);
  const bool array = LookingAt("[[");
  pos_ += array ? 2 : 1;
  SkipWs();
  std::vector<KeyPart> parts;
  FW_RETURN_IF_ERROR(ParseKey(&parts));
  if (array ? !LookingAt("]]") : !LookingAt("]")) {
    if (array && Peek() == ']') ++pos_;  // point past the one ']' there is
    return ErrorHere(absl::StrCat("expected '", array ? "]]" : "]", "' to close the ",
                                  array ? "array of tables header" : "table header", ", found ",
                                  Describe(pos_)));
  }
  pos_ += array ? 2 : 1;

  Value* t = &root_;
  int depth = 0;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    Value* child = Lookup(t, parts[i].name);
    const auto name = [&parts, i] { return JoinKey("", parts, i + 1); };  // for errors
    if (child == nullptr) {
      child = Insert(t, parts[i].name, Make(parts[i].loc));  // kImplicit
      depth += 1;
    } else if (child->is_table()) {
      if (child->origin_ == Value::Origin::kInline) {
        return ErrorAt(parts[i].loc, absl::StrCat("cannot add a table to inline table ", name(),
                                                  " defined at ", At(*child)));
      }
      depth += 1;
    } else if (child->is_array() && child->array_of_tables_) {
      auto& elements = *std::get_if<Value::Array>(&child->data_);
      child = &elements.back();  // [[a]] then [a.b]: b goes into the latest a
      depth += 2;
    } else if (child->is_array()) {
      return ErrorAt(parts[i].loc, absl::StrCat("key ", name(), " is an array defined at ",
                                                At(*child), ", not a table"));
    } else {
      return ErrorAt(parts[i].loc, absl::StrCat("key ", name(), " is already defined as ",
                                                AsAbsl(TypeName(child->type())), " at ", At(*child),
                                                " and cannot also be a table"));
    }
    if (depth > kMaxDepth) {
      return ErrorAt(parts[i].loc, absl::StrCat("nesting deeper than ", kMaxDepth, " levels"));
    }
    t = child;
  }

  const KeyPart& last = parts.back();
  const auto name = [&parts] { return JoinKey("", parts, parts.size()); };
  Value* child = Lookup(t, last.name);
  if (!array) {
    depth += 1;
    if (child == nullptr) {
      Value sub = Make(loc);
      sub.origin_ = Value::Origin::kHeader;
      child = Insert(t, last.name, std::move(sub));
    } else if (child->is_table()) {
      switch (child->origin_) {
        case Value::Origin::kImplicit:  // made by an earlier [a.b.c]; now defined
          child->origin_ = Value::Origin::kHeader;
          child->line_ = loc.line;
          child->column_ = loc.column;
          break;
        case Value::Origin::kHeader:
          return ErrorAt(loc,
                         absl::StrCat("table ", name(), " is already defined at ", At(*child)));
        case Value::Origin::kDotted:
          return ErrorAt(loc, absl::StrCat("table ", name(),
                                           " is already defined by dotted keys at ", At(*child)));
        case Value::Origin::kInline:
          return ErrorAt(loc, absl::StrCat("table ", name(),
                                           " is already defined as an inline "
                                           "table at ",
                                           At(*child)));
      }
    } else if (child->is_array() && child->array_of_tables_) {
      return ErrorAt(loc,
                     absl::StrCat("key ", name(), " is already an array of tables (defined at ",
                                  At(*child), "), not a table"));
    } else {
      return ErrorAt(loc, absl::StrCat("key ", name(), " is already defined as ",
                                       AsAbsl(TypeName(child->type())), " at ", At(*child),
                                       " and cannot also be a table"));
    }
  } else {
    depth += 2;
    if (child == nullptr) {
      Value arr = Make(loc);
      arr.data_ = Value::Array{};
      arr.array_of_tables_ = true;
      child = Insert(t, last.name, std::move(arr));
    } else if (child->is_array() && !child->array_of_tables_) {
      return ErrorAt(
          loc, absl::StrCat("cannot append to static array ", name(), " defined at ", At(*child)));
    } else if (!child->is_array()) {
      return ErrorAt(loc, absl::StrCat("key ", name(), " is already defined as ",
                                       AsAbsl(TypeName(child->type())), " at ", At(*child),
                                       " and cannot also be an array of tables"));
    }
    Value element = Make(loc);
    element.origin_ = Value::Origin::kHeader;
    auto& elements = *std::get_if<Value::Array>(&child->data_);
    elements.push_back(std::move(element));
    child = &elements.back();
  }
  if (depth > kMaxDepth) {
    return ErrorAt(loc, absl::StrCat("nesting deeper than ", kMaxDepth, " levels"));
  }
  current_ = child;
  current_depth_ = depth;
  current_path_ = KeyPath("", parts, parts.size());
  return absl::OkStatus();
}

Status Parser::ParseValue(Value* out, int depth, const Path& path) {
  if (depth > kMaxDepth) {
    return ErrorHere(absl::StrCat("nesting deeper than ", kMaxDepth, " levels"));
  }
  const Loc loc = LocAt(pos_);
  *out = Make(loc);
  const char c = Peek();
  if (AtEnd() || NewlineAt(pos_) != 0 || c == '#') {
    return ErrorHere(absl::StrCat("expected a value, found ", Describe(pos_)));
  }
  std::string s;
  switch (c) {
    case '"':
      FW_RETURN_IF_ERROR(LookingAt("\"\"\"") ? ParseMultilineBasicString(&s)
                                             : ParseBasicString(&s));
      out->data_ = std::move(s);
      return absl::OkStatus();
    case '\'':
      FW_RETURN_IF_ERROR(LookingAt("'''") ? ParseMultilineLiteralString(&s)
                                          : ParseLiteralString(&s));
      out->data_ = std::move(s);
      return absl::OkStatus();
    case '[':
      return ParseArray(out, depth, path);
    case '{':
      return ParseInlineTable(out, depth, path);
    default:
      return ParseScalarToken(out);
  }
}

Status Parser::ParseArray(Value* out, int depth, const Path& path) {
  const Loc open = LocAt(pos_);
  ++pos_;  // '['
  Value::Array elements;
  while (true) {
    FW_RETURN_IF_ERROR(SkipWsCommentsNewlines());
    if (AtEnd()) return ErrorAt(open, "unterminated array");
    if (text_[pos_] == ']') {
      ++pos_;
      break;
    }
    Value element;
    const Path element_path{{}, &path, nullptr, elements.size()};
    FW_RETURN_IF_ERROR(ParseValue(&element, depth + 1, element_path));
    elements.push_back(std::move(element));
    FW_RETURN_IF_ERROR(SkipWsCommentsNewlines());
    if (AtEnd()) return ErrorAt(open, "unterminated array");
    if (text_[pos_] == ',') {
      ++pos_;
    } else if (text_[pos_] == ']') {
      ++pos_;
      break;
    } else {
      return ErrorHere(
          absl::StrCat("expected ',' or ']' after an array element, found ", Describe(pos_)));
    }
  }
  out->data_ = std::move(elements);
  return absl::OkStatus();
}

Status Parser::ParseInlineTable(Value* out, int depth, const Path& path) {
  const Loc open = LocAt(pos_);
  ++pos_;  // '{'
  SkipWs();
  if (Peek() == '}' && !AtEnd()) {
    ++pos_;
  } else {
    while (true) {
      if (AtEnd()) return ErrorAt(open, "unterminated inline table");
      if (NewlineAt(pos_) != 0) return ErrorHere("newlines are not allowed inside inline tables");
      FW_RETURN_IF_ERROR(ParseKeyValue(out, depth, path));
      SkipWs();
      if (AtEnd()) return ErrorAt(open, "unterminated inline table");
      const char c = text_[pos_];
      if (c == '}') {
        ++pos_;
        break;
      }
      if (c == ',') {
        ++pos_;
        SkipWs();
        if (Peek() == '}' && !AtEnd()) {
          return ErrorHere("trailing comma is not allowed in an inline table");
        }
        continue;
      }
      if (NewlineAt(pos_) != 0) return ErrorHere("newlines are not allowed inside inline tables");
      return ErrorHere(absl::StrCat("expected ',' or '}' after a value in an inline table, found ",
                                    Describe(pos_)));
    }
  }
  out->origin_ = Value::Origin::kInline;  // complete: nothing may add to it later
  return absl::OkStatus();
}

Status Parser::ParseScalarToken(Value* out) {
  const Loc loc = LocAt(pos_);
  // Dates and times: 1979-05-27, 07:32:00, 1979-05-27T07:32:00Z.
  const auto digits = [&](size_t from, size_t count) {
    for (size_t k = 0; k < count; ++k) {
      if (!IsDigit(Peek(from + k))) return false;
    }
    return true;
  };
  if ((digits(0, 4) && Peek(4) == '-') || (digits(0, 2) && Peek(2) == ':')) {
    return ErrorAt(loc, "dates and times are not supported");
  }
  const size_t start = pos_;
  while (!AtEnd()) {
    const char c = text_[pos_];
    if (IsBareKeyChar(c) || c == '.' || c == '+') {
      ++pos_;
    } else {
      break;
    }
  }
  const std::string_view token = text_.substr(start, pos_ - start);
  if (token.empty()) return ErrorAt(loc, absl::StrCat("expected a value, found ", Describe(start)));
  if (token == "true" || token == "false") {
    out->data_ = token == "true";
    return absl::OkStatus();
  }
  const char c = token[0];
  if (IsDigit(c) || c == '+' || c == '-' || c == '.') return ParseNumber(token, loc, out);
  if (token == "inf" || token == "nan") return ParseNumber(token, loc, out);
  return ErrorAt(loc, absl::StrCat("invalid value ", Quote(token),
                                   " (strings must be quoted; booleans are true and false)"));
}

namespace {
// Reads digits (of `base`) separated by single underscores from `s` at `*i`
// into `*out`; false if there is no digit or an underscore is not between two
// digits.
bool ReadDigits(std::string_view s, size_t* i, int base, std::string* out) {
  const auto is_digit = [base](char c) {
    switch (base) {
      case 2:
        return c == '0' || c == '1';
      case 8:
        return c >= '0' && c <= '7';
      case 16:
        return IsHexDigit(c);
      default:
        return IsDigit(c);
    }
  };
  if (*i >= s.size() || !is_digit(s[*i])) return false;
  while (*i < s.size()) {
    if (is_digit(s[*i])) {
      out->push_back(s[*i]);
      ++*i;
    } else if (s[*i] == '_') {
      if (*i + 1 >= s.size() || !is_digit(s[*i + 1])) return false;
      ++*i;
    } else {
      break;
    }
  }
  return true;
}
}  // namespace

Status Parser::ParseNumber(std::string_view token, Loc loc, Value* out) {
  const auto invalid = [&]() {
    return ErrorAt(loc, absl::StrCat("invalid number ", Quote(token)));
  };
  std::string_view body = token;
  bool negative = false;
  const bool has_sign = !body.empty() && (body[0] == '+' || body[0] == '-');
  if (has_sign) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  if (body == "inf" || body == "nan") {
    const double v = body == "inf" ? std::numeric_limits<double>::infinity()
                                   : std::numeric_limits<double>::quiet_NaN();
    out->data_ = std::copysign(v, negative ? -1.0 : 1.0);
    return absl::OkStatus();
  }

  // 0x / 0o / 0b integers.
  if (body.size() >= 2 && body[0] == '0' && (body[1] == 'x' || body[1] == 'o' || body[1] == 'b')) {
    const int base = body[1] == 'x' ? 16 : body[1] == 'o' ? 8 : 2;
    if (has_sign) {
      return ErrorAt(loc, absl::StrCat("a sign is not allowed on a hexadecimal, octal or binary "
                                       "integer: ",
                                       Quote(token)));
    }
    size_t i = 2;
    std::string digits;
    if (!ReadDigits(body, &i, base, &digits) || i != body.size()) return invalid();
    uint64_t v = 0;
    for (const char d : digits) {
      const uint64_t dv = static_cast<uint64_t>(HexValue(d));
      if (v > (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - dv) /
                  static_cast<uint64_t>(base)) {
        return ErrorAt(loc, absl::StrCat("integer ", Quote(token), " does not fit in 64 bits"));
      }
      v = v * static_cast<uint64_t>(base) + dv;
    }
    out->data_ = static_cast<int64_t>(v);
    return absl::OkStatus();
  }

  // Decimal integer or float: int [ '.' digits ] [ e [sign] digits ].
  size_t i = 0;
  std::string int_part;
  if (!ReadDigits(body, &i, 10, &int_part)) return invalid();
  if (int_part.size() > 1 && int_part[0] == '0') {
    return ErrorAt(loc, absl::StrCat("leading zeros are not allowed: ", Quote(token)));
  }
  std::string frac;
  std::string exp;
  bool is_float = false;
  bool exp_negative = false;
  if (i < body.size() && body[i] == '.') {
    ++i;
    if (!ReadDigits(body, &i, 10, &frac)) return invalid();
    is_float = true;
  }
  if (i < body.size() && (body[i] == 'e' || body[i] == 'E')) {
    ++i;
    if (i < body.size() && (body[i] == '+' || body[i] == '-')) {
      exp_negative = body[i] == '-';
      ++i;
    }
    if (!ReadDigits(body, &i, 10, &exp)) return invalid();
    is_float = true;
  }
  if (i != body.size()) return invalid();

  if (!is_float) {
    // Magnitude may be 2^63 for the most negative integer.
    const uint64_t limit =
        static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) + (negative ? 1 : 0);
    uint64_t v = 0;
    for (const char d : int_part) {
      const uint64_t dv = static_cast<uint64_t>(d - '0');
      if (v > (limit - dv) / 10) {
        return ErrorAt(loc, absl::StrCat("integer ", Quote(token), " does not fit in 64 bits"));
      }
      v = v * 10 + dv;
    }
    out->data_ = negative ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
    return absl::OkStatus();
  }

  std::string text = negative ? "-" : "";
  text += int_part;
  if (!frac.empty()) absl::StrAppend(&text, ".", frac);
  if (!exp.empty()) absl::StrAppend(&text, "e", exp_negative ? "-" : "", exp);
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range) {
    return ErrorAt(loc, absl::StrCat("float ", Quote(token), " is out of range for a double"));
  }
  if (ec != std::errc() || end != text.data() + text.size()) return invalid();
  out->data_ = v;
  return absl::OkStatus();
}

Status Parser::ParseEscape(std::string* out) {
  const Loc loc = LocAt(pos_);
  ++pos_;  // '\'
  if (AtEnd()) return ErrorAt(loc, "unterminated string");
  const char c = text_[pos_++];
  switch (c) {
    case 'b':
      out->push_back('\b');
      return absl::OkStatus();
    case 't':
      out->push_back('\t');
      return absl::OkStatus();
    case 'n':
      out->push_back('\n');
      return absl::OkStatus();
    case 'f':
      out->push_back('\f');
      return absl::OkStatus();
    case 'r':
      out->push_back('\r');
      return absl::OkStatus();
    case '"':
      out->push_back('"');
      return absl::OkStatus();
    case '\\':
      out->push_back('\\');
      return absl::OkStatus();
    case 'u':
    case 'U': {
      const size_t n = c == 'u' ? 4 : 8;
      uint32_t cp = 0;
      for (size_t k = 0; k < n; ++k) {
        if (AtEnd() || !IsHexDigit(text_[pos_])) {
          return ErrorAt(
              loc, absl::StrCat("\\", std::string(1, c), " needs ", n, " hexadecimal digits"));
        }
        cp = (cp << 4) | static_cast<uint32_t>(HexValue(text_[pos_++]));
      }
      if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
        return ErrorAt(loc, absl::StrFormat("escape \\%c%0*X is not a Unicode scalar value", c,
                                            static_cast<int>(n), cp));
      }
      AppendUtf8(cp, out);
      return absl::OkStatus();
    }
    default:
      if (c > 0x20 && c < 0x7f) {
        return ErrorAt(loc, absl::StrCat("invalid escape sequence \\", std::string(1, c)));
      }
      return ErrorAt(
          loc, absl::StrCat("invalid escape sequence: '\\' followed by ", Describe(pos_ - 1)));
  }
}

Status Parser::ParseBasicString(std::string* out) {
  const Loc open = LocAt(pos_);
  ++pos_;  // '"'
  while (true) {
    if (AtEnd()) return ErrorAt(open, "unterminated string");
    const unsigned char c = static_cast<unsigned char>(text_[pos_]);
    if (c == '"') {
      ++pos_;
      return absl::OkStatus();
    }
    if (c == '\\') {
      FW_RETURN_IF_ERROR(ParseEscape(out));
    } else if (c == '\n' || NewlineAt(pos_) == 2) {
      return ErrorAt(open, "unterminated string (use \"\"\" for a multi-line string)");
    } else if (IsForbiddenControl(c)) {
      return ErrorHere(
          absl::StrCat("control character ", Describe(pos_), " must be escaped in a string"));
    } else {
      out->push_back(static_cast<char>(c));
      ++pos_;
    }
  }
}

Status Parser::ParseLiteralString(std::string* out) {
  const Loc open = LocAt(pos_);
  ++pos_;  // '
  while (true) {
    if (AtEnd()) return ErrorAt(open, "unterminated string");
    const unsigned char c = static_cast<unsigned char>(text_[pos_]);
    if (c == '\'') {
      ++pos_;
      return absl::OkStatus();
    }
    if (c == '\n' || NewlineAt(pos_) == 2) {
      return ErrorAt(open, "unterminated string (use ''' for a multi-line string)");
    }
    if (IsForbiddenControl(c)) {
      return ErrorHere(absl::StrCat("control character ", Describe(pos_),
                                    " is not allowed in a literal string"));
    }
    out->push_back(static_cast<char>(c));
    ++pos_;
  }
}

Status Parser::ParseMultilineBasicString(std::string* out) {
  const Loc open = LocAt(pos_);
  pos_ += 3;
  pos_ += NewlineAt(pos_);  // a newline right after the delimiter is trimmed
  while (true) {
    if (AtEnd()) return ErrorAt(open, "unterminated multi-line string");
    const unsigned char c = static_cast<unsigned char>(text_[pos_]);
    if (c == '"') {
      size_t quotes = 0;
      while (pos_ + quotes < text_.size() && text_[pos_ + quotes] == '"' && quotes < 5) ++quotes;
      if (quotes >= 3) {  // up to two quotes may sit just before the closing """
        out->append(quotes - 3, '"');
        pos_ += quotes;
        return absl::OkStatus();
      }
      out->append(quotes, '"');
      pos_ += quotes;
    } else if (c == '\\') {
      // Line-ending backslash: trims the newline and all whitespace after it.
      size_t j = pos_ + 1;
      while (j < text_.size() && (text_[j] == ' ' || text_[j] == '\t')) ++j;
      if (NewlineAt(j) != 0) {
        pos_ = j;
        while (!AtEnd()) {
          if (text_[pos_] == ' ' || text_[pos_] == '\t') {
            ++pos_;
          } else if (const size_t nl = NewlineAt(pos_); nl != 0) {
            pos_ += nl;
          } else {
            break;
          }
        }
      } else {
        FW_RETURN_IF_ERROR(ParseEscape(out));
      }
    } else if (const size_t nl = NewlineAt(pos_); nl != 0) {
      out->push_back('\n');
      pos_ += nl;
    } else if (IsForbiddenControl(c)) {
      return ErrorHere(
          absl::StrCat("control character ", Describe(pos_), " must be escaped in a string"));
    } else {
      out->push_back(static_cast<char>(c));
      ++pos_;
    }
  }
}

Status Parser::ParseMultilineLiteralString(std::string* out) {
  const Loc open = LocAt(pos_);
  pos_ += 3;
  pos_ += NewlineAt(pos_);
  while (true) {
    if (AtEnd()) return ErrorAt(open, "unterminated multi-line string");
    const unsigned char c = static_cast<unsigned char>(text_[pos_]);
    if (c == '\'') {
      size_t quotes = 0;
      while (pos_ + quotes < text_.size() && text_[pos_ + quotes] == '\'' && quotes < 5) ++quotes;
      if (quotes >= 3) {
        out->append(quotes - 3, '\'');
        pos_ += quotes;
        return absl::OkStatus();
      }
      out->append(quotes, '\'');
      pos_ += quotes;
    } else if (const size_t nl = NewlineAt(pos_); nl != 0) {
      out->push_back('\n');
      pos_ += nl;
    } else if (IsForbiddenControl(c)) {
      return ErrorHere(absl::StrCat("control character ", Describe(pos_),
                                    " is not allowed in a literal string"));
    } else {
      out->push_back(static_cast<char>(c));
      ++pos_;
    }
  }
}

}  // namespace internal_toml

Result<Value> Parse(std::string_view text, std::string_view source_name) {
  internal_toml::Parser parser(text, source_name);
  return parser.Run();
}

Result<Value> ParseFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("opening ", path));
  std::string text;
  char buf[1 << 16];
  while (true) {
    const size_t n = std::fread(buf, 1, sizeof(buf), f);
    text.append(buf, n);
    if (text.size() > kMaxFileBytes) {
      std::fclose(f);
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": larger than ", kMaxFileBytes >> 20, " MiB; not a config file"));
    }
    if (n < sizeof(buf)) break;
  }
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) return absl::ErrnoToStatus(err, absl::StrCat("reading ", path));
  return Parse(text, path);
}

namespace {
// The value under `key`, nullptr if absent, or an error if it has another type.
Result<const Value*> FindTyped(const Value& table, std::string_view key, Type want) {
  const Value* v = table.Find(key);
  if (v == nullptr || v->type() == want) return v;
  if (want == Type::kDouble && v->is_int()) return v;  // GetDouble converts
  return v->Error(absl::StrCat(AsAbsl(key), ": expected ", AsAbsl(TypeName(want)), ", got ",
                               AsAbsl(TypeName(v->type()))));
}
Status Missing(const Value& table, std::string_view key) {
  return table.Error(absl::StrCat("missing key ", Quote(key)));
}
}  // namespace

Result<std::string> GetString(const Value& table, std::string_view key,
                              std::optional<std::string_view> default_value) {
  FW_ASSIGN_OR_RETURN(const Value* v, FindTyped(table, key, Type::kString));
  if (v != nullptr) return v->as_string();
  if (default_value.has_value()) return std::string(*default_value);
  return Missing(table, key);
}

Result<int64_t> GetInt(const Value& table, std::string_view key,
                       std::optional<int64_t> default_value) {
  FW_ASSIGN_OR_RETURN(const Value* v, FindTyped(table, key, Type::kInt));
  if (v != nullptr) return v->as_int();
  if (default_value.has_value()) return *default_value;
  return Missing(table, key);
}

Result<double> GetDouble(const Value& table, std::string_view key,
                         std::optional<double> default_value) {
  FW_ASSIGN_OR_RETURN(const Value* v, FindTyped(table, key, Type::kDouble));
  if (v != nullptr) {
    if (v->is_double()) return v->as_double();
    constexpr int64_t kExact = int64_t{1} << 53;  // doubles hold every integer up to here
    const int64_t i = v->as_int();
    if (i > kExact || i < -kExact) {
      return v->Error(
          absl::StrCat(AsAbsl(key), ": integer ", i, " is not exactly representable as a float"));
    }
    return static_cast<double>(i);
  }
  if (default_value.has_value()) return *default_value;
  return Missing(table, key);
}

Result<bool> GetBool(const Value& table, std::string_view key, std::optional<bool> default_value) {
  FW_ASSIGN_OR_RETURN(const Value* v, FindTyped(table, key, Type::kBool));
  if (v != nullptr) return v->as_bool();
  if (default_value.has_value()) return *default_value;
  return Missing(table, key);
}

Status CheckKeys(const Value& table, const std::vector<std::string_view>& known) {
  for (const auto& entry : table.as_table()) {
    bool found = false;
    for (const std::string_view k : known) found = found || k == entry.first;
    if (!found) {
      std::vector<std::string> names;
      names.reserve(known.size());
      for (const std::string_view k : known) names.push_back(KeyPartText(k));
      return entry.second.Error(absl::StrCat("unknown key ", Quote(entry.first),
                                             " (expected one of: ", absl::StrJoin(names, ", "),
                                             ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace flywheel::toml
