// CSV/TSV source (text_reader.h): RFC 4180 records (quoted fields may hold
// delimiters, doubled quotes and line breaks; CRLF or LF), scanned in place
// in the input buffer and converted straight into column builders.
// docs/ingest.md, "JSONL and CSV".
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flywheel/base/utf8.h"
#include "flywheel/interop/text/internal.h"

namespace flywheel::interop {
namespace internal_text {
namespace {

std::string_view TrimSpace(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// One field of the current record: bytes [begin, end) of the record's text.
struct CsvField {
  size_t begin = 0, end = 0;
  bool quoted = false;
  bool escaped = false;  // holds doubled quotes to undo
  int64_t line = 0;      // where the field starts
};

class CsvReader final : public RecordBatchReader {
 public:
  CsvReader(std::string file, std::unique_ptr<InputBuffer> in, const TextReadOptions& options)
      : file_(std::move(file)), in_(std::move(in)), options_(options) {}

  Status Open();
  const format::Schema& schema() const override { return schema_.output; }
  Result<std::optional<format::RecordBatch>> Next() override;
  int64_t bytes_read() const override { return in_->position(); }

 private:
  enum class Scan { kRecord, kNeedMore };
  // Splits the record at the start of `w` into fields_; *consumed gets its
  // length with the line break, *newlines the line breaks in it.
  Result<Scan> ScanRecord(std::string_view w, size_t* consumed, int64_t* newlines);
  // The next non-blank record into fields_ (views into the buffer, valid
  // until the next call); false at the end of the input.
  Result<bool> NextRecord();
  // A field's text, quotes undone.
  std::string_view Text(const CsvField& f);
  bool IsNull(const CsvField& f) const {
    if (f.quoted) return false;
    return f.begin == f.end ||
           (!options_.null_text.empty() &&
            std::string_view(record_ + f.begin, f.end - f.begin) == options_.null_text);
  }
  // FILE:LINE:N (N = 1-based field number) and the field's name.
  Status FieldError(const CsvField& f, size_t index, std::string_view name,
                    std::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ":", f.line, ":", index + 1, ": field '",
                                                   AsAbsl(name), "' (CSV field ", index + 1,
                                                   "): ", AsAbsl(message)));
  }
  Status CheckFieldCount() const;
  Status ConvertRow();
  Status ConvertField(const CsvField& f, size_t index, ColumnBuilder* b);

  const std::string file_;
  std::unique_ptr<InputBuffer> in_;
  const TextReadOptions options_;
  int64_t line_no_ = 0;      // line breaks consumed so far
  int64_t record_line_ = 0;  // line where the current record starts
  const char* record_ = nullptr;
  std::vector<CsvField> fields_;
  std::string scratch_;
  size_t num_fields_ = 0;  // fields every record must have
  ResolvedSchema schema_;
  std::vector<int> source_;  // per output field: the CSV field it reads, or -1 (all null)
  std::vector<ColumnBuilder> builders_;
  Status status_;
  bool done_ = false;
};

Result<CsvReader::Scan> CsvReader::ScanRecord(std::string_view w, size_t* consumed,
                                              int64_t* newlines) {
  const char d = options_.delimiter;
  const char q = options_.quote;
  const bool eof = in_->eof();
  const size_t n = w.size();
  fields_.clear();
  size_t i = 0;
  int64_t nl = 0;
  while (true) {
    CsvField f;
    f.line = record_line_ + nl;
    if (q != '\0' && i < n && w[i] == q) {
      f.quoted = true;
      f.begin = ++i;
      while (true) {
        const void* p = std::memchr(w.data() + i, q, n - i);
        if (p == nullptr) {
          if (!eof) return Scan::kNeedMore;
          return absl::InvalidArgumentError(absl::StrCat(
              file_, ":", f.line, ":", fields_.size() + 1,
              ": unterminated quoted field (CSV field ", fields_.size() + 1, " starts here)"));
        }
        const size_t j = static_cast<size_t>(static_cast<const char*>(p) - w.data());
        for (size_t k = i; k < j; ++k) nl += w[k] == '\n';
        if (j + 1 == n && !eof) return Scan::kNeedMore;  // a doubled quote may follow
        if (j + 1 < n && w[j + 1] == q) {
          f.escaped = true;
          i = j + 2;
          continue;
        }
        f.end = j;
        i = j + 1;
        break;
      }
      if (i == n) {
        if (!eof) return Scan::kNeedMore;
        fields_.push_back(f);
        *consumed = i;
        *newlines = nl;
        return Scan::kRecord;
      }
      const char c = w[i];
      if (c == d) {
        fields_.push_back(f);
        ++i;
        continue;
      }
      if (c == '\n' || c == '\r') {
        if (c == '\r' && i + 1 == n && !eof) return Scan::kNeedMore;
        const bool crlf = c == '\r' && i + 1 < n && w[i + 1] == '\n';
        if (c == '\n' || crlf || i + 1 == n) {
          fields_.push_back(f);
          *consumed = i + (crlf ? 2 : 1);
          *newlines = nl + (c == '\n' || crlf ? 1 : 0);
          return Scan::kRecord;
        }
      }
      return absl::InvalidArgumentError(
          absl::StrCat(file_, ":", record_line_ + nl, ":", fields_.size() + 1, ": unexpected ",
                       Quoted(w.substr(i, 1)), " after the closing quote of CSV field ",
                       fields_.size() + 1, " (a quote inside a quoted field is written twice)"));
    }
    f.begin = i;
    while (i < n && w[i] != d && w[i] != '\n') ++i;
    if (i == n && !eof) return Scan::kNeedMore;
    f.end = i;
    if (i < n && w[i] == d) {
      fields_.push_back(f);
      ++i;
      continue;
    }
    if (f.end > f.begin && w[f.end - 1] == '\r') --f.end;  // CRLF, or a final CR
    fields_.push_back(f);
    *consumed = i < n ? i + 1 : i;
    *newlines = nl + (i < n ? 1 : 0);
    return Scan::kRecord;
  }
}

Result<bool> CsvReader::NextRecord() {
  while (true) {
    if (in_->size() == 0) {
      if (in_->eof()) return false;
      FW_RETURN_IF_ERROR_CTX(in_->Fill(), "reading ", file_);
      continue;
    }
    record_line_ = line_no_ + 1;
    size_t consumed = 0;
    int64_t newlines = 0;
    FW_ASSIGN_OR_RETURN(const Scan scan, ScanRecord(std::string_view(in_->data(), in_->size()),
                                                    &consumed, &newlines));
    if (scan == Scan::kNeedMore) {
      if (in_->size() > kMaxRecordBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            file_, ":", record_line_, ": record longer than ", kMaxRecordBytes, " bytes"));
      }
      FW_RETURN_IF_ERROR_CTX(in_->Fill(), "reading ", file_);
      continue;
    }
    record_ = in_->data();
    in_->Consume(consumed);
    line_no_ += newlines;
    if (fields_.size() == 1 && !fields_[0].quoted && fields_[0].begin == fields_[0].end)
      continue;  // blank line
    return true;
  }
}

std::string_view CsvReader::Text(const CsvField& f) {
  const std::string_view raw(record_ + f.begin, f.end - f.begin);
  if (!f.escaped) return raw;
  scratch_.clear();
  for (size_t i = 0; i < raw.size(); ++i) {
    scratch_.push_back(raw[i]);
    if (raw[i] == options_.quote) ++i;  // the second of a doubled quote
  }
  return scratch_;
}

Status CsvReader::CheckFieldCount() const {
  if (fields_.size() == num_fields_) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(file_, ":", record_line_, ": expected ",
                                                 num_fields_, " fields, got ", fields_.size()));
}

Status CsvReader::Open() {
  while (in_->size() < 3 && !in_->eof()) FW_RETURN_IF_ERROR_CTX(in_->Fill(), "reading ", file_);
  if (in_->size() >= 3 && std::memcmp(in_->data(), "\xEF\xBB\xBF", 3) == 0) in_->Consume(3);

  std::vector<std::string> names;
  bool have_header = false;
  if (options_.header) {
    FW_ASSIGN_OR_RETURN(have_header, NextRecord());
    if (!have_header && !options_.schema.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file_,
                       ": the file is empty (no header row) so there is no schema to infer; pass "
                       "an explicit schema"));
    }
    for (size_t i = 0; have_header && i < fields_.size(); ++i) {
      const std::string_view text = Text(fields_[i]);
      if (const size_t bad = FirstInvalidUtf8(text); bad != std::string_view::npos) {
        return absl::InvalidArgumentError(absl::StrCat(file_, ":", fields_[i].line, ":", i + 1,
                                                       ": column name (CSV field ", i + 1,
                                                       ") is not valid UTF-8 at byte ", bad + 1));
      }
      std::string name = text.empty() ? absl::StrCat("f", i) : std::string(text);
      for (const std::string& prev : names) {
        if (prev == name) {
          return absl::InvalidArgumentError(absl::StrCat(file_, ":", fields_[i].line, ":", i + 1,
                                                         ": duplicate column name '", name, "'"));
        }
      }
      names.push_back(std::move(name));
    }
    num_fields_ = names.size();
  }

  format::Schema full;
  const bool inferred = !options_.schema.has_value();
  if (inferred) {
    in_->SetMark();
    const int64_t mark_line = line_no_;
    std::vector<TypeGuess> guesses(names.size());
    int64_t rows = 0;
    while (rows < options_.infer_rows) {
      FW_ASSIGN_OR_RETURN(const bool more, NextRecord());
      if (!more) break;
      if (!options_.header && rows == 0) {
        num_fields_ = fields_.size();
        guesses.resize(num_fields_);
        for (size_t i = 0; i < num_fields_; ++i) names.push_back(absl::StrCat("f", i));
      }
      FW_RETURN_IF_ERROR(CheckFieldCount());
      for (size_t i = 0; i < num_fields_; ++i) {
        if (IsNull(fields_[i])) {
          guesses[i].any_null = true;
        } else {
          GuessCsvText(Text(fields_[i]), &guesses[i]);
        }
      }
      ++rows;
    }
    if (rows == 0 && !options_.header) {
      return absl::InvalidArgumentError(
          absl::StrCat(file_,
                       ": no rows to infer a schema from (the file is empty or blank); pass an "
                       "explicit schema"));
    }
    for (size_t i = 0; i < names.size(); ++i) {
      format::Field f;
      f.name = names[i];
      f.type = guesses[i].Resolve();
      f.nullable = guesses[i].any_null || rows == 0;  // header only: nothing known, all nullable
      full.fields.push_back(std::move(f));
    }
    in_->RewindToMark();
    line_no_ = mark_line;
  } else {
    full = *options_.schema;
    if (!options_.header) num_fields_ = full.fields.size();
  }
  FW_ASSIGN_OR_RETURN(schema_, ResolveSchema(file_, std::move(full), inferred, options_));

  // Which CSV field each output field reads.
  for (const format::Field& f : schema_.output.fields) {
    int src = -1;
    if (!options_.header || inferred) {
      src = schema_.full.FieldIndex(f.name);
    } else {
      for (size_t i = 0; i < names.size(); ++i) {
        if (names[i] == f.name) src = static_cast<int>(i);
      }
      if (src < 0 && have_header && !f.nullable) {
        return absl::InvalidArgumentError(
            absl::StrCat(file_, ": the schema's field '", f.name,
                         "' is not a column of the file and is not nullable "
                         "(columns: ",
                         absl::StrJoin(names, ", "), ")"));
      }
    }
    source_.push_back(src);
    builders_.emplace_back(f);
  }
  if (!inferred && options_.header && options_.columns.empty()) {
    for (size_t i = 0; i < names.size(); ++i) {
      if (schema_.full.FieldIndex(names[i]) < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(file_, ":", record_line_, ":", i + 1, ": column '", names[i],
                         "' is not in the schema (select columns to leave it out)"));
      }
    }
  }
  return absl::OkStatus();
}

Status CsvReader::ConvertField(const CsvField& f, size_t index, ColumnBuilder* b) {
  const format::Field& field = b->field();
  if (IsNull(f)) {
    if (!field.nullable) {
      return FieldError(f, index, field.name,
                        absl::StrCat("null (an empty field), but the field is not nullable",
                                     InferenceHint(schema_, options_)));
    }
    b->AppendNull();
    return absl::OkStatus();
  }
  const std::string_view text = Text(f);
  const format::DataType& t = field.type;
  std::string* out = b->values();
  switch (t.id) {
    case format::TypeId::kString:
      if (const size_t bad = FirstInvalidUtf8(text); bad != std::string_view::npos) {
        return FieldError(f, index, field.name,
                          absl::StrCat("not valid UTF-8 at byte ", bad + 1, " of the value"));
      }
      out->append(text);
      break;
    case format::TypeId::kBinary:
      out->append(text);
      break;
    case format::TypeId::kList:
      break;
    default:
      if (t.shape.empty()) {
        const std::string_view trimmed = TrimSpace(text);
        switch (AppendScalarText(t.id, trimmed, /*csv=*/true, out)) {
          case ParseStatus::kOk:
            break;
          case ParseStatus::kSyntax:
            return FieldError(f, index, field.name,
                              absl::StrCat("expected ", t.ToString(), ", got ", Quoted(text),
                                           InferenceHint(schema_, options_)));
          case ParseStatus::kRange:
            return FieldError(
                f, index, field.name,
                absl::StrCat("value ", Quoted(trimmed), " is out of range for ", t.ToString()));
        }
      }
      break;
  }
  if (t.id == format::TypeId::kList || !t.shape.empty()) {
    // Lists and tensors: the field holds a JSON array ("[1, 2, 3]").
    if (const size_t bad = FirstInvalidUtf8(text); bad != std::string_view::npos) {
      return FieldError(f, index, field.name,
                        absl::StrCat("not valid UTF-8 at byte ", bad + 1, " of the value"));
    }
    JsonScanner s(text);
    JsonValue v;
    TextError err;
    if (!s.ParseValue(&v, &err)) {
      return FieldError(f, index, field.name,
                        absl::StrCat("expected ", t.ToString(), " as a JSON array, got ",
                                     Quoted(text), ": ", err.message));
    }
    s.SkipSpace();
    if (!s.AtEnd()) {
      return FieldError(
          f, index, field.name,
          absl::StrCat("expected ", t.ToString(), " as a JSON array, got ", Quoted(text)));
    }
    if (!AppendJson(s, v, b, &err)) return FieldError(f, index, field.name, err.message);
    return absl::OkStatus();
  }
  b->CommitValue();
  return absl::OkStatus();
}

Status CsvReader::ConvertRow() {
  FW_RETURN_IF_ERROR(CheckFieldCount());
  for (size_t k = 0; k < builders_.size(); ++k) {
    const int src = source_[k];
    if (src < 0) {
      builders_[k].AppendNull();
      continue;
    }
    FW_RETURN_IF_ERROR(ConvertField(fields_[src], static_cast<size_t>(src), &builders_[k]));
  }
  return absl::OkStatus();
}

Result<std::optional<format::RecordBatch>> CsvReader::Next() {
  if (!status_.ok()) return status_;
  if (done_) return std::nullopt;
  int64_t rows = 0;
  while (rows < options_.batch_rows) {
    auto more = NextRecord();
    if (!more.ok()) return status_ = more.status();
    if (!*more) {
      done_ = true;
      break;
    }
    if (Status s = ConvertRow(); !s.ok()) return status_ = s;
    ++rows;
  }
  if (rows == 0) return std::nullopt;
  return FinishBatch(schema_.output, rows, builders_);
}

}  // namespace

Result<std::unique_ptr<RecordBatchReader>> OpenCsvInput(std::string file,
                                                        std::unique_ptr<InputBuffer> in,
                                                        const TextReadOptions& options) {
  FW_RETURN_IF_ERROR(options.Validate());
  auto reader = std::make_unique<CsvReader>(std::move(file), std::move(in), options);
  FW_RETURN_IF_ERROR(reader->Open());
  return std::unique_ptr<RecordBatchReader>(std::move(reader));
}

}  // namespace internal_text

Result<std::unique_ptr<RecordBatchReader>> OpenCsv(const std::string& path,
                                                   const TextReadOptions& options) {
  FW_RETURN_IF_ERROR(options.Validate());
  FW_ASSIGN_OR_RETURN(auto in, internal_text::InputBuffer::OpenFile(path));
  return internal_text::OpenCsvInput(path, std::move(in), options);
}

}  // namespace flywheel::interop
