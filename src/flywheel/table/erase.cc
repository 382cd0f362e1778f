// Erasure: rewriting the fragments that hold matching rows and every retained
// manifest that references them. docs/format/table.md, "Erasure".
#include <xxhash.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flywheel/table/internal.h"

namespace flywheel::table {

using format::Column;
using format::RecordBatch;

namespace {

// A Bloom filter over one data file's key column: "FWBLOOM2" | k u32 |
// bits u64 | checksum u64 (XXH3-64 of the bit words) | words. 10 bits per
// row, 7 probes (about 1% false positives); probe i of hash h sets bit
// x * bits >> 64 with x = (h + i * ((h * 0x9E3779B97F4A7C15) | 1)) mod 2^64
// (multiply-shift, no division). Files with another magic are treated as missing and rebuilt.
class KeyIndex {
 public:
  static KeyIndex Build(const std::vector<uint64_t>& hashes) {
    KeyIndex b;
    b.bits_ = std::max<uint64_t>(64, hashes.size() * 10);
    b.words_.assign((b.bits_ + 63) / 64, 0);
    for (uint64_t h : hashes) b.Add(h);
    return b;
  }
  static std::optional<KeyIndex> Decode(std::string_view data) {
    if (data.size() < 28 || std::memcmp(data.data(), "FWBLOOM2", 8) != 0) return std::nullopt;
    KeyIndex b;
    uint32_t k;
    uint64_t sum;
    std::memcpy(&k, data.data() + 8, 4);
    std::memcpy(&b.bits_, data.data() + 12, 8);
    std::memcpy(&sum, data.data() + 20, 8);
    // The bit count must fit the words that follow (a huge one would wrap
    // the word count to zero and probes would read past the words).
    if (k != kProbes || b.bits_ == 0 || b.bits_ > (data.size() - 28) * 8) return std::nullopt;
    const size_t n = (b.bits_ + 63) / 64;
    if (data.size() != 28 + n * 8) return std::nullopt;
    b.words_.resize(n);
    std::memcpy(b.words_.data(), data.data() + 28, n * 8);
    if (XXH3_64bits(b.words_.data(), n * 8) != sum) return std::nullopt;
    return b;
  }
  std::string Encode() const {
    std::string out("FWBLOOM2", 8);
    const uint32_t k = kProbes;
    const uint64_t sum = XXH3_64bits(words_.data(), words_.size() * 8);
    out.append(reinterpret_cast<const char*>(&k), 4);
    out.append(reinterpret_cast<const char*>(&bits_), 8);
    out.append(reinterpret_cast<const char*>(&sum), 8);
    out.append(reinterpret_cast<const char*>(words_.data()), words_.size() * 8);
    return out;
  }
  bool MayContain(uint64_t h) const {
    for (uint32_t i = 0; i < kProbes; ++i) {
      const uint64_t bit = Probe(h, i);
      if (!(words_[bit / 64] >> (bit % 64) & 1)) return false;
    }
    return true;
  }

 private:
  static constexpr uint32_t kProbes = 7;
  uint64_t Probe(uint64_t h, uint32_t i) const {
    // A full-width step: with (h >> 32) the probes would share their top
    // bits, which multiply-shift maps to the same bit of a small filter.
    const uint64_t x = h + i * ((h * 0x9E3779B97F4A7C15ull) | 1);
    return static_cast<uint64_t>((static_cast<unsigned __int128>(x) * bits_) >> 64);
  }
  void Add(uint64_t h) {
    for (uint32_t i = 0; i < kProbes; ++i) {
      const uint64_t bit = Probe(h, i);
      words_[bit / 64] |= uint64_t{1} << (bit % 64);
    }
  }
  uint64_t bits_ = 0;
  std::vector<uint64_t> words_;
};

}  // namespace

std::optional<bool> KeyIndexMayContain(std::string_view index_file, uint64_t key_hash) {
  auto index = KeyIndex::Decode(index_file);
  if (!index) return std::nullopt;
  return index->MayContain(key_hash);
}

namespace {

// Key hashes as the predicate compares them: bytes for strings, the value
// as a double for numbers (the matcher compares numbers as doubles).
uint64_t HashNumber(double v) {
  if (v == 0) v = 0;  // -0 == 0
  return XXH3_64bits(&v, sizeof v);
}
uint64_t HashBytes(std::string_view s) { return XXH3_64bits(s.data(), s.size()); }

template <typename T>
void HashFixed(const Column& c, std::vector<uint64_t>* out) {
  const T* d = c.values.as<T>();
  for (int64_t i = 0; i < c.length; ++i) {
    if (c.IsValid(i)) out->push_back(HashNumber(static_cast<double>(d[i])));
  }
}

Result<std::vector<uint64_t>> KeyHashes(const Column& c, const format::DataType& type) {
  using format::TypeId;
  std::vector<uint64_t> out;
  switch (type.id) {
    case TypeId::kString:
    case TypeId::kBinary:
      for (int64_t i = 0; i < c.length; ++i) {
        if (c.IsValid(i)) out.push_back(HashBytes(c.GetBytes(i)));
      }
      break;
    case TypeId::kBool: HashFixed<uint8_t>(c, &out); break;
    case TypeId::kInt8: HashFixed<int8_t>(c, &out); break;
    case TypeId::kInt16: HashFixed<int16_t>(c, &out); break;
    case TypeId::kInt32: HashFixed<int32_t>(c, &out); break;
    case TypeId::kInt64: HashFixed<int64_t>(c, &out); break;
    case TypeId::kUInt8: HashFixed<uint8_t>(c, &out); break;
    case TypeId::kUInt16: HashFixed<uint16_t>(c, &out); break;
    case TypeId::kUInt32: HashFixed<uint32_t>(c, &out); break;
    case TypeId::kUInt64: HashFixed<uint64_t>(c, &out); break;
    case TypeId::kFloat32: HashFixed<float>(c, &out); break;
    case TypeId::kFloat64: HashFixed<double>(c, &out); break;
    default: return absl::InvalidArgumentError(absl::StrCat("cannot index ", type.ToString()));
  }
  return out;
}

std::string IndexPath(const std::string& uri, int32_t field_id, const std::string& data_file) {
  // data/<id>.shard -> _erase_index/<field id>-<id>.bloom
  std::string base = data_file.substr(data_file.rfind('/') + 1);
  base = base.substr(0, base.rfind('.'));
  return io::JoinPath(io::JoinPath(uri, "_erase_index"), absl::StrCat(field_id, "-", base, ".bloom"));
}

std::string FragmentKey(const Fragment& f) {
  std::vector<std::string> paths;
  for (const auto& df : f.files) paths.push_back(df.path);
  return absl::StrJoin(paths, "|");
}

// A fragment's rewrite: the physical rows erased (sorted) and the files
// that replace its old ones.
struct Plan {
  std::vector<int64_t> erased;
  std::vector<DataFile> files;
  int64_t rows = 0;
  std::vector<std::string> old_files;
};

}  // namespace

Result<EraseResult> Table::Erase(const Predicate& pred, const EraseOptions& options) {
  FW_ASSIGN_OR_RETURN(PredicateMatcher matcher,
                      PredicateMatcher::Make(schema(), pred, absl::StrCat("erase from ", uri_)));
  const format::Field key = matcher.field();
  io::FileSystem* fs = impl_->fs.get();
  const bool equality = pred.op == "==";
  uint64_t probe = 0;
  if (equality) {
    // The predicate's value (valid JSON of the right kind: Make checked),
    // hashed as the index hashes keys.
    const auto v = nlohmann::json::parse(pred.value);
    probe = v.is_string()    ? HashBytes(v.get<std::string>())
            : v.is_boolean() ? HashNumber(v.get<bool>() ? 1.0 : 0.0)
                             : HashNumber(v.get<double>());
  }
  EraseResult res;
  // The key index is an optimisation: without its directory every file is read.
  // A dry run writes nothing, not even the index.
  const bool can_index = !options.dry_run && fs->CreateDirs(io::JoinPath(uri_, "_erase_index")).ok();
  std::map<std::string, Plan> plans;  // by FragmentKey of the old fragment
  std::set<std::string> settled;      // fragment keys known to hold no matching row

  // The physical rows of `f` matching the predicate (reading the key column
  // unless the key index rules the file out).
  auto scan = [&](const Fragment& f) -> Result<std::vector<int64_t>> {
    std::vector<int64_t> rows;
    const DataFile* file = nullptr;
    if (!FindField(f, key.id, &file)) {
      // The fragment predates the key column: every row reads its default.
      FW_ASSIGN_OR_RETURN(Column d, DefaultColumn(key, 1));
      std::vector<int64_t> hit;
      FW_RETURN_IF_ERROR(matcher.Match(d, 0, &hit));
      if (!hit.empty()) {
        for (int64_t r = 0; r < f.num_rows; ++r) rows.push_back(r);
      }
      ++res.fragments_scanned;
      return rows;
    }
    const std::string index_path = IndexPath(uri_, key.id, file->path);
    bool indexed = false;
    if (can_index) {
      auto data = fs->ReadFile(index_path);
      if (data.ok()) {
        auto index = KeyIndex::Decode(*data);
        indexed = index.has_value();
        if (equality && index && !index->MayContain(probe)) {
          ++res.fragments_skipped;
          return rows;
        }
      }
    }
    ++res.fragments_scanned;
    FW_ASSIGN_OR_RETURN(auto reader, format::ShardReader::Open(fs, io::JoinPath(uri_, file->path)));
    int col = -1;
    for (int i = 0; i < reader->schema().num_fields(); ++i) {
      if (reader->schema().fields[i].id == key.id) col = i;
    }
    if (col < 0) return absl::DataLossError(absl::StrCat(reader->path(), ": lacks field id ", key.id));
    FW_ASSIGN_OR_RETURN(Column c, reader->Read(col, 0, reader->num_rows()));
    FW_RETURN_IF_ERROR(matcher.Match(c, 0, &rows));
    // Index the file for the next erasure (immutable file, so forever valid).
    if (can_index && !indexed) {
      auto hashes = KeyHashes(c, key.type);
      if (hashes.ok()) (void)fs->Put(index_path, KeyIndex::Build(*hashes).Encode());
    }
    return rows;
  };

  // Writes the fragment's files without the rows in `erased`.
  auto rewrite = [&](const Fragment& f, std::vector<int64_t> erased) -> Result<Plan> {
    Plan p;
    p.erased = std::move(erased);
    std::vector<int64_t> keep;
    keep.reserve(static_cast<size_t>(f.num_rows) - p.erased.size());
    for (int64_t r = 0, e = 0; r < f.num_rows; ++r) {
      if (e < static_cast<int64_t>(p.erased.size()) && p.erased[e] == r) {
        ++e;
        continue;
      }
      keep.push_back(r);
    }
    p.rows = static_cast<int64_t>(keep.size());
    for (const DataFile& df : f.files) p.old_files.push_back(df.path);
    if (p.rows == 0) return p;  // the fragment goes away entirely
    for (const DataFile& df : f.files) {
      FW_ASSIGN_OR_RETURN(auto reader, format::ShardReader::Open(fs, io::JoinPath(uri_, df.path)));
      RecordBatch b;
      b.schema = reader->schema();
      b.num_rows = p.rows;
      for (int c = 0; c < reader->schema().num_fields(); ++c) {
        FW_ASSIGN_OR_RETURN(Column col, reader->Read(c, 0, reader->num_rows()));
        b.columns.push_back(format::TakeColumn(col, keep.data(), keep.size()));
      }
      const std::string rel = absl::StrCat("data/", NewFileId(), ".shard");
      FW_ASSIGN_OR_RETURN(auto writer, format::ShardWriter::Open(fs, io::JoinPath(uri_, rel), b.schema, options_.shard));
      FW_RETURN_IF_ERROR(writer->Write(b));
      FW_ASSIGN_OR_RETURN(format::ShardInfo info, writer->Finish());
      p.files.push_back(DataFile{rel, df.field_ids, info.size_bytes});
      res.files_written.push_back(rel);
      for (int c = 0; c < b.schema.num_fields(); ++c) {
        if (b.schema.fields[c].id != key.id) continue;
        auto hashes = KeyHashes(b.columns[c], key.type);
        if (can_index && hashes.ok()) (void)fs->Put(IndexPath(uri_, key.id, rel), KeyIndex::Build(*hashes).Encode());
      }
    }
    return p;
  };

  std::set<std::string> old_dvs;
  // Each manifest as last read or written, with its file's size and mtime:
  // a later round reads only versions that are new or were replaced by
  // someone else (another erasure), so a quiet table costs one pass.
  struct Seen {
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    Manifest m;
  };
  std::map<int64_t, Seen> seen;
  auto list_versions = [&]() -> Result<std::map<int64_t, io::FileInfo>> {
    FW_ASSIGN_OR_RETURN(auto entries, fs->List(io::JoinPath(uri_, "_versions")));
    std::map<int64_t, io::FileInfo> out;
    for (const auto& e : entries) {
      int64_t v = 0;
      if (e.name.size() == 29 && e.name.compare(20, 9, ".manifest") == 0 &&
          std::all_of(e.name.begin(), e.name.begin() + 20, [](char ch) { return ch >= '0' && ch <= '9'; })) {
        v = std::stoll(e.name.substr(0, 20));
        out[v] = e;
      }
    }
    return out;
  };
  std::map<int64_t, io::FileInfo> listed;
  for (int round = 0;; ++round) {
    FW_ASSIGN_OR_RETURN(listed, list_versions());
    bool changed_any = false;
    for (const auto& [v, info] : listed) {
      auto known = seen.find(v);
      if (known != seen.end() && known->second.size == info.size && known->second.mtime_ns == info.mtime_ns) continue;
      auto read = Impl::ReadManifest(fs, uri_, v);
      if (absl::IsNotFound(read.status())) continue;  // expired meanwhile
      FW_RETURN_IF_ERROR(read.status());
      Manifest m = std::move(*read);
      if (round > 0) changed_any = true;  // new or replaced meanwhile: check once more after it
      bool changed = false;
      std::vector<Fragment> kept;
      for (Fragment& f : m.fragments) {
        const std::string fk = FragmentKey(f);
        if (!settled.count(fk) && !plans.count(fk)) {
          FW_ASSIGN_OR_RETURN(std::vector<int64_t> hit, scan(f));
          if (hit.empty()) {
            settled.insert(fk);
          } else if (options.dry_run) {
            plans[fk].erased = std::move(hit);
          } else {
            FW_ASSIGN_OR_RETURN(Plan p, rewrite(f, std::move(hit)));
            res.rows_erased += static_cast<int64_t>(p.erased.size());
            ++res.fragments_rewritten;
            Fragment replaced = f;
            replaced.files = p.files;
            settled.insert(FragmentKey(replaced));
            plans[fk] = std::move(p);
          }
        }
        auto it = plans.find(fk);
        if (it == plans.end()) {
          kept.push_back(std::move(f));
          continue;
        }
        const Plan& p = it->second;
        FW_ASSIGN_OR_RETURN(auto dv, impl_->Deletions(uri_, f));
        std::vector<int64_t> deleted = dv ? dv->rows() : std::vector<int64_t>{};
        int64_t gone = 0;
        std::vector<int64_t> remapped;
        size_t e = 0;
        for (int64_t r : deleted) {
          while (e < p.erased.size() && p.erased[e] < r) ++e;
          if (e < p.erased.size() && p.erased[e] == r) continue;  // erased anyway
          remapped.push_back(r - static_cast<int64_t>(e));
        }
        for (int64_t r : p.erased) {
          if (!std::binary_search(deleted.begin(), deleted.end(), r)) ++gone;
        }
        res.rows_by_version[v] += gone;
        if (options.dry_run) {
          kept.push_back(std::move(f));
          continue;
        }
        changed = true;
        if (!f.deletion.path.empty()) old_dvs.insert(f.deletion.path);
        if (p.rows == 0) continue;  // every row of the fragment was erased
        f.files = p.files;
        f.num_rows = p.rows;
        f.deletion = DeletionFile{};
        if (!remapped.empty()) {
          const std::string rel = absl::StrCat("deletions/", NewFileId(), ".dv");
          FW_RETURN_IF_ERROR(fs->PutIfAbsent(io::JoinPath(uri_, rel), DeletionVector(remapped).Encode()));
          res.files_written.push_back(rel);
          f.deletion = DeletionFile{rel, static_cast<int64_t>(remapped.size())};
        }
        kept.push_back(std::move(f));
      }
      if (changed) {
        m.fragments = std::move(kept);
        FW_RETURN_IF_ERROR_CTX(fs->Replace(Impl::ManifestPath(uri_, v), m.Encode()), "erase from ", uri_,
                               ": replacing manifest ", v);
        res.versions_rewritten.push_back(v);
        changed_any = true;
      }
      Seen entry{info.size, info.mtime_ns, std::move(m)};
      if (changed) {
        FW_ASSIGN_OR_RETURN(io::FileInfo now, fs->Stat(Impl::ManifestPath(uri_, v)));
        entry.size = now.size;
        entry.mtime_ns = now.mtime_ns;
      }
      seen[v] = std::move(entry);
    }
    if (options.dry_run || !changed_any) break;
    if (round + 1 >= options.max_rounds) {
      return absl::AbortedError(absl::StrCat("erase from ", uri_, ": writers kept committing versions that hold the "
                                             "rows; ", round + 1, " rounds done (run it again when writes pause)"));
    }
  }
  std::sort(res.versions_rewritten.begin(), res.versions_rewritten.end());
  res.versions_rewritten.erase(std::unique(res.versions_rewritten.begin(), res.versions_rewritten.end()),
                               res.versions_rewritten.end());
  if (options.dry_run) {
    for (const auto& [fk, p] : plans) res.rows_erased += static_cast<int64_t>(p.erased.size());
    res.fragments_rewritten = static_cast<int64_t>(plans.size());
    return res;
  }

  // What the retained manifests reference now (the last round read every
  // listed version that was new or changed).
  std::set<std::string> referenced;
  for (const auto& [v, info] : listed) {
    auto m = seen.find(v);
    if (m == seen.end()) continue;
    for (const auto& f : m->second.m.fragments) {
      for (const auto& df : f.files) referenced.insert(df.path);
      if (!f.deletion.path.empty()) referenced.insert(f.deletion.path);
    }
  }
  auto remove = [&](const std::string& rel) -> Status {
    Status s = fs->Delete(io::JoinPath(uri_, rel));
    if (!s.ok() && !absl::IsNotFound(s)) return s;
    if (s.ok()) res.files_deleted.push_back(rel);
    if (rel.rfind("data/", 0) == 0) {
      // Every column's index of the file (they would tell what it held).
      std::string id = rel.substr(5, rel.rfind('.') - 5);
      auto index = fs->List(io::JoinPath(uri_, "_erase_index"));
      if (index.ok()) {
        for (const auto& e : *index) {
          const size_t dash = e.name.find('-');
          if (dash != std::string::npos && e.name.substr(dash + 1) == id + ".bloom") {
            (void)fs->Delete(io::JoinPath(io::JoinPath(uri_, "_erase_index"), e.name));
          }
        }
      }
    }
    return absl::OkStatus();
  };
  for (const auto& [fk, p] : plans) {
    for (const auto& rel : p.old_files) {
      if (!referenced.count(rel)) FW_RETURN_IF_ERROR(remove(rel));
    }
  }
  for (const auto& rel : old_dvs) {
    if (!referenced.count(rel)) FW_RETURN_IF_ERROR(remove(rel));
  }
  // Data files no retained version references (expired versions not yet
  // vacuumed, abandoned writes) may hold the rows too.
  auto listing = fs->List(io::JoinPath(uri_, "data"));
  if (listing.ok()) {
    std::set<std::string> written(res.files_written.begin(), res.files_written.end());
    for (const auto& e : *listing) {
      const std::string rel = absl::StrCat("data/", e.name);
      if (e.is_dir || e.name.rfind(".tmp.", 0) == 0 || referenced.count(rel) || written.count(rel)) continue;
      auto reader = format::ShardReader::Open(fs, io::JoinPath(uri_, rel));
      if (!reader.ok()) continue;  // not a complete shard: a writer's file in progress
      for (int i = 0; i < (*reader)->schema().num_fields(); ++i) {
        if ((*reader)->schema().fields[i].id != key.id || !((*reader)->schema().fields[i].type == key.type)) continue;
        FW_ASSIGN_OR_RETURN(Column c, (*reader)->Read(i, 0, (*reader)->num_rows()));
        std::vector<int64_t> hit;
        FW_RETURN_IF_ERROR(matcher.Match(c, 0, &hit));
        if (!hit.empty()) FW_RETURN_IF_ERROR(remove(rel));
      }
    }
  }
  // This handle: forget the old files and reread its own version.
  {
    absl::MutexLock lock(&impl_->cache->mu);
    impl_->cache->readers.clear();
    impl_->cache->dvs.clear();
  }
  auto again = Impl::ReadManifest(fs, uri_, manifest_.version);
  if (again.ok()) {
    manifest_ = std::move(*again);
    impl_->RebuildIndex(manifest_);
  }
  return res;
}

}  // namespace flywheel::table
