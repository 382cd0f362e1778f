#include "flywheel/interop/parquet/reader.h"

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flywheel/base/thread_pool.h"
#include "flywheel/base/utf8.h"
#include "flywheel/interop/parquet/compression.h"
#include "flywheel/interop/parquet/encoding.h"
#include "flywheel/io/file_system.h"

namespace flywheel::interop::parquet {
namespace {

constexpr char kMagic[4] = {'P', 'A', 'R', '1'};
// No page may claim to decode to more than this (a lying header must not
// make us allocate gigabytes); real pages are kilobytes to megabytes.
constexpr int64_t kMaxPageBytes = int64_t{1} << 30;

// ---------------------------------------------------------------------------
// Schema: the flat depth-first SchemaElement list as a tree, with the levels
// of every node (parquet-format's Dremel encoding).

struct SNode {
  const SchemaElement* el = nullptr;
  int parent = -1;
  std::vector<int> children;
  int16_t def = 0;        // max definition level at this node
  int16_t rep = 0;        // max repetition level at this node
  int16_t exist_def = 0;  // def level of the deepest repeated node at or above
  int leaf = -1;          // leaf column index, for primitives
  std::string path;       // dotted path from the root's child
};

bool IsRepeated(const SNode& n) { return n.el->repetition == Repetition::kRepeated; }
bool IsOptional(const SNode& n) { return n.el->repetition == Repetition::kOptional; }
bool IsGroup(const SNode& n) { return !n.el->type.has_value(); }

// How to build one logical field from schema nodes.
struct Plan {
  enum class Kind { kLeaf, kStruct, kList } kind = Plan::Kind::kLeaf;
  Field field;
  int node = -1;      // kLeaf/kStruct: the node; kList: the node whose slots hold the lists
  int validity_node = -1;  // the node whose definition decides "not null"
  int repeated = -1;  // kList: the repeated node giving the elements
  int first_leaf = -1;
  std::vector<Plan> children;  // kStruct: fields; kList: the element
};

Result<ValueType> LeafType(const SchemaElement& e, const std::string& path) {
  const LogicalType& lt = e.logical_type;
  using K = LogicalType::Kind;
  auto bad = [&](std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("column ", path, ": ", AsAbsl(what)));
  };
  const bool has_ct = e.converted_type.has_value();
  const ConvertedType ct = has_ct ? *e.converted_type : ConvertedType::kUtf8;
  auto decimal = [&](int32_t width) -> Result<ValueType> {
    ValueType t{ValueKind::kDecimal, width};
    if (lt.kind == K::kDecimal) {
      t.precision = lt.decimal_precision;
      t.scale = lt.decimal_scale;
    } else {
      t.precision = e.precision.value_or(0);
      t.scale = e.scale.value_or(0);
    }
    if (t.precision < 1 || t.scale < 0 || t.scale > t.precision) {
      return bad(absl::StrCat("DECIMAL(", t.precision, ", ", t.scale, ") is not a valid decimal"));
    }
    const int max_precision = width == 4 ? 9 : width == 8 ? 18 : 38;
    if (t.precision > max_precision) {
      return bad(absl::StrCat("DECIMAL precision ", t.precision, " does not fit its physical type"));
    }
    return t;
  };
  if (lt.kind == K::kUnknown) return ValueType{ValueKind::kNull};
  switch (*e.type) {
    case PhysicalType::kBoolean:
      return ValueType{ValueKind::kBool};
    case PhysicalType::kInt32: {
      if (lt.kind == K::kInteger) {
        const bool s = lt.is_signed;
        switch (lt.bit_width) {
          case 8: return ValueType{s ? ValueKind::kInt8 : ValueKind::kUInt8};
          case 16: return ValueType{s ? ValueKind::kInt16 : ValueKind::kUInt16};
          case 32: return ValueType{s ? ValueKind::kInt32 : ValueKind::kUInt32};
          default: return bad(absl::StrCat("INTEGER(", lt.bit_width, ") on INT32"));
        }
      }
      if (lt.kind == K::kDate) return ValueType{ValueKind::kDate32};
      if (lt.kind == K::kDecimal) return decimal(4);
      if (lt.kind == K::kTime) {
        if (lt.unit != TimeUnit::kMillis) return bad("TIME on INT32 must be in milliseconds");
        ValueType t{ValueKind::kTime32};
        t.unit = TimeUnit::kMillis;
        t.adjusted_to_utc = lt.adjusted_to_utc;
        return t;
      }
      if (lt.kind == K::kNone && has_ct) {
        switch (ct) {
          case ConvertedType::kInt8: return ValueType{ValueKind::kInt8};
          case ConvertedType::kInt16: return ValueType{ValueKind::kInt16};
          case ConvertedType::kInt32: return ValueType{ValueKind::kInt32};
          case ConvertedType::kUint8: return ValueType{ValueKind::kUInt8};
          case ConvertedType::kUint16: return ValueType{ValueKind::kUInt16};
          case ConvertedType::kUint32: return ValueType{ValueKind::kUInt32};
          case ConvertedType::kDate: return ValueType{ValueKind::kDate32};
          case ConvertedType::kDecimal: return decimal(4);
          case ConvertedType::kTimeMillis: {
            ValueType t{ValueKind::kTime32};
            t.unit = TimeUnit::kMillis;
            return t;
          }
          default: break;
        }
      }
      return ValueType{ValueKind::kInt32};
    }
    case PhysicalType::kInt64: {
      if (lt.kind == K::kInteger) {
        if (lt.bit_width != 64) return bad(absl::StrCat("INTEGER(", lt.bit_width, ") on INT64"));
        return ValueType{lt.is_signed ? ValueKind::kInt64 : ValueKind::kUInt64};
      }
      if (lt.kind == K::kDecimal) return decimal(8);
      if (lt.kind == K::kTimestamp || lt.kind == K::kTime) {
        ValueType t{lt.kind == K::kTimestamp ? ValueKind::kTimestamp : ValueKind::kTime64};
        t.unit = lt.unit;
        t.adjusted_to_utc = lt.adjusted_to_utc;
        if (t.kind == ValueKind::kTime64 && t.unit == TimeUnit::kMillis) {
          return bad("TIME(MILLIS) must be stored as INT32");
        }
        return t;
      }
      if (lt.kind == K::kNone && has_ct) {
        switch (ct) {
          case ConvertedType::kInt64: return ValueType{ValueKind::kInt64};
          case ConvertedType::kUint64: return ValueType{ValueKind::kUInt64};
          case ConvertedType::kDecimal: return decimal(8);
          case ConvertedType::kTimestampMillis:
          case ConvertedType::kTimestampMicros: {
            ValueType t{ValueKind::kTimestamp};
            t.unit = ct == ConvertedType::kTimestampMillis ? TimeUnit::kMillis : TimeUnit::kMicros;
            t.adjusted_to_utc = true;
            return t;
          }
          case ConvertedType::kTimeMicros: {
            ValueType t{ValueKind::kTime64};
            t.unit = TimeUnit::kMicros;
            return t;
          }
          default: break;
        }
      }
      return ValueType{ValueKind::kInt64};
    }
    case PhysicalType::kInt96: {
      ValueType t{ValueKind::kTimestamp};
      t.unit = TimeUnit::kNanos;
      return t;
    }
    case PhysicalType::kFloat:
      return ValueType{ValueKind::kFloat32};
    case PhysicalType::kDouble:
      return ValueType{ValueKind::kFloat64};
    case PhysicalType::kByteArray: {
      if (lt.kind == K::kString || lt.kind == K::kEnum || lt.kind == K::kJson) return ValueType{ValueKind::kString};
      if (lt.kind == K::kDecimal) return decimal(16);
      if (lt.kind == K::kNone && has_ct) {
        if (ct == ConvertedType::kUtf8 || ct == ConvertedType::kEnum || ct == ConvertedType::kJson) {
          return ValueType{ValueKind::kString};
        }
        if (ct == ConvertedType::kDecimal) return decimal(16);
      }
      return ValueType{ValueKind::kBinary};
    }
    case PhysicalType::kFixedLenByteArray: {
      if (e.type_length < 0) return bad(absl::StrCat("FIXED_LEN_BYTE_ARRAY of length ", e.type_length));
      if (lt.kind == K::kFloat16) {
        if (e.type_length != 2) return bad("FLOAT16 must be a 2-byte FIXED_LEN_BYTE_ARRAY");
        return ValueType{ValueKind::kFloat16};
      }
      if (lt.kind == K::kDecimal || (lt.kind == K::kNone && has_ct && ct == ConvertedType::kDecimal)) {
        if (e.type_length < 1 || e.type_length > 16) {
          return bad(absl::StrCat("DECIMAL in a ", e.type_length, "-byte FIXED_LEN_BYTE_ARRAY"));
        }
        return decimal(16);
      }
      if (lt.kind == K::kUuid && e.type_length != 16) return bad("UUID must be a 16-byte FIXED_LEN_BYTE_ARRAY");
      return ValueType{ValueKind::kFixedBinary, e.type_length};
    }
  }
  return bad("unknown physical type");
}

// Decimals are stored 4 or 8 bytes wide when they came as INT32 / INT64 and
// as 8 (precision <= 18) or 16 bytes when they came as bytes.
int32_t DecimalWidth(const ValueType& t, PhysicalType p) {
  if (p == PhysicalType::kInt32) return 4;
  if (p == PhysicalType::kInt64) return 8;
  return t.precision <= 18 ? 8 : 16;
}


bool IsVariable(const ValueType& t) { return t.kind == ValueKind::kString || t.kind == ValueKind::kBinary; }

size_t PhysicalSize(const SchemaElement& e) {
  switch (*e.type) {
    case PhysicalType::kBoolean: return 1;
    case PhysicalType::kInt32: case PhysicalType::kFloat: return 4;
    case PhysicalType::kInt64: case PhysicalType::kDouble: return 8;
    case PhysicalType::kInt96: return 12;
    case PhysicalType::kFixedLenByteArray: return static_cast<size_t>(e.type_length);
    case PhysicalType::kByteArray: return 0;
  }
  return 0;
}

// ---------------------------------------------------------------------------
// A leaf column chunk as read: levels for every entry, dense non-null values.

struct LeafData {
  std::vector<int16_t> def, rep;  // empty when the max level is 0
  int64_t entries = 0;
  std::vector<uint8_t> fixed;  // non-null values, physical size each
  ByteArrays bytes;            // BYTE_ARRAY (and FLBA under DELTA_BYTE_ARRAY, moved to fixed)
  int64_t num_values = 0;      // non-null values decoded
  int64_t chunk_start = 0;     // entries before the column chunk being read
  std::vector<uint32_t> scratch;  // levels and dictionary indices of one page, reused
};



// a's length, null count and validity bitmap: slot s (entry slots[s], or s
// when `slots` is null) is valid when its definition level reaches `def`.
void SetValidityFromLevels(const LeafData& d, const std::vector<int64_t>* slots, int64_t count, int16_t def,
                           Array* a) {
  a->length = count;
  a->null_count = 0;
  a->validity.clear();
  if (d.def.empty() || def == 0) return;
  const int16_t* lv = d.def.data();
  const int64_t* sl = slots ? slots->data() : nullptr;
  std::vector<uint8_t> bits(static_cast<size_t>((count + 7) / 8), 0);
  int64_t nulls = 0;
  for (int64_t s = 0; s < count; ++s) {
    const bool ok = lv[sl ? sl[s] : s] >= def;
    bits[s >> 3] |= static_cast<uint8_t>(static_cast<unsigned>(ok) << (s & 7));
    nulls += !ok;
  }
  a->null_count = nulls;
  if (nulls > 0) a->validity = std::move(bits);
}

// a's length, null count and validity bitmap over the slots of `n` (the
// entries with repetition level <= n.rep and definition level >=
// n.exist_def), without a list of them: one pass counts, one fills.
void SetValidityOfSlots(const LeafData& d, const SNode& n, int16_t def, Array* a) {
  if (d.rep.empty() && n.exist_def == 0) return SetValidityFromLevels(d, nullptr, d.entries, def, a);
  const int16_t* rep = d.rep.empty() ? nullptr : d.rep.data();
  const int16_t* dl = d.def.empty() ? nullptr : d.def.data();
  a->null_count = 0;
  a->validity.clear();
  // One pass: the slot count is at most the entry count, so the bitmap is
  // sized for that and trimmed.
  std::vector<uint8_t> bits;
  const bool track = dl != nullptr && def > 0;
  if (track) bits.assign(static_cast<size_t>((d.entries + 7) / 8), 0);
  int64_t slots = 0, nulls = 0;
  for (int64_t j = 0; j < d.entries; ++j) {
    const int16_t r = rep ? rep[j] : 0, df = dl ? dl[j] : 0;
    if (r > n.rep || df < n.exist_def) continue;
    if (track) {
      const bool ok = df >= def;
      bits[slots >> 3] |= static_cast<uint8_t>(static_cast<unsigned>(ok) << (slots & 7));
      nulls += !ok;
    }
    ++slots;
  }
  a->length = slots;
  if (nulls > 0) {
    bits.resize(static_cast<size_t>((slots + 7) / 8));
    a->null_count = nulls;
    a->validity = std::move(bits);
  }
}


// Concatenates `parts` (same type) into `out`, each buffer allocated once.
Status ConcatArrays(std::vector<Array>& parts, Array* out) {
  if (parts.empty()) return absl::OkStatus();
  if (parts.size() == 1) {
    *out = std::move(parts[0]);
    return absl::OkStatus();
  }
  out->type = parts[0].type;
  int64_t len = 0, nulls = 0;
  size_t vbytes = 0;
  for (const Array& p : parts) {
    if (p.type.kind != out->type.kind || p.children.size() != parts[0].children.size()) {
      return absl::InternalError("row groups read with different types");
    }
    len += p.length;
    nulls += p.null_count;
    vbytes += p.values.size();
  }
  out->length = len;
  out->null_count = nulls;
  out->values.reserve(vbytes);
  for (const Array& p : parts) out->values.insert(out->values.end(), p.values.begin(), p.values.end());
  if (!parts[0].offsets.empty()) {
    out->offsets.reserve(static_cast<size_t>(len) + 1);
    out->offsets.push_back(0);
    for (const Array& p : parts) {
      const int64_t base = out->offsets.back() - p.offsets[0];
      for (size_t i = 1; i < p.offsets.size(); ++i) out->offsets.push_back(base + p.offsets[i]);
    }
  }
  if (nulls > 0) {
    out->validity.assign(static_cast<size_t>((len + 7) / 8), 0);
    int64_t at = 0;
    for (const Array& p : parts) {
      if (p.validity.empty()) {
        for (int64_t i = 0; i < p.length; ++i, ++at) out->validity[at >> 3] |= static_cast<uint8_t>(1u << (at & 7));
      } else if ((at & 7) == 0) {
        std::memcpy(out->validity.data() + (at >> 3), p.validity.data(), static_cast<size_t>((p.length + 7) / 8));
        at += p.length;
      } else {
        for (int64_t i = 0; i < p.length; ++i, ++at) {
          if (p.IsValid(i)) out->validity[at >> 3] |= static_cast<uint8_t>(1u << (at & 7));
        }
      }
    }
  }
  out->children.resize(parts[0].children.size());
  for (size_t c = 0; c < out->children.size(); ++c) {
    std::vector<Array> kids;
    kids.reserve(parts.size());
    for (Array& p : parts) kids.push_back(std::move(p.children[c]));
    FW_RETURN_IF_ERROR(ConcatArrays(kids, &out->children[c]));
  }
  return absl::OkStatus();
}

// Values [from, size) of `b` are valid UTF-8, or an error naming the first
// that is not (its index counted from `from`, and the byte).
Status CheckUtf8(const ByteArrays& b, int64_t from) {
  const auto* data = reinterpret_cast<const uint8_t*>(b.data.data());
  const int64_t lo = b.offsets[from], hi = b.offsets.back();
  if (IsAscii(std::string_view(reinterpret_cast<const char*>(data) + lo, static_cast<size_t>(hi - lo)))) {
    return absl::OkStatus();
  }
  for (int64_t i = from; i < b.size(); ++i) {
    const std::string_view v(b.data.data() + b.offsets[i], static_cast<size_t>(b.offsets[i + 1] - b.offsets[i]));
    const size_t bad = FirstInvalidUtf8(v);
    if (bad != std::string_view::npos) {
      return absl::DataLossError(
          absl::StrCat("string value ", i - from, " is not valid UTF-8 at byte ", bad, " (the column is UTF8)"));
    }
  }
  return absl::OkStatus();
}

class ReaderImpl final : public ParquetReader {
 public:
  ReaderImpl(std::shared_ptr<io::RandomAccessFile> file, std::string name, FileMetaData meta,
             uint64_t data_end)
      : file_(std::move(file)), name_(std::move(name)), meta_(std::move(meta)), data_end_(data_end) {}

  Status Init();

  const FileMetaData& metadata() const override { return meta_; }
  void set_verify_page_crc(bool verify) override { verify_crc_ = verify; }
  const std::vector<Field>& fields() const override { return fields_; }
  int64_t num_rows() const override { return meta_.num_rows; }
  int num_row_groups() const override { return static_cast<int>(meta_.row_groups.size()); }

  Result<std::vector<Array>> ReadRowGroup(int row_group, const std::vector<std::string>& columns) const override;
  Result<std::vector<Array>> ReadAll(const ReadOptions& options) const override;

 private:
  Result<Plan> PlanNode(int node, int depth);
  Result<Plan> PlanValue(int node, std::string name, bool nullable, int depth);
  Result<std::vector<int>> Resolve(const std::vector<std::string>& columns) const;
  void LeavesOf(const Plan& p, std::vector<int>* out) const;
  Status ReadLeaf(int row_group, int leaf, LeafData* out) const;
  Status DecodePage(int leaf, CompressionCodec codec, const PageHeader& h, const uint8_t* body, size_t len,
                    bool has_dict,
                    int64_t dict_count, const std::vector<uint8_t>& dict_fixed,
                    const ByteArrays& dict_bytes, std::vector<uint8_t>* scratch, LeafData* out) const;
  Status Build(const Plan& p, std::vector<LeafData>& leaves, Array* out) const;
  Status BuildLeaf(const Plan& p, LeafData& d, Array* out) const;
  std::string ChunkContext(int row_group, int leaf) const {
    return absl::StrCat(name_, ": row group ", row_group, ", column ", nodes_[leaf_nodes_[leaf]].path);
  }

  std::shared_ptr<io::RandomAccessFile> file_;
  std::string name_;
  FileMetaData meta_;
  uint64_t data_end_;  // first byte of the footer
  bool verify_crc_ = true;
  std::vector<SNode> nodes_;
  std::vector<int> leaf_nodes_;  // leaf index -> node
  std::vector<uint8_t> leaf_utf8_;  // leaf index -> its values must be UTF-8
  std::vector<Plan> plans_;      // one per top-level field
  std::vector<Field> fields_;
};

Status ReaderImpl::Init() {
  const auto& schema = meta_.schema;
  if (schema.empty()) return absl::InvalidArgumentError(absl::StrCat(name_, ": empty schema"));
  nodes_.resize(schema.size());
  // Depth-first: each group's children follow it.
  std::vector<std::pair<int, int>> stack;  // (node, children still to attach)
  for (size_t i = 0; i < schema.size(); ++i) {
    SNode& n = nodes_[i];
    n.el = &schema[i];
    if (i > 0) {
      while (!stack.empty() && stack.back().second == 0) stack.pop_back();
      if (stack.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(name_, ": schema element ", i, " ('", schema[i].name, "') is outside the root"));
      }
      n.parent = stack.back().first;
      stack.back().second--;
      nodes_[n.parent].children.push_back(static_cast<int>(i));
      const SNode& p = nodes_[n.parent];
      if (!n.el->repetition) {
        return absl::InvalidArgumentError(
            absl::StrCat(name_, ": schema element '", n.el->name, "' has no repetition"));
      }
      n.def = static_cast<int16_t>(p.def + (IsRepeated(n) || IsOptional(n) ? 1 : 0));
      n.rep = static_cast<int16_t>(p.rep + (IsRepeated(n) ? 1 : 0));
      n.exist_def = IsRepeated(n) ? n.def : p.exist_def;
      n.path = p.parent < 0 ? n.el->name : absl::StrCat(p.path, ".", n.el->name);
      if (n.def > 1000 || n.rep > 1000) {
        return absl::InvalidArgumentError(absl::StrCat(name_, ": schema nested too deeply at ", n.path));
      }
    }
    if (IsGroup(n)) {
      if (n.el->num_children < 0) {
        return absl::InvalidArgumentError(absl::StrCat(name_, ": negative num_children at ", n.path));
      }
      if (i > 0 && n.el->num_children == 0) {
        return absl::InvalidArgumentError(absl::StrCat(name_, ": group ", n.path, " has no fields"));
      }
      stack.emplace_back(static_cast<int>(i), n.el->num_children);
    } else {
      if (i == 0) return absl::InvalidArgumentError(absl::StrCat(name_, ": the schema root is not a group"));
      n.leaf = static_cast<int>(leaf_nodes_.size());
      leaf_nodes_.push_back(static_cast<int>(i));
      auto lt = LeafType(*n.el, n.path.empty() ? n.el->name : n.path);
      leaf_utf8_.push_back(lt.ok() && lt->kind == ValueKind::kString);
    }
  }
  for (const auto& [node, left] : stack) {
    if (left != 0) {
      return absl::InvalidArgumentError(absl::StrCat(name_, ": schema group '", schema[node].name,
                                                     "' declares ", left, " more children than the schema has"));
    }
  }
  for (size_t r = 0; r < meta_.row_groups.size(); ++r) {
    if (meta_.row_groups[r].columns.size() != leaf_nodes_.size()) {
      return absl::InvalidArgumentError(absl::StrCat(name_, ": row group ", r, " has ",
                                                     meta_.row_groups[r].columns.size(),
                                                     " column chunks, the schema has ", leaf_nodes_.size(),
                                                     " leaf columns"));
    }
    if (meta_.row_groups[r].num_rows < 0) {
      return absl::InvalidArgumentError(absl::StrCat(name_, ": row group ", r, " has a negative row count"));
    }
  }
  for (int c : nodes_[0].children) {
    FW_ASSIGN_OR_RETURN(Plan p, PlanNode(c, 0));
    fields_.push_back(p.field);
    plans_.push_back(std::move(p));
  }
  return absl::OkStatus();
}

// The logical field a schema node stands for (parquet-format
// LogicalTypes.md, "Nested Types", with its backward-compatibility rules).
Result<Plan> ReaderImpl::PlanNode(int node, int depth) {
  if (depth > 200) return absl::InvalidArgumentError(absl::StrCat(name_, ": schema nested too deeply"));
  const SNode& n = nodes_[node];
  const LogicalType::Kind lk = n.el->logical_type.kind;
  const bool list_annot = lk == LogicalType::Kind::kList ||
                          (lk == LogicalType::Kind::kNone && n.el->converted_type == ConvertedType::kList);
  const bool map_annot = lk == LogicalType::Kind::kMap ||
                         (lk == LogicalType::Kind::kNone && (n.el->converted_type == ConvertedType::kMap ||
                                                             n.el->converted_type == ConvertedType::kMapKeyValue));
  // Plans `elem` (a repeated node) as the element of a list whose slots are
  // `list_node`'s and whose validity is `validity`'s.
  auto make_list = [&](int list_node, int validity, int rep_node, Plan elem) {
    Plan l;
    l.kind = Plan::Kind::kList;
    l.node = list_node;
    l.validity_node = validity;
    l.repeated = rep_node;
    l.first_leaf = elem.first_leaf;
    l.field.name = n.el->name;
    l.field.type = ValueType{ValueKind::kList};
    l.field.nullable = validity >= 0 && IsOptional(nodes_[validity]);
    l.field.children.push_back(elem.field);
    l.children.push_back(std::move(elem));
    return l;
  };
  if (IsRepeated(n)) {
    // A repeated field outside a LIST/MAP: a non-null list of its values.
    FW_ASSIGN_OR_RETURN(Plan elem, PlanValue(node, n.el->name, false, depth));
    Plan l = make_list(n.parent, n.parent == 0 ? -1 : n.parent, node, std::move(elem));
    l.field.nullable = false;
    return l;
  }
  if ((list_annot || map_annot) && IsGroup(n)) {
    if (n.children.size() != 1 || !IsRepeated(nodes_[n.children[0]])) {
      return absl::InvalidArgumentError(absl::StrCat(name_, ": ", list_annot ? "LIST" : "MAP", " group ", n.path,
                                                     " must have exactly one repeated child"));
    }
    const int r = n.children[0];
    const SNode& rn = nodes_[r];
    Plan elem;
    if (map_annot) {
      if (!IsGroup(rn) || rn.children.empty() || rn.children.size() > 2) {
        return absl::InvalidArgumentError(
            absl::StrCat(name_, ": MAP group ", n.path, " must hold a repeated group of key and value"));
      }
      FW_ASSIGN_OR_RETURN(elem, PlanValue(r, rn.el->name, false, depth));
    } else if (!IsGroup(rn) || rn.children.size() > 1 || rn.el->name == "array" ||
               rn.el->name == n.el->name + "_tuple") {
      // Two-level lists: the repeated node is the element.
      FW_ASSIGN_OR_RETURN(elem, PlanValue(r, IsGroup(rn) ? rn.el->name : "element", false, depth));
    } else {
      // The standard three-level list: optional/required element under it.
      FW_ASSIGN_OR_RETURN(elem, PlanNode(rn.children[0], depth + 1));
    }
    Plan l = make_list(node, node, r, std::move(elem));
    l.field.map = map_annot && l.field.children[0].type.kind == ValueKind::kStruct &&
                  l.field.children[0].children.size() == 2;
    return l;
  }
  return PlanValue(node, n.el->name, IsOptional(n), depth);
}

// A leaf or a struct of `node`'s fields, its own repetition aside (a plain
// field, the element of a list, or the value under a repeated node).
Result<Plan> ReaderImpl::PlanValue(int node, std::string name, bool nullable, int depth) {
  const SNode& n = nodes_[node];
  Plan p;
  p.field.name = std::move(name);
  p.field.nullable = nullable;
  p.node = node;
  p.validity_node = node;
  if (!IsGroup(n)) {
    p.kind = Plan::Kind::kLeaf;
    FW_ASSIGN_OR_RETURN(p.field.type, LeafType(*n.el, n.path));
    if (p.field.type.kind == ValueKind::kDecimal) p.field.type.width = DecimalWidth(p.field.type, *n.el->type);
    p.first_leaf = n.leaf;
    return p;
  }
  p.kind = Plan::Kind::kStruct;
  p.field.type = ValueType{ValueKind::kStruct};
  for (int c : n.children) {
    FW_ASSIGN_OR_RETURN(Plan cp, PlanNode(c, depth + 1));
    p.field.children.push_back(cp.field);
    p.children.push_back(std::move(cp));
  }
  p.first_leaf = p.children.front().first_leaf;
  return p;
}

void ReaderImpl::LeavesOf(const Plan& p, std::vector<int>* out) const {
  if (p.kind == Plan::Kind::kLeaf) {
    out->push_back(nodes_[p.node].leaf);
    return;
  }
  for (const Plan& c : p.children) LeavesOf(c, out);
}

Result<std::vector<int>> ReaderImpl::Resolve(const std::vector<std::string>& columns) const {
  std::vector<int> idx;
  if (columns.empty()) {
    for (size_t i = 0; i < plans_.size(); ++i) idx.push_back(static_cast<int>(i));
    return idx;
  }
  for (const std::string& c : columns) {
    auto it = std::find_if(plans_.begin(), plans_.end(), [&](const Plan& p) { return p.field.name == c; });
    if (it == plans_.end()) {
      std::vector<std::string> names;
      for (const Plan& p : plans_) names.push_back(p.field.name);
      return absl::NotFoundError(absl::StrCat(name_, " has no column '", c, "' (columns: ",
                                              absl::StrJoin(names, ", "), ")"));
    }
    idx.push_back(static_cast<int>(it - plans_.begin()));
  }
  return idx;
}

// Levels of one page: RLE (v1: with a 4-byte length prefix) or the legacy
// BIT_PACKED encoding, appended to `out` (which grows by `n`). The stream is
// shown to hold `n` levels before anything is sized by `n`, so a page header
// that lies about its count fails without allocating for it. Returns the
// bytes used.
Result<size_t> DecodeLevels(const uint8_t* data, size_t size, Encoding enc, int16_t max_level, int64_t n,
                            bool v1_prefix, std::vector<int16_t>* out, std::vector<uint32_t>* scratch) {
  const int bw = BitWidth(static_cast<uint64_t>(max_level));
  const uint8_t* p = data;
  size_t len = size;
  if (enc == Encoding::kBitPacked) {
    if (static_cast<uint64_t>(n) > static_cast<uint64_t>(size) * 8 / static_cast<uint64_t>(bw)) {
      return absl::DataLossError(absl::StrCat("the page claims ", n, " values but its ", size,
                                              " bytes hold at most ", static_cast<uint64_t>(size) * 8 / bw,
                                              " levels of ", bw, " bits"));
    }
  } else if (enc == Encoding::kRle) {
    if (v1_prefix) {
      if (size < 4) return absl::DataLossError("level stream shorter than its 4-byte length");
      uint32_t l;
      std::memcpy(&l, data, 4);
      if (l > size - 4) {
        return absl::DataLossError(absl::StrCat("level stream of ", l, " bytes but only ", size - 4, " remain"));
      }
      len = l;
      p = data + 4;
    }
    FW_ASSIGN_OR_RETURN(const int64_t held, CountRleBitPacked(p, len, bw, n));
    if (held < n) {
      return absl::DataLossError(absl::StrCat("the page claims ", n, " values but its ", len, "-byte level stream holds ",
                                              held));
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat("levels in unsupported encoding ", static_cast<int>(enc)));
  }
  scratch->resize(static_cast<size_t>(n));
  uint32_t* tmp = scratch->data();
  size_t used = 0;
  if (enc == Encoding::kBitPacked) {
    FW_ASSIGN_OR_RETURN(used, DecodeBitPackedLegacy(data, size, bw, n, tmp));
  } else {
    FW_RETURN_IF_ERROR(DecodeRleBitPacked(p, len, bw, n, tmp).status());
    used = v1_prefix ? 4 + len : len;
  }
  const size_t base = out->size();
  out->resize(base + static_cast<size_t>(n));
  int16_t* dst = out->data() + base;
  for (int64_t i = 0; i < n; ++i) {
    if (tmp[i] > static_cast<uint32_t>(max_level)) {
      out->resize(base);
      return absl::DataLossError(absl::StrCat("level ", tmp[i], " of entry ", i, " exceeds the maximum ", max_level));
    }
    dst[i] = static_cast<int16_t>(tmp[i]);
  }
  return used;
}

Status ReaderImpl::DecodePage(int leaf, CompressionCodec codec, const PageHeader& h, const uint8_t* body,
                              size_t len, bool has_dict,
                              int64_t dict_count, const std::vector<uint8_t>& dict_fixed,
                              const ByteArrays& dict_bytes, std::vector<uint8_t>* scratch, LeafData* out) const {
  const SNode& ln = nodes_[leaf_nodes_[leaf]];
  const SchemaElement& el = *ln.el;
  const bool v2 = h.type == PageType::kDataPageV2;
  const int64_t n = v2 ? h.data_page_header_v2->num_values : h.data_page_header->num_values;
  const Encoding enc = v2 ? h.data_page_header_v2->encoding : h.data_page_header->encoding;
  if (n < 0) return absl::DataLossError(absl::StrCat("negative value count ", n));
  const int64_t uncompressed = h.uncompressed_page_size;
  if (uncompressed < 0 || uncompressed > kMaxPageBytes) {
    return absl::DataLossError(absl::StrCat("uncompressed page size ", uncompressed, " is out of range"));
  }
  // Every entry needs a level or a value, so a page cannot hold more
  // entries than bits of uncompressed data plus what RLE runs can repeat;
  // bound by the level arrays we are about to allocate.
  if (n > (int64_t{1} << 31)) return absl::DataLossError(absl::StrCat("page claims ", n, " values"));
  const uint8_t* data = body;
  size_t size = len;
  size_t level_bytes = 0;
  const size_t base = static_cast<size_t>(out->entries);
  if ((ln.rep > 0 && out->rep.size() != base) || (ln.def > 0 && out->def.size() != base)) {
    return absl::InternalError("level arrays out of step with the entries read");
  }
  if (v2) {
    const auto& v = *h.data_page_header_v2;
    if (v.repetition_levels_byte_length < 0 || v.definition_levels_byte_length < 0 ||
        static_cast<uint64_t>(v.repetition_levels_byte_length) + v.definition_levels_byte_length > len) {
      return absl::DataLossError("level lengths exceed the page");
    }
    const size_t rl = static_cast<size_t>(v.repetition_levels_byte_length);
    const size_t dl = static_cast<size_t>(v.definition_levels_byte_length);
    if (ln.rep > 0) {
      FW_RETURN_IF_ERROR_CTX(DecodeLevels(body, rl, Encoding::kRle, ln.rep, n, false, &out->rep, &out->scratch).status(),
                             "repetition levels");
    }
    if (ln.def > 0) {
      FW_RETURN_IF_ERROR_CTX(
          DecodeLevels(body + rl, dl, Encoding::kRle, ln.def, n, false, &out->def, &out->scratch).status(),
          "definition levels");
    }
    level_bytes = rl + dl;
    const int64_t values_uncompressed = uncompressed - static_cast<int64_t>(level_bytes);
    if (values_uncompressed < 0) return absl::DataLossError("level lengths exceed the uncompressed page size");
    if (v.is_compressed && codec != CompressionCodec::kUncompressed) {
      FW_RETURN_IF_ERROR(DecompressPage(codec, body + level_bytes, len - level_bytes, values_uncompressed, scratch));
      data = scratch->data();
      size = scratch->size();
    } else {
      data = body + level_bytes;
      size = len - level_bytes;
    }
  } else {
    const auto& v = *h.data_page_header;
    size_t pos = 0;
    if (ln.rep > 0) {
      FW_ASSIGN_OR_RETURN_CTX(size_t used,
                              DecodeLevels(data, size, v.repetition_level_encoding, ln.rep, n, true, &out->rep, &out->scratch),
                              "repetition levels");
      pos += used;
    }
    if (ln.def > 0) {
      FW_ASSIGN_OR_RETURN_CTX(
          size_t used, DecodeLevels(data + pos, size - pos, v.definition_level_encoding, ln.def, n, true, &out->def, &out->scratch),
          "definition levels");
      pos += used;
    }
    data += pos;
    size -= pos;
  }
  // The values present: entries at the maximum definition level.
  int64_t present = n;
  if (ln.def > 0) {
    present = 0;
    for (int64_t i = 0; i < n; ++i) present += out->def[base + i] == ln.def ? 1 : 0;
  }
  if (v2 && n - h.data_page_header_v2->num_nulls != present && ln.rep == 0) {
    return absl::DataLossError(absl::StrCat("page says ", h.data_page_header_v2->num_nulls, " nulls but its levels have ",
                                            n - present));
  }
  if (ln.rep > 0 && static_cast<int64_t>(base) == out->chunk_start && n > 0 && out->rep[base] != 0) {
    return absl::DataLossError("the column chunk's first entry does not start a row");
  }
  out->entries += n;
  const PhysicalType pt = *el.type;
  const size_t width = PhysicalSize(el);
  auto add_fixed = [&](int64_t count) {
    const size_t at = out->fixed.size();
    out->fixed.resize(at + static_cast<size_t>(count) * width);
    return out->fixed.data() + at;
  };
  const int64_t strings_before = out->bytes.size();
  auto decode = [&]() -> Status {
    switch (enc) {
      case Encoding::kPlain: {
        if (pt == PhysicalType::kBoolean) {
          if (static_cast<uint64_t>(present) > static_cast<uint64_t>(size) * 8) {
            return absl::DataLossError(absl::StrCat("PLAIN: ", present, " booleans need more than the ", size,
                                                    " bytes the page has"));
          }
          return DecodePlainBoolean(data, size, present, add_fixed(present)).status();
        }
        if (pt == PhysicalType::kByteArray) return DecodePlainByteArray(data, size, present, &out->bytes).status();
        const uint64_t need = static_cast<uint64_t>(present) * width;
        if (need > size) {
          return absl::DataLossError(absl::StrCat("PLAIN: ", present, " values of ", width, " bytes need ", need,
                                                  " bytes, the page has ", size));
        }
        if (need > 0) std::memcpy(add_fixed(present), data, need);
        return absl::OkStatus();
      }
      case Encoding::kPlainDictionary:
      case Encoding::kRleDictionary: {
        if (!has_dict) return absl::DataLossError("dictionary-encoded page without a dictionary page");
        if (present == 0) return absl::OkStatus();
        if (size < 1) return absl::DataLossError("dictionary indices: missing bit width");
        const int bw = data[0];
        if (bw > 32) return absl::DataLossError(absl::StrCat("dictionary index bit width ", bw, " > 32"));
        FW_ASSIGN_OR_RETURN_CTX(const int64_t held, CountRleBitPacked(data + 1, size - 1, bw, present),
                                "dictionary indices");
        if (held < present) {
          return absl::DataLossError(absl::StrCat("the page needs ", present, " dictionary indices, its ", size - 1,
                                                  " bytes hold ", held));
        }
        std::vector<uint32_t>& idx = out->scratch;  // the levels are decoded by now
        idx.resize(static_cast<size_t>(present));
        FW_RETURN_IF_ERROR_CTX(DecodeRleBitPacked(data + 1, size - 1, bw, present, idx.data()).status(),
                               "dictionary indices");
        for (int64_t i = 0; i < present; ++i) {
          if (idx[i] >= static_cast<uint64_t>(dict_count)) {
            return absl::DataLossError(absl::StrCat("dictionary index ", idx[i], " of value ", i,
                                                    " is out of range (the dictionary has ", dict_count, " values)"));
          }
        }
        if (pt == PhysicalType::kByteArray) {
          for (uint32_t k : idx) {
            out->bytes.Append(dict_bytes.data.data() + dict_bytes.offsets[k],
                              static_cast<size_t>(dict_bytes.offsets[k + 1] - dict_bytes.offsets[k]));
          }
        } else {
          uint8_t* dst = add_fixed(present);
          for (int64_t i = 0; i < present; ++i) std::memcpy(dst + i * width, dict_fixed.data() + idx[i] * width, width);
        }
        return absl::OkStatus();
      }
      case Encoding::kRle: {
        if (pt != PhysicalType::kBoolean) return absl::DataLossError("RLE values on a non-BOOLEAN column");
        if (size < 4) return absl::DataLossError("RLE booleans: missing length");
        uint32_t l;
        std::memcpy(&l, data, 4);
        if (l > size - 4) return absl::DataLossError("RLE booleans: length beyond the page");
        FW_ASSIGN_OR_RETURN(const int64_t held, CountRleBitPacked(data + 4, l, 1, present));
        if (held < present) {
          return absl::DataLossError(absl::StrCat("RLE booleans: the page needs ", present, " values, its ", l,
                                                  " bytes hold ", held));
        }
        std::vector<uint32_t> v(static_cast<size_t>(present));
        FW_RETURN_IF_ERROR(DecodeRleBitPacked(data + 4, l, 1, present, v.data()).status());
        uint8_t* dst = add_fixed(present);
        for (int64_t i = 0; i < present; ++i) dst[i] = static_cast<uint8_t>(v[i]);
        return absl::OkStatus();
      }
      case Encoding::kDeltaBinaryPacked: {
        if (pt != PhysicalType::kInt32 && pt != PhysicalType::kInt64) {
          return absl::DataLossError("DELTA_BINARY_PACKED on a column that is not INT32/INT64");
        }
        std::vector<int64_t> v;
        FW_RETURN_IF_ERROR(DecodeDeltaBinaryPacked(data, size, present, &v).status());
        if (static_cast<int64_t>(v.size()) < present) {
          return absl::DataLossError(absl::StrCat("DELTA_BINARY_PACKED holds ", v.size(), " values, the levels need ", present));
        }
        uint8_t* dst = add_fixed(present);
        for (int64_t i = 0; i < present; ++i) {
          if (pt == PhysicalType::kInt32) {
            const int32_t x = static_cast<int32_t>(static_cast<uint32_t>(v[i]));
            std::memcpy(dst + i * 4, &x, 4);
          } else {
            std::memcpy(dst + i * 8, &v[i], 8);
          }
        }
        return absl::OkStatus();
      }
      case Encoding::kDeltaLengthByteArray:
      case Encoding::kDeltaByteArray: {
        if (pt != PhysicalType::kByteArray && pt != PhysicalType::kFixedLenByteArray) {
          return absl::DataLossError("delta byte-array encoding on a column that is not BYTE_ARRAY");
        }
        ByteArrays v;
        if (enc == Encoding::kDeltaLengthByteArray) {
          FW_RETURN_IF_ERROR(DecodeDeltaLengthByteArray(data, size, present, &v).status());
        } else {
          FW_RETURN_IF_ERROR(DecodeDeltaByteArray(data, size, present, &v).status());
        }
        if (v.size() < present) {
          return absl::DataLossError(absl::StrCat("page holds ", v.size(), " values, the levels need ", present));
        }
        if (pt == PhysicalType::kByteArray) {
          for (int64_t i = 0; i < present; ++i) {
            out->bytes.Append(v.data.data() + v.offsets[i], static_cast<size_t>(v.offsets[i + 1] - v.offsets[i]));
          }
        } else {
          uint8_t* dst = add_fixed(present);
          for (int64_t i = 0; i < present; ++i) {
            if (static_cast<size_t>(v.offsets[i + 1] - v.offsets[i]) != width) {
              return absl::DataLossError(absl::StrCat("value ", i, " is not ", width, " bytes long"));
            }
            std::memcpy(dst + i * width, v.data.data() + v.offsets[i], width);
          }
        }
        return absl::OkStatus();
      }
      case Encoding::kByteStreamSplit: {
        if (width == 0 || pt == PhysicalType::kBoolean || pt == PhysicalType::kInt96) {
          return absl::DataLossError("BYTE_STREAM_SPLIT on a column of variable or bit width");
        }
        if (static_cast<uint64_t>(present) > size / width) {
          return absl::DataLossError(absl::StrCat("BYTE_STREAM_SPLIT: ", present, " values of ", width,
                                                  " bytes need more than the ", size, " bytes the page has"));
        }
        return DecodeByteStreamSplit(data, size, width, present, add_fixed(present));
      }
      default:
        return absl::UnimplementedError(absl::StrCat("value encoding ", static_cast<int>(enc), " is not supported"));
    }
  };
  FW_RETURN_IF_ERROR(decode());
  // Strings are checked where they are decoded, so an error names the page
  // (dictionary pages are checked once, in ReadLeaf).
  if (leaf_utf8_[leaf] && pt == PhysicalType::kByteArray && enc != Encoding::kPlainDictionary &&
      enc != Encoding::kRleDictionary) {
    return CheckUtf8(out->bytes, strings_before);
  }
  return absl::OkStatus();
}

Status ReaderImpl::ReadLeaf(int row_group, int leaf, LeafData* out) const {
  const ColumnChunk& cc = meta_.row_groups[row_group].columns[leaf];
  const SchemaElement& el = *nodes_[leaf_nodes_[leaf]].el;
  if (!cc.file_path.empty()) {
    return absl::UnimplementedError(absl::StrCat("the column chunk is in another file ('", cc.file_path, "')"));
  }
  if (!cc.meta_data) return absl::DataLossError("the column chunk has no metadata");
  const ColumnMetaData& m = *cc.meta_data;
  if (m.type != *el.type) {
    return absl::DataLossError(absl::StrCat("the column chunk's physical type ", static_cast<int>(m.type),
                                            " differs from the schema's ", static_cast<int>(*el.type)));
  }
  int64_t start = m.data_page_offset;
  if (m.dictionary_page_offset && *m.dictionary_page_offset > 0 && *m.dictionary_page_offset < start) {
    start = *m.dictionary_page_offset;
  }
  const int64_t stored = m.total_compressed_size;
  if (start < 4 || stored < 0 || static_cast<uint64_t>(start) > data_end_ ||
      static_cast<uint64_t>(stored) > data_end_ - static_cast<uint64_t>(start)) {
    return absl::DataLossError(absl::StrCat("the column chunk's bytes [", start, ", ", start + stored,
                                            ") are outside the file's data [4, ", data_end_, ")"));
  }
  if (m.num_values < 0) return absl::DataLossError(absl::StrCat("negative value count ", m.num_values));
  // A column that does not repeat holds one entry (value or null) per row.
  const int64_t rows = meta_.row_groups[row_group].num_rows;
  if (nodes_[leaf_nodes_[leaf]].rep == 0 && m.num_values != rows) {
    return absl::DataLossError(absl::StrCat("the column chunk says ", m.num_values, " values, the row group ", rows,
                                            " rows (a column that does not repeat has one entry per row)"));
  }
  std::string owned;
  const uint8_t* chunk = nullptr;
  if (file_->mapped_data() != nullptr) {
    chunk = file_->mapped_data() + start;
  } else {
    owned.resize(static_cast<size_t>(stored));
    FW_RETURN_IF_ERROR(file_->ReadAt(static_cast<uint64_t>(start), owned.size(), owned.data()));
    chunk = reinterpret_cast<const uint8_t*>(owned.data());
  }
  const size_t size = static_cast<size_t>(stored);
  size_t pos = 0;
  int page = 0;
  bool has_dict = false;
  int64_t dict_count = 0;
  std::vector<uint8_t> dict_fixed, page_buf, scratch;
  ByteArrays dict_bytes;
  const size_t width = PhysicalSize(el);
  // Chunks of several row groups may accumulate in one LeafData (ReadAll).
  const int64_t first = out->entries;
  out->chunk_start = first;
  while (out->entries - first < m.num_values) {
    const uint64_t at = static_cast<uint64_t>(start) + pos;
    const int page_index = page;  // the page this iteration reads (page is advanced below)
    auto ctx = [page_index, at] { return absl::StrCat("page ", page_index, " at byte ", at); };
    if (pos >= size) {
      return absl::DataLossError(absl::StrCat("the column chunk ends after ", out->entries - first, " of its ",
                                              m.num_values, " values"));
    }
    size_t consumed = 0;
    FW_ASSIGN_OR_RETURN_CTX(PageHeader h, ParsePageHeader(chunk + pos, size - pos, &consumed), ctx());
    if (h.compressed_page_size < 0 || static_cast<uint64_t>(h.compressed_page_size) > size - pos - consumed) {
      return absl::DataLossError(absl::StrCat(ctx(), ": page of ", h.compressed_page_size, " bytes runs past the column chunk (",
                                              size - pos - consumed, " bytes left)"));
    }
    const uint8_t* body = chunk + pos + consumed;
    const size_t len = static_cast<size_t>(h.compressed_page_size);
    if (h.crc && verify_crc_) {
      const uint32_t got = static_cast<uint32_t>(crc32(0L, body, static_cast<uInt>(len)));
      if (got != static_cast<uint32_t>(*h.crc)) {
        return absl::DataLossError(absl::StrCat(ctx(), ": page CRC mismatch (the header says ",
                                                absl::Hex(static_cast<uint32_t>(*h.crc), absl::kZeroPad8),
                                                ", the ", len, " page bytes give ", absl::Hex(got, absl::kZeroPad8),
                                                "); the file is corrupt"));
      }
    }
    pos += consumed + len;
    ++page;
    if (h.type == PageType::kIndexPage) continue;
    if (h.type == PageType::kDictionaryPage) {
      if (has_dict) return absl::DataLossError(absl::StrCat(ctx(), ": a second dictionary page"));
      const auto& d = *h.dictionary_page_header;
      if (d.num_values < 0) return absl::DataLossError(absl::StrCat(ctx(), ": negative dictionary size"));
      if (h.uncompressed_page_size < 0 || h.uncompressed_page_size > kMaxPageBytes) {
        return absl::DataLossError(absl::StrCat(ctx(), ": uncompressed size ", h.uncompressed_page_size, " out of range"));
      }
      FW_RETURN_IF_ERROR_CTX(DecompressPage(m.codec, body, len, h.uncompressed_page_size, &page_buf), ctx());
      if (d.encoding != Encoding::kPlain && d.encoding != Encoding::kPlainDictionary) {
        return absl::DataLossError(absl::StrCat(ctx(), ": dictionary in encoding ", static_cast<int>(d.encoding)));
      }
      if (*el.type == PhysicalType::kByteArray) {
        FW_RETURN_IF_ERROR_CTX(DecodePlainByteArray(page_buf.data(), page_buf.size(), d.num_values, &dict_bytes).status(),
                               ctx());
        if (leaf_utf8_[leaf]) FW_RETURN_IF_ERROR_CTX(CheckUtf8(dict_bytes, 0), ctx(), " (dictionary)");
      } else if (*el.type == PhysicalType::kBoolean) {
        if (static_cast<uint64_t>(d.num_values) > static_cast<uint64_t>(page_buf.size()) * 8) {
          return absl::DataLossError(absl::StrCat(ctx(), ": dictionary of ", d.num_values, " booleans needs more than the ",
                                                  page_buf.size(), " bytes the page has"));
        }
        dict_fixed.resize(static_cast<size_t>(d.num_values));
        FW_RETURN_IF_ERROR_CTX(DecodePlainBoolean(page_buf.data(), page_buf.size(), d.num_values, dict_fixed.data()).status(),
                               ctx());
      } else {
        const uint64_t need = static_cast<uint64_t>(d.num_values) * width;
        if (need > page_buf.size()) {
          return absl::DataLossError(absl::StrCat(ctx(), ": dictionary of ", d.num_values, " values needs ", need,
                                                  " bytes, the page has ", page_buf.size()));
        }
        dict_fixed.assign(page_buf.begin(), page_buf.begin() + static_cast<ptrdiff_t>(need));
      }
      has_dict = true;
      dict_count = d.num_values;
      continue;
    }
    const uint8_t* data = body;
    size_t data_len = len;
    if (h.type == PageType::kDataPage) {
      if (h.uncompressed_page_size < 0 || h.uncompressed_page_size > kMaxPageBytes) {
        return absl::DataLossError(absl::StrCat(ctx(), ": uncompressed size ", h.uncompressed_page_size, " out of range"));
      }
      FW_RETURN_IF_ERROR_CTX(DecompressPage(m.codec, body, len, h.uncompressed_page_size, &page_buf), ctx());
      data = page_buf.data();
      data_len = page_buf.size();
    }
    if (h.type != PageType::kDataPage && h.type != PageType::kDataPageV2) {
      return absl::DataLossError(absl::StrCat(ctx(), ": unknown page type ", static_cast<int>(h.type)));
    }
    const int64_t page_values =
        h.type == PageType::kDataPage ? h.data_page_header->num_values : h.data_page_header_v2->num_values;
    if (page_values > m.num_values - (out->entries - first)) {
      return absl::DataLossError(absl::StrCat(ctx(), ": ", page_values, " values, more than the ",
                                              m.num_values - (out->entries - first), " the column chunk has left"));
    }
    FW_RETURN_IF_ERROR_CTX(DecodePage(leaf, m.codec, h, data, data_len, has_dict, dict_count, dict_fixed, dict_bytes,
                                      &scratch, out),
                           ctx());
  }
  out->num_values = *el.type == PhysicalType::kByteArray
                        ? out->bytes.size()
                        : static_cast<int64_t>(width == 0 ? 0 : out->fixed.size() / width);
  return absl::OkStatus();
}

int64_t LoadSigned(const uint8_t* p, size_t n) {  // little-endian, sign-extended
  uint64_t v = 0;
  std::memcpy(&v, p, n);
  if (n < 8 && (p[n - 1] & 0x80)) v |= ~uint64_t{0} << (8 * n);
  return static_cast<int64_t>(v);
}

// A big-endian two's complement integer of 0..16 bytes as `width` bytes
// little-endian, sign-extended; false when it does not fit in `width`
// (bytes beyond it that are not the sign's extension).
bool BigEndianToLittle(const uint8_t* src, size_t n, uint8_t* dst, size_t width) {
  const uint8_t fill = n > 0 && (src[0] & 0x80) ? 0xff : 0x00;
  for (size_t i = width; i < n; ++i) {
    if (src[n - 1 - i] != fill) return false;
  }
  if (n > width && ((src[n - width] & 0x80) ? 0xff : 0x00) != fill) return false;
  for (size_t i = 0; i < width; ++i) dst[i] = i < n ? src[n - 1 - i] : fill;
  return true;
}

Status ReaderImpl::BuildLeaf(const Plan& p, LeafData& d, Array* out) const {
  const SNode& n = nodes_[p.node];
  const SNode& leaf = nodes_[leaf_nodes_[n.leaf]];
  const SchemaElement& el = *leaf.el;
  const ValueType& t = p.field.type;
  out->type = t;
  SetValidityOfSlots(d, n, leaf.def, out);
  const int64_t len = out->length;
  if (t.kind == ValueKind::kNull) return absl::OkStatus();
  const int64_t present = len - out->null_count;
  int64_t used = 0;  // dense values consumed
  if (IsVariable(t) || (t.kind == ValueKind::kDecimal && *el.type == PhysicalType::kByteArray)) {
    if (d.bytes.size() < present) {
      return absl::DataLossError(absl::StrCat("the column has ", d.bytes.size(), " values, the levels need ", present));
    }
    if (t.kind == ValueKind::kDecimal) {
      out->values.assign(static_cast<size_t>(len) * t.width, 0);
      for (int64_t s = 0; s < len; ++s) {
        if (!out->IsValid(s)) continue;
        const size_t b = static_cast<size_t>(d.bytes.offsets[used + 1] - d.bytes.offsets[used]);
        if (!BigEndianToLittle(reinterpret_cast<const uint8_t*>(d.bytes.data.data()) + d.bytes.offsets[used], b,
                               out->values.data() + s * t.width, static_cast<size_t>(t.width))) {
          return absl::DataLossError(absl::StrCat("DECIMAL value ", used, " (", b, " bytes) does not fit DECIMAL(",
                                                  t.precision, ")"));
        }
        ++used;
      }
      return absl::OkStatus();
    }
    out->offsets.resize(static_cast<size_t>(len) + 1);
    out->offsets[0] = 0;
    const int64_t* src_off = d.bytes.offsets.data();
    const int64_t base = src_off[0];
    if (present == len) {
      for (int64_t s = 0; s < len; ++s) out->offsets[s + 1] = src_off[s + 1] - base;
      used = len;
    } else {
      for (int64_t s = 0; s < len; ++s) {
        int64_t size = 0;
        if (out->IsValid(s)) {
          size = src_off[used + 1] - src_off[used];
          ++used;
        }
        out->offsets[s + 1] = out->offsets[s] + size;
      }
    }
    // The dense values are exactly the valid slots' bytes, in order.
    const auto* bytes = reinterpret_cast<const uint8_t*>(d.bytes.data.data());
    out->values.assign(bytes + base, bytes + src_off[used]);
    return absl::OkStatus();
  }
  const size_t pw = PhysicalSize(el);
  const size_t ow = ValueWidth(t);
  if (d.num_values < present) {
    return absl::DataLossError(absl::StrCat("the column has ", d.num_values, " values, the levels need ", present));
  }
  const bool same_bytes = pw == ow && *el.type != PhysicalType::kInt96 &&
                          !(t.kind == ValueKind::kDecimal && *el.type == PhysicalType::kFixedLenByteArray);
  if (same_bytes && present == len && d.fixed.size() == static_cast<size_t>(len) * ow) {
    out->values = std::move(d.fixed);  // no nulls, stored as handed out: no copy
    return absl::OkStatus();
  }
  out->values.assign(static_cast<size_t>(len) * ow, 0);
  if (same_bytes) {
    const uint8_t* src = d.fixed.data();
    uint8_t* dst = out->values.data();
    for (int64_t s = 0; s < len; ++s) {
      if (!out->IsValid(s)) continue;
      std::memcpy(dst + s * ow, src + used * ow, ow);
      ++used;
    }
    return absl::OkStatus();
  }
  for (int64_t s = 0; s < len; ++s) {
    if (!out->IsValid(s)) continue;
    const uint8_t* src = d.fixed.data() + used * pw;
    uint8_t* dst = out->values.data() + s * ow;
    ++used;
    switch (*el.type) {
      case PhysicalType::kInt96: {
        // 8 bytes of nanoseconds in the day, then the Julian day.
        int64_t nanos;
        int32_t day;
        std::memcpy(&nanos, src, 8);
        std::memcpy(&day, src + 8, 4);
        // Nanoseconds since 1970 fit int64 for about ±292 years (Julian
        // days 2440588 ± 106751); a value outside is refused, not wrapped.
        const int64_t days = static_cast<int64_t>(day) - 2440588;
        constexpr int64_t kNanosPerDay = int64_t{86400} * 1000000000;
        if (days < -106750 || days > 106750 || nanos < 0 || nanos >= kNanosPerDay) {
          return absl::DataLossError(absl::StrCat("INT96 value ", used - 1, " (Julian day ", day, ", ", nanos,
                                                  " ns) is not a timestamp in nanoseconds' range"));
        }
        const int64_t ns = days * kNanosPerDay + nanos;
        std::memcpy(dst, &ns, 8);
        break;
      }
      case PhysicalType::kFixedLenByteArray:
        if (t.kind == ValueKind::kDecimal) {
          if (!BigEndianToLittle(src, pw, dst, ow)) {
            return absl::DataLossError(
                absl::StrCat("DECIMAL value ", used - 1, " does not fit DECIMAL(", t.precision, ")"));
          }
        } else {
          std::memcpy(dst, src, pw);
        }
        break;
      case PhysicalType::kInt32:
        if (ow < 4) {
          // INT(8/16): the low bytes (the writer stored a value in range).
          const int64_t v = LoadSigned(src, 4);
          std::memcpy(dst, &v, ow);
        } else {
          std::memcpy(dst, src, 4);
        }
        break;
      default:
        std::memcpy(dst, src, std::min(pw, ow));
    }
  }
  return absl::OkStatus();
}

Status ReaderImpl::Build(const Plan& p, std::vector<LeafData>& leaves, Array* out) const {
  if (p.kind == Plan::Kind::kLeaf) return BuildLeaf(p, leaves[nodes_[p.node].leaf], out);
  const LeafData& d = leaves[p.first_leaf];
  if (p.kind == Plan::Kind::kStruct) {
    const SNode& n = nodes_[p.node];
    out->type = p.field.type;
    SetValidityOfSlots(d, n, n.def, out);
    out->children.resize(p.children.size());
    for (size_t c = 0; c < p.children.size(); ++c) {
      FW_RETURN_IF_ERROR(Build(p.children[c], leaves, &out->children[c]));
      if (out->children[c].length != out->length) {
        return absl::DataLossError(absl::StrCat("struct field ", p.children[c].field.name, " has ",
                                                out->children[c].length, " rows, its struct ", out->length));
      }
    }
    return absl::OkStatus();
  }
  // A list: slots of the list node, elements are the repeated node's slots.
  const SNode& ln = nodes_[p.node];
  const SNode& rn = nodes_[p.repeated];
  const int16_t valid_def = p.validity_node >= 0 ? nodes_[p.validity_node].def : 0;
  out->type = p.field.type;
  SetValidityOfSlots(d, ln, valid_def, out);
  // Offsets in one pass: a list slot starts at an entry that starts a slot
  // of the list node; each entry that starts a slot of the repeated node is
  // one element of the current list.
  const int16_t* rep = d.rep.empty() ? nullptr : d.rep.data();
  const int16_t* dl = d.def.empty() ? nullptr : d.def.data();
  out->offsets.assign(static_cast<size_t>(out->length) + 1, 0);
  int64_t slot = -1, elements = 0;
  for (int64_t j = 0; j < d.entries; ++j) {
    const int16_t r = rep ? rep[j] : 0, df = dl ? dl[j] : 0;
    if (r <= ln.rep && df >= ln.exist_def) {
      if (slot >= 0) out->offsets[slot + 1] = elements;
      ++slot;
    }
    if (r <= rn.rep && df >= rn.exist_def) ++elements;
  }
  if (slot >= 0) out->offsets[slot + 1] = elements;
  out->children.resize(1);
  FW_RETURN_IF_ERROR(Build(p.children[0], leaves, &out->children[0]));
  if (out->children[0].length != out->offsets.back()) {
    return absl::DataLossError(absl::StrCat("list ", p.field.name, " has ", out->offsets.back(),
                                            " elements but its element column has ", out->children[0].length));
  }
  return absl::OkStatus();
}

Result<std::vector<Array>> ReaderImpl::ReadRowGroup(int row_group, const std::vector<std::string>& columns) const {
  if (row_group < 0 || row_group >= num_row_groups()) {
    return absl::OutOfRangeError(absl::StrCat(name_, ": row group ", row_group, " does not exist (the file has ",
                                              num_row_groups(), ")"));
  }
  FW_ASSIGN_OR_RETURN(std::vector<int> which, Resolve(columns));
  std::vector<LeafData> leaves(leaf_nodes_.size());
  std::vector<Array> out(which.size());
  const int64_t rows = meta_.row_groups[row_group].num_rows;
  for (size_t i = 0; i < which.size(); ++i) {
    const Plan& p = plans_[which[i]];
    std::vector<int> ls;
    LeavesOf(p, &ls);
    for (int l : ls) {
      if (leaves[l].entries > 0 || leaves[l].num_values > 0) continue;
      FW_RETURN_IF_ERROR_CTX(ReadLeaf(row_group, l, &leaves[l]), ChunkContext(row_group, l));
    }
    FW_RETURN_IF_ERROR_CTX(Build(p, leaves, &out[i]),
                           absl::StrCat(name_, ": row group ", row_group, ", column ", p.field.name));
    if (out[i].length != rows) {
      return absl::DataLossError(absl::StrCat(name_, ": row group ", row_group, ", column ", p.field.name, " has ",
                                              out[i].length, " rows, the row group says ", rows));
    }
  }
  return out;
}

Result<std::vector<Array>> ReaderImpl::ReadAll(const ReadOptions& options) const {
  FW_ASSIGN_OR_RETURN(std::vector<int> which, Resolve(options.columns));
  const int groups = num_row_groups();
  const int cols = static_cast<int>(which.size());
  std::vector<Array> all(static_cast<size_t>(cols));
  if (groups == 0) {
    for (int c = 0; c < cols; ++c) {
      all[c].type = plans_[which[c]].field.type;
      if (all[c].type.kind == ValueKind::kList || IsVariable(all[c].type)) all[c].offsets = {0};
    }
    return all;
  }
  int threads = options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = std::max(1, threads);
  if (cols >= 2 * threads || threads == 1) {
    // Enough columns to keep every thread busy: one task per column reads
    // the column's chunks of all row groups into one level/value stream and
    // assembles it once, so nothing is concatenated afterwards. Largest
    // columns first, for balance.
    std::vector<std::pair<int64_t, int>> order;
    for (int c = 0; c < cols; ++c) {
      std::vector<int> ls;
      LeavesOf(plans_[which[c]], &ls);
      int64_t bytes = 0;
      for (const auto& rg : meta_.row_groups) {
        for (int l : ls) {
          if (rg.columns[l].meta_data) bytes += rg.columns[l].meta_data->total_uncompressed_size;
        }
      }
      order.emplace_back(-bytes, c);
    }
    std::sort(order.begin(), order.end());
    std::vector<Status> st(static_cast<size_t>(cols));
    auto column = [&](int64_t k) {
      const int c = order[k].second;
      const Plan& p = plans_[which[c]];
      std::vector<int> ls;
      LeavesOf(p, &ls);
      std::vector<LeafData> leaves(leaf_nodes_.size());
      for (int g = 0; g < groups; ++g) {
        for (int l : ls) {
          Status s = Annotate(ReadLeaf(g, l, &leaves[l]), ChunkContext(g, l));
          if (!s.ok()) {
            st[c] = s;
            return;
          }
        }
      }
      Status s = Build(p, leaves, &all[c]);
      if (!s.ok()) {
        st[c] = Annotate(s, absl::StrCat(name_, ": column ", p.field.name));
        return;
      }
      if (all[c].length != num_rows()) {
        st[c] = absl::DataLossError(absl::StrCat(name_, ": column ", p.field.name, " has ", all[c].length,
                                                 " rows, the row groups say ", num_rows()));
      }
    };
    if (threads == 1) {
      for (int64_t k = 0; k < cols; ++k) column(k);
    } else {
      ThreadPool pool(std::min(threads, cols));
      pool.ParallelFor(0, cols, column);
    }
    for (const Status& s : st) FW_RETURN_IF_ERROR(s);
    return all;
  }
  // Few columns: one task per (row group, column), then one concatenation
  // task per column.
  std::vector<std::vector<Array>> parts(static_cast<size_t>(cols), std::vector<Array>(static_cast<size_t>(groups)));
  std::vector<Status> status(static_cast<size_t>(groups) * cols);
  auto read = [&](int64_t task) {
    const int g = static_cast<int>(task / cols), c = static_cast<int>(task % cols);
    auto r = ReadRowGroup(g, {plans_[which[c]].field.name});
    if (!r.ok()) {
      status[task] = r.status();
      return;
    }
    parts[c][g] = std::move((*r)[0]);
  };
  std::vector<Status> concat(static_cast<size_t>(cols));
  auto join = [&](int64_t c) { concat[c] = ConcatArrays(parts[c], &all[c]); };
  threads = std::clamp(threads, 1, groups * cols);
  if (threads <= 1) {
    for (int64_t t = 0; t < static_cast<int64_t>(groups) * cols; ++t) read(t);
  } else {
    ThreadPool pool(threads);
    pool.ParallelFor(0, static_cast<int64_t>(groups) * cols, read);
  }
  // The first failure in file order (row group, then column) is the one reported.
  for (const Status& st : status) FW_RETURN_IF_ERROR(st);
  if (threads <= 1 || cols <= 1) {
    for (int c = 0; c < cols; ++c) join(c);
  } else {
    ThreadPool pool(std::min(threads, cols));
    pool.ParallelFor(0, cols, join);
  }
  for (const Status& st : concat) FW_RETURN_IF_ERROR(st);
  return all;
}

}  // namespace

size_t ValueWidth(const ValueType& t) {
  switch (t.kind) {
    case ValueKind::kBool: case ValueKind::kInt8: case ValueKind::kUInt8: return 1;
    case ValueKind::kInt16: case ValueKind::kUInt16: case ValueKind::kFloat16: return 2;
    case ValueKind::kInt32: case ValueKind::kUInt32: case ValueKind::kFloat32: case ValueKind::kDate32:
    case ValueKind::kTime32: return 4;
    case ValueKind::kInt64: case ValueKind::kUInt64: case ValueKind::kFloat64: case ValueKind::kTime64:
    case ValueKind::kTimestamp: return 8;
    case ValueKind::kFixedBinary: case ValueKind::kDecimal: return static_cast<size_t>(t.width);
    default: return 0;
  }
}

Status AppendArray(Array* a, Array b) {
  std::vector<Array> parts;
  parts.push_back(std::move(*a));
  parts.push_back(std::move(b));
  if (parts[0].type.kind != parts[1].type.kind || parts[0].children.size() != parts[1].children.size()) {
    *a = std::move(parts[0]);
    return absl::InvalidArgumentError("AppendArray: the arrays' types differ");
  }
  *a = Array{};
  return ConcatArrays(parts, a);
}

std::string ValueTypeName(const ValueType& t) {
  auto unit = [&] { return t.unit == TimeUnit::kMillis ? "ms" : t.unit == TimeUnit::kMicros ? "us" : "ns"; };
  switch (t.kind) {
    case ValueKind::kNull: return "null";
    case ValueKind::kBool: return "bool";
    case ValueKind::kInt8: return "int8";
    case ValueKind::kInt16: return "int16";
    case ValueKind::kInt32: return "int32";
    case ValueKind::kInt64: return "int64";
    case ValueKind::kUInt8: return "uint8";
    case ValueKind::kUInt16: return "uint16";
    case ValueKind::kUInt32: return "uint32";
    case ValueKind::kUInt64: return "uint64";
    case ValueKind::kFloat16: return "float16";
    case ValueKind::kFloat32: return "float32";
    case ValueKind::kFloat64: return "float64";
    case ValueKind::kString: return "string";
    case ValueKind::kBinary: return "binary";
    case ValueKind::kFixedBinary: return absl::StrCat("fixed_binary(", t.width, ")");
    case ValueKind::kDate32: return "date32";
    case ValueKind::kTime32: case ValueKind::kTime64: return absl::StrCat("time(", unit(), ")");
    case ValueKind::kTimestamp: return absl::StrCat("timestamp(", unit(), t.adjusted_to_utc ? ", UTC)" : ")");
    case ValueKind::kDecimal: return absl::StrCat("decimal(", t.precision, ",", t.scale, ")");
    case ValueKind::kList: return "list";
    case ValueKind::kStruct: return "struct";
  }
  return "unknown";
}

std::string FieldTypeName(const Field& f) {
  if (f.type.kind == ValueKind::kList) return absl::StrCat("list<", FieldTypeName(f.children.at(0)), ">");
  if (f.type.kind == ValueKind::kStruct) {
    std::vector<std::string> parts;
    for (const Field& c : f.children) parts.push_back(absl::StrCat(c.name, ": ", FieldTypeName(c)));
    return absl::StrCat("struct<", absl::StrJoin(parts, ", "), ">");
  }
  return ValueTypeName(f.type);
}

Result<std::unique_ptr<ParquetReader>> ParquetReader::Open(const std::string& path) {
  auto fs = io::PosixFileSystem();
  FW_ASSIGN_OR_RETURN(auto file, fs->OpenRead(path));
  return Open(std::move(file), path);
}

Result<std::unique_ptr<ParquetReader>> ParquetReader::Open(std::shared_ptr<io::RandomAccessFile> file,
                                                           std::string name) {
  const uint64_t size = file->size();
  if (size < 12) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not a Parquet file (", size, " bytes; too short)"));
  }
  uint8_t head[4], tail[8];
  FW_RETURN_IF_ERROR(file->ReadAt(0, 4, head));
  FW_RETURN_IF_ERROR(file->ReadAt(size - 8, 8, tail));
  if (std::memcmp(head, kMagic, 4) != 0 || std::memcmp(tail + 4, kMagic, 4) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not a Parquet file (no PAR1 magic at ",
                                                   std::memcmp(head, kMagic, 4) != 0 ? "the start" : "the end", ")"));
  }
  uint32_t footer_len;
  std::memcpy(&footer_len, tail, 4);
  if (footer_len > size - 12) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": footer length ", footer_len, " exceeds the file (",
                                                   size, " bytes)"));
  }
  const uint64_t footer_at = size - 8 - footer_len;
  std::string footer(footer_len, '\0');
  FW_RETURN_IF_ERROR(file->ReadAt(footer_at, footer_len, footer.data()));
  FW_ASSIGN_OR_RETURN_CTX(FileMetaData meta,
                          ParseFileMetaData(reinterpret_cast<const uint8_t*>(footer.data()), footer.size()),
                          absl::StrCat(name, ": footer"));
  auto r = std::make_unique<ReaderImpl>(std::move(file), name, std::move(meta), footer_at);
  FW_RETURN_IF_ERROR(r->Init());
  return std::unique_ptr<ParquetReader>(std::move(r));
}

}  // namespace flywheel::interop::parquet
