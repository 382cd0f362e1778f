// JSON Lines source (text_reader.h): a hand-written JSON scanner over each
// line (no DOM: values are spans of the line, converted straight into column
// builders), so errors carry exact byte columns and ingest runs near disk
// speed. docs/ingest.md, "JSONL and CSV".
#include <cstring>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "flywheel/base/utf8.h"
#include "flywheel/format/internal/json_column.h"
#include "flywheel/interop/text/internal.h"

namespace flywheel::interop {
namespace internal_text {
namespace {

// Deeper nesting is refused (it would only be stored as JSON text anyway,
// and the scanner recurses).
constexpr int kMaxDepth = 128;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The 4 hex digits at text[p..p+4), or -1.
int32_t Hex4(std::string_view text, size_t p) {
  if (p + 4 > text.size()) return -1;
  int32_t v = 0;
  for (size_t i = 0; i < 4; ++i) {
    const int h = HexValue(text[p + i]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}


bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool Expected(JsonScanner& s, const JsonValue& v, const format::DataType& t, TextError* err) {
  err->pos = v.begin;
  err->message = absl::StrCat("expected ", t.ToString(), ", got ", Excerpt(s.Raw(v)));
  return false;
}

bool OutOfRange(JsonScanner& s, const JsonValue& v, format::TypeId id, TextError* err) {
  err->pos = v.begin;
  err->message = absl::StrCat("value ", Excerpt(s.Raw(v)), " is out of range for ",
                              AsAbsl(format::TypeIdName(id)));
  return false;
}

// One scalar element of type `id`.
bool AppendJsonScalar(JsonScanner& s, const JsonValue& v, format::TypeId id, std::string* out,
                      TextError* err) {
  using format::TypeId;
  if (id == TypeId::kBool) {
    if (v.kind != JsonKind::kBool) return Expected(s, v, format::DataType::Scalar(id), err);
    out->push_back(s.text()[v.begin] == 't' ? 1 : 0);
    return true;
  }
  const bool is_float_type =
      id == TypeId::kFloat16 || id == TypeId::kFloat32 || id == TypeId::kFloat64;
  if (!(v.kind == JsonKind::kInteger || (is_float_type && v.kind == JsonKind::kFloat))) {
    return Expected(s, v, format::DataType::Scalar(id), err);
  }
  switch (AppendScalarText(id, s.Raw(v), /*csv=*/false, out)) {
    case ParseStatus::kOk:
      return true;
    case ParseStatus::kRange:
      return OutOfRange(s, v, id, err);
    case ParseStatus::kSyntax:
      break;
  }
  return Expected(s, v, format::DataType::Scalar(id), err);
}

// Flattens nested arrays of scalars into `out`, counting elements.
bool AppendTensorElements(JsonScanner& s, const JsonValue& array, format::TypeId id,
                          std::string* out, int64_t* count, TextError* err) {
  return s.ForEachElement(array, [&](const JsonValue& e) {
    if (e.kind == JsonKind::kArray) return AppendTensorElements(s, e, id, out, count, err);
    ++*count;
    return AppendJsonScalar(s, e, id, out, err);
  });
}

}  // namespace

// ---- JsonScanner ----

bool JsonScanner::Fail(TextError* err, size_t pos, std::string message) {
  err->pos = pos;
  err->message = std::move(message);
  return false;
}

bool JsonScanner::ParseLiteral(std::string_view word, JsonValue* v, TextError* err) {
  if (text_.substr(pos_, word.size()) != word) {
    return Fail(err, pos_,
                absl::StrCat("invalid JSON: expected a value, got ",
                             Excerpt(text_.substr(pos_, word.size()))));
  }
  v->begin = pos_;
  pos_ += word.size();
  v->end = pos_;
  v->kind = word == "null" ? JsonKind::kNull : JsonKind::kBool;
  return true;
}

bool JsonScanner::ParseNumber(JsonValue* v, TextError* err) {
  const size_t begin = pos_;
  const size_t n = text_.size();
  auto digits = [&] {
    const size_t start = pos_;
    while (pos_ < n && IsDigit(text_[pos_])) ++pos_;
    return pos_ > start;
  };
  if (text_[pos_] == '-') ++pos_;
  if (pos_ < n && text_[pos_] == '0') {
    ++pos_;
  } else if (!digits()) {
    return Fail(err, begin, "invalid JSON: malformed number");
  }
  bool is_float = false;
  if (pos_ < n && text_[pos_] == '.') {
    ++pos_;
    if (!digits()) return Fail(err, begin, "invalid JSON: malformed number (no digits after '.')");
    is_float = true;
  }
  if (pos_ < n && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
    ++pos_;
    if (pos_ < n && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
    if (!digits()) return Fail(err, begin, "invalid JSON: malformed number (no exponent digits)");
    is_float = true;
  }
  v->kind = is_float ? JsonKind::kFloat : JsonKind::kInteger;
  v->begin = begin;
  v->end = pos_;
  return true;
}

bool JsonScanner::ParseString(JsonValue* v, TextError* err) {
  const size_t begin = pos_;
  const size_t n = text_.size();
  ++pos_;  // opening quote
  bool escaped = false;
  while (true) {
    // Eight bytes at a time while none is a quote, a backslash or a control
    // character (the usual SWAR zero-byte tests).
    constexpr uint64_t kOnes = 0x0101010101010101ull;
    constexpr uint64_t kHigh = 0x8080808080808080ull;
    while (pos_ + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, text_.data() + pos_, 8);
      const uint64_t quote = w ^ (kOnes * '"');
      const uint64_t backslash = w ^ (kOnes * '\\');
      const uint64_t special = ((quote - kOnes) & ~quote) | ((backslash - kOnes) & ~backslash) |
                               ((w - kOnes * 0x20) & ~w);
      if (special & kHigh) break;
      pos_ += 8;
    }
    while (pos_ < n) {
      const unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"' || c == '\\' || c < 0x20) break;
      ++pos_;
    }
    if (pos_ >= n) return Fail(err, begin, "invalid JSON: unterminated string");
    const char c = text_[pos_];
    if (c == '"') break;
    if (c != '\\')
      return Fail(err, pos_, "invalid JSON: control character in a string (must be escaped)");
    escaped = true;
    const size_t esc = pos_;
    if (++pos_ >= n) return Fail(err, begin, "invalid JSON: unterminated string");
    switch (text_[pos_]) {
      case '"':
      case '\\':
      case '/':
      case 'b':
      case 'f':
      case 'n':
      case 'r':
      case 't':
        ++pos_;
        continue;
      case 'u':
        break;
      default:
        return Fail(err, esc, "invalid JSON: invalid escape sequence");
    }
    const int32_t cp = Hex4(text_, pos_ + 1);
    if (cp < 0) return Fail(err, esc, "invalid JSON: \\u needs 4 hex digits");
    pos_ += 5;
    if (cp >= 0xdc00 && cp <= 0xdfff)
      return Fail(err, esc, "invalid JSON: unpaired UTF-16 surrogate");
    if (cp >= 0xd800 && cp <= 0xdbff) {
      const int32_t low = (pos_ + 1 < n && text_[pos_] == '\\' && text_[pos_ + 1] == 'u')
                              ? Hex4(text_, pos_ + 2)
                              : -1;
      if (low < 0xdc00 || low > 0xdfff)
        return Fail(err, esc, "invalid JSON: unpaired UTF-16 surrogate");
      pos_ += 6;
    }
  }
  ++pos_;  // closing quote
  v->kind = JsonKind::kString;
  v->escaped = escaped;
  v->begin = begin;
  v->end = pos_;
  return true;
}

bool JsonScanner::ParseValue(JsonValue* v, TextError* err, int depth) {
  SkipSpace();
  if (AtEnd()) return Fail(err, pos_, "invalid JSON: expected a value, got the end of the line");
  const char c = Peek();
  switch (c) {
    case '"':
      return ParseString(v, err);
    case 't':
      return ParseLiteral("true", v, err);
    case 'f':
      return ParseLiteral("false", v, err);
    case 'n':
      return ParseLiteral("null", v, err);
    case '[':
    case '{': {
      if (depth >= kMaxDepth)
        return Fail(err, pos_, absl::StrCat("nesting deeper than ", kMaxDepth, " levels"));
      const bool object = c == '{';
      const char close = object ? '}' : ']';
      const size_t begin = pos_++;
      SkipSpace();
      if (!AtEnd() && Peek() == close) {
        ++pos_;
      } else {
        while (true) {
          if (object) {
            SkipSpace();
            if (AtEnd() || Peek() != '"')
              return Fail(err, pos_, "invalid JSON: expected a field name in double quotes");
            JsonValue key;
            if (!ParseString(&key, err)) return false;
            SkipSpace();
            if (AtEnd() || Peek() != ':')
              return Fail(err, pos_, "invalid JSON: expected ':' after a field name");
            ++pos_;
          }
          JsonValue e;
          if (!ParseValue(&e, err, depth + 1)) return false;
          SkipSpace();
          if (AtEnd())
            return Fail(
                err, begin,
                object ? "invalid JSON: unterminated object" : "invalid JSON: unterminated array");
          if (Peek() == ',') {
            ++pos_;
            continue;
          }
          if (Peek() == close) {
            ++pos_;
            break;
          }
          return Fail(err, pos_,
                      absl::StrCat("invalid JSON: expected ',' or '", std::string(1, close), "'"));
        }
      }
      v->kind = object ? JsonKind::kObject : JsonKind::kArray;
      v->escaped = false;
      v->begin = begin;
      v->end = pos_;
      return true;
    }
    default:
      if (c == '-' || IsDigit(c)) return ParseNumber(v, err);
      return Fail(
          err, pos_,
          absl::StrCat("invalid JSON: unexpected character ", Excerpt(text_.substr(pos_, 1))));
  }
}

void JsonScanner::AppendUnescaped(const JsonValue& v, std::string* out) const {
  const size_t end = v.end - 1;
  size_t p = v.begin + 1;
  if (!v.escaped) {
    out->append(text_.data() + p, end - p);
    return;
  }
  while (p < end) {
    const size_t bs = text_.find('\\', p);
    if (bs == std::string_view::npos || bs >= end) {
      out->append(text_.data() + p, end - p);
      return;
    }
    out->append(text_.data() + p, bs - p);
    const char e = text_[bs + 1];
    p = bs + 2;
    switch (e) {
      case 'b':
        out->push_back('\b');
        break;
      case 'f':
        out->push_back('\f');
        break;
      case 'n':
        out->push_back('\n');
        break;
      case 'r':
        out->push_back('\r');
        break;
      case 't':
        out->push_back('\t');
        break;
      case 'u': {
        uint32_t cp = static_cast<uint32_t>(Hex4(text_, p));
        p += 4;
        if (cp >= 0xd800 && cp <= 0xdbff) {  // validated: a low surrogate follows
          const uint32_t low = static_cast<uint32_t>(Hex4(text_, p + 2));
          cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
          p += 6;
        }
        AppendUtf8(cp, out);
        break;
      }
      default:
        out->push_back(e);
        break;  // '"', '\\', '/'
    }
  }
}

void JsonScanner::AppendCompact(const JsonValue& v, std::string* out) const {
  if (v.kind != JsonKind::kArray && v.kind != JsonKind::kObject) {
    out->append(text_.substr(v.begin, v.end - v.begin));
    return;
  }
  bool in_string = false;
  for (size_t p = v.begin; p < v.end; ++p) {
    const char c = text_[p];
    if (in_string) {
      out->push_back(c);
      if (c == '\\') {
        out->push_back(text_[++p]);
      } else if (c == '"') {
        in_string = false;
      }
    } else if (!IsJsonSpace(c)) {
      out->push_back(c);
      in_string = c == '"';
    }
  }
}

// ---- Inference and conversion ----

// Merges an object or array into the field's nested type guess.
void AddNested(JsonScanner& s, const JsonValue& v, TypeGuess* g) {
  if (!g->conflict.empty()) return;
  if (g->nested == nullptr) g->nested = std::make_shared<format::JsonTypeInferrer>();
  const std::string_view raw = s.Raw(v);
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(raw.begin(), raw.end());
  } catch (const nlohmann::json::exception& e) {
    g->conflict = e.what();
    return;
  }
  Status st = internal_format::AddJson(*g->nested, j);
  if (!st.ok()) g->conflict = std::string(st.message());
}

void GuessJson(JsonScanner& s, const JsonValue& v, TypeGuess* g) {
  switch (v.kind) {
    case JsonKind::kNull:
      g->any_null = true;
      break;
    case JsonKind::kBool:
      g->any_bool = true;
      break;
    case JsonKind::kInteger:
      g->number.AddInteger(s.Raw(v));
      break;
    case JsonKind::kFloat:
      g->number.AddFloat();
      break;
    case JsonKind::kString:
      g->any_string = true;
      break;
    case JsonKind::kObject:
      g->any_other = true;
      AddNested(s, v, g);
      break;
    case JsonKind::kArray: {
      AddNested(s, v, g);
      NumberGuess elems;
      const bool numeric = s.ForEachElement(v, [&](const JsonValue& e) {
        if (e.kind == JsonKind::kInteger) {
          elems.AddInteger(s.Raw(e));
        } else if (e.kind == JsonKind::kFloat) {
          elems.AddFloat();
        } else {
          return false;
        }
        return true;
      });
      if (!numeric) {
        g->any_other = true;
        break;
      }
      g->any_list = true;
      g->element.any |= elems.any;
      g->element.any_float |= elems.any_float;
      g->element.any_negative |= elems.any_negative;
      g->element.any_uint64 |= elems.any_uint64;
      break;
    }
  }
}

bool AppendJson(JsonScanner& s, const JsonValue& v, ColumnBuilder* b, TextError* err) {
  using format::TypeId;
  const format::DataType& t = b->type();
  if (b->nested() != nullptr) {
    const std::string_view raw = s.Raw(v);
    nlohmann::ordered_json j;
    try {
      j = nlohmann::ordered_json::parse(raw.begin(), raw.end());
    } catch (const nlohmann::json::exception& e) {
      err->pos = v.begin;
      err->message = e.what();
      return false;
    }
    Status st = internal_format::AppendJson(*b->nested(), &j);
    if (!st.ok()) {
      err->pos = v.begin;
      err->message = absl::StrCat(t.ToString(), ": ", st.message());
      return false;
    }
    b->CommitNested();
    return true;
  }
  std::string* out = b->values();
  if (t.id == TypeId::kString) {
    if (v.kind == JsonKind::kString) {
      s.AppendUnescaped(v, out);
    } else {
      s.AppendCompact(v, out);
    }
  } else if (t.id == TypeId::kBinary) {
    if (v.kind != JsonKind::kString) return Expected(s, v, t, err);
    s.AppendUnescaped(v, out);
  } else if (t.id == TypeId::kList) {
    if (v.kind != JsonKind::kArray) return Expected(s, v, t, err);
    const bool ok = s.ForEachElement(
        v, [&](const JsonValue& e) { return AppendJsonScalar(s, e, t.elem, out, err); });
    if (!ok) return false;
  } else if (!t.shape.empty()) {
    if (v.kind != JsonKind::kArray) return Expected(s, v, t, err);
    int64_t count = 0;
    if (!AppendTensorElements(s, v, t.id, out, &count, err)) return false;
    if (count != t.num_elements()) {
      err->pos = v.begin;
      err->message = absl::StrCat("expected ", t.ToString(), " (", t.num_elements(),
                                  " elements), got ", count, " elements");
      return false;
    }
  } else {
    if (!AppendJsonScalar(s, v, t.id, out, err)) return false;
  }
  b->CommitValue();
  return true;
}

namespace {

bool IsBlank(std::string_view line) {
  for (char c : line) {
    if (!IsJsonSpace(c)) return false;
  }
  return true;
}

// Reads JSON Lines. Unknown-field policy: a field that is not in the schema
// (explicit, or inferred from the first infer_rows rows) is an error naming
// its line and column, so data is never dropped silently; with `columns`
// set, fields outside the projection (known or not) are skipped instead.
class JsonLinesReader final : public RecordBatchReader {
 public:
  JsonLinesReader(std::string file, std::unique_ptr<InputBuffer> in, const TextReadOptions& options)
      : file_(std::move(file)), in_(std::move(in)), options_(options) {}

  Status Open();
  const format::Schema& schema() const override { return schema_.output; }
  Result<std::optional<format::RecordBatch>> Next() override;
  int64_t bytes_read() const override { return in_->position(); }

 private:
  // FILE:LINE:COL (byte column, 1-based) of byte `pos` of the current line.
  std::string Where(size_t pos) const { return absl::StrCat(file_, ":", line_no_, ":", pos + 1); }
  Status Error(size_t pos, std::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(Where(pos), ": ", AsAbsl(message)));
  }
  // The next non-blank line (without its line break), valid until the next
  // call; false at the end of the input.
  Result<bool> NextLine(std::string_view* line);
  // Parses the object on `line`, calling on_member(key, key_pos, scanner, value)
  // for each top-level member.
  template <typename F>
  Status ForEachMember(std::string_view line, F&& on_member);
  Status Infer(format::Schema* schema);
  Status ConvertRow(std::string_view line);

  const std::string file_;
  std::unique_ptr<InputBuffer> in_;
  const TextReadOptions options_;
  int64_t line_no_ = 0;  // line of the last line read
  ResolvedSchema schema_;
  absl::flat_hash_map<std::string, int> index_;  // field name -> index in schema_.full
  std::vector<int> predicted_;  // per member position: the field the last row had there, or -1
  std::vector<ColumnBuilder> builders_;
  std::vector<int64_t> seen_row_;  // per output field: the last row that had it
  int64_t row_serial_ = 0;
  std::string key_scratch_;
  Status status_;
  bool done_ = false;
};

Result<bool> JsonLinesReader::NextLine(std::string_view* line) {
  while (true) {
    size_t scanned = 0;
    const void* nl;
    while (true) {
      nl = std::memchr(in_->data() + scanned, '\n', in_->size() - scanned);
      if (nl != nullptr || in_->eof()) break;
      scanned = in_->size();
      if (scanned > kMaxRecordBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            file_, ":", line_no_ + 1, ": line longer than ", kMaxRecordBytes, " bytes"));
      }
      FW_RETURN_IF_ERROR_CTX(in_->Fill(), "reading ", file_);
    }
    if (nl == nullptr && in_->size() == 0) return false;
    const size_t len = nl != nullptr
                           ? static_cast<size_t>(static_cast<const char*>(nl) - in_->data())
                           : in_->size();
    std::string_view l(in_->data(), len);
    in_->Consume(nl != nullptr ? len + 1 : len);
    ++line_no_;
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    if (IsBlank(l)) continue;
    *line = l;
    return true;
  }
}

template <typename F>
Status JsonLinesReader::ForEachMember(std::string_view line, F&& on_member) {
  if (const size_t bad = FirstInvalidUtf8(line); bad != std::string_view::npos) {
    return Error(bad, "invalid UTF-8");
  }
  JsonScanner s(line);
  TextError err;
  s.SkipSpace();
  if (s.Peek() != '{') {
    return Error(s.pos(),
                 absl::StrCat("expected a JSON object, got ", Excerpt(line.substr(s.pos(), 16))));
  }
  const size_t open = s.pos();
  s.set_pos(open + 1);
  s.SkipSpace();
  if (!s.AtEnd() && s.Peek() == '}') {
    s.set_pos(s.pos() + 1);
  } else {
    while (true) {
      s.SkipSpace();
      if (s.AtEnd() || s.Peek() != '"')
        return Error(s.pos(), "invalid JSON: expected a field name in double quotes");
      JsonValue key;
      if (!s.ParseString(&key, &err)) return Error(err.pos, err.message);
      std::string_view name;
      if (key.escaped) {
        key_scratch_.clear();
        s.AppendUnescaped(key, &key_scratch_);
        name = key_scratch_;
      } else {
        name = line.substr(key.begin + 1, key.end - key.begin - 2);
      }
      s.SkipSpace();
      if (s.AtEnd() || s.Peek() != ':')
        return Error(s.pos(), "invalid JSON: expected ':' after a field name");
      s.set_pos(s.pos() + 1);
      JsonValue v;
      if (!s.ParseValue(&v, &err, 1)) return Error(err.pos, err.message);
      FW_RETURN_IF_ERROR(on_member(name, key.begin, s, v));
      s.SkipSpace();
      if (s.AtEnd()) return Error(open, "invalid JSON: unterminated object");
      if (s.Peek() == ',') {
        s.set_pos(s.pos() + 1);
        continue;
      }
      if (s.Peek() == '}') {
        s.set_pos(s.pos() + 1);
        break;
      }
      return Error(s.pos(), "invalid JSON: expected ',' or '}'");
    }
  }
  s.SkipSpace();
  if (!s.AtEnd())
    return Error(s.pos(), "unexpected text after the JSON object (one object per line)");
  return absl::OkStatus();
}

Status JsonLinesReader::Infer(format::Schema* schema) {
  std::vector<TypeGuess> guesses;
  std::vector<int64_t> seen_row;
  absl::flat_hash_map<std::string, size_t> index;
  int64_t rows = 0;
  std::string_view line;
  while (rows < options_.infer_rows) {
    FW_ASSIGN_OR_RETURN(const bool more, NextLine(&line));
    if (!more) break;
    FW_RETURN_IF_ERROR(ForEachMember(
        line,
        [&](std::string_view name, size_t key_pos, JsonScanner& s, const JsonValue& v) -> Status {
          const auto [it, inserted] = index.try_emplace(AsAbsl(name), guesses.size());
          if (inserted) {
            guesses.push_back(TypeGuess{});
            guesses.back().name = std::string(name);
            seen_row.push_back(-1);
          }
          if (seen_row[it->second] == rows) {
            return Error(key_pos,
                         absl::StrCat("field '", AsAbsl(name), "' appears twice in the object"));
          }
          seen_row[it->second] = rows;
          TypeGuess& g = guesses[it->second];
          ++g.rows_present;
          GuessJson(s, v, &g);
          if (!g.conflict.empty()) {
            return Error(v.begin, absl::StrCat("field '", AsAbsl(name), "': ", g.conflict,
                                               " (declare the field's type with --schema or --type)"));
          }
          return absl::OkStatus();
        }));
    ++rows;
  }
  if (rows == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        file_,
        ": no rows to infer a schema from (the file is empty or blank); pass an explicit schema"));
  }
  for (const TypeGuess& g : guesses) {
    format::Field f;
    f.name = g.name;
    f.type = g.Resolve();
    f.nullable = g.any_null || g.rows_present < rows;
    schema->fields.push_back(std::move(f));
  }
  return absl::OkStatus();
}

Status JsonLinesReader::Open() {
  while (in_->size() < 3 && !in_->eof()) FW_RETURN_IF_ERROR_CTX(in_->Fill(), "reading ", file_);
  if (in_->size() >= 3 && std::memcmp(in_->data(), "\xEF\xBB\xBF", 3) == 0) in_->Consume(3);
  format::Schema full;
  const bool inferred = !options_.schema.has_value();
  if (inferred) {
    in_->SetMark();
    FW_RETURN_IF_ERROR(Infer(&full));
    in_->RewindToMark();
    line_no_ = 0;
  } else {
    full = *options_.schema;
  }
  FW_ASSIGN_OR_RETURN(schema_, ResolveSchema(file_, std::move(full), inferred, options_));
  for (size_t i = 0; i < schema_.full.fields.size(); ++i) {
    index_.emplace(schema_.full.fields[i].name, static_cast<int>(i));
  }
  for (const format::Field& f : schema_.output.fields) builders_.emplace_back(f);
  seen_row_.assign(builders_.size(), -1);
  return absl::OkStatus();
}

Status JsonLinesReader::ConvertRow(std::string_view line) {
  const int64_t row = row_serial_++;
  const bool projected = !options_.columns.empty();
  size_t member = 0;
  FW_RETURN_IF_ERROR(ForEachMember(
      line,
      [&](std::string_view name, size_t key_pos, JsonScanner& s, const JsonValue& v) -> Status {
        // Rows usually list their fields in the same order: try the field the
        // previous row had at this position before hashing the name.
        const size_t position = member++;
        int full = -1;
        if (position < predicted_.size() && predicted_[position] >= 0 &&
            schema_.full.fields[predicted_[position]].name == name) {
          full = predicted_[position];
        } else {
          const auto it = index_.find(AsAbsl(name));
          if (it != index_.end()) full = it->second;
          if (position >= predicted_.size()) predicted_.resize(position + 1, -1);
          predicted_[position] = full;
        }
        if (full < 0) {
          if (projected) return absl::OkStatus();
          return Error(
              key_pos,
              absl::StrCat("field '", AsAbsl(name), "' is not in the schema",
                           schema_.inferred
                               ? absl::StrCat(" (it is not in the first ", options_.infer_rows,
                                              " rows the schema was inferred from; pass an "
                                              "explicit schema, a larger infer_rows, or columns "
                                              "to select)")
                               : std::string(" (select columns to leave it out)")));
        }
        const int out = schema_.full_to_output[full];
        if (out < 0) return absl::OkStatus();
        ColumnBuilder& b = builders_[out];
        if (seen_row_[out] == row) {
          return Error(key_pos,
                       absl::StrCat("field '", AsAbsl(name), "' appears twice in the object"));
        }
        seen_row_[out] = row;
        if (v.kind == JsonKind::kNull) {
          if (!b.field().nullable) {
            return Error(v.begin, absl::StrCat("field '", AsAbsl(name),
                                               "': null, but the field is not nullable",
                                               InferenceHint(schema_, options_)));
          }
          b.AppendNull();
          return absl::OkStatus();
        }
        TextError err;
        if (!AppendJson(s, v, &b, &err)) {
          return Error(err.pos, absl::StrCat("field '", AsAbsl(name), "': ", err.message,
                                             InferenceHint(schema_, options_)));
        }
        return absl::OkStatus();
      }));
  for (size_t i = 0; i < builders_.size(); ++i) {
    if (seen_row_[i] == row) continue;
    if (!builders_[i].field().nullable) {
      return absl::InvalidArgumentError(absl::StrCat(
          file_, ":", line_no_, ": field '", builders_[i].field().name,
          "' is missing, and the field is not nullable", InferenceHint(schema_, options_)));
    }
    builders_[i].AppendNull();
  }
  return absl::OkStatus();
}

Result<std::optional<format::RecordBatch>> JsonLinesReader::Next() {
  if (!status_.ok()) return status_;
  if (done_) return std::nullopt;
  int64_t rows = 0;
  std::string_view line;
  while (rows < options_.batch_rows) {
    auto more = NextLine(&line);
    if (!more.ok()) return status_ = more.status();
    if (!*more) {
      done_ = true;
      break;
    }
    if (Status s = ConvertRow(line); !s.ok()) return status_ = s;
    ++rows;
  }
  if (rows == 0) return std::nullopt;
  return FinishBatch(schema_.output, rows, builders_);
}

}  // namespace

Result<std::unique_ptr<RecordBatchReader>> OpenJsonLinesInput(std::string file,
                                                              std::unique_ptr<InputBuffer> in,
                                                              const TextReadOptions& options) {
  FW_RETURN_IF_ERROR(options.Validate());
  auto reader = std::make_unique<JsonLinesReader>(std::move(file), std::move(in), options);
  FW_RETURN_IF_ERROR(reader->Open());
  return std::unique_ptr<RecordBatchReader>(std::move(reader));
}

}  // namespace internal_text

Result<std::unique_ptr<RecordBatchReader>> OpenJsonLines(const std::string& path,
                                                         const TextReadOptions& options) {
  FW_RETURN_IF_ERROR(options.Validate());
  FW_ASSIGN_OR_RETURN(auto in, internal_text::InputBuffer::OpenFile(path));
  return internal_text::OpenJsonLinesInput(path, std::move(in), options);
}

}  // namespace flywheel::interop
