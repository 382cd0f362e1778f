// Pieces shared by the JSON Lines and CSV readers (text_reader.h): a
// streaming input buffer, the type-inference lattice, scalar parsing from
// text, per-field column builders, the schema resolution step (overrides,
// projection) and a JSON value scanner. Private to src/flywheel/interop/text
// and its fuzz target; nothing else may include it.
//
// Thread-safety: every type here is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "flywheel/base/half.h"
#include "flywheel/base/status.h"
#include "flywheel/format/column.h"
#include "flywheel/format/json_column.h"
#include "flywheel/format/types.h"
#include "flywheel/interop/source.h"
#include "flywheel/interop/text/text_reader.h"

namespace flywheel::interop::internal_text {

// A record (a JSON line, a CSV record) longer than this is an error rather
// than an unbounded buffer.
inline constexpr size_t kMaxRecordBytes = size_t{1} << 30;
// Default read size of an InputBuffer.
inline constexpr size_t kDefaultBufferBytes = size_t{1} << 20;

// Sequential input with a window of unconsumed bytes held in memory. Readers
// look at data()/size(), Consume() what they used, and Fill() when a record
// runs past the window. While a mark is set nothing at or after it is
// dropped, so the reader can rewind to it (schema inference reads the first
// rows twice this way; the file is read once).
class InputBuffer {
 public:
  // The file at `path`, read `read_bytes` at a time.
  static Result<std::unique_ptr<InputBuffer>> OpenFile(const std::string& path,
                                                       size_t read_bytes = kDefaultBufferBytes);
  // `data` itself, handed out at most `read_bytes` at a time (small values
  // exercise the refill paths in tests and fuzzing).
  static std::unique_ptr<InputBuffer> FromMemory(std::string data,
                                                 size_t read_bytes = kDefaultBufferBytes);
  virtual ~InputBuffer() = default;

  const char* data() const { return buf_.data() + begin_; }
  size_t size() const { return end_ - begin_; }
  // True when every byte of the input is in the window already.
  bool eof() const { return eof_; }
  // Reads more input after the window (or learns that there is none: eof()).
  // Invalidates pointers into data().
  Status Fill();
  // REQUIRES: n <= size().
  void Consume(size_t n) { begin_ += n; }
  void SetMark() { mark_ = begin_; }
  // REQUIRES: SetMark was called. Clears the mark.
  void RewindToMark();
  // Stream offset of data()[0]: bytes consumed so far.
  int64_t position() const { return base_ + static_cast<int64_t>(begin_); }

 protected:
  explicit InputBuffer(size_t read_bytes) : read_bytes_(read_bytes) {}
  // Reads at most `n` bytes into `dst`; 0 at the end of the input.
  virtual Result<size_t> ReadSome(char* dst, size_t n) = 0;

 private:
  std::string buf_;
  size_t begin_ = 0, end_ = 0;
  size_t mark_ = std::string::npos;
  int64_t base_ = 0;  // stream offset of buf_[0]
  size_t read_bytes_;
  bool eof_ = false;
};

// How a value seen during inference classifies. Numbers keep enough detail
// to choose int64, uint64 or float64.
struct NumberGuess {
  bool any = false;
  bool any_float = false;  // a fraction/exponent, or an integer beyond uint64
  bool any_negative = false;
  bool any_uint64 = false;  // a non-negative integer above int64 max
  // `token` is an integer (optional sign, digits).
  void AddInteger(std::string_view token);
  void AddFloat() { any = any_float = true; }
  format::TypeId Resolve() const;
};

struct TypeGuess {
  std::string name;
  int64_t rows_present = 0;  // rows that had the field (null included)
  bool any_null = false;
  bool any_bool = false;
  bool any_string = false;
  bool any_other = false;  // objects, arrays of non-numbers
  bool any_list = false;   // arrays of numbers (possibly empty)
  NumberGuess number;
  NumberGuess element;  // of numeric arrays
  // Objects and arrays (JSON Lines): their merged nested type, and the first
  // conflict between their shapes (a path and what clashed), if any.
  std::shared_ptr<format::JsonTypeInferrer> nested;
  std::string conflict;

  // The type these observations call for (see docs/ingest.md): one kind
  // seen gives that kind's type; objects and arrays their nested type;
  // several kinds give string.
  format::DataType Resolve() const;
};

// CSV: classifies one non-null field's text (surrounding spaces ignored).
void GuessCsvText(std::string_view text, TypeGuess* guess);

// Outcome of parsing a scalar from text.
enum class ParseStatus { kOk, kSyntax, kRange };

// Appends `text` as one element of scalar `id` (native byte order) to
// `out`. Integers: optional sign (a '+' only when `allow_plus`) and digits,
// range-checked. Floats: decimal (std::from_chars general format; also
// nan/inf when `allow_plus`, i.e. for CSV). Bool: true/false
// (case-insensitive). REQUIRES: IsScalar(id).
ParseStatus AppendScalarText(format::TypeId id, std::string_view text, bool allow_plus,
                             std::string* out);
using ::flywheel::FloatToHalf;  // base/half.h
// `text` for an error message: cut to a sane length, control characters
// and invalid UTF-8 as \xNN. Quoted() also wraps it in double quotes.
std::string Excerpt(std::string_view text);
std::string Quoted(std::string_view text);

// Rows of one field of one batch, appended in order.
class ColumnBuilder {
 public:
  explicit ColumnBuilder(const format::Field& field);
  const format::Field& field() const { return field_; }
  const format::DataType& type() const { return field_.type; }
  // Values bytes, for the caller to append one row's value to; then call
  // CommitValue().
  std::string* values() { return &values_; }
  void CommitValue();
  void AppendNull();
  int64_t length() const { return length_; }
  // Nested types (JSON Lines): the builder a row's value goes to instead of
  // values(); then CommitNested(). Null for every other type.
  format::JsonColumnBuilder* nested() { return nested_.get(); }
  void CommitNested() { ++length_; }
  // The column built so far; the builder starts over empty.
  format::Column Finish();

 private:
  void PushValidity(bool valid);

  format::Field field_;
  size_t elem_size_ = 1;  // bytes per offset unit (list element, or 1)
  std::string values_;
  std::vector<int64_t> offsets_;
  std::vector<uint8_t> validity_;
  int64_t length_ = 0;
  int64_t null_count_ = 0;
  size_t values_hint_ = 0;
  std::unique_ptr<format::JsonColumnBuilder> nested_;
};

// The rows the builders hold as one batch of `schema`; the builders start
// over.
format::RecordBatch FinishBatch(const format::Schema& schema, int64_t rows,
                                std::vector<ColumnBuilder>& builders);

// The schema a reader produces, with the mapping from the source's fields.
struct ResolvedSchema {
  format::Schema full;              // every field of the source, overrides applied
  format::Schema output;            // the fields the reader returns, in order
  std::vector<int> full_to_output;  // -1: not returned
  bool inferred = false;
};
// Applies options.overrides and options.columns to `full`, checks the
// result; `file` names the source in errors.
Result<ResolvedSchema> ResolveSchema(const std::string& file, format::Schema full, bool inferred,
                                     const TextReadOptions& options);

// A hint appended to errors that an inferred schema can cause.
std::string InferenceHint(const ResolvedSchema& schema, const TextReadOptions& options);

// ---- JSON values (jsonl.cc) ----

enum class JsonKind : uint8_t { kNull, kBool, kInteger, kFloat, kString, kArray, kObject };

// One JSON value in a text: its kind and byte span [begin, end) (strings
// include their quotes).
struct JsonValue {
  JsonKind kind = JsonKind::kNull;
  bool escaped = false;  // a string with a backslash escape
  size_t begin = 0, end = 0;
};

// A syntax or conversion problem at byte `pos` of the text.
struct TextError {
  size_t pos = 0;
  std::string message;
};

// Scans JSON values in `text`. Every Parse* validates completely (grammar,
// escapes, surrogates, nesting depth); the text must be valid UTF-8 already.
class JsonScanner {
 public:
  explicit JsonScanner(std::string_view text) : text_(text) {}
  std::string_view text() const { return text_; }
  size_t pos() const { return pos_; }
  void set_pos(size_t p) { pos_ = p; }
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return text_[pos_]; }
  // Parses one value at pos() (after optional space).
  bool ParseValue(JsonValue* v, TextError* err, int depth = 0);
  // Parses a string at pos(); `v` spans its quotes.
  bool ParseString(JsonValue* v, TextError* err);
  // Calls f(element) for each element of `array` (a value this scanner
  // parsed); stops at the first false f returns.
  template <typename F>
  bool ForEachElement(const JsonValue& array, F&& f) {
    JsonScanner s(text_);
    s.pos_ = array.begin + 1;
    TextError ignored;
    s.SkipSpace();
    if (s.Peek() == ']') return true;
    while (true) {
      JsonValue e;
      if (!s.ParseValue(&e, &ignored)) return false;  // not reached: validated already
      if (!f(e)) return false;
      s.SkipSpace();
      if (s.Peek() == ']') return true;
      ++s.pos_;  // ','
    }
  }
  std::string_view Raw(const JsonValue& v) const { return text_.substr(v.begin, v.end - v.begin); }
  // Appends the decoded contents of string `v`.
  void AppendUnescaped(const JsonValue& v, std::string* out) const;
  // Appends `v` as compact JSON (no whitespace outside strings).
  void AppendCompact(const JsonValue& v, std::string* out) const;

 private:
  bool Fail(TextError* err, size_t pos, std::string message);
  bool ParseNumber(JsonValue* v, TextError* err);
  bool ParseLiteral(std::string_view word, JsonValue* v, TextError* err);

  std::string_view text_;
  size_t pos_ = 0;
};

// Observes `v` (not null) for inference.
void GuessJson(JsonScanner& scanner, const JsonValue& v, TypeGuess* guess);

// Appends non-null JSON value `v` to builder `b` as the builder's type (see
// docs/ingest.md for what each type accepts). On failure `err` gets the
// position of the offending value and "expected T, got X" or a range error.
bool AppendJson(JsonScanner& scanner, const JsonValue& v, ColumnBuilder* b, TextError* err);

// Readers over an InputBuffer; `file` names the source in errors. The public
// OpenJsonLines/OpenCsv open the file and call these.
Result<std::unique_ptr<RecordBatchReader>> OpenJsonLinesInput(std::string file,
                                                              std::unique_ptr<InputBuffer> in,
                                                              const TextReadOptions& options);
Result<std::unique_ptr<RecordBatchReader>> OpenCsvInput(std::string file,
                                                        std::unique_ptr<InputBuffer> in,
                                                        const TextReadOptions& options);

}  // namespace flywheel::interop::internal_text
