// Replay checkpoints as flywheel tables. Layout: docs/replay.md, "Checkpoints".

#include "flywheel/replay/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "flywheel/base/logging.h"
#include "flywheel/base/metrics.h"
#include "flywheel/base/utf8.h"
#include "flywheel/format/column.h"
#include "flywheel/table/table.h"

namespace flywheel::replay {
namespace {

using format::Column;
using format::DataType;
using format::RecordBatch;
using format::Schema;
using format::TypeId;
using Json = nlohmann::json;

constexpr char kMarker[] = "CHECKPOINT";
constexpr char kFormat[] = "flywheel-replay-checkpoint";
constexpr int64_t kFormatVersion = 1;
constexpr size_t kIdDigits = 20;

// The three tables of a checkpoint (docs/replay.md, "Checkpoints").
constexpr char kItemsTable[] = "items";
constexpr char kChunksTable[] = "chunks";
constexpr char kTablesTable[] = "tables";
constexpr char kItemsSchema[] =
    "table:string, key:uint64, priority:float64, times_sampled:int32, column_index:int32, "
    "column:string, chunk_keys:list<uint64>, offset:int64, length:int64";
constexpr char kChunksSchema[] =
    "key:uint64, step_type:string, num_steps:int64, codec:string, compressed:binary";
constexpr char kTablesSchema[] =
    "name:string, max_size:int64, max_times_sampled:int32, sampler:string, remover:string, "
    "samples_per_insert:float64, min_size_to_sample:int64, min_diff:float64, max_diff:float64, "
    "inserts:int64, deletes:int64, samples:int64, num_items:int64, num_evicted:int64, "
    "num_deleted:int64, "
    "signature:string?";

std::shared_ptr<io::FileSystem> FsOr(std::shared_ptr<io::FileSystem> fs) {
  return fs ? std::move(fs) : io::PosixFileSystem();
}

std::string IdName(int64_t id) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%020lld", static_cast<long long>(id));
  return buf;
}

bool ParseId(const std::string& name, int64_t* id) {
  if (name.size() != kIdDigits) return false;
  int64_t v = 0;
  for (char c : name) {
    if (c < '0' || c > '9') return false;
    if (v > (INT64_MAX - 9) / 10) return false;
    v = v * 10 + (c - '0');
  }
  *id = v;
  return true;
}

Schema MustParseSchema(const char* text) {
  auto s = Schema::Parse(text);
  // The schema texts above are constants; a failure is a programmer error.
  if (!s.ok()) {
    FW_LOG(ERROR) << "checkpoint schema constant does not parse: " << s.status();
    std::abort();
  }
  return *std::move(s);
}

// ---------------------------------------------------------------- builders

class BytesBuilder {
 public:
  void Add(std::string_view s) {
    data_.append(s.data(), s.size());
    offsets_.push_back(static_cast<int64_t>(data_.size()));
  }
  size_t bytes() const { return data_.size(); }
  Column Finish(const DataType& type) {
    Column c;
    c.type = type;
    c.length = static_cast<int64_t>(offsets_.size()) - 1;
    c.values = format::Buffer::FromString(std::move(data_));
    c.offsets = format::Buffer::FromVector(std::move(offsets_));
    data_.clear();
    offsets_ = {0};
    return c;
  }

 private:
  std::string data_;
  std::vector<int64_t> offsets_{0};
};

template <typename T>
Column FixedColumn(TypeId id, std::vector<T>& v) {
  Column c = format::MakeFixedColumn(DataType::Scalar(id), std::move(v));
  v = {};
  return c;
}

// Rows of the `chunks` table, appended in batches.
struct ChunkRows {
  std::vector<uint64_t> key;
  BytesBuilder step_type, codec, compressed;
  std::vector<int64_t> num_steps;

  int64_t rows() const { return static_cast<int64_t>(key.size()); }
  void Add(const Chunk& c) {
    key.push_back(c.key());
    step_type.Add(c.step_type().ToString());
    num_steps.push_back(c.num_steps());
    codec.Add(format::CodecName(c.codec()));
    compressed.Add(c.compressed());
  }
  RecordBatch Finish(const Schema& schema) {
    RecordBatch b;
    b.schema = schema;
    b.num_rows = rows();
    b.columns.push_back(FixedColumn(TypeId::kUInt64, key));
    b.columns.push_back(step_type.Finish(DataType::String()));
    b.columns.push_back(FixedColumn(TypeId::kInt64, num_steps));
    b.columns.push_back(codec.Finish(DataType::String()));
    b.columns.push_back(compressed.Finish(DataType::Binary()));
    return b;
  }
};

// Rows of the `items` table: one per (item, trajectory column).
struct ItemRows {
  BytesBuilder table, column;
  std::vector<uint64_t> key;
  std::vector<double> priority;
  std::vector<int32_t> times_sampled, column_index;
  std::vector<uint64_t> chunk_keys;
  std::vector<int64_t> chunk_offsets{0};
  std::vector<int64_t> offset, length;

  int64_t rows() const { return static_cast<int64_t>(key.size()); }
  void Add(const std::string& table_name, const ReplayTable::SnapshotItem& item) {
    int32_t index = 0;
    for (const TrajectoryColumn& col : item.item->columns) {
      table.Add(table_name);
      key.push_back(item.key);
      priority.push_back(item.priority);
      times_sampled.push_back(item.times_sampled);
      column_index.push_back(index++);
      column.Add(col.name);
      for (const ChunkRef& c : col.chunks) chunk_keys.push_back(c->key());
      chunk_offsets.push_back(static_cast<int64_t>(chunk_keys.size()));
      offset.push_back(col.offset);
      length.push_back(col.length);
    }
  }
  RecordBatch Finish(const Schema& schema) {
    RecordBatch b;
    b.schema = schema;
    b.num_rows = rows();
    b.columns.push_back(table.Finish(DataType::String()));
    b.columns.push_back(FixedColumn(TypeId::kUInt64, key));
    b.columns.push_back(FixedColumn(TypeId::kFloat64, priority));
    b.columns.push_back(FixedColumn(TypeId::kInt32, times_sampled));
    b.columns.push_back(FixedColumn(TypeId::kInt32, column_index));
    b.columns.push_back(column.Finish(DataType::String()));
    Column lists;
    lists.type = DataType::List(TypeId::kUInt64);
    lists.length = b.num_rows;
    lists.values = format::Buffer::FromVector(std::move(chunk_keys));
    lists.offsets = format::Buffer::FromVector(std::move(chunk_offsets));
    chunk_keys = {};
    chunk_offsets = {0};
    b.columns.push_back(std::move(lists));
    b.columns.push_back(FixedColumn(TypeId::kInt64, offset));
    b.columns.push_back(FixedColumn(TypeId::kInt64, length));
    return b;
  }
};

RecordBatch TablesBatch(const Schema& schema, const std::vector<ReplayTable::Snapshot>& snaps,
                        const std::vector<std::optional<std::string>>& signatures) {
  BytesBuilder name, sampler, remover, signature;
  std::vector<int64_t> max_size, min_size, inserts, deletes, samples, num_items, evicted, deleted;
  std::vector<int32_t> max_times_sampled;
  std::vector<double> spi, min_diff, max_diff;
  std::vector<bool> signature_valid;
  for (size_t i = 0; i < snaps.size(); ++i) {
    const TableInfo& info = snaps[i].info;
    name.Add(info.name);
    max_size.push_back(info.max_size);
    max_times_sampled.push_back(info.max_times_sampled);
    sampler.Add(info.sampler);
    remover.Add(info.remover);
    spi.push_back(info.limiter_options.samples_per_insert);
    min_size.push_back(info.limiter_options.min_size_to_sample);
    min_diff.push_back(info.limiter_options.min_diff);
    max_diff.push_back(info.limiter_options.max_diff);
    inserts.push_back(info.limiter.inserts);
    deletes.push_back(info.limiter.deletes);
    samples.push_back(info.limiter.samples);
    num_items.push_back(static_cast<int64_t>(snaps[i].items.size()));
    evicted.push_back(info.num_episodes_evicted);
    deleted.push_back(info.num_deleted);
    signature.Add(signatures[i].value_or(""));
    signature_valid.push_back(signatures[i].has_value());
  }
  RecordBatch b;
  b.schema = schema;
  b.num_rows = static_cast<int64_t>(snaps.size());
  b.columns.push_back(name.Finish(DataType::String()));
  b.columns.push_back(FixedColumn(TypeId::kInt64, max_size));
  b.columns.push_back(FixedColumn(TypeId::kInt32, max_times_sampled));
  b.columns.push_back(sampler.Finish(DataType::String()));
  b.columns.push_back(remover.Finish(DataType::String()));
  b.columns.push_back(FixedColumn(TypeId::kFloat64, spi));
  b.columns.push_back(FixedColumn(TypeId::kInt64, min_size));
  b.columns.push_back(FixedColumn(TypeId::kFloat64, min_diff));
  b.columns.push_back(FixedColumn(TypeId::kFloat64, max_diff));
  b.columns.push_back(FixedColumn(TypeId::kInt64, inserts));
  b.columns.push_back(FixedColumn(TypeId::kInt64, deletes));
  b.columns.push_back(FixedColumn(TypeId::kInt64, samples));
  b.columns.push_back(FixedColumn(TypeId::kInt64, num_items));
  b.columns.push_back(FixedColumn(TypeId::kInt64, evicted));
  b.columns.push_back(FixedColumn(TypeId::kInt64, deleted));
  Column sig = signature.Finish(DataType::String());
  format::SetValidity(sig, signature_valid);
  b.columns.push_back(std::move(sig));
  return b;
}

// Deletes directory `dir` and everything below it. Absent is OK.
Status DeleteTree(io::FileSystem* fs, const std::string& dir) {
  auto entries = fs->List(dir);
  if (absl::IsNotFound(entries.status())) return absl::OkStatus();
  FW_RETURN_IF_ERROR(entries.status());
  for (const io::FileInfo& e : *entries) {
    const std::string path = io::JoinPath(dir, e.name);
    Status s = e.is_dir ? DeleteTree(fs, path) : fs->Delete(path);
    if (!s.ok() && !absl::IsNotFound(s)) return s;
  }
  Status s = fs->Delete(dir);
  if (absl::IsNotFound(s)) return absl::OkStatus();
  return s;
}

// Deletes a checkpoint directory: its marker first, so that a deletion cut
// short leaves an incomplete directory (ignored, cleaned up later), never a
// complete-looking one with missing files.
Status DeleteCheckpointDir(io::FileSystem* fs, const std::string& dir) {
  Status s = fs->Delete(io::JoinPath(dir, kMarker));
  if (!s.ok() && !absl::IsNotFound(s)) return s;
  return DeleteTree(fs, dir);
}

// ---------------------------------------------------------------- reading

Status CheckpointDataLoss(int64_t id, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("checkpoint ", id, ": ", what));
}

// The column `name` of `b`, which must have type `type`.
Result<const Column*> GetColumn(const RecordBatch& b, std::string_view name, const DataType& type,
                                const std::string& table_path) {
  const int i = b.schema.FieldIndex(name);
  if (i < 0 || i >= static_cast<int>(b.columns.size())) {
    return absl::DataLossError(absl::StrCat(table_path, ": no column '", AsAbsl(name), "'"));
  }
  if (!(b.columns[i].type == type)) {
    return absl::DataLossError(absl::StrCat(table_path, ": column '", AsAbsl(name), "' holds ",
                                            b.columns[i].type.ToString(), ", expected ",
                                            type.ToString()));
  }
  return &b.columns[i];
}

template <typename T>
T Fixed(const Column* c, int64_t row) {
  return c->values.as<T>()[row];
}

std::string Str(const Column* c, int64_t row) { return std::string(c->GetBytes(row)); }

// Calls `fn(batch)` for every batch of `t`.
template <typename Fn>
Status ForEachBatch(const table::Table& t, Fn&& fn) {
  FW_ASSIGN_OR_RETURN_CTX(auto it, t.Scan(), "reading ", t.uri());
  while (true) {
    FW_ASSIGN_OR_RETURN_CTX(std::optional<RecordBatch> b, it->Next(), "reading ", t.uri());
    if (!b) return absl::OkStatus();
    FW_RETURN_IF_ERROR(fn(*b));
  }
}

struct TableRecord {
  std::string name;
  TableInfo info;  // max_size, max_times_sampled, sampler, remover, limiter, limiter_options
  int64_t num_items = 0;
  std::optional<Signature> signature;
};

Result<std::vector<TableRecord>> ReadTables(const table::Table& t, int64_t id) {
  std::vector<TableRecord> out;
  const DataType i32 = DataType::Scalar(TypeId::kInt32), i64 = DataType::Scalar(TypeId::kInt64),
                 f64 = DataType::Scalar(TypeId::kFloat64), str = DataType::String();
  FW_RETURN_IF_ERROR(ForEachBatch(t, [&](const RecordBatch& b) -> Status {
    const std::string& p = t.uri();
    FW_ASSIGN_OR_RETURN(const Column* name, GetColumn(b, "name", str, p));
    FW_ASSIGN_OR_RETURN(const Column* max_size, GetColumn(b, "max_size", i64, p));
    FW_ASSIGN_OR_RETURN(const Column* mts, GetColumn(b, "max_times_sampled", i32, p));
    FW_ASSIGN_OR_RETURN(const Column* sampler, GetColumn(b, "sampler", str, p));
    FW_ASSIGN_OR_RETURN(const Column* remover, GetColumn(b, "remover", str, p));
    FW_ASSIGN_OR_RETURN(const Column* spi, GetColumn(b, "samples_per_insert", f64, p));
    FW_ASSIGN_OR_RETURN(const Column* min_size, GetColumn(b, "min_size_to_sample", i64, p));
    FW_ASSIGN_OR_RETURN(const Column* min_diff, GetColumn(b, "min_diff", f64, p));
    FW_ASSIGN_OR_RETURN(const Column* max_diff, GetColumn(b, "max_diff", f64, p));
    FW_ASSIGN_OR_RETURN(const Column* inserts, GetColumn(b, "inserts", i64, p));
    FW_ASSIGN_OR_RETURN(const Column* deletes, GetColumn(b, "deletes", i64, p));
    FW_ASSIGN_OR_RETURN(const Column* samples, GetColumn(b, "samples", i64, p));
    FW_ASSIGN_OR_RETURN(const Column* num_items, GetColumn(b, "num_items", i64, p));
    FW_ASSIGN_OR_RETURN(const Column* signature, GetColumn(b, "signature", str, p));
    for (int64_t r = 0; r < b.num_rows; ++r) {
      TableRecord rec;
      rec.name = Str(name, r);
      rec.info.name = rec.name;
      rec.info.max_size = Fixed<int64_t>(max_size, r);
      rec.info.max_times_sampled = Fixed<int32_t>(mts, r);
      rec.info.sampler = Str(sampler, r);
      rec.info.remover = Str(remover, r);
      rec.info.limiter_options.samples_per_insert = Fixed<double>(spi, r);
      rec.info.limiter_options.min_size_to_sample = Fixed<int64_t>(min_size, r);
      rec.info.limiter_options.min_diff = Fixed<double>(min_diff, r);
      rec.info.limiter_options.max_diff = Fixed<double>(max_diff, r);
      rec.info.limiter.inserts = Fixed<int64_t>(inserts, r);
      rec.info.limiter.deletes = Fixed<int64_t>(deletes, r);
      rec.info.limiter.samples = Fixed<int64_t>(samples, r);
      rec.num_items = Fixed<int64_t>(num_items, r);
      if (signature->IsValid(r)) {
        auto sig = SignatureFromJson(signature->GetBytes(r));
        if (!sig.ok()) {
          return CheckpointDataLoss(
              id, absl::StrCat("table '", rec.name, "': signature: ", sig.status().message()));
        }
        rec.signature = *std::move(sig);
      }
      out.push_back(std::move(rec));
    }
    return absl::OkStatus();
  }));
  return out;
}

Result<absl::flat_hash_map<ChunkKey, ChunkRef>> ReadChunks(const table::Table& t, int64_t id) {
  absl::flat_hash_map<ChunkKey, ChunkRef> out;
  const std::string& p = t.uri();
  FW_RETURN_IF_ERROR(ForEachBatch(t, [&](const RecordBatch& b) -> Status {
    FW_ASSIGN_OR_RETURN(const Column* key,
                        GetColumn(b, "key", DataType::Scalar(TypeId::kUInt64), p));
    FW_ASSIGN_OR_RETURN(const Column* step_type, GetColumn(b, "step_type", DataType::String(), p));
    FW_ASSIGN_OR_RETURN(const Column* num_steps,
                        GetColumn(b, "num_steps", DataType::Scalar(TypeId::kInt64), p));
    FW_ASSIGN_OR_RETURN(const Column* codec, GetColumn(b, "codec", DataType::String(), p));
    FW_ASSIGN_OR_RETURN(const Column* compressed,
                        GetColumn(b, "compressed", DataType::Binary(), p));
    for (int64_t r = 0; r < b.num_rows; ++r) {
      const ChunkKey k = Fixed<uint64_t>(key, r);
      auto type = DataType::Parse(step_type->GetBytes(r));
      if (!type.ok())
        return CheckpointDataLoss(id, absl::StrCat("chunk ", k, ": ", type.status().message()));
      auto c = format::ParseCodec(codec->GetBytes(r));
      if (!c.ok())
        return CheckpointDataLoss(id, absl::StrCat("chunk ", k, ": ", c.status().message()));
      auto chunk =
          Chunk::FromCompressed(k, *type, Fixed<int64_t>(num_steps, r), *c, Str(compressed, r));
      if (!chunk.ok()) return CheckpointDataLoss(id, chunk.status().message());
      if (!out.emplace(k, *std::move(chunk)).second) {
        return CheckpointDataLoss(id, absl::StrCat("chunk ", k, " appears twice in ", p));
      }
    }
    return absl::OkStatus();
  }));
  return out;
}

// ---------------------------------------------------------------- marker

Result<int64_t> JsonInt(const Json& j, const char* key, const std::string& path) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number_integer()) {
    return absl::DataLossError(absl::StrCat(path, ": missing or non-integer '", key, "'"));
  }
  return j[key].get<int64_t>();
}

struct Marker {
  int64_t id = 0;
  std::map<std::string, int64_t> versions;  // checkpoint table -> version
  std::map<std::string, int64_t> rows;      // checkpoint table -> rows
};

Result<Marker> ReadMarker(io::FileSystem* fs, const std::string& dir, int64_t id) {
  const std::string path = io::JoinPath(dir, kMarker);
  FW_ASSIGN_OR_RETURN(std::string text, fs->ReadFile(path));
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return absl::DataLossError(absl::StrCat(path, ": not a JSON object"));
  if (!j.contains("format") || !j["format"].is_string() ||
      j["format"].get<std::string>() != kFormat) {
    return absl::DataLossError(absl::StrCat(path, ": 'format' is not \"", kFormat, "\""));
  }
  FW_ASSIGN_OR_RETURN(int64_t version, JsonInt(j, "format_version", path));
  if (version > kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": format version ", version,
                                                      " is newer than this reader's (",
                                                      kFormatVersion, "); upgrade flywheel"));
  }
  Marker m;
  FW_ASSIGN_OR_RETURN(m.id, JsonInt(j, "id", path));
  if (m.id != id)
    return absl::DataLossError(
        absl::StrCat(path, ": records id ", m.id, ", its directory says ", id));
  if (!j.contains("tables") || !j["tables"].is_object()) {
    return absl::DataLossError(absl::StrCat(path, ": missing 'tables'"));
  }
  for (const char* t : {kItemsTable, kChunksTable, kTablesTable}) {
    if (!j["tables"].contains(t))
      return absl::DataLossError(absl::StrCat(path, ": no entry for table '", t, "'"));
    const Json& e = j["tables"][t];
    FW_ASSIGN_OR_RETURN(m.versions[t], JsonInt(e, "version", path));
    FW_ASSIGN_OR_RETURN(m.rows[t], JsonInt(e, "num_rows", path));
  }
  return m;
}

}  // namespace

// ---------------------------------------------------------------- public

Status CheckpointOptions::Validate() const {
  if (keep_last < 0)
    return absl::InvalidArgumentError(absl::StrCat("keep_last must be >= 0, got ", keep_last));
  if (max_batch_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_bytes must be >= 1, got ", max_batch_bytes));
  }
  if (max_batch_rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_rows must be >= 1, got ", max_batch_rows));
  }
  return absl::OkStatus();
}

Result<std::unique_ptr<ItemSelector>> SelectorFromDescription(std::string_view text,
                                                              uint64_t seed) {
  if (text == "Uniform") return NewUniformSelector(seed);
  if (text == "Fifo") return NewFifoSelector();
  if (text == "Lifo") return NewLifoSelector();
  if (text == "MinHeap") return NewMinHeapSelector();
  if (text == "MaxHeap") return NewMaxHeapSelector();
  constexpr std::string_view kPrefix = "Prioritized(priority_exponent=";
  if (text.size() > kPrefix.size() + 1 && text.substr(0, kPrefix.size()) == kPrefix &&
      text.back() == ')') {
    const std::string number(text.substr(kPrefix.size(), text.size() - kPrefix.size() - 1));
    char* end = nullptr;
    errno = 0;
    const double exponent = std::strtod(number.c_str(), &end);
    const bool blank = number.empty() || number.front() == ' ' || number.front() == '\t';
    if (!blank && errno == 0 && end == number.c_str() + number.size() && std::isfinite(exponent) &&
        exponent >= 0) {
      return NewPrioritizedSelector(exponent, seed);
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "selector \"", AsAbsl(text), "\": priority_exponent must be a finite number >= 0"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown selector \"", AsAbsl(text),
      "\" (known: Uniform, Prioritized(priority_exponent=X), Fifo, Lifo, MinHeap, MaxHeap)"));
}

Result<std::string> SignatureToJson(const Signature& signature) {
  Json arr = Json::array();
  for (const auto& [name, type] : signature.columns) {
    if (!IsValidUtf8(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("signature column name is not valid UTF-8: ", AsAbsl(name)));
    }
    arr.push_back(Json{{"name", name}, {"type", type.ToString()}});
  }
  return arr.dump();
}

Result<Signature> SignatureFromJson(std::string_view json) {
  Json j = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array())
    return absl::InvalidArgumentError("signature is not a JSON array");
  Signature s;
  for (const Json& e : j) {
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("type") ||
        !e["type"].is_string()) {
      return absl::InvalidArgumentError(
          "signature entries must be {\"name\": string, \"type\": string}");
    }
    const std::string name = e["name"].get<std::string>();
    FW_ASSIGN_OR_RETURN_CTX(DataType type, DataType::Parse(e["type"].get<std::string>()),
                            "signature column '", name, "'");
    s.columns.emplace_back(name, std::move(type));
  }
  return s;
}

Result<std::vector<CheckpointListing>> ListCheckpoints(const std::string& root,
                                                       std::shared_ptr<io::FileSystem> fs) {
  fs = FsOr(std::move(fs));
  std::vector<CheckpointListing> out;
  auto entries = fs->List(root);
  if (absl::IsNotFound(entries.status())) return out;
  FW_RETURN_IF_ERROR_CTX(entries.status(), "listing checkpoints under ", root);
  for (const io::FileInfo& e : *entries) {
    int64_t id = 0;
    if (!e.is_dir || !ParseId(e.name, &id)) continue;
    CheckpointListing l;
    l.id = id;
    l.path = io::JoinPath(root, e.name);
    FW_ASSIGN_OR_RETURN_CTX(l.complete, fs->Exists(io::JoinPath(l.path, kMarker)),
                            "checking checkpoint ", l.path);
    out.push_back(std::move(l));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

Result<CheckpointResult> Checkpoint(const std::vector<ReplayTable*>& tables, const std::string& root,
                                    const CheckpointOptions& options) {
  const absl::Time start = absl::Now();
  FW_RETURN_IF_ERROR_CTX(options.Validate(), "checkpoint options");
  std::set<std::string> names;
  for (const ReplayTable* t : tables) {
    if (t == nullptr) return absl::InvalidArgumentError("checkpoint: null table");
    if (!names.insert(t->name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint: table name '", t->name(), "' given twice"));
    }
  }
  std::vector<std::optional<std::string>> signatures(tables.size());
  for (size_t i = 0; i < tables.size(); ++i) {
    if (!tables[i]->signature().has_value()) continue;
    FW_ASSIGN_OR_RETURN_CTX(signatures[i], SignatureToJson(*tables[i]->signature()),
                            "checkpoint: table '", tables[i]->name(), "'");
  }

  // 1. Snapshots, all before any IO so they are as close in time as possible.
  CheckpointResult result;
  std::vector<ReplayTable::Snapshot> snaps;
  snaps.reserve(tables.size());
  for (const ReplayTable* t : tables) {
    snaps.push_back(t->TakeSnapshot());
    result.pauses.emplace_back(t->name(), snaps.back().lock_held);
    result.max_pause = std::max(result.max_pause, snaps.back().lock_held);
    result.num_items += static_cast<int64_t>(snaps.back().items.size());
  }
  // Restore inserts items in row order, which decides Fifo/Lifo order and
  // heap ties: snapshots come in insertion order, so rows keep it.

  // 2. Claim the next id: creating its `tables` table is the claim (a table
  // is created with put-if-absent), so two racing writers never share one.
  std::shared_ptr<io::FileSystem> fs = FsOr(options.fs);
  FW_RETURN_IF_ERROR_CTX(fs->CreateDirs(root), "checkpoint: creating ", root);
  FW_ASSIGN_OR_RETURN(auto existing, ListCheckpoints(root, fs));
  int64_t id = existing.empty() ? 1 : existing.back().id + 1;
  table::TableOptions topts;
  topts.fs = fs;
  topts.shard.codec = format::Codec::kLz4;
  table::TableOptions chunk_opts = topts;
  chunk_opts.shard.codec = format::Codec::kNone;  // chunk bytes are compressed already
  const Schema items_schema = MustParseSchema(kItemsSchema);
  const Schema chunks_schema = MustParseSchema(kChunksSchema);
  const Schema tables_schema = MustParseSchema(kTablesSchema);
  std::shared_ptr<table::Table> tables_table;
  std::string dir;
  for (int attempt = 0;; ++attempt, ++id) {
    dir = io::JoinPath(root, IdName(id));
    table::CommitOptions commit{{{"flywheel.replay.checkpoint", std::to_string(id)}}};
    auto t = table::Table::Create(io::JoinPath(dir, kTablesTable), tables_schema, topts, commit);
    if (t.ok()) {
      tables_table = *std::move(t);
      break;
    }
    if (!absl::IsAlreadyExists(t.status()) || attempt >= 100) {
      return Annotate(t.status(), absl::StrCat("checkpoint ", id));
    }
  }
  result.id = id;
  result.path = dir;
  const table::CommitOptions commit{{{"flywheel.replay.checkpoint", std::to_string(id)}}};

  // 3. tables
  FW_RETURN_IF_ERROR_CTX(
      tables_table->Append(TablesBatch(tables_schema, snaps, signatures), commit), "checkpoint ",
      id);

  // 4. chunks, each once however many items and tables share it.
  FW_ASSIGN_OR_RETURN_CTX(
      auto chunks_table,
      table::Table::Create(io::JoinPath(dir, kChunksTable), chunks_schema, chunk_opts, commit),
      "checkpoint ", id);
  {
    absl::flat_hash_map<ChunkKey, const Chunk*> seen;
    ChunkRows rows;
    for (const auto& snap : snaps) {
      for (const auto& item : snap.items) {
        for (const TrajectoryColumn& col : item.item->columns) {
          for (const ChunkRef& c : col.chunks) {
            auto [it, inserted] = seen.emplace(c->key(), c.get());
            if (!inserted) {
              const Chunk* other = it->second;
              if (other != c.get() &&
                  (other->num_steps() != c->num_steps() || other->codec() != c->codec() ||
                   !(other->step_type() == c->step_type()) ||
                   other->compressed() != c->compressed())) {
                return absl::FailedPreconditionError(
                    absl::StrCat("checkpoint ", id, ": two different chunks share key ", c->key(),
                                 " (table '", snap.info.name, "', item ", item.key, ")"));
              }
              continue;
            }
            rows.Add(*c);
            result.chunk_bytes += c->compressed().size();
            if (static_cast<int64_t>(rows.compressed.bytes()) >= options.max_batch_bytes ||
                rows.rows() >= options.max_batch_rows) {
              FW_RETURN_IF_ERROR_CTX(chunks_table->Append(rows.Finish(chunks_schema), commit),
                                     "checkpoint ", id);
            }
          }
        }
      }
    }
    if (rows.rows() > 0) {
      FW_RETURN_IF_ERROR_CTX(chunks_table->Append(rows.Finish(chunks_schema), commit),
                             "checkpoint ", id);
    }
    result.num_chunks = static_cast<int64_t>(seen.size());
  }

  // 5. items, one row per (item, column).
  FW_ASSIGN_OR_RETURN_CTX(
      auto items_table,
      table::Table::Create(io::JoinPath(dir, kItemsTable), items_schema, topts, commit),
      "checkpoint ", id);
  {
    ItemRows rows;
    for (const auto& snap : snaps) {
      for (const auto& item : snap.items) {
        const auto n = static_cast<int64_t>(item.item->columns.size());
        // An item's rows go into one batch (one with more columns than
        // max_batch_rows gets a batch of its own).
        if (rows.rows() > 0 && rows.rows() + n > options.max_batch_rows) {
          FW_RETURN_IF_ERROR_CTX(items_table->Append(rows.Finish(items_schema), commit),
                                 "checkpoint ", id);
        }
        rows.Add(snap.info.name, item);
      }
    }
    if (rows.rows() > 0) {
      FW_RETURN_IF_ERROR_CTX(items_table->Append(rows.Finish(items_schema), commit), "checkpoint ",
                             id);
    }
  }

  // 6. The marker, last: from here on the checkpoint exists.
  Json marker = {
      {"format", kFormat},
      {"format_version", kFormatVersion},
      {"id", id},
      {"timestamp_ms", absl::ToUnixMillis(absl::Now())},
      {"num_items", result.num_items},
      {"num_chunks", result.num_chunks},
      {"max_pause_us", absl::ToInt64Microseconds(result.max_pause)},
      {"tables",
       {{kItemsTable, {{"version", items_table->version()}, {"num_rows", items_table->num_rows()}}},
        {kChunksTable,
         {{"version", chunks_table->version()}, {"num_rows", chunks_table->num_rows()}}},
        {kTablesTable,
         {{"version", tables_table->version()}, {"num_rows", tables_table->num_rows()}}}}},
  };
  FW_RETURN_IF_ERROR_CTX(fs->PutIfAbsent(io::JoinPath(dir, kMarker), marker.dump(2) + "\n"),
                         "checkpoint ", id, ": publishing");

  // 7. Cleanup (best effort: the checkpoint is complete already). Incomplete
  // directories below our id are dead writers' leftovers; complete ones
  // beyond keep_last are retired oldest first.
  auto listing = ListCheckpoints(root, fs);
  if (listing.ok()) {
    std::vector<int64_t> complete;
    for (const auto& l : *listing) {
      if (l.complete && l.id <= id) complete.push_back(l.id);
    }
    const size_t keep =
        options.keep_last == 0 ? complete.size() : static_cast<size_t>(options.keep_last);
    std::set<int64_t> retire;
    if (complete.size() > keep)
      retire.insert(complete.begin(), complete.end() - static_cast<ptrdiff_t>(keep));
    for (const auto& l : *listing) {
      if (l.id >= id) continue;
      if (!l.complete || retire.contains(l.id)) {
        Status s = DeleteCheckpointDir(fs.get(), l.path);
        if (s.ok()) {
          result.deleted.push_back(l.id);
        } else {
          FW_LOG(WARNING) << "checkpoint " << id << ": could not delete old checkpoint " << l.path
                          << ": " << s;
        }
      }
    }
  } else {
    FW_LOG(WARNING) << "checkpoint " << id << ": cleanup skipped: " << listing.status();
  }
  result.duration = absl::Now() - start;
  static Histogram* const duration = Metrics().GetHistogram(
      "flywheel_replay_checkpoint_seconds", "Time to write a replay checkpoint (the tables keep serving meanwhile)");
  duration->Observe(absl::ToDoubleSeconds(result.duration));
  for (const auto& [name, pause] : result.pauses) {
    Metrics()
        .GetHistogram("flywheel_replay_checkpoint_pause_seconds",
                      "Time a replay table was paused (locked) to snapshot it for a checkpoint", {{"table", name}})
        ->Observe(absl::ToDoubleSeconds(pause));
  }
  return result;
}

Result<RestoredCheckpoint> Restore(const std::string& root, int64_t id,
                                   const RestoreOptions& options) {
  std::shared_ptr<io::FileSystem> fs = FsOr(options.fs);
  if (id == kLatestCheckpoint) {
    FW_ASSIGN_OR_RETURN(auto listing, ListCheckpoints(root, fs));
    int incomplete = 0;
    for (auto it = listing.rbegin(); it != listing.rend(); ++it) {
      if (it->complete) {
        id = it->id;
        break;
      }
      incomplete++;
    }
    if (id == kLatestCheckpoint) {
      return absl::NotFoundError(
          absl::StrCat("no complete checkpoint under ", root, " (", incomplete, " incomplete)"));
    }
  } else if (id < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint id must be >= 0 or kLatestCheckpoint, got ", id));
  }
  const std::string dir = io::JoinPath(root, IdName(id));
  FW_ASSIGN_OR_RETURN_CTX(bool complete, fs->Exists(io::JoinPath(dir, kMarker)),
                          "restoring checkpoint ", id);
  if (!complete) {
    FW_ASSIGN_OR_RETURN_CTX(bool exists, fs->Exists(dir), "restoring checkpoint ", id);
    return absl::NotFoundError(absl::StrCat(
        "checkpoint ", dir, exists ? " is incomplete (no marker)" : " does not exist"));
  }
  FW_ASSIGN_OR_RETURN_CTX(Marker marker, ReadMarker(fs.get(), dir, id), "restoring checkpoint ",
                          id);

  table::TableOptions topts;
  topts.fs = fs;
  std::map<std::string, std::shared_ptr<table::Table>> ckpt;
  for (const char* name : {kItemsTable, kChunksTable, kTablesTable}) {
    table::OpenOptions open;
    open.version = marker.versions[name];
    FW_ASSIGN_OR_RETURN_CTX(ckpt[name], table::Table::Open(io::JoinPath(dir, name), open, topts),
                            "restoring checkpoint ", id);
    if (ckpt[name]->num_rows() != marker.rows[name]) {
      return CheckpointDataLoss(id, absl::StrCat("table '", name, "' has ", ckpt[name]->num_rows(),
                                                 " rows, the marker says ", marker.rows[name]));
    }
  }

  // Tables first, with their original options.
  FW_ASSIGN_OR_RETURN(std::vector<TableRecord> records, ReadTables(*ckpt[kTablesTable], id));
  RestoredCheckpoint out;
  out.id = id;
  absl::flat_hash_map<std::string, size_t> by_name;
  for (const TableRecord& rec : records) {
    ReplayTableOptions o;
    o.name = rec.name;
    FW_ASSIGN_OR_RETURN_CTX(o.sampler, SelectorFromDescription(rec.info.sampler, options.seed),
                            "restoring checkpoint ", id, ": table '", rec.name, "' sampler");
    FW_ASSIGN_OR_RETURN_CTX(o.remover, SelectorFromDescription(rec.info.remover, options.seed),
                            "restoring checkpoint ", id, ": table '", rec.name, "' remover");
    o.max_size = rec.info.max_size;
    o.max_times_sampled = rec.info.max_times_sampled;
    o.rate_limiter = rec.info.limiter_options;
    o.signature = rec.signature;
    o.watchdog = options.watchdog;
    auto t = ReplayTable::Create(std::move(o));
    if (!t.ok())
      return CheckpointDataLoss(id, absl::StrCat("table '", rec.name, "': ", t.status().message()));
    if (!by_name.emplace(rec.name, out.tables.size()).second) {
      return CheckpointDataLoss(id, absl::StrCat("table '", rec.name, "' appears twice"));
    }
    out.signatures[rec.name] = rec.signature;
    out.tables.push_back(*std::move(t));
  }

  // Every chunk once; items share them.
  FW_ASSIGN_OR_RETURN(auto chunks, ReadChunks(*ckpt[kChunksTable], id));

  // Items: consecutive rows of one (table, key) are its columns in order.
  std::vector<int64_t> restored(out.tables.size(), 0);
  const table::Table& items = *ckpt[kItemsTable];
  const std::string& p = items.uri();
  Item pending;
  std::optional<size_t> pending_table;
  auto flush = [&]() -> Status {
    if (!pending_table) return absl::OkStatus();
    ReplayTable& t = *out.tables[*pending_table];
    const ItemKey key = pending.key;
    Status s = t.RestoreItem(std::move(pending));
    pending = Item();
    const size_t ti = *pending_table;
    pending_table.reset();
    if (!s.ok())
      return CheckpointDataLoss(
          id, absl::StrCat("item ", key, " of table '", t.name(), "': ", s.message()));
    restored[ti]++;
    return absl::OkStatus();
  };
  FW_RETURN_IF_ERROR(ForEachBatch(items, [&](const RecordBatch& b) -> Status {
    FW_ASSIGN_OR_RETURN(const Column* table, GetColumn(b, "table", DataType::String(), p));
    FW_ASSIGN_OR_RETURN(const Column* key,
                        GetColumn(b, "key", DataType::Scalar(TypeId::kUInt64), p));
    FW_ASSIGN_OR_RETURN(const Column* priority,
                        GetColumn(b, "priority", DataType::Scalar(TypeId::kFloat64), p));
    FW_ASSIGN_OR_RETURN(const Column* ts,
                        GetColumn(b, "times_sampled", DataType::Scalar(TypeId::kInt32), p));
    FW_ASSIGN_OR_RETURN(const Column* ci,
                        GetColumn(b, "column_index", DataType::Scalar(TypeId::kInt32), p));
    FW_ASSIGN_OR_RETURN(const Column* column, GetColumn(b, "column", DataType::String(), p));
    FW_ASSIGN_OR_RETURN(const Column* chunk_keys,
                        GetColumn(b, "chunk_keys", DataType::List(TypeId::kUInt64), p));
    FW_ASSIGN_OR_RETURN(const Column* offset,
                        GetColumn(b, "offset", DataType::Scalar(TypeId::kInt64), p));
    FW_ASSIGN_OR_RETURN(const Column* length,
                        GetColumn(b, "length", DataType::Scalar(TypeId::kInt64), p));
    const int64_t* lo = chunk_keys->offsets_data();
    const uint64_t* kv = chunk_keys->values.as<uint64_t>();
    for (int64_t r = 0; r < b.num_rows; ++r) {
      const std::string_view tname = table->GetBytes(r);
      const ItemKey k = Fixed<uint64_t>(key, r);
      const int32_t index = Fixed<int32_t>(ci, r);
      if (index == 0) FW_RETURN_IF_ERROR(flush());
      auto ti = by_name.find(AsAbsl(tname));
      if (ti == by_name.end()) {
        return CheckpointDataLoss(id, absl::StrCat("item ", k, " names table '", AsAbsl(tname),
                                                   "', which the tables table lacks"));
      }
      if (index == 0) {
        pending_table = ti->second;
        pending.key = k;
        pending.priority = Fixed<double>(priority, r);
        pending.times_sampled = Fixed<int32_t>(ts, r);
      } else if (!pending_table || *pending_table != ti->second || pending.key != k ||
                 static_cast<size_t>(index) != pending.columns.size()) {
        return CheckpointDataLoss(
            id, absl::StrCat(p, " row ", r, ": column ", index, " of item ", k, " of table '",
                             AsAbsl(tname), "' does not follow the item's previous column"));
      }
      TrajectoryColumn col;
      col.name = Str(column, r);
      col.offset = Fixed<int64_t>(offset, r);
      col.length = Fixed<int64_t>(length, r);
      for (int64_t j = lo[r]; j < lo[r + 1]; ++j) {
        auto c = chunks.find(kv[j]);
        if (c == chunks.end()) {
          return CheckpointDataLoss(
              id, absl::StrCat("item ", k, " of table '", AsAbsl(tname), "' (column '", col.name,
                               "') references chunk ", kv[j],
                               ", which the chunks table does not hold"));
        }
        col.chunks.push_back(c->second);
      }
      pending.columns.push_back(std::move(col));
    }
    return absl::OkStatus();
  }));
  FW_RETURN_IF_ERROR(flush());
  chunks.clear();  // unreferenced chunks (none in a consistent checkpoint) go now

  for (size_t i = 0; i < records.size(); ++i) {
    if (restored[i] != records[i].num_items) {
      return CheckpointDataLoss(
          id, absl::StrCat("table '", records[i].name, "' should hold ", records[i].num_items,
                           " items, the items table has ", restored[i]));
    }
    out.tables[i]->SetRateLimiterState(records[i].info.limiter);
  }
  return out;
}

}  // namespace flywheel::replay
