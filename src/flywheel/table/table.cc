// Opening tables and reading versions. Writes are in commit.cc, version
// management in maintenance.cc. Protocol: docs/format/table.md.
#include "flywheel/table/table.h"

#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include <algorithm>
#include <cstring>
#include <chrono>
#include <cinttypes>
#include <cstdlib>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "flywheel/base/rng.h"
#include "flywheel/table/internal.h"

namespace flywheel::table {

using format::Column;
using format::RecordBatch;

// ---------------------------------------------------------------- helpers

std::string NewFileId() {
  // Each id comes straight from the kernel: no generator state that fork()
  // could copy into several writers (regression: forked writers once drew
  // identical ids from an inherited thread_local generator).
  uint64_t r[2] = {0, 0};
  size_t got = 0;
  while (got < sizeof r) {
    const ssize_t n = getrandom(reinterpret_cast<char*>(r) + got, sizeof r - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      // No kernel entropy: fall back to time, pid and a counter, mixed.
      static std::atomic<uint64_t> counter{0};
      r[0] = Mix64(static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                   (static_cast<uint64_t>(getpid()) << 32));
      r[1] = Mix64(r[0] ^ counter.fetch_add(1));
      break;
    }
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016" PRIx64 "%016" PRIx64, r[0], r[1]);
  return buf;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string DefaultWriter() {
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  return absl::StrCat(host, ":", getpid());
}

Status TableOptions::Validate() const {
  FW_RETURN_IF_ERROR_CTX(shard.Validate(), "table options");
  if (max_rows_per_file < 1) return absl::InvalidArgumentError("max_rows_per_file must be >= 1");
  if (max_commit_attempts < 1) return absl::InvalidArgumentError("max_commit_attempts must be >= 1");
  for (const auto& [k, v] : extra_config) {
    if (k.empty() || k == "codec" || k == "page_size" || k == "zstd_level") {
      return absl::InvalidArgumentError(absl::StrCat("extra_config may not set '", k, "'"));
    }
  }
  return absl::OkStatus();
}

namespace {

template <typename T>
format::Buffer FilledBuffer(T v, int64_t n) {
  return format::Buffer::FromVector(std::vector<T>(static_cast<size_t>(n), v));
}

Result<format::Buffer> FillScalar(format::TypeId id, const nlohmann::json& v, int64_t n) {
  using format::TypeId;
  if (!v.is_number() && !v.is_boolean()) return absl::InvalidArgumentError("default must be a number");
  const double d = v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.get<double>();
  switch (id) {
    case TypeId::kBool: return FilledBuffer<uint8_t>(d != 0, n);
    case TypeId::kInt8: return FilledBuffer<int8_t>(static_cast<int8_t>(d), n);
    case TypeId::kInt16: return FilledBuffer<int16_t>(static_cast<int16_t>(d), n);
    case TypeId::kInt32: return FilledBuffer<int32_t>(static_cast<int32_t>(d), n);
    case TypeId::kInt64: return FilledBuffer<int64_t>(v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(d), n);
    case TypeId::kUInt8: return FilledBuffer<uint8_t>(static_cast<uint8_t>(d), n);
    case TypeId::kUInt16: return FilledBuffer<uint16_t>(static_cast<uint16_t>(d), n);
    case TypeId::kUInt32: return FilledBuffer<uint32_t>(static_cast<uint32_t>(d), n);
    case TypeId::kUInt64: return FilledBuffer<uint64_t>(v.is_number_unsigned() ? v.get<uint64_t>() : static_cast<uint64_t>(d), n);
    case TypeId::kFloat32: return FilledBuffer<float>(static_cast<float>(d), n);
    case TypeId::kFloat64: return FilledBuffer<double>(d, n);
    default: return absl::InvalidArgumentError("defaults are not supported for this type");
  }
}

}  // namespace

Result<Column> DefaultColumn(const format::Field& field, int64_t len) {
  if (field.default_json.empty()) return format::MakeNullColumn(field.type, len, field.nullable);
  nlohmann::json v;
  try {
    v = nlohmann::json::parse(field.default_json);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("field '", field.name, "': default is not JSON"));
  }
  Column c;
  c.type = field.type;
  c.length = len;
  if (field.type.id == format::TypeId::kString || field.type.id == format::TypeId::kBinary) {
    if (!v.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("field '", field.name, "': default must be a string"));
    }
    const std::string s = v.get<std::string>();
    std::string values;
    std::vector<int64_t> offsets(static_cast<size_t>(len) + 1);
    for (int64_t i = 0; i < len; ++i) {
      values += s;
      offsets[i + 1] = static_cast<int64_t>(values.size());
    }
    c.values = format::Buffer::FromString(std::move(values));
    c.offsets = format::Buffer::FromVector(std::move(offsets));
    return c;
  }
  if (!field.type.is_fixed_width()) {
    return absl::InvalidArgumentError(
        absl::StrCat("field '", field.name, "': defaults are not supported for ", field.type.ToString()));
  }
  FW_ASSIGN_OR_RETURN_CTX(c.values, FillScalar(field.type.id, v, len * field.type.num_elements()),
                          "field '", field.name, "'");
  if (field.type.id == format::TypeId::kFloat16) {
    return absl::InvalidArgumentError("defaults are not supported for float16");
  }
  return c;
}

// ---------------------------------------------------------------- Impl

std::string Table::Impl::ManifestPath(const std::string& uri, int64_t version) {
  char name[40];
  std::snprintf(name, sizeof name, "%020" PRId64 ".manifest", version);
  return io::JoinPath(io::JoinPath(uri, "_versions"), name);
}
std::string Table::Impl::HintPath(const std::string& uri) { return io::JoinPath(uri, "_latest"); }
std::string Table::Impl::TagPath(const std::string& uri, const std::string& name) {
  return io::JoinPath(io::JoinPath(uri, "_tags"), name);
}

Result<Manifest> Table::Impl::ReadManifest(io::FileSystem* fs, const std::string& uri, int64_t version) {
  const std::string path = ManifestPath(uri, version);
  FW_ASSIGN_OR_RETURN(std::string data, fs->ReadFile(path));
  FW_ASSIGN_OR_RETURN(Manifest m, Manifest::Decode(data, path));
  if (m.version != version) {
    return absl::DataLossError(absl::StrCat("manifest ", path, ": says version ", m.version));
  }
  return m;
}

Result<std::vector<int64_t>> Table::Impl::ListVersions(io::FileSystem* fs, const std::string& uri) {
  FW_ASSIGN_OR_RETURN(auto entries, fs->List(io::JoinPath(uri, "_versions")));
  std::vector<int64_t> out;
  for (const auto& e : entries) {
    int64_t v = 0;
    char tail[16] = {0};
    if (e.name.size() == 29 && std::sscanf(e.name.c_str(), "%20" SCNd64 ".%9s", &v, tail) == 2 &&
        std::string(tail) == "manifest") {
      out.push_back(v);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<int64_t> Table::Impl::FindLatest(io::FileSystem* fs, const std::string& uri) {
  // The hint is only a hint: start there if it names an existing manifest,
  // else list once; then probe forward (no listing) to the newest.
  int64_t v = 0;
  auto hint = fs->ReadFile(HintPath(uri));
  if (hint.ok()) {
    v = std::strtoll(hint->c_str(), nullptr, 10);
    if (v > 0) {
      FW_ASSIGN_OR_RETURN(bool exists, fs->Exists(ManifestPath(uri, v)));
      if (!exists) v = 0;
    }
  }
  if (v <= 0) {
    auto versions = ListVersions(fs, uri);
    if (!versions.ok()) {
      if (absl::IsNotFound(versions.status())) {
        return absl::NotFoundError(absl::StrCat("no flywheel table at ", uri));
      }
      return versions.status();
    }
    if (versions->empty()) return absl::NotFoundError(absl::StrCat("no flywheel table at ", uri));
    return versions->back();
  }
  // Gallop then binary-search for the first missing version.
  int64_t step = 1;
  int64_t lo = v;  // exists
  int64_t hi = -1;  // missing
  while (hi < 0) {
    FW_ASSIGN_OR_RETURN(bool exists, fs->Exists(ManifestPath(uri, lo + step)));
    if (exists) {
      lo += step;
      step *= 2;
    } else {
      hi = lo + step;
    }
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    FW_ASSIGN_OR_RETURN(bool exists, fs->Exists(ManifestPath(uri, mid)));
    if (exists) lo = mid;
    else hi = mid;
  }
  return lo;
}

Result<std::shared_ptr<format::ShardReader>> Table::Impl::Reader(const std::string& uri,
                                                                 const DataFile& file) {
  {
    absl::MutexLock lock(&cache->mu);
    auto it = cache->readers.find(file.path);
    if (it != cache->readers.end()) return it->second;
  }
  FW_ASSIGN_OR_RETURN(auto reader, format::ShardReader::Open(fs.get(), io::JoinPath(uri, file.path)));
  absl::MutexLock lock(&cache->mu);
  cache->readers.emplace(file.path, reader);
  return reader;
}

Result<std::shared_ptr<const DeletionVector>> Table::Impl::Deletions(const std::string& uri,
                                                                     const Fragment& f) {
  if (f.deletion.path.empty()) {
    if (f.deletion.count != 0) {
      return absl::DataLossError(absl::StrCat("table ", uri, ": fragment ", f.id, " says ",
                                              f.deletion.count, " rows are deleted but names no deletion vector"));
    }
    return std::shared_ptr<const DeletionVector>();
  }
  {
    absl::MutexLock lock(&cache->mu);
    auto it = cache->dvs.find(f.deletion.path);
    if (it != cache->dvs.end()) return it->second;
  }
  const std::string path = io::JoinPath(uri, f.deletion.path);
  FW_ASSIGN_OR_RETURN(std::string data, fs->ReadFile(path));
  FW_ASSIGN_OR_RETURN(DeletionVector dv, DeletionVector::Decode(data, f.num_rows, path));
  if (dv.count() != f.deletion.count) {
    return absl::DataLossError(absl::StrCat("deletion vector ", path, " holds ", dv.count(),
                                            " rows, manifest says ", f.deletion.count));
  }
  auto shared = std::make_shared<const DeletionVector>(std::move(dv));
  absl::MutexLock lock(&cache->mu);
  cache->dvs.emplace(f.deletion.path, shared);
  return shared;
}

bool FindField(const Fragment& f, int32_t field_id, const DataFile** file) {
  for (const auto& df : f.files) {
    if (std::find(df.field_ids.begin(), df.field_ids.end(), field_id) != df.field_ids.end()) {
      *file = &df;
      return true;
    }
  }
  return false;
}

namespace {

Result<int> ShardColumn(const format::ShardReader& r, const format::Field& field) {
  for (int i = 0; i < r.schema().num_fields(); ++i) {
    if (r.schema().fields[i].id == field.id) {
      // A shard written before fields were added to a struct column reads
      // them as null (WidenColumn at each read).
      if (!format::IsWidening(r.schema().fields[i].type, field.type)) {
        return absl::DataLossError(absl::StrCat(r.path(), ": field id ", field.id, " has type ",
                                                r.schema().fields[i].type.ToString(),
                                                ", manifest says ", field.type.ToString()));
      }
      return i;
    }
  }
  return absl::DataLossError(absl::StrCat(r.path(), ": lacks field id ", field.id, " ('",
                                          field.name, "') that the manifest lists"));
}
}  // namespace

Result<Column> Table::Impl::ReadRange(const std::string& uri, const Fragment& f,
                                      const format::Field& field, int64_t start, int64_t len) {
  const DataFile* file = nullptr;
  if (!FindField(f, field.id, &file)) return DefaultColumn(field, len);
  FW_ASSIGN_OR_RETURN(auto reader, Reader(uri, *file));
  if (reader->num_rows() != f.num_rows) {
    return absl::DataLossError(absl::StrCat(reader->path(), " has ", reader->num_rows(),
                                            " rows, manifest says ", f.num_rows));
  }
  FW_ASSIGN_OR_RETURN(int col, ShardColumn(*reader, field));
  FW_ASSIGN_OR_RETURN(Column c, reader->Read(col, start, len));
  return format::WidenColumn(c, field.type);
}

Result<std::pair<std::shared_ptr<format::ShardReader>, int>> Table::Impl::Locate(
    const std::string& uri, const Fragment& f, const format::Field& field) {
  const DataFile* file = nullptr;
  if (!FindField(f, field.id, &file)) return std::make_pair(std::shared_ptr<format::ShardReader>(), -1);
  FW_ASSIGN_OR_RETURN(auto reader, Reader(uri, *file));
  if (reader->num_rows() != f.num_rows) {
    return absl::DataLossError(absl::StrCat(reader->path(), " has ", reader->num_rows(),
                                            " rows, manifest says ", f.num_rows));
  }
  FW_ASSIGN_OR_RETURN(int col, ShardColumn(*reader, field));
  return std::make_pair(std::move(reader), col);
}

Result<Column> Table::Impl::TakeRows(const std::string& uri, const Fragment& f,
                                     const format::Field& field, const int64_t* rows, size_t n) {
  const DataFile* file = nullptr;
  if (!FindField(f, field.id, &file)) return DefaultColumn(field, static_cast<int64_t>(n));
  FW_ASSIGN_OR_RETURN(auto reader, Reader(uri, *file));
  if (reader->num_rows() != f.num_rows) {
    return absl::DataLossError(absl::StrCat(reader->path(), " has ", reader->num_rows(),
                                            " rows, manifest says ", f.num_rows));
  }
  FW_ASSIGN_OR_RETURN(int col, ShardColumn(*reader, field));
  FW_ASSIGN_OR_RETURN(Column c, reader->Take(col, rows, n));
  return format::WidenColumn(c, field.type);
}

// ---------------------------------------------------------------- Table

Table::~Table() = default;

namespace {
Result<std::shared_ptr<Table>> MakeHandle(const std::string& uri, const TableOptions& options,
                                          Manifest manifest, std::shared_ptr<FileCache> cache);
}

Result<std::shared_ptr<Table>> Table::Create(const std::string& uri, const format::Schema& schema_in,
                                             const TableOptions& options_in, const CommitOptions& commit) {
  TableOptions options = options_in;
  if (!options.fs) options.fs = io::PosixFileSystem();
  if (options.writer.empty()) options.writer = DefaultWriter();
  FW_RETURN_IF_ERROR(options.Validate());
  FW_RETURN_IF_ERROR_CTX(schema_in.Validate(), "creating table ", uri);
  Manifest m;
  m.version = 1;
  m.timestamp_ms = NowMs();
  m.operation = Operation{"create", options.writer, commit.properties, {}};
  m.schema = schema_in;
  m.config = {{"codec", std::string(format::CodecName(options.shard.codec))},
              {"page_size", std::to_string(options.shard.page_size)},
              {"zstd_level", std::to_string(options.shard.zstd_level)}};
  for (const auto& [k, v] : options.extra_config) m.config[k] = v;
  for (auto& f : m.schema.fields) {
    f.id = m.next_field_id++;
    if (!f.default_json.empty()) {
      FW_RETURN_IF_ERROR_CTX(DefaultColumn(f, 1).status(), "creating table ", uri);
    }
  }
  for (const char* dir : {"_versions", "data", "deletions", "_tags"}) {
    FW_RETURN_IF_ERROR_CTX(options.fs->CreateDirs(io::JoinPath(uri, dir)), "creating table ", uri);
  }
  Status s = options.fs->PutIfAbsent(Impl::ManifestPath(uri, 1), m.Encode());
  if (absl::IsAlreadyExists(s)) {
    return absl::AlreadyExistsError(absl::StrCat("a table already exists at ", uri));
  }
  FW_RETURN_IF_ERROR_CTX(s, "creating table ", uri);
  (void)options.fs->Put(Impl::HintPath(uri), "1");
  return MakeHandle(uri, options, std::move(m), std::make_shared<FileCache>());
}

Result<std::shared_ptr<Table>> Table::Open(const std::string& uri, const OpenOptions& open,
                                           const TableOptions& options_in) {
  TableOptions options = options_in;
  if (!options.fs) options.fs = io::PosixFileSystem();
  if (options.writer.empty()) options.writer = DefaultWriter();
  FW_RETURN_IF_ERROR(options.Validate());
  io::FileSystem* fs = options.fs.get();
  int64_t version;
  if (open.tag) {
    auto data = fs->ReadFile(Impl::TagPath(uri, *open.tag));
    if (absl::IsNotFound(data.status())) {
      return absl::NotFoundError(absl::StrCat("table ", uri, " has no tag '", *open.tag, "'"));
    }
    FW_RETURN_IF_ERROR_CTX(data.status(), "opening table ", uri);
    try {
      const auto j = nlohmann::json::parse(*data);
      if (!j.at("version").is_number_integer()) throw nlohmann::json::type_error::create(302, "version is not an integer", nullptr);
      version = j.at("version").get<int64_t>();
    } catch (const nlohmann::json::exception&) {
      return absl::DataLossError(absl::StrCat("tag file ", Impl::TagPath(uri, *open.tag), " is corrupt"));
    }
  } else if (open.version) {
    version = *open.version;
  } else {
    FW_ASSIGN_OR_RETURN(version, Impl::FindLatest(fs, uri));
  }
  auto m = Impl::ReadManifest(fs, uri, version);
  if (absl::IsNotFound(m.status())) {
    auto versions = Impl::ListVersions(fs, uri);
    if (!versions.ok() || versions->empty()) {
      return absl::NotFoundError(absl::StrCat("no flywheel table at ", uri));
    }
    return absl::NotFoundError(absl::StrCat("table ", uri, " has no version ", version,
                                            " (retained versions: ", versions->front(), "..",
                                            versions->back(), ")"));
  }
  FW_RETURN_IF_ERROR_CTX(m.status(), "opening table ", uri, " at version ", version);
  return MakeHandle(uri, options, std::move(*m), std::make_shared<FileCache>());
}

Result<std::shared_ptr<Table>> Table::Checkout(int64_t version) const {
  auto read = Impl::ReadManifest(impl_->fs.get(), uri_, version);
  if (absl::IsNotFound(read.status())) {
    auto versions = Impl::ListVersions(impl_->fs.get(), uri_);
    if (versions.ok() && !versions->empty()) {
      return absl::NotFoundError(absl::StrCat("table ", uri_, " has no version ", version,
                                              " (retained versions: ", versions->front(), "..",
                                              versions->back(), ")"));
    }
  }
  FW_ASSIGN_OR_RETURN(Manifest m, std::move(read));
  return MakeHandle(uri_, options_, std::move(m), impl_->cache);
}

Result<std::shared_ptr<Table>> Table::CheckoutLatest() const {
  FW_ASSIGN_OR_RETURN(int64_t v, LatestVersion());
  return Checkout(v);
}

Result<int64_t> Table::LatestVersion() const { return Impl::FindLatest(impl_->fs.get(), uri_); }

Result<std::vector<VersionInfo>> Table::Versions() const {
  FW_ASSIGN_OR_RETURN(auto versions, Impl::ListVersions(impl_->fs.get(), uri_));
  std::vector<VersionInfo> out;
  for (int64_t v : versions) {
    auto m = Impl::ReadManifest(impl_->fs.get(), uri_, v);
    if (absl::IsNotFound(m.status())) continue;  // expired while listing
    FW_RETURN_IF_ERROR(m.status());
    out.push_back(VersionInfo{v, m->timestamp_ms, m->operation, m->num_rows(),
                              static_cast<int64_t>(m->fragments.size())});
  }
  return out;
}

namespace {

Result<std::vector<int>> ResolveColumns(const format::Schema& schema,
                                        const std::vector<std::string>& names) {
  std::vector<int> out;
  if (names.empty()) {
    for (int i = 0; i < schema.num_fields(); ++i) out.push_back(i);
    return out;
  }
  for (const auto& n : names) {
    const int i = schema.FieldIndex(n);
    if (i < 0) {
      return absl::NotFoundError(absl::StrCat("no column '", n, "' (columns: ", schema.ToString(), ")"));
    }
    out.push_back(i);
  }
  return out;
}

format::Schema Project(const format::Schema& schema, const std::vector<int>& cols) {
  format::Schema s;
  for (int c : cols) s.fields.push_back(schema.fields[c]);
  return s;
}

class TableScan final : public ScanIterator {
 public:
  TableScan(std::shared_ptr<const Table> table, Table::Impl* impl, std::vector<int> cols,
            int64_t batch_rows)
      : table_(std::move(table)), impl_(impl), cols_(std::move(cols)), batch_rows_(batch_rows),
        schema_(Project(table_->schema(), cols_)) {}

  Result<std::optional<RecordBatch>> Next() override {
    const auto& frags = table_->manifest().fragments;
    if (batch_rows_ > 0) {
      // Fixed-size batches: gather pieces until full.
      std::vector<RecordBatch> pieces;
      int64_t have = 0;
      while (have < batch_rows_) {
        FW_ASSIGN_OR_RETURN(auto piece, NextChunk(frags, batch_rows_ - have));
        if (!piece) break;
        have += piece->num_rows;
        pieces.push_back(std::move(*piece));
      }
      if (pieces.empty()) return std::optional<RecordBatch>();
      if (pieces.size() == 1) return std::optional<RecordBatch>(std::move(pieces[0]));
      RecordBatch out;
      out.schema = schema_;
      out.num_rows = have;
      for (size_t c = 0; c < cols_.size(); ++c) {
        std::vector<Column> parts;
        for (auto& p : pieces) parts.push_back(p.columns[c]);
        out.columns.push_back(format::ConcatColumns(parts));
      }
      return std::optional<RecordBatch>(std::move(out));
    }
    return NextChunk(frags, INT64_MAX);
  }

 private:
  // The next piece of at most `limit` physical rows that lies within one page
  // of every requested column, with deleted rows removed.
  Result<std::optional<RecordBatch>> NextChunk(const std::vector<Fragment>& frags, int64_t limit) {
    while (true) {
      if (frag_ >= frags.size()) return std::optional<RecordBatch>();
      const Fragment& f = frags[frag_];
      if (row_ >= f.num_rows) {
        frag_++;
        row_ = 0;
        continue;
      }
      // Chunk end: the nearest page boundary after row_ among requested columns.
      int64_t end = limit >= f.num_rows - row_ ? f.num_rows : row_ + limit;
      for (int c : cols_) {
        const format::Field& field = table_->schema().fields[c];
        for (const auto& df : f.files) {
          if (std::find(df.field_ids.begin(), df.field_ids.end(), field.id) == df.field_ids.end()) continue;
          FW_ASSIGN_OR_RETURN(auto reader, impl_->Reader(table_->uri(), df));
          for (int sc = 0; sc < reader->schema().num_fields(); ++sc) {
            if (reader->schema().fields[sc].id != field.id) continue;
            if (row_ >= reader->num_rows()) break;
            const auto& pi = reader->pages(sc)[reader->FindPage(sc, row_)];
            end = std::min(end, pi.first_row + pi.num_rows);
          }
        }
      }
      const int64_t start = row_;
      row_ = end;
      FW_ASSIGN_OR_RETURN(auto dv, impl_->Deletions(table_->uri(), f));
      std::vector<int64_t> keep;
      if (dv) {
        for (int64_t r = start; r < end; ++r) {
          if (!dv->Contains(r)) keep.push_back(r - start);
        }
        if (keep.empty()) continue;
      }
      RecordBatch batch;
      batch.schema = schema_;
      for (int c : cols_) {
        FW_ASSIGN_OR_RETURN(Column col, impl_->ReadRange(table_->uri(), f, table_->schema().fields[c],
                                                         start, end - start));
        if (dv && static_cast<int64_t>(keep.size()) != end - start) {
          col = format::TakeColumn(col, keep.data(), keep.size());
        }
        batch.columns.push_back(std::move(col));
      }
      batch.num_rows = dv ? static_cast<int64_t>(keep.size()) : end - start;
      return std::optional<RecordBatch>(std::move(batch));
    }
  }

  std::shared_ptr<const Table> table_;
  Table::Impl* impl_;
  std::vector<int> cols_;
  int64_t batch_rows_;
  format::Schema schema_;
  size_t frag_ = 0;
  int64_t row_ = 0;
};

// A scan with a row filter: reads the projected columns plus the predicate's
// column (last, when not projected) and keeps the matching rows.
class FilteredScan final : public ScanIterator {
 public:
  FilteredScan(std::unique_ptr<ScanIterator> inner, PredicateMatcher matcher, int pred_col, size_t out_cols)
      : inner_(std::move(inner)), matcher_(std::move(matcher)), pred_col_(pred_col), out_cols_(out_cols) {}

  Result<std::optional<RecordBatch>> Next() override {
    while (true) {
      FW_ASSIGN_OR_RETURN(std::optional<RecordBatch> b, inner_->Next());
      if (!b) return b;
      std::vector<int64_t> rows;
      FW_RETURN_IF_ERROR(matcher_.Match(b->columns[static_cast<size_t>(pred_col_)], 0, &rows));
      if (rows.empty()) continue;
      RecordBatch out;
      out.num_rows = static_cast<int64_t>(rows.size());
      for (size_t c = 0; c < out_cols_; ++c) {
        out.schema.fields.push_back(b->schema.fields[c]);
        out.columns.push_back(rows.size() == static_cast<size_t>(b->num_rows)
                                  ? b->columns[c]
                                  : format::TakeColumn(b->columns[c], rows.data(), rows.size()));
      }
      return std::optional<RecordBatch>(std::move(out));
    }
  }

 private:
  std::unique_ptr<ScanIterator> inner_;
  PredicateMatcher matcher_;
  int pred_col_;
  size_t out_cols_;
};

}  // namespace

Result<std::unique_ptr<ScanIterator>> Table::Scan(const ScanOptions& options) const {
  FW_ASSIGN_OR_RETURN(auto cols, ResolveColumns(schema(), options.columns));
  if (options.batch_rows < 0) return absl::InvalidArgumentError("batch_rows must be >= 0");
  std::optional<PredicateMatcher> matcher;
  int pred_col = -1;
  const size_t out_cols = cols.size();
  if (options.where) {
    FW_ASSIGN_OR_RETURN(matcher, PredicateMatcher::Make(schema(), *options.where, absl::StrCat("scan of ", uri_)));
    const int field = schema().FieldIndex(options.where->TopColumn(schema()));
    auto it = std::find(cols.begin(), cols.end(), field);
    pred_col = static_cast<int>(it - cols.begin());
    if (it == cols.end()) cols.push_back(field);
  }
  // The iterator keeps a snapshot handle alive (it shares the file cache).
  FW_ASSIGN_OR_RETURN(auto self, MakeHandle(uri_, options_, manifest_, impl_->cache));
  Table::Impl* impl = self->impl_.get();
  auto scan = std::unique_ptr<ScanIterator>(
      new TableScan(std::move(self), impl, std::move(cols), options.batch_rows));
  if (!matcher) return scan;
  return std::unique_ptr<ScanIterator>(new FilteredScan(std::move(scan), std::move(*matcher), pred_col, out_cols));
}

Result<format::LeafStatsMap> Table::LeafStatistics(const std::string& column) const {
  const int ci = schema().FieldIndex(column);
  if (ci < 0) {
    return absl::NotFoundError(absl::StrCat("table ", uri_, " has no column '", column, "' (columns: ",
                                            schema().ToString(), ")"));
  }
  const format::Field& field = schema().fields[static_cast<size_t>(ci)];
  if (!field.type.is_nested()) {
    return absl::InvalidArgumentError(absl::StrCat("column '", column, "' is ", field.type.ToString(),
                                                   "; leaf statistics are kept for nested columns"));
  }
  format::LeafStatsMap out;
  for (const Fragment& f : manifest_.fragments) {
    const DataFile* file = nullptr;
    if (!FindField(f, field.id, &file)) continue;
    FW_ASSIGN_OR_RETURN(auto reader, impl_->Reader(uri_, *file));
    const auto it = reader->metadata().find(format::kLeafStatsKey);
    if (it == reader->metadata().end()) continue;
    FW_ASSIGN_OR_RETURN_CTX(format::LeafStatsMap part, format::LeafStatsFromJson(it->second), reader->path());
    // Paths are named by the column's name when the file was written.
    const std::string& written = reader->schema().fields[static_cast<size_t>(ShardColumn(*reader, field).value_or(0))].name;
    format::LeafStatsMap renamed;
    for (auto& [path, st] : part) {
      if (path.rfind(written, 0) == 0) renamed[column + path.substr(written.size())] = st;
    }
    format::MergeLeafStats(renamed, &out);
  }
  return out;
}

Result<RecordBatch> Table::Take(const std::vector<int64_t>& indices,
                                const std::vector<std::string>& columns) const {
  FW_ASSIGN_OR_RETURN(auto cols, ResolveColumns(schema(), columns));
  const auto& frags = manifest_.fragments;
  const size_t n = indices.size();
  // Map each global index to (fragment, physical row).
  std::vector<RowAddress> addr(n);
  FW_RETURN_IF_ERROR_CTX(Locate(indices.data(), n, addr.data()), "take");
  std::vector<int32_t> frag_of(n);
  std::vector<int64_t> phys(n);
  for (size_t i = 0; i < n; ++i) {
    frag_of[i] = addr[i].fragment;
    phys[i] = addr[i].row;
  }
  RecordBatch out;
  out.schema = Project(schema(), cols);
  out.num_rows = static_cast<int64_t>(n);
  const bool one_fragment =
      n == 0 || std::all_of(frag_of.begin(), frag_of.end(), [&](int32_t f) { return f == frag_of[0]; });
  if (n == 0) {
    for (int c : cols) out.columns.push_back(format::MakeNullColumn(schema().fields[c].type, 0, false));
    return out;
  }
  if (one_fragment) {
    for (int c : cols) {
      FW_ASSIGN_OR_RETURN(Column col, impl_->TakeRows(uri_, frags[frag_of[0]], schema().fields[c], phys.data(), n));
      out.columns.push_back(std::move(col));
    }
    return out;
  }
  // Several fragments: gather per fragment, then put rows back in order.
  std::vector<std::vector<int64_t>> rows_by_frag(frags.size());
  std::vector<int64_t> pos_in_concat(n);
  for (size_t i = 0; i < n; ++i) rows_by_frag[frag_of[i]].push_back(phys[i]);
  std::vector<int64_t> base(frags.size() + 1, 0);
  for (size_t f = 0; f < frags.size(); ++f) base[f + 1] = base[f] + static_cast<int64_t>(rows_by_frag[f].size());
  std::vector<int64_t> cursor(base.begin(), base.end() - 1);
  for (size_t i = 0; i < n; ++i) pos_in_concat[i] = cursor[frag_of[i]]++;
  std::vector<std::vector<int64_t>> pos_by_frag(frags.size());
  for (size_t i = 0; i < n; ++i) pos_by_frag[frag_of[i]].push_back(static_cast<int64_t>(i));
  for (int c : cols) {
    const format::Field& field = schema().fields[c];
    if (field.type.is_fixed_width()) {
      // Each fragment's rows go straight to their output positions.
      const size_t w = field.type.fixed_width();
      Column col;
      col.type = field.type;
      col.length = static_cast<int64_t>(n);
      uint8_t* values = nullptr;
      col.values = format::Buffer::Allocate(n * w, &values);
      std::vector<uint8_t> validity((n + 7) / 8, 0xff);
      bool validity_used = false;
      for (size_t f = 0; f < frags.size(); ++f) {
        if (rows_by_frag[f].empty()) continue;
        FW_ASSIGN_OR_RETURN(auto where, impl_->Locate(uri_, frags[f], field));
        const auto& [reader, sc] = where;
        if (reader) {
          const bool nulls = reader->has_nulls(sc);
          FW_ASSIGN_OR_RETURN(int64_t k, reader->GatherFixed(sc, rows_by_frag[f].data(), pos_by_frag[f].data(),
                                                             rows_by_frag[f].size(), values,
                                                             nulls ? validity.data() : nullptr));
          col.null_count += k;
          validity_used |= nulls;
        } else {
          FW_ASSIGN_OR_RETURN(Column d, DefaultColumn(field, 1));
          for (int64_t pos : pos_by_frag[f]) {
            std::memcpy(values + pos * w, d.values.data, w);
            if (!d.IsValid(0)) {
              validity[pos >> 3] &= static_cast<uint8_t>(~(1u << (pos & 7)));
              col.null_count++;
              validity_used = true;
            }
          }
        }
      }
      if (validity_used && col.null_count > 0) col.validity = format::Buffer::FromVector(std::move(validity));
      out.columns.push_back(std::move(col));
      continue;
    }
    std::vector<Column> parts;
    for (size_t f = 0; f < frags.size(); ++f) {
      if (rows_by_frag[f].empty()) continue;
      FW_ASSIGN_OR_RETURN(Column part, impl_->TakeRows(uri_, frags[f], schema().fields[c],
                                                       rows_by_frag[f].data(), rows_by_frag[f].size()));
      parts.push_back(std::move(part));
    }
    Column all = format::ConcatColumns(parts);
    out.columns.push_back(format::TakeColumn(all, pos_in_concat.data(), n));
  }
  return out;
}

Status Table::Locate(const int64_t* indices, size_t n, RowAddress* out) const {
  const auto& frags = manifest_.fragments;
  const auto& starts = impl_->live_start;
  const int64_t total = starts.back();
  // Deletion vectors are looked up once per fragment per call.
  int last_dv_frag = -1;
  std::shared_ptr<const DeletionVector> dv;
  for (size_t i = 0; i < n; ++i) {
    const int64_t g = indices[i];
    if (g < 0 || g >= total) {
      return absl::OutOfRangeError(absl::StrCat("row ", g, " is outside [0, ", total, ") of table ",
                                                uri_, " version ", version()));
    }
    const int f = static_cast<int>(std::upper_bound(starts.begin(), starts.end(), g) - starts.begin()) - 1;
    int64_t local = g - starts[f];
    if (!frags[f].deletion.path.empty() || frags[f].deletion.count != 0) {
      if (f != last_dv_frag) {
        FW_ASSIGN_OR_RETURN(dv, impl_->Deletions(uri_, frags[f]));
        last_dv_frag = f;
      }
      if (dv) local = dv->LiveToPhysical(local);
    }
    out[i] = RowAddress{f, local};
  }
  return absl::OkStatus();
}

Result<ColumnSource> Table::OpenColumn(int fragment, std::string_view column) const {
  const int c = schema().FieldIndex(column);
  if (c < 0) {
    return absl::NotFoundError(absl::StrCat("no column '", AsAbsl(column), "' (columns: ",
                                            schema().ToString(), ")"));
  }
  if (fragment < 0 || fragment >= static_cast<int>(manifest_.fragments.size())) {
    return absl::OutOfRangeError(absl::StrCat("table ", uri_, " version ", version(), " has no fragment index ",
                                              fragment));
  }
  const format::Field& field = schema().fields[c];
  ColumnSource src;
  FW_ASSIGN_OR_RETURN(auto where, impl_->Locate(uri_, manifest_.fragments[fragment], field));
  src.reader = std::move(where.first);
  src.column = where.second;
  if (!src.reader) {
    FW_ASSIGN_OR_RETURN(src.fill, DefaultColumn(field, 1));
  }
  return src;
}

Result<std::shared_ptr<Table>> Table::Impl::NewHandle(const std::string& uri, const TableOptions& options,
                                                      Manifest manifest, std::shared_ptr<FileCache> cache) {
  std::shared_ptr<Table> t(new Table());
  t->uri_ = uri;
  t->options_ = options;
  t->impl_ = std::make_unique<Impl>();
  t->impl_->fs = options.fs;
  t->impl_->cache = std::move(cache);
  t->manifest_ = std::move(manifest);
  t->impl_->RebuildIndex(t->manifest_);
  if (options.use_table_config) {
    const auto& cfg = t->manifest_.config;
    auto codec = cfg.count("codec") ? format::ParseCodec(cfg.at("codec")) : Result<format::Codec>(options.shard.codec);
    if (!codec.ok()) {
      return Annotate(codec.status(), absl::StrCat("table ", uri, " config"));
    }
    t->options_.shard.codec = *codec;
    if (cfg.count("page_size")) t->options_.shard.page_size = std::strtoull(cfg.at("page_size").c_str(), nullptr, 10);
    if (cfg.count("zstd_level")) t->options_.shard.zstd_level = std::atoi(cfg.at("zstd_level").c_str());
    FW_RETURN_IF_ERROR_CTX(t->options_.shard.Validate(), "table ", uri, " config");
  }
  return t;
}

void Table::Impl::RebuildIndex(const Manifest& m) {
  live_start.assign(1, 0);
  for (const auto& f : m.fragments) live_start.push_back(live_start.back() + f.live_rows());
}

namespace {
Result<std::shared_ptr<Table>> MakeHandle(const std::string& uri, const TableOptions& options,
                                          Manifest manifest, std::shared_ptr<FileCache> cache) {
  return Table::Impl::NewHandle(uri, options, std::move(manifest), std::move(cache));
}
}  // namespace

}  // namespace flywheel::table
