// Shared machinery of the JSON Lines and CSV readers: options checks, the
// streaming input buffer, inference, scalar parsing and column builders.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <system_error>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flywheel/base/utf8.h"
#include "flywheel/interop/text/internal.h"

namespace flywheel::interop {

namespace {

// Parses an override's type text; a trailing '?' makes the field nullable.
Result<std::pair<format::DataType, bool>> ParseOverride(std::string_view text) {
  bool nullable = false;
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  if (!text.empty() && text.back() == '?') {
    nullable = true;
    text.remove_suffix(1);
  }
  FW_ASSIGN_OR_RETURN(format::DataType t, format::DataType::Parse(text));
  FW_RETURN_IF_ERROR(t.Validate());
  return std::make_pair(std::move(t), nullable);
}

}  // namespace

Status TextReadOptions::Validate() const {
  auto bad = [](auto&&... msg) {
    return absl::InvalidArgumentError(absl::StrCat("text options: ", msg...));
  };
  if (infer_rows < 1) return bad("infer_rows must be >= 1 (got ", infer_rows, ")");
  if (batch_rows < 1) return bad("batch_rows must be >= 1 (got ", batch_rows, ")");
  if (delimiter == '\n' || delimiter == '\r')
    return bad("the CSV delimiter cannot be a line break");
  if (quote == '\n' || quote == '\r') return bad("the CSV quote cannot be a line break");
  if (delimiter == quote) return bad("the CSV delimiter and quote must differ");
  if (null_text.find_first_of(std::string{'\n', '\r', delimiter}) != std::string::npos) {
    return bad("null_text must not contain a line break or the delimiter");
  }
  if (schema.has_value()) {
    if (schema->fields.empty()) return bad("the explicit schema has no fields");
    FW_RETURN_IF_ERROR_CTX(schema->Validate(), "text options: schema");
  }
  for (const auto& [name, type] : overrides) {
    auto parsed = ParseOverride(type);
    if (!parsed.ok()) return bad("override for field '", name, "': ", parsed.status().message());
  }
  std::set<std::string_view> seen;
  for (const std::string& c : columns) {
    if (c.empty()) return bad("empty column name in columns");
    if (!seen.insert(c).second) return bad("column '", c, "' is listed twice in columns");
  }
  return absl::OkStatus();
}

namespace internal_text {
namespace {

class FileInput final : public InputBuffer {
 public:
  FileInput(int fd, size_t read_bytes) : InputBuffer(read_bytes), fd_(fd) {}
  ~FileInput() override { ::close(fd_); }

 protected:
  Result<size_t> ReadSome(char* dst, size_t n) override {
    while (true) {
      const ssize_t r = ::read(fd_, dst, n);
      if (r >= 0) return static_cast<size_t>(r);
      if (errno == EINTR) continue;
      return absl::DataLossError(absl::StrCat("read failed: ", std::strerror(errno)));
    }
  }

 private:
  int fd_;
};

class MemoryInput final : public InputBuffer {
 public:
  MemoryInput(std::string data, size_t read_bytes)
      : InputBuffer(read_bytes), data_(std::move(data)), chunk_(std::max<size_t>(read_bytes, 1)) {}

 protected:
  Result<size_t> ReadSome(char* dst, size_t n) override {
    n = std::min({n, chunk_, data_.size() - pos_});
    std::memcpy(dst, data_.data() + pos_, n);
    pos_ += n;
    return n;
  }

 private:
  std::string data_;
  size_t chunk_;
  size_t pos_ = 0;
};

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char c = a[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != b[i]) return false;
  }
  return true;
}

std::string_view TrimSpace(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// [+-]?[0-9]+
bool IsIntegerText(std::string_view s) {
  size_t i = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i) {
    if (!IsDigit(s[i])) return false;
  }
  return true;
}

template <typename T>
void Put(T v, std::string* out) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
ParseStatus ParseInt(std::string_view t, bool csv, std::string* out) {
  const char* b = t.data();
  const char* e = b + t.size();
  if (csv && b != e && *b == '+') {
    ++b;
    if (b == e || !IsDigit(*b)) return ParseStatus::kSyntax;
  }
  if (b == e) return ParseStatus::kSyntax;
  if constexpr (std::is_unsigned_v<T>) {
    if (*b == '-') {
      if (!IsIntegerText(t)) return ParseStatus::kSyntax;
      for (const char* p = b + 1; p != e; ++p) {
        if (*p != '0') return ParseStatus::kRange;
      }
      Put(T{0}, out);
      return ParseStatus::kOk;
    }
  }
  // Fast path: up to 18 digits cannot overflow 64 bits.
  {
    const bool negative = std::is_signed_v<T> && *b == '-';
    const char* p = b + (negative ? 1 : 0);
    if (p != e && e - p <= 18) {
      uint64_t v = 0;
      for (; p != e; ++p) {
        const unsigned digit = static_cast<unsigned>(*p - '0');
        if (digit > 9) return ParseStatus::kSyntax;
        v = v * 10 + digit;
      }
      if constexpr (std::is_unsigned_v<T>) {
        if (v > std::numeric_limits<T>::max()) return ParseStatus::kRange;
        Put(static_cast<T>(v), out);
      } else {
        const int64_t sv = negative ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
        if (sv < std::numeric_limits<T>::min() || sv > std::numeric_limits<T>::max())
          return ParseStatus::kRange;
        Put(static_cast<T>(sv), out);
      }
      return ParseStatus::kOk;
    }
  }
  int64_t wide_signed = 0;
  uint64_t wide_unsigned = 0;
  std::from_chars_result r;
  if constexpr (std::is_unsigned_v<T>) {
    r = std::from_chars(b, e, wide_unsigned);
  } else {
    r = std::from_chars(b, e, wide_signed);
  }
  if (r.ptr != e) return ParseStatus::kSyntax;
  if (r.ec == std::errc::result_out_of_range) return ParseStatus::kRange;
  if (r.ec != std::errc()) return ParseStatus::kSyntax;
  if constexpr (std::is_unsigned_v<T>) {
    if (wide_unsigned > std::numeric_limits<T>::max()) return ParseStatus::kRange;
    Put(static_cast<T>(wide_unsigned), out);
  } else {
    if (wide_signed < std::numeric_limits<T>::min() ||
        wide_signed > std::numeric_limits<T>::max()) {
      return ParseStatus::kRange;
    }
    Put(static_cast<T>(wide_signed), out);
  }
  return ParseStatus::kOk;
}

// Parses a float (T = float or double); kRange only for overflow
// (underflow reads as the nearest representable value, possibly zero).
template <typename T>
ParseStatus ParseFloat(std::string_view t, bool csv, T* v) {
  const char* b = t.data();
  const char* e = b + t.size();
  if (csv && b != e && *b == '+') {
    ++b;
    if (b == e || *b == '+' || *b == '-') return ParseStatus::kSyntax;
  }
  if (b == e) return ParseStatus::kSyntax;
  if (!csv && !(IsDigit(*b) || *b == '-')) return ParseStatus::kSyntax;  // JSON: no nan/inf
  const auto r = std::from_chars(b, e, *v, std::chars_format::general);
  if (r.ptr != e) return ParseStatus::kSyntax;
  if (r.ec == std::errc()) return ParseStatus::kOk;
  if (r.ec != std::errc::result_out_of_range) return ParseStatus::kSyntax;
  // Rare: tell overflow from underflow with strto{f,d}.
  const std::string copy(b, e);
  if constexpr (std::is_same_v<T, float>) {
    *v = std::strtof(copy.c_str(), nullptr);
  } else {
    *v = std::strtod(copy.c_str(), nullptr);
  }
  return std::isinf(*v) ? ParseStatus::kRange : ParseStatus::kOk;
}

std::string FieldNames(const format::Schema& s) {
  return absl::StrJoin(s.fields, ", ",
                       [](std::string* out, const format::Field& f) { out->append(f.name); });
}

}  // namespace

// ---- InputBuffer ----

Result<std::unique_ptr<InputBuffer>> InputBuffer::OpenFile(const std::string& path,
                                                           size_t read_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = absl::StrCat("opening ", path, ": ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(msg);
    if (err == EACCES) return absl::PermissionDeniedError(msg);
    return absl::UnavailableError(msg);
  }
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return std::unique_ptr<InputBuffer>(new FileInput(fd, std::max<size_t>(read_bytes, 1)));
}

std::unique_ptr<InputBuffer> InputBuffer::FromMemory(std::string data, size_t read_bytes) {
  return std::unique_ptr<InputBuffer>(new MemoryInput(std::move(data), read_bytes));
}

Status InputBuffer::Fill() {
  if (eof_) return absl::OkStatus();
  const size_t keep = mark_ != std::string::npos ? std::min(mark_, begin_) : begin_;
  if (keep > 0) {
    std::memmove(buf_.data(), buf_.data() + keep, end_ - keep);
    base_ += static_cast<int64_t>(keep);
    begin_ -= keep;
    end_ -= keep;
    if (mark_ != std::string::npos) mark_ -= keep;
  }
  if (buf_.size() - end_ < read_bytes_) buf_.resize(std::max(buf_.size() * 2, end_ + read_bytes_));
  FW_ASSIGN_OR_RETURN(const size_t n, ReadSome(buf_.data() + end_, buf_.size() - end_));
  if (n == 0) eof_ = true;
  end_ += n;
  return absl::OkStatus();
}

void InputBuffer::RewindToMark() {
  begin_ = mark_;
  mark_ = std::string::npos;
}

// ---- Inference ----

void NumberGuess::AddInteger(std::string_view token) {
  any = true;
  const bool negative = !token.empty() && token[0] == '-';
  any_negative |= negative;
  const char* b = token.data();
  const char* e = b + token.size();
  if (b != e && *b == '+') ++b;
  int64_t s;
  auto r = std::from_chars(b, e, s);
  if (r.ec == std::errc() && r.ptr == e) return;
  if (!negative) {
    uint64_t u;
    r = std::from_chars(b, e, u);
    if (r.ec == std::errc() && r.ptr == e) {
      any_uint64 = true;
      return;
    }
  }
  any_float = true;  // beyond every integer type
}

format::TypeId NumberGuess::Resolve() const {
  if (any_float || (any_uint64 && any_negative)) return format::TypeId::kFloat64;
  return any_uint64 ? format::TypeId::kUInt64 : format::TypeId::kInt64;
}

format::DataType TypeGuess::Resolve() const {
  if (any_other && nested != nullptr && !any_bool && !number.any && !any_string) return nested->type();
  const int kinds = any_bool + number.any + any_string + any_list + any_other;
  if (kinds != 1) return format::DataType::String();  // none (only nulls) or mixed
  if (any_bool) return format::DataType::Scalar(format::TypeId::kBool);
  if (number.any) return format::DataType::Scalar(number.Resolve());
  if (any_list)
    return format::DataType::List(element.any ? element.Resolve() : format::TypeId::kInt64);
  return format::DataType::String();
}

void GuessCsvText(std::string_view text, TypeGuess* guess) {
  const std::string_view t = TrimSpace(text);
  if (EqualsIgnoreCase(t, "true") || EqualsIgnoreCase(t, "false")) {
    guess->any_bool = true;
  } else if (IsIntegerText(t)) {
    guess->number.AddInteger(t);
  } else {
    double d;
    if (ParseFloat(t, /*csv=*/true, &d) == ParseStatus::kOk) {
      guess->number.AddFloat();
    } else {
      guess->any_string = true;
    }
  }
}

// ---- Scalars ----

format::RecordBatch FinishBatch(const format::Schema& schema, int64_t rows,
                                std::vector<ColumnBuilder>& builders) {
  format::RecordBatch batch;
  batch.schema = schema;
  batch.num_rows = rows;
  batch.columns.reserve(builders.size());
  for (ColumnBuilder& b : builders) batch.columns.push_back(b.Finish());
  return batch;
}

ParseStatus AppendScalarText(format::TypeId id, std::string_view text, bool csv, std::string* out) {
  using format::TypeId;
  switch (id) {
    case TypeId::kBool:
      if (EqualsIgnoreCase(text, "true")) {
        out->push_back(1);
      } else if (EqualsIgnoreCase(text, "false")) {
        out->push_back(0);
      } else {
        return ParseStatus::kSyntax;
      }
      return ParseStatus::kOk;
    case TypeId::kInt8:
      return ParseInt<int8_t>(text, csv, out);
    case TypeId::kInt16:
      return ParseInt<int16_t>(text, csv, out);
    case TypeId::kInt32:
      return ParseInt<int32_t>(text, csv, out);
    case TypeId::kInt64:
      return ParseInt<int64_t>(text, csv, out);
    case TypeId::kUInt8:
      return ParseInt<uint8_t>(text, csv, out);
    case TypeId::kUInt16:
      return ParseInt<uint16_t>(text, csv, out);
    case TypeId::kUInt32:
      return ParseInt<uint32_t>(text, csv, out);
    case TypeId::kUInt64:
      return ParseInt<uint64_t>(text, csv, out);
    case TypeId::kFloat16: {
      float f;
      const ParseStatus s = ParseFloat(text, csv, &f);
      if (s != ParseStatus::kOk) return s;
      const uint16_t h = FloatToHalf(f);
      if ((h & 0x7fffu) == 0x7c00u && std::isfinite(f)) return ParseStatus::kRange;
      Put(h, out);
      return ParseStatus::kOk;
    }
    case TypeId::kFloat32: {
      float f;
      const ParseStatus s = ParseFloat(text, csv, &f);
      if (s == ParseStatus::kOk) Put(f, out);
      return s;
    }
    case TypeId::kFloat64: {
      double d;
      const ParseStatus s = ParseFloat(text, csv, &d);
      if (s == ParseStatus::kOk) Put(d, out);
      return s;
    }
    default:
      return ParseStatus::kSyntax;
  }
}

std::string Excerpt(std::string_view text) {
  constexpr size_t kMax = 64;
  bool cut = false;
  if (text.size() > kMax) {
    size_t n = kMax;
    while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xc0) == 0x80) --n;
    text = text.substr(0, n);
    cut = true;
  }
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    if (c >= 0x80) {
      // Keep a well-formed UTF-8 sequence as is.
      size_t len = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
      if (len > 0 && i + len <= text.size() &&
          FirstInvalidUtf8(text.substr(i, len)) == std::string_view::npos) {
        out.append(text.substr(i, len));
        i += len;
        continue;
      }
    }
    static constexpr char kHex[] = "0123456789abcdef";
    out += "\\x";
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
    ++i;
  }
  if (cut) out += "...";
  return out;
}

std::string Quoted(std::string_view text) { return absl::StrCat("\"", Excerpt(text), "\""); }

// ---- ColumnBuilder ----

ColumnBuilder::ColumnBuilder(const format::Field& field) : field_(field) {
  if (field_.type.is_nested()) nested_ = std::make_unique<format::JsonColumnBuilder>(field_);
  if (field_.type.id == format::TypeId::kList && !field_.type.is_nested()) {
    elem_size_ = format::ScalarSize(field_.type.elem);
  }
  if (field_.type.is_variable_length()) offsets_.push_back(0);
}

void ColumnBuilder::PushValidity(bool valid) {
  if ((length_ & 7) == 0) validity_.push_back(0);
  if (valid) validity_.back() = static_cast<uint8_t>(validity_.back() | (1u << (length_ & 7)));
}

void ColumnBuilder::CommitValue() {
  if (field_.type.is_variable_length())
    offsets_.push_back(static_cast<int64_t>(values_.size() / elem_size_));
  PushValidity(true);
  ++length_;
}

void ColumnBuilder::AppendNull() {
  if (nested_ != nullptr) {
    (void)nested_->AppendNull();
    ++null_count_;
    ++length_;
    return;
  }
  if (field_.type.is_fixed_width()) {
    values_.append(field_.type.fixed_width(), '\0');
  } else {
    offsets_.push_back(offsets_.back());
  }
  PushValidity(false);
  ++null_count_;
  ++length_;
}

format::Column ColumnBuilder::Finish() {
  if (nested_ != nullptr) {
    length_ = 0;
    null_count_ = 0;
    return nested_->Finish();
  }
  format::Column c;
  c.type = field_.type;
  c.length = length_;
  c.null_count = null_count_;
  values_hint_ = std::max(values_hint_, values_.size());
  c.values = format::Buffer::FromString(std::move(values_));
  if (field_.type.is_variable_length()) c.offsets = format::Buffer::FromVector(std::move(offsets_));
  if (null_count_ > 0) c.validity = format::Buffer::FromVector(std::move(validity_));
  const size_t rows = static_cast<size_t>(length_);
  values_ = std::string();
  values_.reserve(values_hint_);
  offsets_ = std::vector<int64_t>();
  validity_ = std::vector<uint8_t>();
  validity_.reserve(rows / 8 + 1);
  if (field_.type.is_variable_length()) {
    offsets_.reserve(rows + 1);
    offsets_.push_back(0);
  }
  length_ = 0;
  null_count_ = 0;
  return c;
}

// ---- Schema ----

Result<ResolvedSchema> ResolveSchema(const std::string& file, format::Schema full, bool inferred,
                                     const TextReadOptions& options) {
  for (const auto& [name, text] : options.overrides) {
    const int i = full.FieldIndex(name);
    if (i < 0) {
      return absl::NotFoundError(
          absl::StrCat(file, ": override for field '", name,
                       "', which the source does not have (fields: ", FieldNames(full), ")"));
    }
    FW_ASSIGN_OR_RETURN_CTX(auto parsed, ParseOverride(text), file, ": override for field '", name,
                            "'");
    full.fields[i].type = std::move(parsed.first);
    full.fields[i].nullable |= parsed.second;
  }
  FW_RETURN_IF_ERROR_CTX(full.Validate(), file, inferred ? ": inferred schema" : ": schema");
  ResolvedSchema r;
  r.inferred = inferred;
  r.full_to_output.assign(full.fields.size(), -1);
  if (options.columns.empty()) {
    r.output = full;
    for (size_t i = 0; i < full.fields.size(); ++i) r.full_to_output[i] = static_cast<int>(i);
  } else {
    for (const std::string& name : options.columns) {
      const int i = full.FieldIndex(name);
      if (i < 0) {
        return absl::NotFoundError(
            absl::StrCat(file, ": column '", name, "' not found (fields: ", FieldNames(full), ")"));
      }
      r.full_to_output[i] = static_cast<int>(r.output.fields.size());
      r.output.fields.push_back(full.fields[i]);
    }
  }
  r.full = std::move(full);
  return r;
}

std::string InferenceHint(const ResolvedSchema& schema, const TextReadOptions& options) {
  if (!schema.inferred) return "";
  return absl::StrCat(" (the schema was inferred from the first ", options.infer_rows,
                      " rows; pass an explicit schema, an override such as 'int64?' or a larger "
                      "infer_rows)");
}

}  // namespace internal_text
}  // namespace flywheel::interop
