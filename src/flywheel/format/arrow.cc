// The Arrow C data interface, both ways (arrow.h; mapping in docs/arrow.md).
#include "flywheel/format/arrow.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>
#include <memory>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flywheel/format/limits.h"

namespace flywheel::format {
namespace {

// A readable pointer for buffers of zero bytes (some consumers dislike null
// data pointers even when nothing is read through them).
alignas(64) const uint8_t kEmpty[64] = {};

// ---------------------------------------------------------------- type codes

struct ScalarCode {
  TypeId id;
  const char* code;
};
constexpr ScalarCode kScalarCodes[] = {
    {TypeId::kBool, "b"},    {TypeId::kInt8, "c"},    {TypeId::kUInt8, "C"},  {TypeId::kInt16, "s"},
    {TypeId::kUInt16, "S"},  {TypeId::kInt32, "i"},   {TypeId::kUInt32, "I"}, {TypeId::kInt64, "l"},
    {TypeId::kUInt64, "L"},  {TypeId::kFloat16, "e"}, {TypeId::kFloat32, "f"}, {TypeId::kFloat64, "g"},
};

const char* ScalarFormat(TypeId id) {
  for (const auto& c : kScalarCodes) {
    if (c.id == id) return c.code;
  }
  return nullptr;
}

TypeId ScalarOfFormat(std::string_view f) {
  for (const auto& c : kScalarCodes) {
    if (f == c.code) return c.id;
  }
  return TypeId::kNone;
}

constexpr std::string_view kTensorExtension = "arrow.fixed_shape_tensor";

// ---- temporal types: Arrow format <-> (integer storage, logical type tag)

const char* UnitName(char c) {
  switch (c) {
    case 's': return "s";
    case 'm': return "ms";
    case 'u': return "us";
    case 'n': return "ns";
    default: return nullptr;
  }
}

char UnitLetter(std::string_view unit) {
  if (unit == "s") return 's';
  if (unit == "ms") return 'm';
  if (unit == "us") return 'u';
  if (unit == "ns") return 'n';
  return 0;
}

struct Temporal {
  TypeId storage;
  std::string tag;
};

// The storage and tag of an Arrow temporal format; nullopt for others.
std::optional<Temporal> TemporalOf(std::string_view f) {
  if (f == "tdD") return Temporal{TypeId::kInt32, "date32"};
  if (f == "tdm") return Temporal{TypeId::kInt64, "date64"};
  if (f.size() < 3 || f[0] != 't') return std::nullopt;
  const char* unit = UnitName(f[2]);
  if (unit == nullptr) return std::nullopt;
  if (f[1] == 's' && f.size() >= 4 && f[3] == ':') {
    const std::string_view tz = f.substr(4);
    return Temporal{TypeId::kInt64, tz.empty() ? absl::StrCat("timestamp(", unit, ")")
                                               : absl::StrCat("timestamp(", unit, ", ", AsAbsl(tz), ")")};
  }
  if (f.size() != 3) return std::nullopt;
  if (f[1] == 't') {
    return Temporal{f[2] == 's' || f[2] == 'm' ? TypeId::kInt32 : TypeId::kInt64, absl::StrCat("time(", unit, ")")};
  }
  if (f[1] == 'D') return Temporal{TypeId::kInt64, absl::StrCat("duration(", unit, ")")};
  return std::nullopt;
}

// The Arrow format of a tag over `storage`; empty when the tag is not one of
// ours or does not fit the storage (the column then exports as its integers).
std::string FormatOfTag(std::string_view tag, TypeId storage) {
  std::string f;
  if (tag == "date32") {
    f = "tdD";
  } else if (tag == "date64") {
    f = "tdm";
  } else {
    const size_t open = tag.find('(');
    if (open == std::string_view::npos || tag.back() != ')') return {};
    const std::string_view head = tag.substr(0, open);
    std::string_view args = tag.substr(open + 1, tag.size() - open - 2);
    std::string_view tz;
    bool has_tz = false;
    if (const size_t comma = args.find(','); comma != std::string_view::npos) {
      tz = args.substr(comma + 1);
      while (!tz.empty() && tz.front() == ' ') tz.remove_prefix(1);
      args = args.substr(0, comma);
      has_tz = true;
    }
    const char u = UnitLetter(args);
    if (u == 0) return {};
    if (head == "timestamp") {
      f = absl::StrCat("ts", std::string(1, u), ":", has_tz ? AsAbsl(tz) : "");
    } else if (head == "time" && !has_tz) {
      f = absl::StrCat("tt", std::string(1, u));
    } else if (head == "duration" && !has_tz) {
      f = absl::StrCat("tD", std::string(1, u));
    } else {
      return {};
    }
  }
  const std::optional<Temporal> t = TemporalOf(f);
  return t && t->storage == storage ? f : std::string();
}

// Arrow's metadata encoding: int32 count, then per pair int32 length + bytes
// for the key and the value (native byte order).
std::string EncodeMetadata(const std::vector<std::pair<std::string, std::string>>& kv) {
  if (kv.empty()) return {};
  std::string out;
  auto put32 = [&](int32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); };
  put32(static_cast<int32_t>(kv.size()));
  for (const auto& [k, v] : kv) {
    put32(static_cast<int32_t>(k.size()));
    out += k;
    put32(static_cast<int32_t>(v.size()));
    out += v;
  }
  return out;
}

// Pairs of an Arrow metadata blob; malformed blobs read as empty (metadata is
// advisory except for extension types, which then read as their storage).
std::vector<std::pair<std::string, std::string>> DecodeMetadata(const char* md) {
  std::vector<std::pair<std::string, std::string>> out;
  if (md == nullptr) return out;
  auto get32 = [&](size_t& pos) {
    int32_t v;
    std::memcpy(&v, md + pos, 4);
    pos += 4;
    return v;
  };
  size_t pos = 0;
  const int32_t n = get32(pos);
  if (n < 0 || n > (1 << 20)) return {};
  for (int32_t i = 0; i < n; ++i) {
    const int32_t kl = get32(pos);
    if (kl < 0 || kl > (1 << 24)) return {};
    std::string k(md + pos, static_cast<size_t>(kl));
    pos += static_cast<size_t>(kl);
    const int32_t vl = get32(pos);
    if (vl < 0 || vl > (1 << 24)) return {};
    std::string v(md + pos, static_cast<size_t>(vl));
    pos += static_cast<size_t>(vl);
    out.emplace_back(std::move(k), std::move(v));
  }
  return out;
}

std::string MetadataValue(const ArrowSchema& s, std::string_view key) {
  for (auto& [k, v] : DecodeMetadata(s.metadata)) {
    if (k == key) return v;
  }
  return {};
}

// Whole-string decimal integer (surrounding spaces allowed).
bool ParseInt(std::string_view t, int64_t* v) {
  while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
  while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  if (t.empty()) return false;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), *v);
  return ec == std::errc() && ptr == t.data() + t.size();
}

// "2, 3,4" -> {2, 3, 4}; false on anything else.
bool ParseIntList(std::string_view t, std::vector<int64_t>* out) {
  out->clear();
  while (true) {
    const size_t comma = t.find(',');
    int64_t v;
    if (!ParseInt(t.substr(0, comma), &v)) return false;
    out->push_back(v);
    if (comma == std::string_view::npos) return true;
    t.remove_prefix(comma + 1);
  }
}

std::string FieldName(const ArrowSchema& s) { return s.name != nullptr ? s.name : ""; }

// ------------------------------------------------------------------- export

struct SchemaPrivate {
  std::string format, name, metadata;
  std::vector<std::unique_ptr<ArrowSchema>> children;
  std::vector<ArrowSchema*> child_ptrs;
};

// Releases an exported struct: its children first (unless the consumer moved
// them out), then its private data. One function for schemas and arrays.
template <typename T, typename Private>
void Release(T* x) {
  if (x == nullptr || x->release == nullptr) return;
  auto* p = static_cast<Private*>(x->private_data);
  for (T* c : p->child_ptrs) {
    if (c->release != nullptr) c->release(c);
  }
  delete p;
  x->release = nullptr;
}

// Fills `out` from `p` (which it then owns).
void FillSchema(std::unique_ptr<SchemaPrivate> p, int64_t flags, ArrowSchema* out) {
  for (auto& c : p->children) p->child_ptrs.push_back(c.get());
  out->format = p->format.c_str();
  out->name = p->name.c_str();
  out->metadata = p->metadata.empty() ? nullptr : p->metadata.data();
  out->flags = flags;
  out->n_children = static_cast<int64_t>(p->child_ptrs.size());
  out->children = p->child_ptrs.empty() ? nullptr : p->child_ptrs.data();
  out->dictionary = nullptr;
  out->release = &Release<ArrowSchema, SchemaPrivate>;
  out->private_data = p.release();
}

std::unique_ptr<ArrowSchema> ChildSchema(const char* format, const char* name) {
  auto p = std::make_unique<SchemaPrivate>();
  p->format = format;
  p->name = name;
  auto s = std::make_unique<ArrowSchema>();
  FillSchema(std::move(p), 0, s.get());
  return s;
}

struct ArrayPrivate {
  std::vector<std::shared_ptr<const void>> owners;
  std::vector<const void*> buffers;
  std::vector<std::unique_ptr<ArrowArray>> children;
  std::vector<ArrowArray*> child_ptrs;
};

void FillArray(std::unique_ptr<ArrayPrivate> p, int64_t length, int64_t null_count, ArrowArray* out) {
  for (auto& c : p->children) p->child_ptrs.push_back(c.get());
  out->length = length;
  out->null_count = null_count;
  out->offset = 0;
  out->n_buffers = static_cast<int64_t>(p->buffers.size());
  out->n_children = static_cast<int64_t>(p->child_ptrs.size());
  out->buffers = p->buffers.data();
  out->children = p->child_ptrs.empty() ? nullptr : p->child_ptrs.data();
  out->dictionary = nullptr;
  out->release = &Release<ArrowArray, ArrayPrivate>;
  out->private_data = p.release();
}

const void* Keep(ArrayPrivate& p, const Buffer& b) {
  if (b.owner) p.owners.push_back(b.owner);
  return b.data != nullptr ? static_cast<const void*>(b.data) : kEmpty;
}

// `n` bytes of 0/1 as an Arrow bitmap.
Buffer PackBits(const uint8_t* bytes, int64_t n) {
  uint8_t* bits;
  Buffer packed = Buffer::Allocate(static_cast<size_t>((n + 7) / 8), &bits);
  std::memset(bits, 0, packed.size);
  for (int64_t i = 0; i < n; ++i) {
    if (bytes[i] != 0) bits[i >> 3] |= static_cast<uint8_t>(1u << (i & 7));
  }
  return packed;
}

// A primitive child array (no nulls) over `values`.
std::unique_ptr<ArrowArray> ValuesChild(const Buffer& values, int64_t length) {
  auto p = std::make_unique<ArrayPrivate>();
  p->buffers = {nullptr, Keep(*p, values)};
  auto a = std::make_unique<ArrowArray>();
  FillArray(std::move(p), length, 0, a.get());
  return a;
}

}  // namespace

Status ExportField(const Field& field, ArrowSchema* out, const std::string& tag) {
  const DataType& t = field.type;
  auto p = std::make_unique<SchemaPrivate>();
  p->name = field.name;
  std::string temporal = tag.empty() || !t.shape.empty() ? std::string() : FormatOfTag(tag, t.id);
  // Nested types: their child fields, exported the same way.
  auto add_child = [&](const Field& f) -> Status {
    auto child = std::make_unique<ArrowSchema>();
    FW_RETURN_IF_ERROR(ExportField(f, child.get()));
    p->children.push_back(std::move(child));
    return absl::OkStatus();
  };
  Status st;
  if (!temporal.empty()) {
    p->format = std::move(temporal);
  } else if (t.id == TypeId::kString) {
    p->format = "U";
  } else if (t.id == TypeId::kBinary) {
    p->format = "Z";
  } else if (t.id == TypeId::kStruct) {
    p->format = "+s";
    for (const Field& f : t.children) {
      if (st.ok()) st = add_child(f);
    }
  } else if (t.id == TypeId::kMap) {
    // map<K, V> is a list of non-null "entries" structs {key, value}.
    p->format = "+m";
    auto entries = std::make_unique<SchemaPrivate>();
    entries->format = "+s";
    entries->name = "entries";
    for (const Field& f : t.children) {
      auto child = std::make_unique<ArrowSchema>();
      if (st.ok()) st = ExportField(f, child.get());
      if (st.ok()) entries->children.push_back(std::move(child));
    }
    auto e = std::make_unique<ArrowSchema>();
    FillSchema(std::move(entries), 0, e.get());
    p->children.push_back(std::move(e));
  } else if (t.id == TypeId::kList && t.is_nested()) {
    p->format = "+L";
    st = add_child(t.children[0]);
  } else if (t.id == TypeId::kList) {
    const char* elem = ScalarFormat(t.elem);
    if (elem == nullptr) return absl::InvalidArgumentError(absl::StrCat("column '", field.name, "': bad list type"));
    p->format = "+L";
    p->children.push_back(ChildSchema(elem, "item"));
  } else if (const char* code = ScalarFormat(t.id); code != nullptr) {
    if (t.shape.empty()) {
      p->format = code;
    } else {
      p->format = absl::StrCat("+w:", t.num_elements());
      p->children.push_back(ChildSchema(code, "item"));
      p->metadata = EncodeMetadata({{"ARROW:extension:name", std::string(kTensorExtension)},
                                    {"ARROW:extension:metadata",
                                     absl::StrCat("{\"shape\":[", absl::StrJoin(t.shape, ","), "]}")}});
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("column '", field.name, "': type ", t.ToString(), " has no Arrow form"));
  }
  if (!st.ok()) {
    for (auto& c : p->children) Release<ArrowSchema, SchemaPrivate>(c.get());
    return st;
  }
  FillSchema(std::move(p), field.nullable ? ARROW_FLAG_NULLABLE : 0, out);
  return absl::OkStatus();
}

Status ExportSchema(const Schema& schema, ArrowSchema* out, const LogicalTypes* logical) {
  auto p = std::make_unique<SchemaPrivate>();
  p->format = "+s";
  for (const Field& f : schema.fields) {
    auto child = std::make_unique<ArrowSchema>();
    std::string tag;
    if (logical != nullptr) {
      if (auto it = logical->find(f.name); it != logical->end()) tag = it->second;
    }
    if (Status s = ExportField(f, child.get(), tag); !s.ok()) {
      for (auto& c : p->children) Release<ArrowSchema, SchemaPrivate>(c.get());
      return s;
    }
    p->children.push_back(std::move(child));
  }
  FillSchema(std::move(p), 0, out);
  return absl::OkStatus();
}

Status ExportColumn(const Column& c, ArrowArray* out) {
  auto p = std::make_unique<ArrayPrivate>();
  const int64_t nulls = c.validity.empty() ? 0 : c.null_count;
  const void* validity = c.validity.empty() ? nullptr : Keep(*p, c.validity);
  const DataType& t = c.type;
  if (t.id == TypeId::kString || t.id == TypeId::kBinary) {
    p->buffers = {validity, Keep(*p, c.offsets), Keep(*p, c.values)};
  } else if (t.is_nested()) {
    Status st;
    auto add_child = [&](const Column& ch, std::vector<std::unique_ptr<ArrowArray>>* into) {
      auto a = std::make_unique<ArrowArray>();
      if (st.ok()) st = ExportColumn(ch, a.get());
      if (st.ok()) into->push_back(std::move(a));
    };
    if (t.id == TypeId::kStruct) {
      p->buffers = {validity};
      for (const Column& ch : c.children) add_child(ch, &p->children);
    } else if (t.id == TypeId::kList) {
      p->buffers = {validity, Keep(*p, c.offsets)};
      add_child(c.children[0], &p->children);
    } else {
      // Arrow maps have int32 offsets (the one copy here).
      const int64_t* o = c.offsets_data();
      if (c.length > 0 && o[c.length] > std::numeric_limits<int32_t>::max()) {
        return absl::InvalidArgumentError(absl::StrCat("map column holds ", o[c.length],
                                                       " entries; Arrow maps hold at most 2^31 - 1"));
      }
      int32_t* o32;
      Buffer offs = Buffer::Allocate(static_cast<size_t>(c.length + 1) * 4, reinterpret_cast<uint8_t**>(&o32));
      for (int64_t i = 0; i <= c.length; ++i) o32[i] = static_cast<int32_t>(c.length > 0 ? o[i] : 0);
      p->buffers = {validity, Keep(*p, offs)};
      auto entries = std::make_unique<ArrayPrivate>();
      entries->buffers = {nullptr};
      add_child(c.children[0], &entries->children);
      add_child(c.children[1], &entries->children);
      auto e = std::make_unique<ArrowArray>();
      const int64_t n = c.children[0].length;
      FillArray(std::move(entries), n, 0, e.get());
      p->children.push_back(std::move(e));
    }
    if (!st.ok()) {
      for (auto& ch : p->children) Release<ArrowArray, ArrayPrivate>(ch.get());
      return st;
    }
  } else if (t.id == TypeId::kList) {
    p->buffers = {validity, Keep(*p, c.offsets)};
    p->children.push_back(ValuesChild(c.values, static_cast<int64_t>(c.values.size / ScalarSize(t.elem))));
  } else if (t.id == TypeId::kBool) {
    // flywheel keeps a byte per bool; Arrow packs bits (the one copy here).
    // A bool tensor packs every element, as the child of a fixed-size list.
    const int64_t n = c.length * t.num_elements();
    Buffer packed = PackBits(c.values.data, n);
    if (t.shape.empty()) {
      p->buffers = {validity, Keep(*p, packed)};
    } else {
      p->buffers = {validity};
      p->children.push_back(ValuesChild(packed, n));
    }
  } else if (IsScalar(t.id)) {
    if (t.shape.empty()) {
      p->buffers = {validity, Keep(*p, c.values)};
    } else {
      p->buffers = {validity};
      p->children.push_back(ValuesChild(c.values, c.length * t.num_elements()));
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat("type ", t.ToString(), " has no Arrow form"));
  }
  FillArray(std::move(p), c.length, nulls, out);
  return absl::OkStatus();
}

Status ExportBatch(const RecordBatch& batch, ArrowArray* out) {
  if (batch.columns.size() != batch.schema.fields.size()) {
    return absl::InvalidArgumentError("record batch has a different number of columns than fields");
  }
  auto p = std::make_unique<ArrayPrivate>();
  p->buffers = {nullptr};
  for (size_t i = 0; i < batch.columns.size(); ++i) {
    const Column& c = batch.columns[i];
    if (c.length != batch.num_rows) {
      for (auto& ch : p->children) Release<ArrowArray, ArrayPrivate>(ch.get());
      return absl::InvalidArgumentError(absl::StrCat("column '", batch.schema.fields[i].name, "' has ",
                                                     c.length, " rows, the batch ", batch.num_rows));
    }
    auto child = std::make_unique<ArrowArray>();
    if (Status s = ExportColumn(c, child.get()); !s.ok()) {
      for (auto& ch : p->children) Release<ArrowArray, ArrayPrivate>(ch.get());
      return Status(s.code(), absl::StrCat("column '", batch.schema.fields[i].name, "': ", s.message()));
    }
    p->children.push_back(std::move(child));
  }
  FillArray(std::move(p), batch.num_rows, 0, out);
  return absl::OkStatus();
}

namespace {

struct StreamPrivate {
  Schema schema;
  LogicalTypes logical;
  BatchSource next;
  std::string error;
  bool done = false;
};

int StreamFail(StreamPrivate* p, const Status& s) {
  p->error = std::string(s.message());
  return s.code() == absl::StatusCode::kInvalidArgument ? EINVAL : EIO;
}

int StreamGetSchema(ArrowArrayStream* st, ArrowSchema* out) {
  auto* p = static_cast<StreamPrivate*>(st->private_data);
  try {
    Status s = ExportSchema(p->schema, out, &p->logical);
    return s.ok() ? 0 : StreamFail(p, s);
  } catch (const std::exception& e) {
    p->error = e.what();
    return EIO;
  }
}

int StreamGetNext(ArrowArrayStream* st, ArrowArray* out) {
  auto* p = static_cast<StreamPrivate*>(st->private_data);
  try {
    if (p->done) {
      out->release = nullptr;
      return 0;
    }
    Result<std::optional<RecordBatch>> r = p->next();
    if (!r.ok()) return StreamFail(p, r.status());
    if (!r->has_value()) {
      p->done = true;
      p->next = nullptr;  // drop what the source holds (open files) at the end
      out->release = nullptr;
      return 0;
    }
    const RecordBatch& b = **r;
    bool same = b.schema.fields.size() == p->schema.fields.size();
    for (size_t i = 0; same && i < b.schema.fields.size(); ++i) {
      same = b.schema.fields[i].name == p->schema.fields[i].name &&
             b.schema.fields[i].type == p->schema.fields[i].type;
    }
    if (!same) {
      return StreamFail(p, absl::InternalError(absl::StrCat("a batch of schema ", b.schema.ToString(),
                                                            " in a stream of ", p->schema.ToString())));
    }
    Status s = ExportBatch(b, out);
    return s.ok() ? 0 : StreamFail(p, s);
  } catch (const std::exception& e) {
    p->error = e.what();
    return EIO;
  }
}

const char* StreamLastError(ArrowArrayStream* st) {
  auto* p = static_cast<StreamPrivate*>(st->private_data);
  return p->error.empty() ? nullptr : p->error.c_str();
}

void StreamRelease(ArrowArrayStream* st) {
  if (st == nullptr || st->release == nullptr) return;
  delete static_cast<StreamPrivate*>(st->private_data);
  st->release = nullptr;
}

}  // namespace

void ExportStream(Schema schema, BatchSource next, ArrowArrayStream* out, LogicalTypes logical) {
  auto p = std::make_unique<StreamPrivate>();
  p->schema = std::move(schema);
  p->logical = std::move(logical);
  p->next = std::move(next);
  out->get_schema = &StreamGetSchema;
  out->get_next = &StreamGetNext;
  out->get_last_error = &StreamLastError;
  out->release = &StreamRelease;
  out->private_data = p.release();
}

// ------------------------------------------------------------------- import

std::string ArrowTypeText(const ArrowSchema& s) {
  const std::string_view f = s.format != nullptr ? s.format : "";
  if (s.dictionary != nullptr) {
    return absl::StrCat("dictionary<", ArrowTypeText(*s.dictionary), ">");
  }
  static constexpr std::pair<std::string_view, std::string_view> kNames[] = {
      {"n", "null"},          {"b", "bool"},          {"c", "int8"},         {"C", "uint8"},
      {"s", "int16"},         {"S", "uint16"},        {"i", "int32"},        {"I", "uint32"},
      {"l", "int64"},         {"L", "uint64"},        {"e", "float16"},      {"f", "float32"},
      {"g", "float64"},       {"z", "binary"},        {"Z", "large_binary"}, {"vz", "binary_view"},
      {"u", "string"},        {"U", "large_string"},  {"vu", "string_view"}, {"tdD", "date32"},
      {"tdm", "date64"},      {"tts", "time32[s]"},   {"ttm", "time32[ms]"}, {"ttu", "time64[us]"},
      {"ttn", "time64[ns]"},  {"tDs", "duration[s]"}, {"tDm", "duration[ms]"}, {"tDu", "duration[us]"},
      {"tDn", "duration[ns]"}, {"tiM", "month_interval"}, {"tiD", "day_time_interval"},
      {"tin", "month_day_nano_interval"}, {"+s", "struct"}, {"+m", "map"}};
  for (const auto& [code, name] : kNames) {
    if (f == code) {
      if (f == "+s" || f == "+m") {
        std::vector<std::string> kids;
        for (int64_t i = 0; i < s.n_children; ++i) {
          kids.push_back(absl::StrCat(FieldName(*s.children[i]), ": ", ArrowTypeText(*s.children[i])));
        }
        return absl::StrCat(AsAbsl(name), "<", absl::StrJoin(kids, ", "), ">");
      }
      return std::string(name);
    }
  }
  if (f.starts_with("ts") && f.size() >= 3) {
    const std::string_view unit = f.substr(2, 1);
    const std::string_view tz = f.size() > 4 ? f.substr(4) : "";
    const char* u = unit == "s" ? "s" : unit == "m" ? "ms" : unit == "u" ? "us" : "ns";
    return tz.empty() ? absl::StrCat("timestamp[", u, "]") : absl::StrCat("timestamp[", u, ", ", AsAbsl(tz), "]");
  }
  if (f.starts_with("d:")) return absl::StrCat("decimal(", AsAbsl(f.substr(2)), ")");
  if (f.starts_with("w:")) return absl::StrCat("fixed_size_binary[", AsAbsl(f.substr(2)), "]");
  const std::string child = s.n_children > 0 ? ArrowTypeText(*s.children[0]) : "?";
  if (f == "+l") return absl::StrCat("list<", child, ">");
  if (f == "+L") return absl::StrCat("large_list<", child, ">");
  if (f == "+vl" || f == "+vL") return absl::StrCat("list_view<", child, ">");
  if (f.starts_with("+w:")) return absl::StrCat("fixed_size_list<", child, ">[", AsAbsl(f.substr(3)), "]");
  if (f.starts_with("+u")) return "union";
  if (f == "+r") return "run_end_encoded";
  return absl::StrCat("format '", AsAbsl(f), "'");
}

namespace {

Status Unsupported(const std::string& column, const ArrowSchema& s, std::string_view why = "") {
  return absl::InvalidArgumentError(absl::StrCat(
      "column '", column, "': Arrow type ", ArrowTypeText(s), " is not supported by flywheel",
      why.empty() ? "" : " (", AsAbsl(why), why.empty() ? "" : ")",
      "; supported: bool, int8..int64, uint8..uint64, float16/32/64, string/large_string/string_view, "
      "binary/large_binary/binary_view, list/large_list, struct and map of these, fixed_size_list or "
      "arrow.fixed_shape_tensor of a number, timestamps, dates, times and durations, and dictionaries of "
      "these (docs/arrow.md)"));
}

// The tensor shape of an arrow.fixed_shape_tensor's metadata ({"shape":[2,3], ...});
// empty when absent or unreadable. Refuses permuted layouts.
Result<std::vector<int64_t>> TensorShape(const ArrowSchema& s, const std::string& column) {
  const std::string meta = MetadataValue(s, "ARROW:extension:metadata");
  std::vector<int64_t> shape;
  const size_t k = meta.find("\"shape\"");
  if (k == std::string::npos) return shape;
  size_t i = meta.find('[', k);
  const size_t end = i == std::string::npos ? i : meta.find(']', i);
  if (end == std::string::npos) return shape;
  if (!ParseIntList(std::string_view(meta).substr(i + 1, end - i - 1), &shape)) return std::vector<int64_t>{};
  for (int64_t d : shape) {
    if (d <= 0) return std::vector<int64_t>{};
  }
  const size_t perm = meta.find("\"permutation\"");
  if (perm != std::string::npos) {
    const size_t a = meta.find('[', perm), b = meta.find(']', perm);
    std::vector<int64_t> p;
    bool identity = a != std::string::npos && b != std::string::npos &&
                    ParseIntList(std::string_view(meta).substr(a + 1, b - a - 1), &p);
    for (size_t k2 = 0; identity && k2 < p.size(); ++k2) identity = p[k2] == static_cast<int64_t>(k2);
    if (!identity) {
      return absl::InvalidArgumentError(absl::StrCat(
          "column '", column, "': arrow.fixed_shape_tensor with a permutation is not supported "
          "(flywheel tensors are row-major)"));
    }
  }
  return shape;
}

// The flywheel type of an Arrow field.
Result<DataType> TypeOf(const ArrowSchema& s, const std::string& column, int depth = 0) {
  if (s.format == nullptr) return absl::InvalidArgumentError(absl::StrCat("column '", column, "': no format"));
  if (depth > kMaxNestingDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("column '", column, "': nests deeper than ", kMaxNestingDepth, " levels"));
  }
  if (s.dictionary != nullptr) {
    FW_ASSIGN_OR_RETURN(DataType v, TypeOf(*s.dictionary, column));
    if (!v.shape.empty() || v.id == TypeId::kList || v.is_nested()) return Unsupported(column, s);
    const std::string_view idx = s.format;
    const TypeId it = ScalarOfFormat(idx);
    if (it == TypeId::kNone || it == TypeId::kBool || it == TypeId::kFloat16 || it == TypeId::kFloat32 ||
        it == TypeId::kFloat64) {
      return Unsupported(column, s, "dictionary indices must be integers");
    }
    return v;
  }
  const std::string_view f = s.format;
  if (TypeId id = ScalarOfFormat(f); id != TypeId::kNone) return DataType::Scalar(id);
  if (f == "u" || f == "U" || f == "vu") return DataType::String();
  if (f == "z" || f == "Z" || f == "vz") return DataType::Binary();
  if (f == "+l" || f == "+L") {
    if (s.n_children != 1 || s.children == nullptr || s.children[0] == nullptr) return Unsupported(column, s);
    const ArrowSchema& c = *s.children[0];
    const bool item_nullable = (c.flags & ARROW_FLAG_NULLABLE) != 0;
    FW_ASSIGN_OR_RETURN(DataType item, TypeOf(c, absl::StrCat(column, "[item]"), depth + 1));
    return DataType::ListOf(std::move(item), item_nullable);
  }
  if (f == "+s") {
    std::vector<Field> fields;
    for (int64_t i = 0; i < s.n_children; ++i) {
      if (s.children == nullptr || s.children[i] == nullptr) return Unsupported(column, s);
      const ArrowSchema& c = *s.children[i];
      Field ch;
      ch.name = FieldName(c);
      ch.nullable = (c.flags & ARROW_FLAG_NULLABLE) != 0;
      FW_ASSIGN_OR_RETURN(ch.type, TypeOf(c, absl::StrCat(column, ".", ch.name), depth + 1));
      fields.push_back(std::move(ch));
    }
    DataType t = DataType::Struct(std::move(fields));
    FW_RETURN_IF_ERROR_CTX(t.Validate(), "column '", column, "'");
    return t;
  }
  if (f == "+m") {
    if (s.n_children != 1 || s.children == nullptr || s.children[0] == nullptr ||
        s.children[0]->n_children != 2 || s.children[0]->children == nullptr) {
      return Unsupported(column, s, "a map needs one entries child with a key and a value");
    }
    const ArrowSchema& k = *s.children[0]->children[0];
    const ArrowSchema& v = *s.children[0]->children[1];
    FW_ASSIGN_OR_RETURN(DataType key, TypeOf(k, absl::StrCat(column, "[key]"), depth + 1));
    FW_ASSIGN_OR_RETURN(DataType value, TypeOf(v, absl::StrCat(column, "[value]"), depth + 1));
    DataType t = DataType::Map(std::move(key), std::move(value), (v.flags & ARROW_FLAG_NULLABLE) != 0);
    FW_RETURN_IF_ERROR_CTX(t.Validate(), "column '", column, "'");
    return t;
  }
  if (f.starts_with("+w:")) {
    int64_t n;
    if (!ParseInt(f.substr(3), &n) || n <= 0 || s.n_children != 1) return Unsupported(column, s);
    FW_ASSIGN_OR_RETURN(DataType inner, TypeOf(*s.children[0], column));
    if (!IsScalar(inner.id)) return Unsupported(column, s, "fixed-size lists hold numbers");
    std::vector<int64_t> shape{n};
    shape.insert(shape.end(), inner.shape.begin(), inner.shape.end());
    if (MetadataValue(s, "ARROW:extension:name") == kTensorExtension) {
      FW_ASSIGN_OR_RETURN(std::vector<int64_t> ts, TensorShape(s, column));
      int64_t prod = 1;
      for (int64_t d : ts) prod *= d;
      if (!ts.empty() && prod == n && inner.shape.empty()) shape = ts;
    }
    return DataType::Tensor(inner.id, std::move(shape));
  }
  if (std::optional<Temporal> t = TemporalOf(f)) return DataType::Scalar(t->storage);
  if (f == "+vl" || f == "+vL") return Unsupported(column, s, "list views are not supported; cast to large_list");
  return Unsupported(column, s);
}

// Keeps the imported ArrowArray alive; releasing it when the last Buffer over
// its memory goes.
struct ImportedArray {
  ArrowArray array{};
  ~ImportedArray() {
    if (array.release != nullptr) array.release(&array);
  }
};
using Owner = std::shared_ptr<const void>;

Status Bad(const std::string& column, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("column '", column, "': invalid Arrow array: ", AsAbsl(what)));
}

const uint8_t* BufferAt(const ArrowArray& a, int64_t i) {
  return i < a.n_buffers && a.buffers != nullptr ? static_cast<const uint8_t*>(a.buffers[i]) : nullptr;
}

// Row i's validity bit of a bitmap starting at bit `offset`.
bool Bit(const uint8_t* bits, int64_t i) { return (bits[i >> 3] >> (i & 7)) & 1; }

// Nulls among rows [offset, offset + rows) of an Arrow array.
int64_t CountNulls(const ArrowArray& a, int64_t offset, int64_t rows) {
  const uint8_t* bits = BufferAt(a, 0);
  if (bits == nullptr || a.null_count == 0) return 0;
  int64_t n = 0;
  for (int64_t i = 0; i < rows; ++i) n += !Bit(bits, offset + i);
  return n;
}

// flywheel's validity (bit 0 = row 0) for rows [offset, offset + rows) of
// an Arrow array; sets *nulls.
Buffer ImportValidity(const ArrowArray& a, int64_t offset, int64_t rows, const Owner& owner, int64_t* nulls) {
  const uint8_t* bits = BufferAt(a, 0);
  *nulls = CountNulls(a, offset, rows);
  if (*nulls == 0) return {};
  if (offset % 8 == 0) return Buffer{bits + offset / 8, static_cast<size_t>((rows + 7) / 8), owner};
  uint8_t* out;
  Buffer b = Buffer::Allocate(static_cast<size_t>((rows + 7) / 8), &out);
  std::memset(out, 0, b.size);
  for (int64_t i = 0; i < rows; ++i) {
    if (Bit(bits, offset + i)) out[i >> 3] |= static_cast<uint8_t>(1u << (i & 7));
  }
  return b;
}

Buffer Unpack(const uint8_t* bits, int64_t offset, int64_t n) {
  uint8_t* out;
  Buffer b = Buffer::Allocate(static_cast<size_t>(n), &out);
  for (int64_t i = 0; i < n; ++i) out[i] = Bit(bits, offset + i);
  return b;
}

Result<Column> ImportColumn(const ArrowSchema& s, const ArrowArray& a, int64_t parent_offset, int64_t rows,
                            const DataType& type, const Owner& owner, const std::string& column);

// Values of a fixed-width (scalar or nested fixed-size-list) array: the
// elements of rows [offset, offset+length) as one contiguous buffer.
Result<Buffer> FixedValues(const ArrowSchema& s, const ArrowArray& a, int64_t offset, int64_t rows,
                           const Owner& owner, const std::string& column, TypeId elem) {
  const std::string_view f = s.format;
  if (f.starts_with("+w:")) {
    int64_t n = 0;
    (void)ParseInt(f.substr(3), &n);
    if (a.n_children != 1 || a.children == nullptr || a.children[0] == nullptr) return Bad(column, "fixed-size list without its child");
    const ArrowArray& c = *a.children[0];
    // Elements of null rows may be null (Polars writes them so); those of
    // valid rows may not.
    const uint8_t* cbits = BufferAt(c, 0);
    const uint8_t* pbits = a.null_count != 0 ? BufferAt(a, 0) : nullptr;
    for (int64_t i = 0; cbits != nullptr && c.null_count != 0 && i < rows; ++i) {
      if (pbits != nullptr && !Bit(pbits, offset + i)) continue;
      for (int64_t j = 0; j < n; ++j) {
        if (!Bit(cbits, c.offset + (offset + i) * n + j)) {
          return Bad(column, absl::StrCat("row ", i, " of a tensor holds a null element; flywheel tensors cannot"));
        }
      }
    }
    if (c.length < (offset + rows) * n) return Bad(column, "fixed-size list child is too short");
    return FixedValues(*s.children[0], c, c.offset + offset * n, rows * n, owner, column, elem);
  }
  const uint8_t* data = BufferAt(a, 1);
  if (data == nullptr && rows > 0) return Bad(column, "no values buffer");
  if (elem == TypeId::kBool) return Unpack(data, offset, rows);
  const size_t w = ScalarSize(elem);
  if (rows == 0) return Buffer{kEmpty, 0, nullptr};
  return Buffer{data + offset * static_cast<int64_t>(w), static_cast<size_t>(rows) * w, owner};
}

// int64 offsets for rows [offset, offset+length) of an int32- or int64-offset array.
Buffer Offsets(const uint8_t* buf, bool wide, int64_t offset, int64_t length, const Owner& owner) {
  if (wide) return Buffer{buf + offset * 8, static_cast<size_t>(length + 1) * 8, owner};
  const int32_t* o32 = reinterpret_cast<const int32_t*>(buf) + offset;
  uint8_t* out;
  Buffer b = Buffer::Allocate(static_cast<size_t>(length + 1) * 8, &out);
  int64_t* o = reinterpret_cast<int64_t*>(out);
  for (int64_t i = 0; i <= length; ++i) o[i] = o32[i];
  return b;
}

// The int64 offsets of rows [offset, offset+rows) of a list or map array
// (int32 ones widened), checked: present, with one child, never negative
// or decreasing.
Result<Buffer> ListOffsets(const ArrowArray& a, bool wide, int64_t offset, int64_t rows, const Owner& owner,
                           const std::string& column) {
  const uint8_t* o = BufferAt(a, 1);
  if (o == nullptr || a.n_children != 1 || a.children == nullptr || a.children[0] == nullptr) {
    return Bad(column, "list or map without offsets or child");
  }
  Buffer b = Offsets(o, wide, offset, rows, owner);
  const int64_t* off = b.as<int64_t>();
  for (int64_t i = 0; i < rows; ++i) {
    if (off[i] > off[i + 1] || off[i] < 0) return Bad(column, absl::StrCat("offsets decrease at row ", i));
  }
  return b;
}

// Gathers string views (the view layout: 16 bytes per row, short strings
// inline, long ones in variadic data buffers) into offsets + data.
Result<std::pair<Buffer, Buffer>> FromViews(const ArrowArray& a, int64_t offset, int64_t rows,
                                           const std::string& column) {
  const uint8_t* views = BufferAt(a, 1);
  const int64_t n_data = a.n_buffers - 3;  // validity, views, data..., sizes
  if (views == nullptr || n_data < 0) return Bad(column, "view array without its buffers");
  std::vector<int64_t> offs{0};
  std::string data;
  for (int64_t i = 0; i < rows; ++i) {
    const uint8_t* v = views + (offset + i) * 16;
    int32_t len;
    std::memcpy(&len, v, 4);
    if (len < 0) return Bad(column, "negative view length");
    if (len <= 12) {
      data.append(reinterpret_cast<const char*>(v + 4), static_cast<size_t>(len));
    } else {
      int32_t buf, off;
      std::memcpy(&buf, v + 8, 4);
      std::memcpy(&off, v + 12, 4);
      if (buf < 0 || buf >= n_data || off < 0) return Bad(column, "view points outside the data buffers");
      const auto* sizes = reinterpret_cast<const int64_t*>(BufferAt(a, a.n_buffers - 1));
      if (sizes != nullptr && static_cast<int64_t>(off) + len > sizes[buf]) {
        return Bad(column, "view points past the end of its data buffer");
      }
      data.append(reinterpret_cast<const char*>(BufferAt(a, 2 + buf)) + off, static_cast<size_t>(len));
    }
    offs.push_back(static_cast<int64_t>(data.size()));
  }
  return std::make_pair(Buffer::FromVector(std::move(offs)), Buffer::FromString(std::move(data)));
}

Result<Column> ImportDictionary(const ArrowSchema& s, const ArrowArray& a, int64_t offset, int64_t nrows,
                                const DataType& type, const Owner& owner, const std::string& column) {
  if (a.dictionary == nullptr) return Bad(column, "dictionary array without its dictionary");
  FW_ASSIGN_OR_RETURN(Column dict, ImportColumn(*s.dictionary, *a.dictionary, 0, a.dictionary->length, type, owner, column));
  const TypeId it = ScalarOfFormat(s.format);
  const uint8_t* idx = BufferAt(a, 1);
  if (idx == nullptr && nrows > 0) return Bad(column, "dictionary indices missing");
  int64_t nulls;
  Buffer validity = ImportValidity(a, offset, nrows, owner, &nulls);
  std::vector<int64_t> rows(static_cast<size_t>(nrows));
  const size_t w = ScalarSize(it);
  for (int64_t i = 0; i < nrows; ++i) {
    const uint8_t* p = idx + (offset + i) * static_cast<int64_t>(w);
    int64_t v = 0;
    switch (it) {
      case TypeId::kInt8: v = *reinterpret_cast<const int8_t*>(p); break;
      case TypeId::kUInt8: v = *p; break;
      case TypeId::kInt16: { int16_t x; std::memcpy(&x, p, 2); v = x; break; }
      case TypeId::kUInt16: { uint16_t x; std::memcpy(&x, p, 2); v = x; break; }
      case TypeId::kInt32: { int32_t x; std::memcpy(&x, p, 4); v = x; break; }
      case TypeId::kUInt32: { uint32_t x; std::memcpy(&x, p, 4); v = x; break; }
      default: { int64_t x; std::memcpy(&x, p, 8); v = x; break; }
    }
    const bool valid = validity.empty() || Bit(validity.data, i);
    if (!valid) v = 0;
    if (valid && (v < 0 || v >= dict.length)) {
      return Bad(column, absl::StrCat("dictionary index ", v, " at row ", i, " outside a dictionary of ",
                                      dict.length));
    }
    rows[static_cast<size_t>(i)] = v;
  }
  Column out;
  if (dict.length == 0) {
    out = MakeNullColumn(type, nrows, true);
  } else {
    out = TakeColumn(dict, rows.data(), rows.size());
  }
  out.validity = validity;
  out.null_count = nulls;
  return out;
}

Result<Column> ImportColumn(const ArrowSchema& s, const ArrowArray& a, int64_t parent_offset, int64_t rows,
                            const DataType& type, const Owner& owner, const std::string& column) {
  if (rows < 0 || rows < 0 || a.offset < 0) return Bad(column, "negative length or offset");
  const int64_t offset = a.offset + parent_offset;
  if (s.dictionary != nullptr) return ImportDictionary(s, a, offset, rows, type, owner, column);
  Column c;
  c.type = type;
  c.length = rows;
  c.validity = ImportValidity(a, offset, rows, owner, &c.null_count);
  const std::string_view f = s.format;
  if (type.id == TypeId::kString || type.id == TypeId::kBinary) {
    if (f == "vu" || f == "vz") {
      FW_ASSIGN_OR_RETURN(auto ov, FromViews(a, offset, rows, column));
      c.offsets = std::move(ov.first);
      c.values = std::move(ov.second);
    } else {
      const uint8_t* o = BufferAt(a, 1);
      const uint8_t* d = BufferAt(a, 2);
      if (o == nullptr) return Bad(column, "no offsets buffer");
      c.offsets = Offsets(o, f == "U" || f == "Z", offset, rows, owner);
      // The data buffer's size is not in the interface: the last offset bounds it.
      const int64_t* off = c.offsets.as<int64_t>();
      for (int64_t i = 0; i < rows; ++i) {
        if (off[i] > off[i + 1] || off[i] < 0) return Bad(column, absl::StrCat("offsets decrease at row ", i));
      }
      const int64_t end = off[rows];
      if (end > 0 && d == nullptr) return Bad(column, "no data buffer");
      c.values = Buffer{d != nullptr ? d : kEmpty, static_cast<size_t>(end), owner};
    }
    return c;
  }
  if (type.id == TypeId::kStruct) {
    if (a.n_children != static_cast<int64_t>(type.children.size()) || a.children == nullptr ||
        s.n_children != a.n_children) {
      return Bad(column, "struct with the wrong number of children");
    }
    for (size_t i = 0; i < type.children.size(); ++i) {
      const Field& f = type.children[i];
      const std::string path = absl::StrCat(column, ".", f.name);
      if (a.children[i] == nullptr) return Bad(path, "missing child array");
      if (a.children[i]->length < offset + rows) return Bad(path, "struct child is shorter than its parent");
      FW_ASSIGN_OR_RETURN(Column ch, ImportColumn(*s.children[i], *a.children[i], offset, rows, f.type, owner, path));
      c.children.push_back(std::move(ch));
    }
    FW_RETURN_IF_ERROR(ClearChildNullsUnderNullRows(&c, column));
    return c;
  }
  if (type.is_nested()) {
    // list<T> and map<K, V>: offsets into the child (a map's "entries"
    // struct, whose key and value arrays are the two children).
    FW_ASSIGN_OR_RETURN(c.offsets, ListOffsets(a, f == "+L", offset, rows, owner, column));
    const int64_t* off = c.offsets.as<int64_t>();
    const ArrowArray& child = *a.children[0];
    const int64_t end = rows > 0 ? off[rows] : 0;
    if (end > child.length) return Bad(column, "offsets run past the child array");
    if (type.id == TypeId::kList) {
      FW_ASSIGN_OR_RETURN(Column ch, ImportColumn(*s.children[0], child, 0, end, type.children[0].type, owner,
                                                  absl::StrCat(column, "[item]")));
      c.children.push_back(std::move(ch));
      return c;
    }
    if (child.n_children != 2 || child.children == nullptr || child.children[0] == nullptr ||
        child.children[1] == nullptr) {
      return Bad(column, "map entries without a key and a value");
    }
    if (CountNulls(child, child.offset, end) > 0) return Bad(column, "null map entries");
    for (int k = 0; k < 2; ++k) {
      const Field& f = type.children[k];
      const std::string path = absl::StrCat(column, "[", f.name, "]");
      if (child.children[k]->length < child.offset + end) return Bad(path, "map child is too short");
      FW_ASSIGN_OR_RETURN(Column ch, ImportColumn(*s.children[0]->children[k], *child.children[k], child.offset, end,
                                                  f.type, owner, path));
      if (k == 0 && ch.null_count > 0) return Bad(path, "map keys hold nulls");
      c.children.push_back(std::move(ch));
    }
    return c;
  }
  if (type.id == TypeId::kList) {
    FW_ASSIGN_OR_RETURN(c.offsets, ListOffsets(a, f == "+L", offset, rows, owner, column));
    const int64_t* off = c.offsets.as<int64_t>();
    const ArrowArray& child = *a.children[0];
    const int64_t end = rows > 0 ? off[rows] : 0;
    if (end > child.length) return Bad(column, "list offsets run past the child array");
    if (CountNulls(child, child.offset, child.length) > 0) {
      return Bad(column, "list elements hold nulls; flywheel lists of numbers cannot");
    }
    // Elements [0, end) of the child, from its own offset; flywheel offsets
    // index into them as Arrow's do.
    FW_ASSIGN_OR_RETURN(c.values, FixedValues(*s.children[0], child, child.offset, end, owner, column, type.elem));
    return c;
  }
  FW_ASSIGN_OR_RETURN(c.values, FixedValues(s, a, offset, rows, owner, column, type.id));
  if (type.id == TypeId::kBool && !type.shape.empty()) {
    // Unpacked above element by element already (bool tensors).
  }
  return c;
}

}  // namespace

Result<Schema> ImportSchema(const ArrowSchema& s, LogicalTypes* logical) {
  if (s.release == nullptr) return absl::InvalidArgumentError("Arrow schema is released");
  if (s.format == nullptr || std::string_view(s.format) != "+s") {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected an Arrow struct type (a record batch's schema), got ", ArrowTypeText(s)));
  }
  Schema out;
  for (int64_t i = 0; i < s.n_children; ++i) {
    const ArrowSchema& c = *s.children[i];
    Field f;
    f.name = FieldName(c);
    f.nullable = (c.flags & ARROW_FLAG_NULLABLE) != 0;
    FW_ASSIGN_OR_RETURN(f.type, TypeOf(c, f.name));
    if (logical != nullptr && c.format != nullptr && c.dictionary == nullptr) {
      if (std::optional<Temporal> t = TemporalOf(c.format)) (*logical)[f.name] = t->tag;
    }
    out.fields.push_back(std::move(f));
  }
  FW_RETURN_IF_ERROR(out.Validate());
  return out;
}

Result<RecordBatch> ImportBatch(ArrowArray* array, const ArrowSchema& schema) {
  auto holder = std::make_shared<ImportedArray>();
  holder->array = *array;
  array->release = nullptr;
  const ArrowArray& a = holder->array;
  if (a.release == nullptr) return absl::InvalidArgumentError("Arrow array is released");
  FW_ASSIGN_OR_RETURN(Schema fields, ImportSchema(schema));
  if (a.n_children != static_cast<int64_t>(fields.fields.size())) {
    return absl::InvalidArgumentError(absl::StrCat("Arrow struct array has ", a.n_children,
                                                   " children, its schema ", fields.fields.size()));
  }
  if (CountNulls(a, a.offset, a.length) > 0) {
    return absl::InvalidArgumentError("Arrow record batch has null rows at the top level");
  }
  RecordBatch b;
  b.num_rows = a.length;
  Owner owner = holder;
  for (int64_t i = 0; i < a.n_children; ++i) {
    const Field& f = fields.fields[static_cast<size_t>(i)];
    const ArrowArray* child = a.children != nullptr ? a.children[i] : nullptr;
    if (child == nullptr) return Bad(f.name, "missing child array");
    if (child->length < a.length + a.offset) {
      return absl::InvalidArgumentError(absl::StrCat("column '", f.name, "' has ", child->length - a.offset,
                                                     " rows but the batch has ", a.length));
    }
    // Rows [a.offset, a.offset + a.length) of the child (which may be longer).
    FW_ASSIGN_OR_RETURN(Column c,
                        ImportColumn(*schema.children[i], *child, a.offset, a.length, f.type, owner, f.name));
    FW_RETURN_IF_ERROR(c.Validate(f.name));
    b.columns.push_back(std::move(c));
  }
  b.schema = std::move(fields);
  // Arrow marks nearly every field nullable; a field whose data has no nulls
  // is checked against the target schema by the writer, not here.
  return b;
}

namespace {

// Adapts `c` to `target` where only child nullability differs (and the
// data has no nulls where the target allows none), or a list<T?> without
// nulls becomes the packed list<T>. An empty message means the shapes
// differ.
Status ConformNested(Column& c, const DataType& target, const std::string& path) {
  if (c.type == target) return absl::OkStatus();
  if (target.id == TypeId::kList && !target.is_nested() && c.type.id == TypeId::kList && c.type.is_nested()) {
    const Column& item = c.children[0];
    if (!(item.type == DataType::Scalar(target.elem))) return absl::InvalidArgumentError("");
    if (item.null_count > 0) {
      return absl::InvalidArgumentError(absl::StrCat("'", path, "' elements hold ", item.null_count, " nulls"));
    }
    c.values = item.values;
    c.children.clear();
    c.type = target;
    return absl::OkStatus();
  }
  if (c.type.id != target.id || c.type.children.size() != target.children.size() || !target.is_nested()) {
    return absl::InvalidArgumentError("");
  }
  for (size_t i = 0; i < target.children.size(); ++i) {
    const Field& want = target.children[i];
    const std::string sub = absl::StrCat(path, target.id == TypeId::kStruct ? "." : "[", want.name,
                                         target.id == TypeId::kStruct ? "" : "]");
    if (c.type.children[i].name != want.name) return absl::InvalidArgumentError("");
    Column& ch = c.children[i];
    FW_RETURN_IF_ERROR(ConformNested(ch, want.type, sub));
    // A struct's fields may hold nulls in its null rows (cleared below).
    if (!want.nullable && ch.null_count > 0 && target.id != TypeId::kStruct) {
      return absl::InvalidArgumentError(absl::StrCat("'", sub, "' holds ", ch.null_count, " nulls"));
    }
  }
  c.type = target;
  if (target.id == TypeId::kStruct) {
    Status s = ClearChildNullsUnderNullRows(&c, path);
    if (!s.ok()) return absl::InvalidArgumentError(std::string(s.message()));
  }
  return absl::OkStatus();
}

}  // namespace

Result<RecordBatch> ConformImported(RecordBatch batch, const Schema& target, std::string_view what) {
  for (size_t i = 0; i < batch.columns.size(); ++i) {
    Field& f = batch.schema.fields[i];
    Column& c = batch.columns[i];
    const int ti = target.FieldIndex(f.name);
    if (ti < 0) {
      return absl::InvalidArgumentError(absl::StrCat(AsAbsl(what), ": column '", f.name,
                                                     "' is not in the table schema (", target.ToString(), ")"));
    }
    const Field& t = target.fields[static_cast<size_t>(ti)];
    const bool reshape = IsScalar(t.type.id) && t.type.id == c.type.id && !c.type.shape.empty() &&
                         !t.type.shape.empty() && t.type.num_elements() == c.type.num_elements();
    if (!(c.type == t.type) && !reshape) {
      // Arrow marks nested children nullable by default: data whose
      // children hold no nulls conforms to a table that declares them not.
      Status s = ConformNested(c, t.type, f.name);
      if (!s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(AsAbsl(what), ": column '", f.name, "' is ",
                                                       c.type.ToString(), " in the Arrow data but ",
                                                       t.type.ToString(), " in the table",
                                                       s.message().empty() ? "" : " (", s.message(),
                                                       s.message().empty() ? "" : ")"));
      }
    }
    c.type = t.type;
    if (!t.nullable && !c.validity.empty() && c.null_count > 0) {
      return absl::InvalidArgumentError(absl::StrCat(AsAbsl(what), ": column '", f.name, "' has ", c.null_count,
                                                     " nulls but is not nullable in the table"));
    }
    if (!t.nullable) c.validity = {};
    f = t;
  }
  return batch;
}

Status ImportStream(ArrowArrayStream* stream,
                    const std::function<Status(const Schema&, const LogicalTypes&)>& on_schema,
                    const std::function<Status(RecordBatch)>& sink) {
  struct Releaser {
    ArrowArrayStream* s;
    ~Releaser() {
      if (s->release != nullptr) s->release(s);
    }
  } releaser{stream};
  if (stream->release == nullptr) return absl::InvalidArgumentError("Arrow stream is released");
  auto err = [&](int code, std::string_view what) {
    const char* e = stream->get_last_error(stream);
    return absl::InvalidArgumentError(absl::StrCat("Arrow stream: ", AsAbsl(what), ": ",
                                                   e != nullptr ? e : std::strerror(code)));
  };
  ArrowSchema schema{};
  if (int rc = stream->get_schema(stream, &schema); rc != 0) return err(rc, "reading its schema");
  struct SchemaReleaser {
    ArrowSchema* s;
    ~SchemaReleaser() {
      if (s->release != nullptr) s->release(s);
    }
  } schema_releaser{&schema};
  LogicalTypes logical;
  FW_ASSIGN_OR_RETURN(Schema fw, ImportSchema(schema, &logical));
  FW_RETURN_IF_ERROR(on_schema(fw, logical));
  for (int64_t n = 0;; ++n) {
    ArrowArray array{};
    if (int rc = stream->get_next(stream, &array); rc != 0) return err(rc, absl::StrCat("reading batch ", n));
    if (array.release == nullptr) return absl::OkStatus();
    FW_ASSIGN_OR_RETURN_CTX(RecordBatch b, ImportBatch(&array, schema), "Arrow stream batch ", n);
    FW_RETURN_IF_ERROR_CTX(sink(std::move(b)), "Arrow stream batch ", n);
  }
}

}  // namespace flywheel::format
