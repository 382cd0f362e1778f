// Implements docs/format/shard.md.
#include "flywheel/format/shard.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "flywheel/base/checksum.h"
#include "flywheel/format/internal/coding.h"
#include "flywheel/format/internal/nested_page.h"
#include "flywheel/format/leaf_stats.h"
#include "flywheel/format/limits.h"

namespace flywheel::format {
namespace {

using internal_format::Decoder;
using internal_format::PutBytes;
using internal_format::PutFixed16;
using internal_format::PutFixed32;
using internal_format::PutFixed64;
using internal_format::PutSigned;
using internal_format::PutVarint;

constexpr char kHeaderMagic[8] = {'F', 'W', 'S', 'H', 'A', 'R', 'D', '\0'};
constexpr char kTrailerMagic[4] = {'F', 'W', 'S', '1'};
constexpr size_t kHeaderSize = 16;
constexpr size_t kTrailerSize = 32;
constexpr size_t kPageAlign = 64;
constexpr uint64_t kFooterVersion = 1;

uint64_t Align8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

size_t ValueElemSize(const DataType& t) {
  if (t.is_fixed_width()) return t.fixed_width();
  if (t.id == TypeId::kList) return ScalarSize(t.elem);
  return 1;
}

// The field's type as the footer writes it (section 6.1): id, element id,
// shape, then for nested types their child fields.
void PutType(std::string* out, const DataType& t) {
  out->push_back(static_cast<char>(t.id));
  out->push_back(static_cast<char>(t.elem));
  PutVarint(out, t.shape.size());
  for (int64_t d : t.shape) PutVarint(out, static_cast<uint64_t>(d));
  if (t.id == TypeId::kStruct || t.id == TypeId::kMap || (t.id == TypeId::kList && t.elem == TypeId::kNone)) {
    PutVarint(out, t.children.size());
    for (const Field& c : t.children) {
      PutBytes(out, c.name);
      PutType(out, c.type);
      out->push_back(c.nullable ? 1 : 0);
    }
  }
}

Status ReadType(Decoder& d, int depth, DataType* t) {
  if (depth > kMaxNestingDepth) return d.Error(absl::StrCat("types nest deeper than ", kMaxNestingDepth));
  uint8_t id, elem;
  uint64_t ndim;
  FW_RETURN_IF_ERROR(d.Byte(&id));
  FW_RETURN_IF_ERROR(d.Byte(&elem));
  FW_RETURN_IF_ERROR(d.Bounded(&ndim, kMaxTensorRank, "tensor rank"));
  t->id = static_cast<TypeId>(id);
  t->elem = static_cast<TypeId>(elem);
  for (uint64_t k = 0; k < ndim; ++k) {
    uint64_t dim;
    FW_RETURN_IF_ERROR(d.Bounded(&dim, kMaxTensorElements, "tensor dimension"));
    t->shape.push_back(static_cast<int64_t>(dim));
  }
  if (t->id == TypeId::kStruct || t->id == TypeId::kMap ||
      (t->id == TypeId::kList && t->elem == TypeId::kNone)) {
    uint64_t n;
    FW_RETURN_IF_ERROR(d.Bounded(&n, kMaxStructFields, "child field count"));
    for (uint64_t i = 0; i < n; ++i) {
      Field c;
      uint8_t nullable;
      FW_RETURN_IF_ERROR(d.Bytes(&c.name));
      FW_RETURN_IF_ERROR(ReadType(d, depth + 1, &c.type));
      FW_RETURN_IF_ERROR(d.Byte(&nullable));
      c.nullable = nullable != 0;
      t->children.push_back(std::move(c));
    }
  }
  return absl::OkStatus();
}

// Pending rows of one column, flushed as a page when large enough.
struct PendingColumn {
  std::string values;
  std::vector<int64_t> offsets{0};
  std::vector<uint8_t> validity;  // bit-packed
  int64_t rows = 0;
  int64_t nulls = 0;
  std::vector<PageInfo> pages;
  int64_t next_first_row = 0;
  // Nested columns: the pending rows as slices of the written batches, and
  // their estimated page bytes.
  std::vector<Column> parts;
  size_t part_bytes = 0;

  size_t bytes() const { return values.size() + offsets.size() * 8 + validity.size() + part_bytes; }
};

class ShardWriterImpl final : public ShardWriter {
 public:
  ShardWriterImpl(std::unique_ptr<io::WritableFile> file, std::string path, Schema schema,
                  ShardWriterOptions options)
      : file_(std::move(file)), path_(std::move(path)), schema_(std::move(schema)),
        options_(std::move(options)), columns_(schema_.fields.size()) {}

  Status Start() {
    std::string header(kHeaderMagic, 8);
    PutFixed16(&header, kShardFormatVersion);
    PutFixed16(&header, 0);
    PutFixed32(&header, 0);
    return file_->Append(header);
  }

  Status Write(const RecordBatch& batch) override {
    if (finished_) return absl::FailedPreconditionError("ShardWriter::Write after Finish");
    if (batch.schema.fields.size() != schema_.fields.size()) {
      return absl::InvalidArgumentError(absl::StrCat("writing ", path_, ": batch has ",
                                                     batch.schema.fields.size(), " fields, shard has ",
                                                     schema_.fields.size()));
    }
    for (size_t i = 0; i < schema_.fields.size(); ++i) {
      const Field& a = batch.schema.fields[i];
      const Field& b = schema_.fields[i];
      if (a.name != b.name || !(a.type == b.type)) {
        return absl::InvalidArgumentError(absl::StrCat("writing ", path_, ": batch field ", i, " is ",
                                                       a.name, ":", a.type.ToString(), ", shard expects ",
                                                       b.name, ":", b.type.ToString()));
      }
    }
    FW_RETURN_IF_ERROR_CTX(batch.Validate(), "writing ", path_);
    for (size_t c = 0; c < columns_.size(); ++c) {
      FW_RETURN_IF_ERROR(AppendColumn(static_cast<int>(c), batch.columns[c]));
      if (schema_.fields[c].type.is_nested()) {
        AccumulateLeafStats(batch.columns[c], schema_.fields[c].name, &leaf_stats_);
      }
    }
    num_rows_ += batch.num_rows;
    return absl::OkStatus();
  }

  Result<ShardInfo> Finish() override {
    if (finished_) return absl::FailedPreconditionError("ShardWriter::Finish called twice");
    finished_ = true;
    for (size_t c = 0; c < columns_.size(); ++c) {
      if (columns_[c].rows > 0) FW_RETURN_IF_ERROR(FlushPage(static_cast<int>(c)));
    }
    std::string footer;
    PutVarint(&footer, kFooterVersion);
    PutVarint(&footer, schema_.fields.size());
    uint16_t features = 0;
    for (const Field& f : schema_.fields) {
      PutBytes(&footer, f.name);
      PutType(&footer, f.type);
      footer.push_back(f.nullable ? 1 : 0);
      PutSigned(&footer, f.id);
      if (f.type.is_nested()) features |= kShardFeatureNested;
    }
    PutVarint(&footer, static_cast<uint64_t>(num_rows_));
    for (const PendingColumn& col : columns_) {
      PutVarint(&footer, col.pages.size());
      for (const PageInfo& p : col.pages) {
        PutVarint(&footer, static_cast<uint64_t>(p.num_rows));
        PutVarint(&footer, p.offset);
        PutVarint(&footer, p.stored_size);
        PutVarint(&footer, p.values_size);
        PutVarint(&footer, p.offsets_size);
        PutVarint(&footer, p.validity_size);
        footer.push_back(static_cast<char>(p.codec));
        PutVarint(&footer, static_cast<uint64_t>(p.null_count));
        PutFixed64(&footer, p.checksum);
      }
    }
    // Statistics per leaf of the nested columns (docs/format/shard.md).
    if (!leaf_stats_.empty()) options_.metadata[kLeafStatsKey] = LeafStatsToJson(leaf_stats_);
    PutVarint(&footer, options_.metadata.size());
    for (const auto& [k, v] : options_.metadata) {
      PutBytes(&footer, k);
      PutBytes(&footer, v);
    }
    const uint64_t footer_offset = file_->position();
    std::string trailer;
    PutFixed64(&trailer, footer_offset);
    PutFixed64(&trailer, footer.size());
    PutFixed64(&trailer, Checksum64(footer));
    PutFixed16(&trailer, kShardFormatVersion);
    PutFixed16(&trailer, features);  // required features
    trailer.append(kTrailerMagic, 4);
    FW_RETURN_IF_ERROR(file_->Append(footer));
    FW_RETURN_IF_ERROR(file_->Append(trailer));
    const uint64_t size = file_->position();
    FW_RETURN_IF_ERROR(file_->Close());
    return ShardInfo{path_, num_rows_, size};
  }

  int64_t num_rows() const override { return num_rows_; }

 private:
  // Nested columns: pages cut by the estimated body size (a binary search
  // for the most rows that fit), each row range kept as a slice.
  Status AppendNested(int c, const Column& src) {
    PendingColumn& col = columns_[c];
    int64_t row = 0;
    while (row < src.length) {
      const size_t room = options_.page_size > col.bytes() ? options_.page_size - col.bytes() : 0;
      int64_t lo = 1, hi = src.length - row;
      if (internal_format::EstimateNestedPageBytes(src, row, hi) > room) {
        while (lo < hi) {  // the largest k in [1, hi] whose rows fit, or 1
          const int64_t mid = lo + (hi - lo + 1) / 2;
          if (internal_format::EstimateNestedPageBytes(src, row, mid) <= room) lo = mid;
          else hi = mid - 1;
        }
        if (col.rows > 0 && internal_format::EstimateNestedPageBytes(src, row, lo) > room) {
          FW_RETURN_IF_ERROR(FlushPage(c));
          continue;
        }
      } else {
        lo = hi;
      }
      Column part = src.Slice(row, lo);
      col.part_bytes += internal_format::EstimateNestedPageBytes(part, 0, lo);
      col.nulls += part.null_count;
      col.parts.push_back(std::move(part));
      col.rows += lo;
      row += lo;
      if (col.bytes() >= options_.page_size) FW_RETURN_IF_ERROR(FlushPage(c));
    }
    return absl::OkStatus();
  }

  Status AppendColumn(int c, const Column& src) {
    PendingColumn& col = columns_[c];
    const DataType& type = schema_.fields[c].type;
    if (type.is_nested()) return AppendNested(c, src);
    const size_t esize = ValueElemSize(type);
    const int64_t* o = type.is_variable_length() ? src.offsets_data() : nullptr;
    int64_t row = 0;
    while (row < src.length) {
      // How many rows fit in the current page.
      int64_t take;
      if (type.is_fixed_width()) {
        const size_t w = type.fixed_width();
        const size_t room = options_.page_size > col.values.size() ? options_.page_size - col.values.size() : 0;
        take = std::max<int64_t>(1, static_cast<int64_t>(room / std::max<size_t>(w, 1)));
        take = std::min(take, src.length - row);
        col.values.append(reinterpret_cast<const char*>(src.values.data + row * w), take * w);
      } else {
        take = 0;
        while (row + take < src.length && (take == 0 || col.bytes() < options_.page_size)) {
          const int64_t r = row + take;
          const size_t n = static_cast<size_t>(o[r + 1] - o[r]) * esize;
          col.values.append(reinterpret_cast<const char*>(src.values.data + o[r] * esize), n);
          col.offsets.push_back(static_cast<int64_t>(col.values.size() / esize));
          take++;
        }
      }
      for (int64_t i = 0; i < take; ++i) {
        const int64_t bit = col.rows + i;
        if ((bit & 7) == 0) col.validity.push_back(0);
        if (src.IsValid(row + i)) {
          col.validity[bit >> 3] |= static_cast<uint8_t>(1u << (bit & 7));
        } else {
          col.nulls++;
        }
      }
      col.rows += take;
      row += take;
      if (col.bytes() >= options_.page_size) FW_RETURN_IF_ERROR(FlushPage(c));
    }
    return absl::OkStatus();
  }

  Status FlushPage(int c) {
    PendingColumn& col = columns_[c];
    const DataType& type = schema_.fields[c].type;
    PageInfo page;
    page.first_row = col.next_first_row;
    page.num_rows = col.rows;
    page.null_count = col.nulls;
    page.values_size = col.values.size();
    page.offsets_size = type.is_variable_length() ? col.offsets.size() * 8 : 0;
    page.validity_size = col.nulls > 0 ? col.validity.size() : 0;
    page.codec = options_.codec;
    std::string body = std::move(col.values);
    if (type.is_nested()) {
      const Column rows = ConcatColumns(col.parts);
      body.clear();
      internal_format::EncodeNestedPage(rows, 0, rows.length, &body);
      page.values_size = body.size();
      page.offsets_size = 0;
      page.validity_size = 0;
      col.parts.clear();
      col.part_bytes = 0;
    }
    body.resize(Align8(body.size()), '\0');
    if (page.offsets_size) {
      body.append(reinterpret_cast<const char*>(col.offsets.data()), page.offsets_size);
    }
    if (page.validity_size) {
      body.append(reinterpret_cast<const char*>(col.validity.data()), page.validity_size);
    }
    std::string stored;
    if (options_.codec != Codec::kNone) {
      FW_RETURN_IF_ERROR_CTX(Compress(options_.codec, options_.zstd_level, body.data(), body.size(), &stored),
                             "writing ", path_);
    } else {
      stored = std::move(body);
    }
    // Pages start 64-byte aligned so mapped views are aligned for any type.
    const uint64_t pos = file_->position();
    const uint64_t aligned = (pos + kPageAlign - 1) & ~uint64_t{kPageAlign - 1};
    if (aligned > pos) FW_RETURN_IF_ERROR(file_->Append(std::string(aligned - pos, '\0')));
    page.offset = aligned;
    page.stored_size = stored.size();
    page.checksum = Checksum64(stored);
    FW_RETURN_IF_ERROR_CTX(file_->Append(stored), "writing ", path_);
    col.pages.push_back(page);
    col.next_first_row += col.rows;
    col.values.clear();
    col.offsets.assign(1, 0);
    col.validity.clear();
    col.rows = 0;
    col.nulls = 0;
    return absl::OkStatus();
  }

  std::unique_ptr<io::WritableFile> file_;
  std::string path_;
  Schema schema_;
  ShardWriterOptions options_;
  std::vector<PendingColumn> columns_;
  LeafStatsMap leaf_stats_;
  int64_t num_rows_ = 0;
  bool finished_ = false;
};

}  // namespace

Status ShardWriterOptions::Validate() const {
  if (page_size < 1024 || page_size > (64u << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size ", page_size, " must be between 1 KiB and 64 MiB"));
  }
  if (codec == Codec::kZstd && (zstd_level < 1 || zstd_level > 19)) {
    return absl::InvalidArgumentError(absl::StrCat("zstd_level ", zstd_level, " must be in 1..19"));
  }
  return absl::OkStatus();
}

Result<std::unique_ptr<ShardWriter>> ShardWriter::Open(io::FileSystem* fs, const std::string& path,
                                                       const Schema& schema,
                                                       const ShardWriterOptions& options) {
  FW_RETURN_IF_ERROR_CTX(options.Validate(), "shard writer options");
  FW_RETURN_IF_ERROR_CTX(schema.Validate(), "shard schema");
  FW_ASSIGN_OR_RETURN(auto file, fs->NewWritable(path));
  auto w = std::make_unique<ShardWriterImpl>(std::move(file), path, schema, options);
  FW_RETURN_IF_ERROR(w->Start());
  return std::unique_ptr<ShardWriter>(std::move(w));
}

uint64_t PageInfo::uncompressed_size() const {
  return Align8(values_size) + offsets_size + validity_size;
}

// ---------------------------------------------------------------- reader

ShardReader::~ShardReader() = default;

const std::string& ShardReader::path() const { return file_->path(); }
uint64_t ShardReader::file_size() const { return file_->size(); }

Result<std::shared_ptr<ShardReader>> ShardReader::Open(io::FileSystem* fs, const std::string& path,
                                                       const ShardReaderOptions& options) {
  FW_ASSIGN_OR_RETURN(auto file, fs->OpenRead(path, io::FileOpenOptions{.mmap = options.mmap}));
  return Open(std::move(file), options);
}

Result<std::shared_ptr<ShardReader>> ShardReader::Open(std::shared_ptr<io::RandomAccessFile> file,
                                                       const ShardReaderOptions& options) {
  std::shared_ptr<ShardReader> r(new ShardReader());
  r->file_ = std::move(file);
  r->options_ = options;
  FW_RETURN_IF_ERROR_CTX(r->ParseFooter(), "opening shard ", r->file_->path());
  return r;
}

Status ShardReader::ParseFooter() {
  const uint64_t size = file_->size();
  if (size < kHeaderSize + kTrailerSize) {
    return absl::DataLossError(absl::StrCat("file is ", size, " bytes, too small to be a shard"));
  }
  uint8_t header[kHeaderSize];
  FW_RETURN_IF_ERROR(file_->ReadAt(0, kHeaderSize, header));
  if (std::memcmp(header, kHeaderMagic, 8) != 0) {
    return absl::DataLossError("not a flywheel shard (bad header magic)");
  }
  uint8_t trailer[kTrailerSize];
  FW_RETURN_IF_ERROR(file_->ReadAt(size - kTrailerSize, kTrailerSize, trailer));
  if (std::memcmp(trailer + 28, kTrailerMagic, 4) != 0) {
    return absl::DataLossError("bad trailer magic (file truncated or not a shard)");
  }
  Decoder t(trailer, kTrailerSize, "trailer");
  uint64_t footer_offset, footer_size, footer_checksum;
  uint16_t version, features;
  FW_RETURN_IF_ERROR(t.Fixed64(&footer_offset));
  FW_RETURN_IF_ERROR(t.Fixed64(&footer_size));
  FW_RETURN_IF_ERROR(t.Fixed64(&footer_checksum));
  FW_RETURN_IF_ERROR(t.Fixed16(&version));
  FW_RETURN_IF_ERROR(t.Fixed16(&features));
  if (version == 0 || version > kShardFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard format version ", version, " is not supported (this reader knows versions 1..",
        kShardFormatVersion, "); upgrade flywheel"));
  }
  if (features & ~kShardKnownFeatures) {
    return absl::FailedPreconditionError(absl::StrCat(
        "file requires format features 0x", absl::Hex(features & ~kShardKnownFeatures),
        " that this reader does not know; upgrade flywheel"));
  }
  uint16_t header_version;
  std::memcpy(&header_version, header + 8, 2);
  if (header_version != version) {
    return absl::DataLossError(absl::StrCat("header version ", header_version,
                                            " does not match trailer version ", version));
  }
  for (size_t i = 10; i < kHeaderSize; ++i) {
    if (header[i] != 0) return absl::DataLossError(absl::StrCat("header byte ", i, " is not zero"));
  }
  if (footer_offset < kHeaderSize || footer_size > size - kHeaderSize - kTrailerSize ||
      footer_offset != size - kTrailerSize - footer_size) {
    return absl::DataLossError(absl::StrCat("footer range [", footer_offset, ", +", footer_size,
                                            ") does not fit a ", size, "-byte file"));
  }
  std::string footer(footer_size, '\0');
  FW_RETURN_IF_ERROR(file_->ReadAt(footer_offset, footer_size, footer.data()));
  if (Checksum64(footer) != footer_checksum) {
    return absl::DataLossError("footer checksum mismatch");
  }
  Decoder d(reinterpret_cast<const uint8_t*>(footer.data()), footer.size(), "footer");
  uint64_t fv, nfields;
  FW_RETURN_IF_ERROR(d.Varint(&fv));
  if (fv != kFooterVersion) return d.Error(absl::StrCat("unknown footer version ", fv));
  FW_RETURN_IF_ERROR(d.Bounded(&nfields, kMaxColumns, "field count"));
  if (nfields == 0) return d.Error("no fields");
  for (uint64_t i = 0; i < nfields; ++i) {
    Field f;
    uint8_t nullable;
    FW_RETURN_IF_ERROR(d.Bytes(&f.name));
    FW_RETURN_IF_ERROR(ReadType(d, 0, &f.type));
    FW_RETURN_IF_ERROR(d.Byte(&nullable));
    f.nullable = nullable != 0;
    int64_t fid;
    FW_RETURN_IF_ERROR(d.Signed(&fid));
    f.id = static_cast<int32_t>(fid);
    schema_.fields.push_back(std::move(f));
  }
  Status sv = schema_.Validate();
  if (!sv.ok()) return d.Error(absl::StrCat("invalid schema: ", sv.message()));
  bool any_nested = false;
  for (const Field& f : schema_.fields) {
    if (f.type.is_nested() && (features & kShardFeatureNested) == 0) {
      return d.Error(absl::StrCat("field '", f.name, "' is nested but the file does not require the nested feature"));
    }
    any_nested = any_nested || f.type.is_nested();
  }
  // Writers set the bit exactly when a column needs it.
  if ((features & kShardFeatureNested) != 0 && !any_nested) {
    return d.Error("the file requires the nested feature but has no nested column");
  }
  uint64_t nrows;
  FW_RETURN_IF_ERROR(d.Bounded(&nrows, kMaxRowsPerFile, "row count"));
  num_rows_ = static_cast<int64_t>(nrows);
  pages_.resize(nfields);
  page_starts_.resize(nfields);
  verified_.resize(nfields);
  for (uint64_t c = 0; c < nfields; ++c) {
    const DataType& type = schema_.fields[c].type;
    uint64_t npages;
    FW_RETURN_IF_ERROR(d.Bounded(&npages, footer_size, "page count"));
    int64_t row = 0;
    for (uint64_t p = 0; p < npages; ++p) {
      PageInfo pi;
      uint64_t n, nulls;
      uint8_t codec;
      FW_RETURN_IF_ERROR(d.Bounded(&n, nrows, "page row count"));
      FW_RETURN_IF_ERROR(d.Varint(&pi.offset));
      FW_RETURN_IF_ERROR(d.Varint(&pi.stored_size));
      FW_RETURN_IF_ERROR(d.Bounded(&pi.values_size, kMaxPageSectionBytes, "values size"));
      FW_RETURN_IF_ERROR(d.Bounded(&pi.offsets_size, kMaxPageSectionBytes, "offsets size"));
      FW_RETURN_IF_ERROR(d.Bounded(&pi.validity_size, kMaxPageSectionBytes, "validity size"));
      FW_RETURN_IF_ERROR(d.Byte(&codec));
      FW_RETURN_IF_ERROR(d.Bounded(&nulls, n, "null count"));
      FW_RETURN_IF_ERROR(d.Fixed64(&pi.checksum));
      pi.first_row = row;
      pi.num_rows = static_cast<int64_t>(n);
      pi.null_count = static_cast<int64_t>(nulls);
      pi.codec = static_cast<Codec>(codec);
      const std::string where = absl::StrCat("column '", schema_.fields[c].name, "' page ", p);
      if (codec > static_cast<uint8_t>(Codec::kZstd)) {
        return d.Error(absl::StrCat(where, ": unknown codec ", codec));
      }
      if (n == 0) return d.Error(absl::StrCat(where, ": empty page"));
      if (n > nrows - static_cast<uint64_t>(row)) {
        return d.Error(absl::StrCat(where, ": pages hold more than the file's ", nrows, " rows"));
      }
      if (pi.offset < kHeaderSize || pi.offset > footer_offset ||
          pi.stored_size > footer_offset - pi.offset) {
        return d.Error(absl::StrCat(where, ": range [", pi.offset, ", +", pi.stored_size,
                                    ") lies outside the data section"));
      }
      if (pi.offset % kPageAlign != 0) {
        return d.Error(absl::StrCat(where, ": offset ", pi.offset, " is not ", kPageAlign,
                                    "-byte aligned"));
      }
      if (type.is_nested()) {
        // The body describes itself (section 3.4); its node table alone
        // takes 40 bytes per node.
        if (pi.offsets_size != 0 || pi.validity_size != 0 || pi.values_size % 8 != 0 ||
            pi.values_size < internal_format::kNestedNodeEntryBytes *
                                 static_cast<uint64_t>(internal_format::NestedNodeCount(type))) {
          return d.Error(absl::StrCat(where, ": section sizes do not describe a nested page"));
        }
      } else if (type.is_fixed_width()) {
        // n <= values_size / width first, so n * width cannot overflow.
        const uint64_t width = type.fixed_width();
        if (n > pi.values_size / width || pi.values_size != n * width || pi.offsets_size != 0) {
          return d.Error(absl::StrCat(where, ": section sizes do not match ", n, " rows of ",
                                      type.ToString()));
        }
      } else if (pi.offsets_size != (n + 1) * 8) {
        return d.Error(absl::StrCat(where, ": offsets size ", pi.offsets_size, " does not match ",
                                    n, " rows"));
      } else if (pi.values_size % ValueElemSize(type) != 0) {
        return d.Error(absl::StrCat(where, ": values size ", pi.values_size,
                                    " is not a multiple of the element size"));
      }
      if (!type.is_nested() && pi.validity_size != (nulls > 0 ? (n + 7) / 8 : 0)) {
        return d.Error(absl::StrCat(where, ": validity size does not match its null count"));
      }
      if (nulls > 0 && !schema_.fields[c].nullable) {
        return d.Error(absl::StrCat(where, ": nulls in a non-nullable column"));
      }
      if (pi.codec == Codec::kNone && pi.stored_size != pi.uncompressed_size()) {
        return d.Error(absl::StrCat(where, ": stored size differs from the uncompressed size"));
      }
      // Bounds what a reader allocates for a page before decompressing it.
      if (pi.uncompressed_size() > MaxDecompressedSize(pi.codec, pi.stored_size)) {
        return d.Error(absl::StrCat(where, ": ", pi.stored_size, " ", AsAbsl(CodecName(pi.codec)),
                                    " bytes cannot decode to ", pi.uncompressed_size()));
      }
      row += pi.num_rows;
      page_starts_[c].push_back(pi.first_row);
      pages_[c].push_back(pi);
    }
    if (row != num_rows_) {
      return d.Error(absl::StrCat("column '", schema_.fields[c].name, "' pages hold ", row,
                                  " rows, file has ", num_rows_));
    }
    int64_t uniform = npages > 0 ? pages_[c][0].num_rows : 0;
    uint8_t nulls_here = 0;
    for (uint64_t p = 0; p < npages; ++p) {
      if (p + 1 < npages && pages_[c][p].num_rows != uniform) uniform = 0;
      if (p + 1 == npages && npages > 1 && pages_[c][p].num_rows > uniform) uniform = 0;
      nulls_here |= pages_[c][p].null_count > 0;
    }
    uniform_rows_.push_back(uniform);
    has_nulls_.push_back(nulls_here);
    verified_[c].reset(new std::atomic<uint8_t>[npages]);
    for (uint64_t p = 0; p < npages; ++p) verified_[c][p].store(0, std::memory_order_relaxed);
  }
  uint64_t nmeta;
  FW_RETURN_IF_ERROR(d.Bounded(&nmeta, footer_size, "metadata count"));
  for (uint64_t i = 0; i < nmeta; ++i) {
    std::string k, v;
    FW_RETURN_IF_ERROR(d.Bytes(&k));
    FW_RETURN_IF_ERROR(d.Bytes(&v));
    if (!metadata_.emplace(std::move(k), std::move(v)).second) {
      return d.Error("duplicate metadata key");
    }
  }
  if (!d.done()) return d.Error("trailing bytes after the footer");
  return absl::OkStatus();
}

int ShardReader::FindPage(int column, int64_t row) const {
  const int64_t uniform = uniform_rows_[column];
  if (uniform > 0) {
    const int64_t last = static_cast<int64_t>(page_starts_[column].size()) - 1;
    return static_cast<int>(std::min(row / uniform, last));
  }
  const auto& starts = page_starts_[column];
  return static_cast<int>(std::upper_bound(starts.begin(), starts.end(), row) - starts.begin()) - 1;
}

// Validates a decoded page body (offsets monotonic and in range).
Status ShardReader::CheckPage(int column, int page, const uint8_t* body, uint64_t size) const {
  const PageInfo& pi = pages_[column][page];
  const DataType& type = schema_.fields[column].type;
  if (size < pi.uncompressed_size()) return absl::DataLossError("page body is short");
  if (type.is_nested()) {
    return internal_format::DecodeNestedPage(schema_.fields[column], pi.num_rows, pi.null_count,
                                             Buffer{body, pi.values_size, nullptr}, /*full=*/true)
        .status();
  }
  if (type.is_variable_length()) {
    const size_t esize = ValueElemSize(type);
    const int64_t* o = reinterpret_cast<const int64_t*>(body + Align8(pi.values_size));
    if (o[0] != 0) return absl::DataLossError("page offsets do not start at 0");
    for (int64_t i = 0; i < pi.num_rows; ++i) {
      if (o[i + 1] < o[i]) return absl::DataLossError(absl::StrCat("page offsets decrease at row ", i));
    }
    // Compared in elements: o * esize could overflow.
    if (static_cast<uint64_t>(o[pi.num_rows]) != pi.values_size / esize) {
      return absl::DataLossError("page offsets do not cover the values");
    }
  }
  if (pi.validity_size) {
    const uint8_t* bits = body + Align8(pi.values_size) + pi.offsets_size;
    int64_t nulls = 0;
    for (int64_t i = 0; i < pi.num_rows; ++i) nulls += !((bits[i >> 3] >> (i & 7)) & 1);
    if (nulls != pi.null_count) {
      return absl::DataLossError(absl::StrCat("page validity has ", nulls, " nulls, index says ",
                                              pi.null_count));
    }
  }
  return absl::OkStatus();
}

bool ShardReader::mapped() const { return file_->mapped_data() != nullptr; }

int ShardReader::fd() const { return file_->fd(); }

Status ShardReader::CheckPageIndex(int column, int page) const {
  if (column < 0 || column >= schema_.num_fields() || page < 0 ||
      page >= static_cast<int>(pages_[column].size())) {
    return absl::OutOfRangeError(absl::StrCat("reading ", path(), ": no column ", column, " page ", page));
  }
  return absl::OkStatus();
}

std::string ShardReader::PageName(int column, int page) const {
  return absl::StrCat("reading ", path(), " column '", schema_.fields[column].name, "' page ", page);
}

Result<Column> ShardReader::PageColumn(int column, int page, const Buffer& body) const {
  const PageInfo& pi = pages_[column][page];
  if (schema_.fields[column].type.is_nested()) {
    // Checked in full by CheckPage before; the sizes are checked again here.
    return internal_format::DecodeNestedPage(schema_.fields[column], pi.num_rows, pi.null_count,
                                             Buffer{body.data, pi.values_size, body.owner}, /*full=*/false);
  }
  Column c;
  c.type = schema_.fields[column].type;
  c.length = pi.num_rows;
  c.null_count = pi.null_count;
  c.values = Buffer{body.data, pi.values_size, body.owner};
  if (pi.offsets_size) {
    c.offsets = Buffer{body.data + Align8(pi.values_size), pi.offsets_size, body.owner};
  }
  if (pi.validity_size) {
    c.validity = Buffer{body.data + Align8(pi.values_size) + pi.offsets_size, pi.validity_size,
                        body.owner};
  }
  return c;
}

Result<Buffer> ShardReader::ReadStoredPage(int column, int page) const {
  FW_RETURN_IF_ERROR(CheckPageIndex(column, page));
  const PageInfo& pi = pages_[column][page];
  std::vector<uint64_t> stored((pi.stored_size + 7) / 8);
  FW_RETURN_IF_ERROR_CTX(file_->ReadAt(pi.offset, pi.stored_size, stored.data()),
                         PageName(column, page));
  Buffer b = Buffer::FromVector(std::move(stored));
  b.size = pi.stored_size;
  return b;
}

Result<Column> ShardReader::DecodePage(int column, int page, Buffer stored) const {
  FW_RETURN_IF_ERROR(CheckPageIndex(column, page));
  const PageInfo& pi = pages_[column][page];
  if (stored.size != pi.stored_size) {
    return absl::DataLossError(absl::StrCat(PageName(column, page), ": got ", stored.size,
                                            " stored bytes, the index says ", pi.stored_size));
  }
  if (options_.verify_checksums && Checksum64(stored.data, pi.stored_size) != pi.checksum) {
    return absl::DataLossError(absl::StrCat(PageName(column, page), ": checksum mismatch"));
  }
  Buffer body;
  if (pi.codec == Codec::kNone) {
    body = std::move(stored);
  } else {
    // Not zero-filled: Decompress writes all `usize` bytes or fails, and a
    // corrupt index may claim a large size (bounded by MaxDecompressedSize).
    const uint64_t usize = pi.uncompressed_size();
    std::shared_ptr<uint64_t[]> out(new uint64_t[(usize + 7) / 8 + 1]);
    FW_RETURN_IF_ERROR_CTX(Decompress(pi.codec, stored.data, pi.stored_size, out.get(), usize),
                           PageName(column, page));
    body = Buffer{reinterpret_cast<const uint8_t*>(out.get()), usize, out};
  }
  FW_RETURN_IF_ERROR_CTX(CheckPage(column, page, body.data, body.size), PageName(column, page));
  return PageColumn(column, page, body);
}

Result<Column> ShardReader::ReadPage(int column, int page) const {
  FW_RETURN_IF_ERROR(CheckPageIndex(column, page));
  const PageInfo& pi = pages_[column][page];
  const uint8_t* mapped = file_->mapped_data();
  if (pi.codec == Codec::kNone && mapped != nullptr) {
    Buffer body{mapped + pi.offset, pi.stored_size, file_};
    if (verified_[column][page].load(std::memory_order_acquire) == 0) {
      if (options_.verify_checksums && Checksum64(body.data, body.size) != pi.checksum) {
        return absl::DataLossError(absl::StrCat(PageName(column, page), ": checksum mismatch"));
      }
      FW_RETURN_IF_ERROR_CTX(CheckPage(column, page, body.data, body.size), PageName(column, page));
      verified_[column][page].store(1, std::memory_order_release);
    }
    return PageColumn(column, page, body);
  }
  // Copy (and maybe decompress) into an 8-byte aligned heap buffer.
  FW_ASSIGN_OR_RETURN(Buffer stored, ReadStoredPage(column, page));
  return DecodePage(column, page, std::move(stored));
}

Result<Column> ShardReader::Read(int column, int64_t start, int64_t length) const {
  if (column < 0 || column >= schema_.num_fields()) {
    return absl::OutOfRangeError(absl::StrCat("reading ", path(), ": no column ", column));
  }
  if (start < 0 || length < 0 || start > num_rows_ || length > num_rows_ - start) {
    return absl::OutOfRangeError(absl::StrCat("reading ", path(), ": ", length, " rows at ", start,
                                              " are outside [0, ", num_rows_, ")"));
  }
  if (length == 0) return MakeNullColumn(schema_.fields[column].type, 0, false);
  std::vector<Column> parts;
  int64_t row = start;
  while (row < start + length) {
    const int p = FindPage(column, row);
    FW_ASSIGN_OR_RETURN(Column page, ReadPage(column, p));
    const PageInfo& pi = pages_[column][p];
    const int64_t lo = row - pi.first_row;
    const int64_t n = std::min(pi.num_rows - lo, start + length - row);
    parts.push_back(lo == 0 && n == pi.num_rows ? std::move(page) : page.Slice(lo, n));
    row += n;
  }
  return ConcatColumns(parts);
}

namespace {

// Copies `width` bytes; constant widths let the compiler inline the copy.
template <size_t W>
void GatherRows(const uint8_t* const* page_values, const int64_t* page_first, const int32_t* page_of,
                const int64_t* rows, const int64_t* positions, size_t n, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) {
    const int32_t p = page_of[i];
    const size_t pos = positions ? static_cast<size_t>(positions[i]) : i;
    std::memcpy(out + pos * W, page_values[p] + (rows[i] - page_first[p]) * W, W);
  }
}

}  // namespace

Result<int64_t> ShardReader::GatherFixed(int column, const int64_t* rows, const int64_t* positions,
                                         size_t n, uint8_t* out_values, uint8_t* out_validity) const {
  if (column < 0 || column >= schema_.num_fields() || !schema_.fields[column].type.is_fixed_width()) {
    return absl::InvalidArgumentError(absl::StrCat("reading ", path(), ": column ", column,
                                                   " is not a fixed-width column"));
  }
  const auto& pages = pages_[column];
  const size_t w = schema_.fields[column].type.fixed_width();
  // Page of each row, and each touched page decoded once (mapped pages are
  // views; `held` keeps copies alive for the duration of the call).
  std::vector<const uint8_t*> page_values(pages.size(), nullptr);
  std::vector<const uint8_t*> page_validity(pages.size(), nullptr);
  std::vector<int64_t> page_first(pages.size());
  std::vector<Column> held;
  std::vector<int32_t> page_of(n);
  for (size_t p = 0; p < pages.size(); ++p) page_first[p] = pages[p].first_row;
  for (size_t i = 0; i < n; ++i) {
    const int64_t r = rows[i];
    if (r < 0 || r >= num_rows_) {
      return absl::OutOfRangeError(
          absl::StrCat("reading ", path(), ": row ", r, " outside [0, ", num_rows_, ")"));
    }
    const int p = FindPage(column, r);
    page_of[i] = p;
    if (page_values[p] == nullptr) {
      FW_ASSIGN_OR_RETURN(Column page, ReadPage(column, p));
      page_values[p] = page.values.data;
      page_validity[p] = page.validity.empty() ? nullptr : page.validity.data;
      held.push_back(std::move(page));
    }
  }
  switch (w) {
    case 1: GatherRows<1>(page_values.data(), page_first.data(), page_of.data(), rows, positions, n, out_values); break;
    case 2: GatherRows<2>(page_values.data(), page_first.data(), page_of.data(), rows, positions, n, out_values); break;
    case 4: GatherRows<4>(page_values.data(), page_first.data(), page_of.data(), rows, positions, n, out_values); break;
    case 8: GatherRows<8>(page_values.data(), page_first.data(), page_of.data(), rows, positions, n, out_values); break;
    case 16: GatherRows<16>(page_values.data(), page_first.data(), page_of.data(), rows, positions, n, out_values); break;
    case 32: GatherRows<32>(page_values.data(), page_first.data(), page_of.data(), rows, positions, n, out_values); break;
    case 64: GatherRows<64>(page_values.data(), page_first.data(), page_of.data(), rows, positions, n, out_values); break;
    default:
      for (size_t i = 0; i < n; ++i) {
        const int32_t p = page_of[i];
        const size_t pos = positions ? static_cast<size_t>(positions[i]) : i;
        std::memcpy(out_values + pos * w, page_values[p] + (rows[i] - page_first[p]) * w, w);
      }
  }
  int64_t nulls = 0;
  if (out_validity != nullptr) {
    for (size_t i = 0; i < n; ++i) {
      const int32_t p = page_of[i];
      const int64_t local = rows[i] - page_first[p];
      const bool valid = page_validity[p] == nullptr || ((page_validity[p][local >> 3] >> (local & 7)) & 1);
      const size_t pos = positions ? static_cast<size_t>(positions[i]) : i;
      if (valid) {
        out_validity[pos >> 3] |= static_cast<uint8_t>(1u << (pos & 7));
      } else {
        out_validity[pos >> 3] &= static_cast<uint8_t>(~(1u << (pos & 7)));
        nulls++;
      }
    }
  }
  return nulls;
}

Result<Column> ShardReader::Take(int column, const int64_t* rows, size_t n) const {
  if (column < 0 || column >= schema_.num_fields()) {
    return absl::OutOfRangeError(absl::StrCat("reading ", path(), ": no column ", column));
  }
  const DataType& type = schema_.fields[column].type;
  Column out;
  out.type = type;
  out.length = static_cast<int64_t>(n);
  if (type.is_fixed_width()) {
    uint8_t* values = nullptr;
    out.values = Buffer::Allocate(n * type.fixed_width(), &values);
    uint8_t* validity = nullptr;
    Buffer validity_buf;
    if (has_nulls_[column] && n > 0) {
      validity_buf = Buffer::Allocate((n + 7) / 8, &validity);
      validity[(n + 7) / 8 - 1] = 0;  // bits past row n stay zero
    }
    FW_ASSIGN_OR_RETURN(int64_t nulls, GatherFixed(column, rows, nullptr, n, values, validity));
    if (nulls > 0) {
      out.validity = std::move(validity_buf);
      out.null_count = nulls;
    }
    return out;
  }
  const auto& pages = pages_[column];
  std::vector<Column> decoded(pages.size());
  std::vector<uint8_t> have(pages.size(), 0);
  std::vector<int64_t> local(n);
  std::vector<int32_t> page_of(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t r = rows[i];
    if (r < 0 || r >= num_rows_) {
      return absl::OutOfRangeError(
          absl::StrCat("reading ", path(), ": row ", r, " outside [0, ", num_rows_, ")"));
    }
    const int p = FindPage(column, r);
    page_of[i] = p;
    local[i] = r - pages[p].first_row;
    if (!have[p]) {
      FW_ASSIGN_OR_RETURN(decoded[p], ReadPage(column, p));
      have[p] = 1;
    }
  }
  if (type.is_nested()) {
    // Each page's rows gathered in one TakeColumn, then put back in the
    // order asked for.
    std::vector<std::vector<int64_t>> want(pages.size());
    std::vector<int64_t> slot(n);
    for (size_t i = 0; i < n; ++i) {
      slot[i] = static_cast<int64_t>(want[page_of[i]].size());
      want[page_of[i]].push_back(local[i]);
    }
    std::vector<Column> gathered;
    std::vector<int64_t> base(pages.size(), 0);
    int64_t total = 0;
    for (size_t p = 0; p < pages.size(); ++p) {
      if (want[p].empty()) continue;
      base[p] = total;
      total += static_cast<int64_t>(want[p].size());
      gathered.push_back(TakeColumn(decoded[p], want[p].data(), want[p].size()));
    }
    if (gathered.empty()) return MakeNullColumn(type, 0, false);
    const Column all = ConcatColumns(gathered);
    std::vector<int64_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = base[page_of[i]] + slot[i];
    return TakeColumn(all, order.data(), n);
  }
  const size_t esize = ValueElemSize(type);
  std::vector<int64_t> offsets(n + 1);
  offsets[0] = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t* o = decoded[page_of[i]].offsets_data();
    offsets[i + 1] = offsets[i] + (o[local[i] + 1] - o[local[i]]);
  }
  uint8_t* dst = nullptr;
  out.values = Buffer::Allocate(static_cast<size_t>(offsets[n]) * esize, &dst);
  for (size_t i = 0; i < n; ++i) {
    const Column& pc = decoded[page_of[i]];
    const int64_t* o = pc.offsets_data();
    std::memcpy(dst + offsets[i] * esize, pc.values.data + o[local[i]] * esize,
                static_cast<size_t>(o[local[i] + 1] - o[local[i]]) * esize);
  }
  out.offsets = Buffer::FromVector(std::move(offsets));
  if (has_nulls_[column]) {
    std::vector<bool> valid(n);
    for (size_t i = 0; i < n; ++i) valid[i] = decoded[page_of[i]].IsValid(local[i]);
    SetValidity(out, valid);
  }
  return out;
}

}  // namespace flywheel::format
