// WebDataset shards: tar entries grouped into samples by key.
// docs/ingest.md, "WebDataset".
//
// Two passes over the archive (the schema must be known before the first
// batch, and a column's type depends on every value of it):
//  1. headers only, reading the data of text extensions to decide UTF-8
//     (string vs binary) and integer (int64 vs string) columns; plain tars
//     skip over other data without reading it, gzip tars are decompressed
//     in full (there is nothing to seek on). Refused entries, reappearing
//     keys and duplicate extensions are found here, so Open fails on them.
//     Memory: the set of keys seen (to detect reappearing keys).
//  2. rows, batch by batch; memory is one batch of samples plus one entry.
#include "flywheel/interop/wds/wds_reader.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "flywheel/base/utf8.h"
#include "flywheel/interop/wds/tar.h"

namespace flywheel::interop {
namespace internal_wds {
namespace {

using format::DataType;
using format::TypeId;

constexpr std::string_view kKeyColumn = "__key__";

// Extensions whose values are text. A multi-part extension ("en.txt") is
// judged by its last part, lowercased.
constexpr std::string_view kTextExtensions[] = {"txt",  "text",  "json", "jsonl",  "cls",
                                                "cls2", "index", "cap",  "caption"};
// Text extensions read as int64 when every value is a base-10 integer.
constexpr std::string_view kIntExtensions[] = {"cls", "cls2", "index"};

std::string TypeSuffix(std::string_view ext) {
  const size_t dot = ext.rfind('.');
  std::string s(dot == std::string_view::npos ? ext : ext.substr(dot + 1));
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

bool IsTextExtension(std::string_view ext) {
  const std::string s = TypeSuffix(ext);
  return std::find(std::begin(kTextExtensions), std::end(kTextExtensions), s) !=
         std::end(kTextExtensions);
}

bool IsIntExtension(std::string_view ext) {
  const std::string s = TypeSuffix(ext);
  return std::find(std::begin(kIntExtensions), std::end(kIntExtensions), s) !=
         std::end(kIntExtensions);
}

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// A base-10 int64 with optional sign, surrounded by optional ASCII whitespace.
bool ParseInt(std::string_view s, int64_t* out) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  if (!s.empty() && s.front() == '+') {
    s.remove_prefix(1);
    if (!s.empty() && s.front() == '-') return false;
  }
  if (s.empty()) return false;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, 10);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string Quote(std::string_view s) {
  return absl::StrCat("\"", absl::CHexEscape(AsAbsl(s)), "\"");
}

std::string Describe(const TarEntry& e) {
  return absl::StrCat("tar entry ", e.index, " ", Quote(e.name), " at offset ", e.offset);
}

Status EntryError(const TarEntry& e, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(Describe(e), ": ", AsAbsl(why)));
}

struct Classified {
  enum Kind { kSample, kIgnore, kRefused } kind = kSample;
  std::string key;
  std::string ext;
  std::string why;  // kRefused
};

Classified Refuse(std::string why) {
  Classified c;
  c.kind = Classified::kRefused;
  c.why = std::move(why);
  return c;
}

// What to do with one entry: a file of a sample (its key and extension), a
// directory (ignored), or a refused entry (and why).
Classified Classify(const TarEntry& e) {
  Classified c;
  const std::string_view name = e.name;
  switch (e.type) {
    case '0':
      break;
    case '5':
      c.kind = Classified::kIgnore;
      return c;
    case '1':
      return Refuse(absl::StrCat("hard link to ", Quote(e.link_name),
                                 " refused (only regular files are read)"));
    case '2':
      return Refuse(absl::StrCat("symbolic link to ", Quote(e.link_name),
                                 " refused (only regular files are read)"));
    case '3':
      return Refuse("character device refused (only regular files are read)");
    case '4':
      return Refuse("block device refused (only regular files are read)");
    case '6':
      return Refuse("FIFO refused (only regular files are read)");
    case '7':
      return Refuse("contiguous file (type '7') refused (only regular files are read)");
    case 'S':
      return Refuse("GNU sparse file refused (only regular files are read)");
    default:
      return Refuse(absl::StrCat("entry type ", Quote(std::string_view(&e.type, 1)),
                                 " refused (only regular files are read)"));
  }
  if (e.sparse) return Refuse("GNU sparse file refused (only regular files are read)");
  if (!name.empty() && name.back() == '/') {
    c.kind = Classified::kIgnore;  // pre-POSIX directory: a regular entry named "dir/"
    return c;
  }
  if (name.empty()) return Refuse("empty name refused");
  if (name.front() == '/') return Refuse("absolute name refused");
  if (!IsValidUtf8(name)) return Refuse("name is not valid UTF-8");
  // Components: "" and "." are dropped, ".." is refused.
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start <= name.size()) {
    size_t slash = name.find('/', start);
    if (slash == std::string_view::npos) slash = name.size();
    const std::string_view part = name.substr(start, slash - start);
    if (part == "..") return Refuse("'..' path component refused");
    if (!part.empty() && part != ".") parts.push_back(part);
    start = slash + 1;
  }
  if (parts.empty()) return Refuse("empty name refused");
  const std::string_view base = parts.back();
  const size_t dot = base.find('.');
  if (dot == std::string_view::npos) {
    return Refuse("name has no extension (WebDataset names are <key>.<extension>)");
  }
  if (dot == 0) return Refuse("name starts with '.' (no key)");
  c.ext = std::string(base.substr(dot + 1));
  if (c.ext.empty()) return Refuse("empty extension");
  if (c.ext == kKeyColumn) return Refuse("extension \"__key__\" is reserved for the key column");
  for (size_t i = 0; i + 1 < parts.size(); ++i) absl::StrAppend(&c.key, AsAbsl(parts[i]), "/");
  absl::StrAppend(&c.key, AsAbsl(base.substr(0, dot)));
  return c;
}

// One output column being filled for the current batch.
struct ColumnBuilder {
  TypeId type = TypeId::kBinary;
  std::string bytes;                // binary/string values
  std::vector<int64_t> offsets{0};  // binary/string
  std::vector<int64_t> ints;        // int64 values (0 under nulls)
  std::vector<bool> valid;
  bool filled = false;  // the current row has a value
};

struct ExtensionStats {
  bool all_utf8 = true;
  bool all_int = true;
};

class WdsReaderImpl final : public WdsReader {
 public:
  WdsReaderImpl(std::shared_ptr<io::RandomAccessFile> file, WdsReadOptions options)
      : file_(std::move(file)), options_(std::move(options)) {}

  Status Init() {
    std::map<std::string, ExtensionStats> stats;
    FW_RETURN_IF_ERROR(Scan(&stats));
    std::vector<std::string> names;
    if (options_.columns.empty()) {
      for (const auto& [ext, s] : stats) names.push_back(ext);  // sorted
    } else {
      for (const auto& ext : options_.columns) {
        if (ext != kKeyColumn) names.push_back(ext);
      }
    }
    schema_.fields.push_back(
        format::Field{std::string(kKeyColumn), DataType::String(), false, -1, ""});
    for (const auto& ext : names) {
      ExtensionStats s;  // unseen: types by the (vacuous) rules
      if (auto it = stats.find(ext); it != stats.end()) s = it->second;
      TypeId type = TypeId::kBinary;
      if (IsIntExtension(ext) && s.all_int) {
        type = TypeId::kInt64;
      } else if (IsTextExtension(ext) && s.all_utf8) {
        type = TypeId::kString;
      }
      col_index_.emplace(ext, static_cast<int>(cols_.size()));
      ColumnBuilder b;
      b.type = type;
      cols_.push_back(std::move(b));
      schema_.fields.push_back(format::Field{ext, DataType::Scalar(type), true, -1, ""});
    }
    FW_RETURN_IF_ERROR(schema_.Validate());
    FW_ASSIGN_OR_RETURN(auto stream, OpenTarStream(file_));
    tar_ = std::make_unique<TarReader>(std::move(stream));
    return absl::OkStatus();
  }

  const format::Schema& schema() const override { return schema_; }
  std::vector<std::string> skipped_entries() const override { return skipped_; }
  int64_t bytes_read() const override {
    return tar_ ? static_cast<int64_t>(tar_->input_bytes()) : 0;
  }

  Result<std::optional<format::RecordBatch>> Next() override {
    if (!error_.ok()) return error_;
    auto batch = NextBatch();
    if (!batch.ok()) {
      error_ = Annotate(batch.status(), absl::StrCat("reading WebDataset ", file_->path()));
      return error_;
    }
    return batch;
  }

 private:
  bool Selected(const std::string& ext) const {
    return options_.columns.empty() || std::find(options_.columns.begin(), options_.columns.end(),
                                                 ext) != options_.columns.end();
  }

  // Pass 1 (see the top of the file).
  Status Scan(std::map<std::string, ExtensionStats>* stats) {
    FW_ASSIGN_OR_RETURN(auto stream, OpenTarStream(file_));
    TarReader tar(std::move(stream));
    std::unordered_set<std::string> finished_keys;
    std::string key;
    bool have_key = false;
    std::vector<std::string> exts;  // of the current sample
    std::string data;
    for (;;) {
      FW_ASSIGN_OR_RETURN(const TarEntry* e, tar.Next());
      if (e == nullptr) break;
      Classified c = Classify(*e);
      if (c.kind == Classified::kIgnore) continue;
      if (c.kind == Classified::kRefused) {
        if (!options_.skip_bad_entries) return EntryError(*e, c.why);
        skipped_.push_back(absl::StrCat(Describe(*e), ": ", c.why));
        continue;
      }
      if (!have_key || c.key != key) {
        if (have_key) finished_keys.insert(std::move(key));
        if (finished_keys.count(c.key) != 0) {
          return EntryError(
              *e, absl::StrCat("key ", Quote(c.key),
                               " reappears after other keys (the files of a sample must be "
                               "consecutive in the tar)"));
        }
        key = c.key;
        have_key = true;
        exts.clear();
      }
      if (std::find(exts.begin(), exts.end(), c.ext) != exts.end()) {
        return EntryError(
            *e, absl::StrCat("duplicate extension ", Quote(c.ext), " in sample ", Quote(c.key)));
      }
      exts.push_back(c.ext);
      if (!Selected(c.ext)) continue;
      ExtensionStats& s = (*stats)[c.ext];
      // Non-UTF-8 values are never integers, so only a still-UTF-8 text
      // column needs its values looked at.
      if (IsTextExtension(c.ext) && s.all_utf8) {
        data.clear();
        FW_RETURN_IF_ERROR(tar.ReadData(&data));
        if (!IsValidUtf8(data)) {
          s.all_utf8 = false;
          s.all_int = false;
        } else if (s.all_int) {
          int64_t v;
          s.all_int = ParseInt(data, &v);
        }
      }
    }
    return absl::OkStatus();
  }

  void BeginRow(const std::string& key) {
    key_bytes_.append(key);
    cur_key_ = key;
    in_row_ = true;
  }

  void EndRow() {
    key_offsets_.push_back(static_cast<int64_t>(key_bytes_.size()));
    for (ColumnBuilder& b : cols_) {
      if (b.type == TypeId::kInt64) {
        if (!b.filled) b.ints.push_back(0);
      } else {
        b.offsets.push_back(static_cast<int64_t>(b.bytes.size()));
      }
      b.valid.push_back(b.filled);
      b.filled = false;
    }
    in_row_ = false;
  }

  // Adds the current entry's data to the current row.
  Status Accept(const TarEntry& e, const Classified& c) {
    const auto it = col_index_.find(c.ext);
    if (it == col_index_.end()) {
      if (options_.columns.empty()) {
        return EntryError(
            e, absl::StrCat("extension ", Quote(c.ext),
                            " was not in the archive's first pass (file changed while read?)"));
      }
      return absl::OkStatus();  // not selected; TarReader skips the data
    }
    ColumnBuilder& b = cols_[static_cast<size_t>(it->second)];
    if (b.filled) {
      return EntryError(
          e, absl::StrCat("duplicate extension ", Quote(c.ext), " in sample ", Quote(c.key)));
    }
    if (b.type == TypeId::kInt64) {
      scratch_.clear();
      FW_RETURN_IF_ERROR(tar_->ReadData(&scratch_));
      int64_t v = 0;
      if (!ParseInt(scratch_, &v)) {
        return EntryError(e,
                          "value is not an integer though the first pass found only integers "
                          "(file changed while read?)");
      }
      b.ints.push_back(v);
    } else {
      const size_t base = b.bytes.size();
      FW_RETURN_IF_ERROR(tar_->ReadData(&b.bytes));
      if (b.type == TypeId::kString && !IsValidUtf8(std::string_view(b.bytes).substr(base))) {
        return EntryError(e,
                          "value is not valid UTF-8 though the first pass found it was "
                          "(file changed while read?)");
      }
    }
    b.filled = true;
    return absl::OkStatus();
  }

  format::RecordBatch Flush(int64_t rows) {
    format::RecordBatch batch;
    batch.schema = schema_;
    batch.num_rows = rows;
    format::Column key;
    key.type = DataType::String();
    key.length = rows;
    key.values = format::Buffer::FromString(std::exchange(key_bytes_, std::string()));
    key.offsets = format::Buffer::FromVector(std::exchange(key_offsets_, std::vector<int64_t>{0}));
    batch.columns.push_back(std::move(key));
    for (ColumnBuilder& b : cols_) {
      format::Column c;
      c.type = DataType::Scalar(b.type);
      c.length = rows;
      if (b.type == TypeId::kInt64) {
        c.values = format::Buffer::FromVector(std::exchange(b.ints, {}));
      } else {
        c.values = format::Buffer::FromString(std::exchange(b.bytes, std::string()));
        c.offsets = format::Buffer::FromVector(std::exchange(b.offsets, std::vector<int64_t>{0}));
      }
      format::SetValidity(c, b.valid);
      b.valid.clear();
      batch.columns.push_back(std::move(c));
    }
    return batch;
  }

  Result<std::optional<format::RecordBatch>> NextBatch() {
    if (done_) return std::nullopt;
    int64_t rows = 0;
    for (;;) {
      const TarEntry* e = nullptr;
      if (pending_ != nullptr) {
        e = std::exchange(pending_, nullptr);
      } else {
        FW_ASSIGN_OR_RETURN(e, tar_->Next());
        if (e == nullptr) {
          if (in_row_) {
            EndRow();
            ++rows;
          }
          done_ = true;
          break;
        }
      }
      const Classified c = Classify(*e);
      if (c.kind == Classified::kIgnore) continue;
      if (c.kind == Classified::kRefused) {
        // Recorded by the first pass.
        if (!options_.skip_bad_entries) return EntryError(*e, c.why);
        continue;
      }
      if (!in_row_ || c.key != cur_key_) {
        if (in_row_) {
          EndRow();
          if (++rows == options_.batch_rows) {
            pending_ = e;  // its data is still unread; the next batch starts with it
            return Flush(rows);
          }
        }
        BeginRow(c.key);
      }
      FW_RETURN_IF_ERROR(Accept(*e, c));
    }
    if (rows == 0) return std::nullopt;
    return Flush(rows);
  }

  std::shared_ptr<io::RandomAccessFile> file_;
  WdsReadOptions options_;
  format::Schema schema_;
  std::vector<std::string> skipped_;
  std::unique_ptr<TarReader> tar_;  // pass 2
  std::vector<ColumnBuilder> cols_;
  std::unordered_map<std::string, int> col_index_;
  std::string key_bytes_;
  std::vector<int64_t> key_offsets_{0};
  std::string cur_key_;
  bool in_row_ = false;
  const TarEntry* pending_ = nullptr;  // read, unprocessed (starts the next batch)
  bool done_ = false;
  Status error_;
  std::string scratch_;
};

Status ValidateOptions(const WdsReadOptions& options) {
  if (options.batch_rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("WdsReadOptions.batch_rows must be >= 1, got ", options.batch_rows));
  }
  std::set<std::string> seen;
  for (const auto& c : options.columns) {
    if (c.empty()) return absl::InvalidArgumentError("WdsReadOptions.columns has an empty name");
    if (!seen.insert(c).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("WdsReadOptions.columns lists ", Quote(c), " twice"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

Result<std::unique_ptr<WdsReader>> OpenWebDatasetFile(std::shared_ptr<io::RandomAccessFile> file,
                                                      const WdsReadOptions& options) {
  FW_RETURN_IF_ERROR(ValidateOptions(options));
  const std::string path = file->path();
  auto reader = std::make_unique<WdsReaderImpl>(std::move(file), options);
  FW_RETURN_IF_ERROR_CTX(reader->Init(), "reading WebDataset ", path);
  return std::unique_ptr<WdsReader>(std::move(reader));
}

}  // namespace internal_wds

Result<std::unique_ptr<WdsReader>> OpenWebDataset(const std::string& path,
                                                  const WdsReadOptions& options) {
  FW_RETURN_IF_ERROR(internal_wds::ValidateOptions(options));
  FW_ASSIGN_OR_RETURN(auto file,
                      io::PosixFileSystem()->OpenRead(path, io::FileOpenOptions{.mmap = false}));
  return internal_wds::OpenWebDatasetFile(std::move(file), options);
}

}  // namespace flywheel::interop
