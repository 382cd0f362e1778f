// Version management and maintenance: tags, expire, vacuum, compaction and
// predicate deletes. Protocol: docs/format/table.md.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <type_traits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "flywheel/base/utf8.h"
#include "flywheel/table/internal.h"

namespace flywheel::table {

using format::Column;
using format::RecordBatch;

namespace {

Status ValidateTagName(const std::string& name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') {
    return absl::InvalidArgumentError(absl::StrCat("invalid tag name '", name, "'"));
  }
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid tag name '", name, "': use letters, digits, '-', '_' and '.'"));
    }
  }
  return absl::OkStatus();
}

bool IsTemp(const std::string& name) { return name.rfind(".tmp.", 0) == 0; }

}  // namespace

Status Table::Tag(const std::string& name, std::optional<int64_t> version) {
  FW_RETURN_IF_ERROR(ValidateTagName(name));
  const int64_t v = version.value_or(this->version());
  FW_ASSIGN_OR_RETURN(bool exists, impl_->fs->Exists(Impl::ManifestPath(uri_, v)));
  if (!exists) {
    return absl::NotFoundError(absl::StrCat("cannot tag version ", v, " of ", uri_, ": no such version"));
  }
  const nlohmann::json j = {{"version", v}, {"timestamp_ms", NowMs()}, {"writer", options_.writer}};
  Status s = impl_->fs->PutIfAbsent(Impl::TagPath(uri_, name), j.dump());
  if (absl::IsAlreadyExists(s)) {
    FW_ASSIGN_OR_RETURN(auto tags, Tags());
    return absl::AlreadyExistsError(absl::StrCat("tag '", name, "' already exists (version ",
                                                 tags.count(name) ? tags[name] : -1,
                                                 "); untag it first"));
  }
  return s;
}

Status Table::Untag(const std::string& name) {
  FW_RETURN_IF_ERROR(ValidateTagName(name));
  Status s = impl_->fs->Delete(Impl::TagPath(uri_, name));
  if (absl::IsNotFound(s)) return absl::NotFoundError(absl::StrCat("table ", uri_, " has no tag '", name, "'"));
  return s;
}

Result<std::map<std::string, int64_t>> Table::Tags() const {
  std::map<std::string, int64_t> out;
  auto entries = impl_->fs->List(io::JoinPath(uri_, "_tags"));
  if (absl::IsNotFound(entries.status())) return out;
  FW_RETURN_IF_ERROR(entries.status());
  for (const auto& e : *entries) {
    if (IsTemp(e.name) || e.is_dir) continue;
    auto data = impl_->fs->ReadFile(Impl::TagPath(uri_, e.name));
    if (absl::IsNotFound(data.status())) continue;
    FW_RETURN_IF_ERROR(data.status());
    try {
      const auto j = nlohmann::json::parse(*data);
      if (!j.at("version").is_number_integer()) {
        return absl::DataLossError(absl::StrCat("tag file ", Impl::TagPath(uri_, e.name), " is corrupt"));
      }
      out[e.name] = j.at("version").get<int64_t>();
    } catch (const nlohmann::json::exception&) {
      return absl::DataLossError(absl::StrCat("tag file ", Impl::TagPath(uri_, e.name), " is corrupt"));
    }
  }
  return out;
}

Result<ExpireResult> Table::Expire(const ExpireOptions& options) {
  if (options.keep_last < 1) return absl::InvalidArgumentError("expire: keep_last must be >= 1");
  FW_ASSIGN_OR_RETURN(auto versions, Impl::ListVersions(impl_->fs.get(), uri_));
  FW_ASSIGN_OR_RETURN(auto tags, Tags());
  if (!versions.empty()) (void)impl_->fs->Put(Impl::HintPath(uri_), std::to_string(versions.back()));
  std::set<int64_t> tagged;
  for (const auto& [name, v] : tags) tagged.insert(v);
  ExpireResult result;
  const int64_t keep_from = static_cast<int64_t>(versions.size()) - options.keep_last;
  for (int64_t i = 0; i < keep_from; ++i) {
    const int64_t v = versions[i];
    if (tagged.count(v) || v == version()) continue;
    if (options.older_than_ms >= 0) {
      auto m = Impl::ReadManifest(impl_->fs.get(), uri_, v);
      if (absl::IsNotFound(m.status())) continue;
      FW_RETURN_IF_ERROR(m.status());
      if (m->timestamp_ms >= options.older_than_ms) continue;
    }
    Status s = impl_->fs->Delete(Impl::ManifestPath(uri_, v));
    if (!s.ok() && !absl::IsNotFound(s)) return s;
    result.expired.push_back(v);
  }
  return result;
}

Result<VacuumResult> Table::Vacuum(const VacuumOptions& options) {
  io::FileSystem* fs = impl_->fs.get();
  // Everything any retained version references. Reading only retained
  // manifests keeps the cost independent of how many versions ever existed.
  std::set<std::string> referenced;
  FW_ASSIGN_OR_RETURN(auto versions, Impl::ListVersions(fs, uri_));
  for (int64_t v : versions) {
    auto m = Impl::ReadManifest(fs, uri_, v);
    if (absl::IsNotFound(m.status())) continue;
    FW_RETURN_IF_ERROR_CTX(m.status(), "vacuum of ", uri_);
    for (const auto& f : m->fragments) {
      for (const auto& df : f.files) referenced.insert(df.path);
      if (!f.deletion.path.empty()) referenced.insert(f.deletion.path);
    }
  }
  const int64_t cutoff_ns = (NowMs() - options.grace_period_ms) * 1000000;
  VacuumResult result;
  for (const char* dir : {"data", "deletions", "_versions", "_tags", ""}) {
    const std::string full = std::string(dir).empty() ? uri_ : io::JoinPath(uri_, dir);
    auto entries = fs->List(full);
    if (absl::IsNotFound(entries.status())) continue;
    FW_RETURN_IF_ERROR(entries.status());
    for (const auto& e : *entries) {
      if (e.is_dir) continue;
      const std::string rel = std::string(dir).empty() ? e.name : absl::StrCat(dir, "/", e.name);
      const bool data_dir = std::string(dir) == "data" || std::string(dir) == "deletions";
      const bool garbage = IsTemp(e.name) || (data_dir && !referenced.count(rel));
      if (!garbage || e.mtime_ns > cutoff_ns) continue;
      if (!options.dry_run) {
        Status s = fs->Delete(io::JoinPath(uri_, rel));
        if (!s.ok() && !absl::IsNotFound(s)) return s;
      }
      result.deleted.push_back(rel);
      result.bytes_freed += e.size;
    }
  }
  // Erase key indexes (docs/format/table.md, "Erasure") of data files that
  // are gone: <field id>-<file id>.bloom.
  auto index = fs->List(io::JoinPath(uri_, "_erase_index"));
  if (index.ok() && !options.dry_run) {
    std::set<std::string> live;
    auto data = fs->List(io::JoinPath(uri_, "data"));
    if (data.ok()) {
      for (const auto& e : *data) live.insert(e.name.substr(0, e.name.rfind('.')));
    }
    for (const auto& e : *index) {
      const size_t dash = e.name.find('-'), dot = e.name.rfind('.');
      if (dash == std::string::npos || dot == std::string::npos || dot < dash) continue;
      if (!live.count(e.name.substr(dash + 1, dot - dash - 1))) {
        (void)fs->Delete(io::JoinPath(io::JoinPath(uri_, "_erase_index"), e.name));
      }
    }
  }
  return result;
}

// ---------------------------------------------------------------- compact

Result<int64_t> Table::Compact(const CompactOptions& options, const CommitOptions& commit) {
  if (options.target_rows < 1) return absl::InvalidArgumentError("compact: target_rows must be >= 1");
  const auto& frags = manifest_.fragments;
  auto candidate = [&](const Fragment& f) {
    return f.live_rows() < options.target_rows ||
           (f.num_rows > 0 && f.deletion.count > 0 &&
            static_cast<double>(f.deletion.count) / static_cast<double>(f.num_rows) >= options.max_deleted_fraction);
  };
  // Runs of consecutive candidates; a lone fragment is rewritten only if it
  // has deletions to drop.
  std::vector<std::vector<size_t>> groups;
  for (size_t i = 0; i < frags.size();) {
    if (!candidate(frags[i])) {
      ++i;
      continue;
    }
    std::vector<size_t> g;
    int64_t rows = 0;
    while (i < frags.size() && candidate(frags[i]) && (g.empty() || rows + frags[i].live_rows() <= options.target_rows)) {
      rows += frags[i].live_rows();
      g.push_back(i++);
    }
    if (g.size() > 1 || frags[g[0]].deletion.count > 0) groups.push_back(std::move(g));
  }
  if (groups.empty()) return 0;
  struct Rewrite {
    std::vector<int64_t> removed;
    std::vector<Fragment> added;
  };
  std::vector<Rewrite> rewrites;
  std::map<int64_t, std::string> removed_dv;  // fragment id -> deletion path read
  int64_t rewritten = 0;
  for (const auto& g : groups) {
    Rewrite rw;
    std::vector<RecordBatch> parts;
    for (size_t i : g) {
      const Fragment& f = frags[i];
      rw.removed.push_back(f.id);
      removed_dv[f.id] = f.deletion.path;
      FW_ASSIGN_OR_RETURN(auto dv, impl_->Deletions(uri_, f));
      std::vector<int64_t> keep;
      if (dv) {
        for (int64_t r = 0; r < f.num_rows; ++r) {
          if (!dv->Contains(r)) keep.push_back(r);
        }
      }
      RecordBatch b;
      b.schema = schema();
      b.num_rows = f.live_rows();
      for (const auto& field : schema().fields) {
        FW_ASSIGN_OR_RETURN(Column c, impl_->ReadRange(uri_, f, field, 0, f.num_rows));
        if (dv) c = format::TakeColumn(c, keep.data(), keep.size());
        b.columns.push_back(std::move(c));
      }
      parts.push_back(std::move(b));
    }
    RecordBatch merged;
    merged.schema = schema();
    for (const auto& p : parts) merged.num_rows += p.num_rows;
    for (int c = 0; c < schema().num_fields(); ++c) {
      std::vector<Column> cols;
      for (const auto& p : parts) cols.push_back(p.columns[c]);
      merged.columns.push_back(format::ConcatColumns(cols));
    }
    if (merged.num_rows > 0) {
      FW_ASSIGN_OR_RETURN(rw.added, Impl::WriteFragments(this, merged));
    }
    rewritten += static_cast<int64_t>(g.size());
    rewrites.push_back(std::move(rw));
  }
  PendingCommit op;
  op.type = "compact";
  op.details = {{"fragments_rewritten", std::to_string(rewritten)}};
  op.conflict = [removed_dv](const Manifest& theirs) -> Result<std::string> {
    if (theirs.operation.type == "overwrite") return std::string("the table was overwritten");
    for (const auto& [id, dv_path] : removed_dv) {
      const Fragment* f = FindFragment(theirs, id);
      if (f == nullptr) return absl::StrCat("fragment ", id, " was already rewritten");
      if (f->deletion.path != dv_path) {
        return absl::StrCat("rows of fragment ", id, " were deleted after the compaction read it");
      }
    }
    return std::string();
  };
  op.apply = [rewrites](const Manifest& base, Manifest* next) -> Status {
    std::map<int64_t, const Rewrite*> first_of;
    std::set<int64_t> removed;
    for (const auto& rw : rewrites) {
      first_of[rw.removed.front()] = &rw;
      removed.insert(rw.removed.begin(), rw.removed.end());
    }
    next->fragments.clear();
    for (const auto& f : base.fragments) {
      auto it = first_of.find(f.id);
      if (it != first_of.end()) {
        for (Fragment nf : it->second->added) {
          nf.id = next->next_fragment_id++;
          next->fragments.push_back(std::move(nf));
        }
      }
      if (!removed.count(f.id)) next->fragments.push_back(f);
    }
    return absl::OkStatus();
  };
  FW_RETURN_IF_ERROR(Impl::Commit(this, commit, std::move(op)));
  return rewritten;
}

// ---------------------------------------------------------------- predicates

Result<Predicate> Predicate::Parse(std::string_view text) {
  static constexpr std::string_view kOps[] = {"==", "!=", "<=", ">=", "<", ">"};
  for (size_t i = 0; i < text.size(); ++i) {
    for (std::string_view op : kOps) {
      if (text.substr(i, op.size()) == op) {
        Predicate p;
        auto trim = [](std::string_view s) {
          while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
          while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
          return std::string(s);
        };
        p.column = trim(text.substr(0, i));
        p.op = std::string(op);
        p.value = trim(text.substr(i + op.size()));
        if (p.column.empty() || p.value.empty()) break;
        if (!IsValidUtf8(text)) {
          return absl::InvalidArgumentError("predicate is not valid UTF-8");
        }
        try {
          const auto parsed = nlohmann::json::parse(p.value);
          if (!parsed.is_number() && !parsed.is_string() && !parsed.is_boolean()) {
            p.value = nlohmann::json(p.value).dump();
          }
        } catch (const nlohmann::json::exception&) {
          p.value = nlohmann::json(p.value).dump();  // a bare word is a string
        }
        return p;
      }
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "predicate '", AsAbsl(text), "' is not 'column OP value' with OP one of == != < <= > >="));
}

namespace {

template <typename T>
bool Compare(const T& a, const T& b, const std::string& op) {
  if (op == "==") return a == b;
  if (op == "!=") return a != b;
  if (op == "<") return a < b;
  if (op == "<=") return a <= b;
  if (op == ">") return a > b;
  return a >= b;
}

// Three-way comparison of an integer column value with the literal
// (negative_, magnitude_), exact for every int64/uint64.
template <typename T>
int CompareInteger(T x, bool negative, uint64_t magnitude) {
  if constexpr (std::is_signed_v<T>) {
    if (x < 0) {
      if (!negative) return -1;
      const uint64_t mx = uint64_t{0} - static_cast<uint64_t>(static_cast<int64_t>(x));
      return mx == magnitude ? 0 : (mx > magnitude ? -1 : 1);
    }
  }
  if (negative) return 1;
  const uint64_t ux = static_cast<uint64_t>(x);
  return ux == magnitude ? 0 : (ux < magnitude ? -1 : 1);
}

bool OpHolds(int cmp, const std::string& op) {
  if (op == "==") return cmp == 0;
  if (op == "!=") return cmp != 0;
  if (op == "<") return cmp < 0;
  if (op == "<=") return cmp <= 0;
  if (op == ">") return cmp > 0;
  return cmp >= 0;
}

template <typename T>
void MatchInteger(const Column& c, bool negative, uint64_t magnitude, const std::string& op, int64_t base,
                  std::vector<int64_t>* out) {
  const T* d = c.values.as<T>();
  for (int64_t i = 0; i < c.length; ++i) {
    if (c.IsValid(i) && OpHolds(CompareInteger<T>(d[i], negative, magnitude), op)) out->push_back(base + i);
  }
}

template <typename T>
void MatchFixed(const Column& c, double v, const std::string& op, int64_t base, std::vector<int64_t>* out) {
  const T* d = c.values.as<T>();
  for (int64_t i = 0; i < c.length; ++i) {
    if (c.IsValid(i) && Compare(static_cast<double>(d[i]), v, op)) out->push_back(base + i);
  }
}

}  // namespace

std::string Predicate::TopColumn(const format::Schema& schema) const {
  if (schema.FieldIndex(column) >= 0) return column;
  const size_t cut = column.find_first_of(".[");
  return cut == std::string::npos ? column : column.substr(0, cut);
}

Result<PredicateMatcher> PredicateMatcher::Make(const format::Schema& schema, const Predicate& pred,
                                                 std::string_view what) {
  const std::string top = pred.TopColumn(schema);
  const int ci = schema.FieldIndex(top);
  if (ci < 0) {
    return absl::NotFoundError(absl::StrCat(AsAbsl(what), ": no column '", top, "' (columns: ",
                                            schema.ToString(), ")"));
  }
  PredicateMatcher m;
  m.field_ = schema.fields[ci];
  // A nested path: walk the type, one step per ".name" or "[N]".
  std::string_view rest = std::string_view(pred.column).substr(top.size());
  while (!rest.empty()) {
    const format::DataType& t = m.field_.type;
    auto bad = [&](std::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(AsAbsl(what), ": path '", pred.column, "': ", AsAbsl(why)));
    };
    if (rest.front() == '.') {
      rest.remove_prefix(1);
      const size_t end = rest.find_first_of(".[");
      const std::string name(rest.substr(0, end));
      rest.remove_prefix(end == std::string_view::npos ? rest.size() : end);
      if (t.id != format::TypeId::kStruct) {
        return bad(absl::StrCat("'.", name, "' needs a struct, not ", t.ToString()));
      }
      int child = -1;
      for (size_t k = 0; k < t.children.size(); ++k) {
        if (t.children[k].name == name) child = static_cast<int>(k);
      }
      if (child < 0) return bad(absl::StrCat("no field '", name, "' in ", t.ToString()));
      m.path_.push_back(Step{false, child, 0});
      format::Field next = t.children[static_cast<size_t>(child)];
      m.field_ = std::move(next);
    } else if (rest.front() == '[') {
      const size_t close = rest.find(']');
      if (close == std::string_view::npos) return bad("missing ']'");
      int64_t index = 0;
      if (!absl::SimpleAtoi(AsAbsl(rest.substr(1, close - 1)), &index)) {
        return bad(absl::StrCat("'", AsAbsl(rest.substr(0, close + 1)), "' is not a list index"));
      }
      rest.remove_prefix(close + 1);
      if (t.id != format::TypeId::kList) return bad(absl::StrCat("[", index, "] needs a list, not ", t.ToString()));
      m.path_.push_back(Step{true, 0, index});
      format::Field next = t.is_nested() ? t.children[0] : format::Field{"item", format::DataType::Scalar(t.elem), false};
      m.field_ = std::move(next);
    } else {
      return bad("expected '.field' or '[index]'");
    }
  }
  if (!m.path_.empty()) {
    m.field_.name = pred.column;
    m.field_.nullable = true;
  }
  m.op_ = pred.op;
  const format::DataType& type = m.field_.type;
  nlohmann::json value;
  try {
    value = nlohmann::json::parse(pred.value);
  } catch (const nlohmann::json::exception&) {
    return absl::InvalidArgumentError(absl::StrCat(AsAbsl(what), ": value '", pred.value, "' is not JSON"));
  }
  const bool is_string = type.id == format::TypeId::kString || type.id == format::TypeId::kBinary;
  if (is_string ? !value.is_string() : !(value.is_number() || value.is_boolean())) {
    return absl::InvalidArgumentError(absl::StrCat(AsAbsl(what), ": column '", pred.column, "' is ", type.ToString(),
                                                   "; compare it with a ", is_string ? "string" : "number"));
  }
  if (!is_string && (!type.is_fixed_width() || type.num_elements() != 1)) {
    return absl::InvalidArgumentError(absl::StrCat(AsAbsl(what), ": predicates need a scalar or string column; '",
                                                   pred.column, "' is ", type.ToString()));
  }
  m.number_ = value.is_string() ? 0 : value.is_boolean() ? (value.get<bool>() ? 1.0 : 0.0) : value.get<double>();
  if (value.is_number_unsigned()) {
    m.integer_ = true;
    m.magnitude_ = value.get<uint64_t>();
  } else if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    m.integer_ = true;
    m.negative_ = v < 0;
    m.magnitude_ = v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  }
  m.text_ = value.is_string() ? value.get<std::string>() : "";
  return m;
}

format::Column PredicateMatcher::Extract(const format::Column& top) const {
  const int64_t n = top.length;
  std::vector<int64_t> rows(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) rows[i] = top.IsValid(i) ? i : -1;
  const Column* cur = &top;
  Column packed_items;  // a packed list's elements as a column
  for (const Step& s : path_) {
    if (!s.element) {
      cur = &cur->children[static_cast<size_t>(s.child)];
    } else {
      const int64_t* o = cur->offsets_data();
      for (int64_t i = 0; i < n; ++i) {
        const int64_t r = rows[i];
        if (r < 0) continue;
        const int64_t len = o[r + 1] - o[r];
        const int64_t k = s.index < 0 ? len + s.index : s.index;
        rows[i] = k >= 0 && k < len ? o[r] + k : -1;
      }
      if (cur->type.is_nested()) {
        cur = &cur->children[0];
      } else {
        packed_items.type = format::DataType::Scalar(cur->type.elem);
        packed_items.length = static_cast<int64_t>(cur->values.size / format::ScalarSize(cur->type.elem));
        packed_items.values = cur->values;
        cur = &packed_items;
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      if (rows[i] >= 0 && !cur->IsValid(rows[i])) rows[i] = -1;
    }
  }
  std::vector<int64_t> take(static_cast<size_t>(n));
  std::vector<bool> valid(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    take[i] = rows[i] < 0 ? 0 : rows[i];
    valid[i] = rows[i] >= 0;
  }
  Column leaf = cur->length == 0 ? format::MakeNullColumn(cur->type, n, true) : format::TakeColumn(*cur, take.data(), take.size());
  format::SetValidity(leaf, valid);
  return leaf;
}

Status PredicateMatcher::Match(const Column& col, int64_t base, std::vector<int64_t>* out) const {
  using format::TypeId;
  Column extracted;
  if (!path_.empty()) extracted = Extract(col);
  const Column& c = path_.empty() ? col : extracted;
  const double v = number_;
  switch (field_.type.id) {
    case TypeId::kString:
    case TypeId::kBinary:
      for (int64_t i = 0; i < c.length; ++i) {
        if (c.IsValid(i) && Compare(c.GetBytes(i), std::string_view(text_), op_)) out->push_back(base + i);
      }
      return absl::OkStatus();
    case TypeId::kBool: MatchFixed<uint8_t>(c, v, op_, base, out); return absl::OkStatus();
#define FW_MATCH_INT(T)                                                   \
  if (integer_) MatchInteger<T>(c, negative_, magnitude_, op_, base, out); \
  else MatchFixed<T>(c, v, op_, base, out);                              \
  return absl::OkStatus()
    case TypeId::kInt8: FW_MATCH_INT(int8_t);
    case TypeId::kInt16: FW_MATCH_INT(int16_t);
    case TypeId::kInt32: FW_MATCH_INT(int32_t);
    case TypeId::kInt64: FW_MATCH_INT(int64_t);
    case TypeId::kUInt8: FW_MATCH_INT(uint8_t);
    case TypeId::kUInt16: FW_MATCH_INT(uint16_t);
    case TypeId::kUInt32: FW_MATCH_INT(uint32_t);
    case TypeId::kUInt64: FW_MATCH_INT(uint64_t);
#undef FW_MATCH_INT
    case TypeId::kFloat32: MatchFixed<float>(c, v, op_, base, out); return absl::OkStatus();
    case TypeId::kFloat64: MatchFixed<double>(c, v, op_, base, out); return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(absl::StrCat("cannot compare ", field_.type.ToString()));
  }
}

Result<int64_t> Table::DeleteWhere(const Predicate& pred, const CommitOptions& commit) {
  FW_ASSIGN_OR_RETURN(PredicateMatcher matcher, PredicateMatcher::Make(schema(), pred, absl::StrCat("delete from ", uri_)));
  ScanOptions so;
  so.columns = {pred.TopColumn(schema())};
  FW_ASSIGN_OR_RETURN(auto it, Scan(so));
  std::vector<int64_t> matches;
  int64_t base = 0;
  while (true) {
    FW_ASSIGN_OR_RETURN(auto batch, it->Next());
    if (!batch) break;
    FW_RETURN_IF_ERROR(matcher.Match(batch->columns[0], base, &matches));
    base += batch->num_rows;
  }
  if (matches.empty()) return 0;
  FW_RETURN_IF_ERROR(Delete(matches, commit));
  return static_cast<int64_t>(matches.size());
}

}  // namespace flywheel::table
