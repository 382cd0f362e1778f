#include "flywheel/interop/parquet/convert.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "flywheel/base/half.h"

namespace flywheel::interop::parquet {
namespace {

using format::Buffer;
using format::Column;
using format::DataType;
using format::TypeId;

bool IsNumeric(ValueKind k) {
  switch (k) {
    case ValueKind::kBool: case ValueKind::kInt8: case ValueKind::kInt16: case ValueKind::kInt32:
    case ValueKind::kInt64: case ValueKind::kUInt8: case ValueKind::kUInt16: case ValueKind::kUInt32:
    case ValueKind::kUInt64: case ValueKind::kFloat16: case ValueKind::kFloat32: case ValueKind::kFloat64:
    case ValueKind::kDate32: case ValueKind::kTime32: case ValueKind::kTime64: case ValueKind::kTimestamp:
      return true;
    default:
      return false;
  }
}

// The flywheel scalar a Parquet value kind is stored as.
TypeId ScalarId(const ValueType& t) {
  switch (t.kind) {
    case ValueKind::kBool: return TypeId::kBool;
    case ValueKind::kInt8: return TypeId::kInt8;
    case ValueKind::kInt16: return TypeId::kInt16;
    case ValueKind::kInt32: case ValueKind::kDate32: case ValueKind::kTime32: return TypeId::kInt32;
    case ValueKind::kInt64: case ValueKind::kTime64: case ValueKind::kTimestamp: return TypeId::kInt64;
    case ValueKind::kUInt8: return TypeId::kUInt8;
    case ValueKind::kUInt16: return TypeId::kUInt16;
    case ValueKind::kUInt32: return TypeId::kUInt32;
    case ValueKind::kUInt64: return TypeId::kUInt64;
    case ValueKind::kFloat16: return TypeId::kFloat16;
    case ValueKind::kFloat32: return TypeId::kFloat32;
    case ValueKind::kFloat64: case ValueKind::kDecimal: return TypeId::kFloat64;
    case ValueKind::kString: case ValueKind::kNull: return TypeId::kString;
    case ValueKind::kBinary: case ValueKind::kFixedBinary: return TypeId::kBinary;
    default: return TypeId::kNone;
  }
}

bool ListAsJson(const Field& f) {
  const Field& e = f.children.at(0);
  return !IsNumeric(e.type.kind);
}

Status Flatten(const Field& f, const std::string& prefix, bool parent_nullable, std::vector<format::Field>* out) {
  const std::string name = prefix.empty() ? f.name : absl::StrCat(prefix, ".", f.name);
  const bool nullable = parent_nullable || f.nullable || f.type.kind == ValueKind::kNull;
  if (f.type.kind == ValueKind::kStruct) {
    for (const Field& c : f.children) FW_RETURN_IF_ERROR(Flatten(c, name, nullable, out));
    return absl::OkStatus();
  }
  format::Field ff;
  ff.name = name;
  ff.nullable = nullable;
  if (f.type.kind == ValueKind::kList) {
    ff.type = ListAsJson(f) ? DataType::String() : DataType::List(ScalarId(f.children[0].type));
  } else {
    ff.type = DataType::Scalar(ScalarId(f.type));
  }
  out->push_back(std::move(ff));
  return absl::OkStatus();
}

// ---- JSON text of nested values -------------------------------------------

void AppendJsonString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          *out += buf;
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

void AppendBase64(const uint8_t* p, size_t n, std::string* out) {
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  out->push_back('"');
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = uint32_t{p[i]} << 16;
    if (i + 1 < n) v |= uint32_t{p[i + 1]} << 8;
    if (i + 2 < n) v |= p[i + 2];
    out->push_back(a[(v >> 18) & 63]);
    out->push_back(a[(v >> 12) & 63]);
    out->push_back(i + 1 < n ? a[(v >> 6) & 63] : '=');
    out->push_back(i + 2 < n ? a[v & 63] : '=');
  }
  out->push_back('"');
}

void AppendDouble(double v, std::string* out) {
  if (std::isnan(v)) {
    *out += "\"NaN\"";
  } else if (std::isinf(v)) {
    *out += v > 0 ? "\"Infinity\"" : "\"-Infinity\"";
  } else {
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    out->append(buf, r.ptr);
  }
}

long double DecimalValue(const uint8_t* p, int width, int scale) {
  __int128 v = 0;
  std::memcpy(&v, p, static_cast<size_t>(width));
  if (width < 16 && (p[width - 1] & 0x80)) v |= ~static_cast<__int128>(0) << (8 * width);
  return static_cast<long double>(v) / std::pow(10.0L, scale);
}

template <typename T>
T Load(const Array& a, int64_t i) {
  T x;
  std::memcpy(&x, a.values.data() + i * sizeof(T), sizeof(T));
  return x;
}

void AppendJson(const Field& f, const Array& a, int64_t i, std::string* out) {
  if (!a.IsValid(i) || f.type.kind == ValueKind::kNull) {
    *out += "null";
    return;
  }
  switch (f.type.kind) {
    case ValueKind::kBool: *out += a.values[i] ? "true" : "false"; return;
    case ValueKind::kInt8: absl::StrAppend(out, Load<int8_t>(a, i)); return;
    case ValueKind::kInt16: absl::StrAppend(out, Load<int16_t>(a, i)); return;
    case ValueKind::kInt32: case ValueKind::kDate32: case ValueKind::kTime32:
      absl::StrAppend(out, Load<int32_t>(a, i));
      return;
    case ValueKind::kInt64: case ValueKind::kTime64: case ValueKind::kTimestamp:
      absl::StrAppend(out, Load<int64_t>(a, i));
      return;
    case ValueKind::kUInt8: absl::StrAppend(out, Load<uint8_t>(a, i)); return;
    case ValueKind::kUInt16: absl::StrAppend(out, Load<uint16_t>(a, i)); return;
    case ValueKind::kUInt32: absl::StrAppend(out, Load<uint32_t>(a, i)); return;
    case ValueKind::kUInt64: absl::StrAppend(out, Load<uint64_t>(a, i)); return;
    case ValueKind::kFloat16: AppendDouble(HalfToDouble(Load<uint16_t>(a, i)), out); return;
    case ValueKind::kFloat32: AppendDouble(Load<float>(a, i), out); return;
    case ValueKind::kFloat64: AppendDouble(Load<double>(a, i), out); return;
    case ValueKind::kDecimal:
      AppendDouble(static_cast<double>(DecimalValue(a.values.data() + i * f.type.width, f.type.width, f.type.scale)),
                   out);
      return;
    case ValueKind::kString:
      AppendJsonString(std::string_view(reinterpret_cast<const char*>(a.values.data()) + a.offsets[i],
                                        static_cast<size_t>(a.offsets[i + 1] - a.offsets[i])),
                       out);
      return;
    case ValueKind::kBinary:
      AppendBase64(a.values.data() + a.offsets[i], static_cast<size_t>(a.offsets[i + 1] - a.offsets[i]), out);
      return;
    case ValueKind::kFixedBinary:
      AppendBase64(a.values.data() + i * f.type.width, static_cast<size_t>(f.type.width), out);
      return;
    case ValueKind::kList: {
      out->push_back('[');
      for (int64_t k = a.offsets[i]; k < a.offsets[i + 1]; ++k) {
        if (k > a.offsets[i]) out->push_back(',');
        AppendJson(f.children[0], a.children[0], k, out);
      }
      out->push_back(']');
      return;
    }
    case ValueKind::kStruct: {
      out->push_back('{');
      for (size_t c = 0; c < f.children.size(); ++c) {
        if (c) out->push_back(',');
        AppendJsonString(f.children[c].name, out);
        out->push_back(':');
        AppendJson(f.children[c], a.children[c], i, out);
      }
      out->push_back('}');
      return;
    }
    case ValueKind::kNull: *out += "null"; return;
  }
}

// Validity of `a` combined with an enclosing struct's (`outer`, empty = all valid).
std::vector<uint8_t> AndValidity(const std::vector<uint8_t>& outer, const Array& a, int64_t* nulls) {
  *nulls = 0;
  if (outer.empty() && a.validity.empty()) return {};
  std::vector<uint8_t> v(static_cast<size_t>((a.length + 7) / 8), 0);
  for (int64_t i = 0; i < a.length; ++i) {
    const bool ok = a.IsValid(i) && (outer.empty() || ((outer[i >> 3] >> (i & 7)) & 1));
    if (ok) {
      v[i >> 3] |= static_cast<uint8_t>(1u << (i & 7));
    } else {
      ++*nulls;
    }
  }
  if (*nulls == 0) return {};
  return v;
}

Status Convert(const Field& f, Array a, const std::vector<uint8_t>& outer, const std::string& name,
               std::vector<Column>* out) {
  int64_t nulls = 0;
  std::vector<uint8_t> validity = AndValidity(outer, a, &nulls);
  if (f.type.kind == ValueKind::kStruct) {
    for (size_t c = 0; c < f.children.size(); ++c) {
      FW_RETURN_IF_ERROR(Convert(f.children[c], std::move(a.children[c]), validity,
                                 absl::StrCat(name, ".", f.children[c].name), out));
    }
    return absl::OkStatus();
  }
  Column col;
  col.length = a.length;
  col.null_count = nulls;
  if (!validity.empty()) col.validity = Buffer::FromVector(std::move(validity));
  const ValueKind k = f.type.kind;
  if (k == ValueKind::kList && !ListAsJson(f)) {
    const Array& e = a.children.at(0);
    if (e.null_count > 0) {
      for (int64_t i = 0; i < a.length; ++i) {
        for (int64_t j = a.offsets[i]; j < a.offsets[i + 1]; ++j) {
          if (!e.IsValid(j)) {
            return absl::InvalidArgumentError(absl::StrCat(
                "column ", name, ": row ", i, " has a null list element (elements of list<",
                AsAbsl(format::TypeIdName(ScalarId(e.type))), "> cannot be null in a table)"));
          }
        }
      }
    }
    col.type = DataType::List(ScalarId(e.type));
    col.offsets = Buffer::FromVector(std::move(a.offsets));
    if (e.type.kind == ValueKind::kDecimal) {
      return absl::InvalidArgumentError(absl::StrCat("column ", name, ": lists of decimals are not supported"));
    }
    col.values = Buffer::FromVector(std::move(a.children[0].values));
    out->push_back(std::move(col));
    return absl::OkStatus();
  }
  if (k == ValueKind::kList || k == ValueKind::kNull) {
    // JSON text per row (all null for kNull).
    std::string data;
    std::vector<int64_t> offsets{0};
    offsets.reserve(static_cast<size_t>(a.length) + 1);
    for (int64_t i = 0; i < a.length; ++i) {
      if (k == ValueKind::kList && col.IsValid(i)) AppendJson(f, a, i, &data);
      offsets.push_back(static_cast<int64_t>(data.size()));
    }
    if (k == ValueKind::kNull && a.length > 0) {
      std::vector<uint8_t> none(static_cast<size_t>((a.length + 7) / 8), 0);
      col.validity = Buffer::FromVector(std::move(none));
      col.null_count = a.length;
    }
    col.type = DataType::String();
    col.values = Buffer::FromString(std::move(data));
    col.offsets = Buffer::FromVector(std::move(offsets));
    out->push_back(std::move(col));
    return absl::OkStatus();
  }
  col.type = DataType::Scalar(ScalarId(f.type));
  if (k == ValueKind::kString || k == ValueKind::kBinary) {
    col.values = Buffer::FromVector(std::move(a.values));
    col.offsets = Buffer::FromVector(std::move(a.offsets));
  } else if (k == ValueKind::kFixedBinary) {
    std::vector<int64_t> offsets(static_cast<size_t>(a.length) + 1);
    for (int64_t i = 0; i <= a.length; ++i) offsets[i] = i * f.type.width;
    col.values = Buffer::FromVector(std::move(a.values));
    col.offsets = Buffer::FromVector(std::move(offsets));
  } else if (k == ValueKind::kDecimal) {
    std::vector<double> v(static_cast<size_t>(a.length));
    for (int64_t i = 0; i < a.length; ++i) {
      v[i] = static_cast<double>(DecimalValue(a.values.data() + i * f.type.width, f.type.width, f.type.scale));
    }
    col.values = Buffer::FromVector(std::move(v));
  } else {
    col.values = Buffer::FromVector(std::move(a.values));
  }
  FW_RETURN_IF_ERROR(col.Validate(name));
  out->push_back(std::move(col));
  return absl::OkStatus();
}

const char* UnitName(TimeUnit u) { return u == TimeUnit::kMillis ? "ms" : u == TimeUnit::kMicros ? "us" : "ns"; }

void CollectTags(const Field& f, const std::string& prefix, std::map<std::string, std::string>* out) {
  const std::string name = prefix.empty() ? f.name : absl::StrCat(prefix, ".", f.name);
  const ValueType& t = f.type;
  switch (t.kind) {
    case ValueKind::kStruct:
      for (const Field& c : f.children) CollectTags(c, name, out);
      return;
    case ValueKind::kDate32: (*out)[name] = "date32"; return;
    case ValueKind::kTime32: case ValueKind::kTime64: (*out)[name] = absl::StrCat("time(", UnitName(t.unit), ")"); return;
    case ValueKind::kTimestamp:
      (*out)[name] = absl::StrCat("timestamp(", UnitName(t.unit), t.adjusted_to_utc ? ", UTC)" : ")");
      return;
    case ValueKind::kDecimal: (*out)[name] = absl::StrCat("decimal(", t.precision, ",", t.scale, ")"); return;
    default: return;
  }
}

class ParquetSource final : public interop::RecordBatchReader {
 public:
  ParquetSource(std::unique_ptr<ParquetReader> r, std::vector<std::string> columns, format::Schema schema,
                std::vector<const Field*> fields)
      : r_(std::move(r)), columns_(std::move(columns)), schema_(std::move(schema)), fields_(std::move(fields)) {}

  const format::Schema& schema() const override { return schema_; }
  int64_t bytes_read() const override { return bytes_; }
  std::map<std::string, std::string> logical_types() const override {
    std::map<std::string, std::string> tags;
    for (const Field* f : fields_) CollectTags(*f, "", &tags);
    return tags;
  }

  Result<std::optional<format::RecordBatch>> Next() override {
    if (next_ >= r_->num_row_groups()) return std::optional<format::RecordBatch>();
    const int g = next_++;
    FW_ASSIGN_OR_RETURN(std::vector<Array> arrays, r_->ReadRowGroup(g, columns_));
    format::RecordBatch b;
    b.schema = schema_;
    b.num_rows = r_->metadata().row_groups[g].num_rows;
    for (size_t i = 0; i < arrays.size(); ++i) {
      FW_RETURN_IF_ERROR(Convert(*fields_[i], std::move(arrays[i]), {}, fields_[i]->name, &b.columns));
    }
    for (const auto& cc : r_->metadata().row_groups[g].columns) {
      if (cc.meta_data) bytes_ += cc.meta_data->total_compressed_size;
    }
    FW_RETURN_IF_ERROR(b.Validate());
    return std::optional<format::RecordBatch>(std::move(b));
  }

 private:
  std::unique_ptr<ParquetReader> r_;
  std::vector<std::string> columns_;
  format::Schema schema_;
  std::vector<const Field*> fields_;
  int next_ = 0;
  int64_t bytes_ = 0;
};

}  // namespace

Result<std::vector<format::Field>> ToTableFields(const Field& field) {
  std::vector<format::Field> out;
  FW_RETURN_IF_ERROR(Flatten(field, "", false, &out));
  return out;
}

std::map<std::string, std::string> LogicalTypeTags(const Field& field) {
  std::map<std::string, std::string> tags;
  CollectTags(field, "", &tags);
  return tags;
}

Result<ValueType> ParseLogicalTypeTag(std::string_view tag) {
  auto unit = [](std::string_view u) -> std::optional<TimeUnit> {
    if (u == "ms") return TimeUnit::kMillis;
    if (u == "us") return TimeUnit::kMicros;
    if (u == "ns") return TimeUnit::kNanos;
    return std::nullopt;
  };
  auto bad = [&] { return absl::InvalidArgumentError(absl::StrCat("unknown logical type tag '", AsAbsl(tag), "'")); };
  if (tag == "date32") return ValueType{ValueKind::kDate32};
  const size_t open = tag.find('(');
  if (open == std::string_view::npos || tag.back() != ')') return bad();
  const std::string_view head = tag.substr(0, open);
  std::string_view args = tag.substr(open + 1, tag.size() - open - 2);
  if (head == "time" || head == "timestamp") {
    bool utc = false;
    if (const size_t comma = args.find(','); comma != std::string_view::npos) {
      utc = args.substr(comma) == ", UTC";
      if (!utc) return bad();
      args = args.substr(0, comma);
    }
    auto u = unit(args);
    if (!u) return bad();
    ValueType t{head == "timestamp" ? ValueKind::kTimestamp
                                    : (*u == TimeUnit::kMillis ? ValueKind::kTime32 : ValueKind::kTime64)};
    t.unit = *u;
    t.adjusted_to_utc = utc;
    return t;
  }
  if (head == "decimal") {
    const size_t comma = args.find(',');
    if (comma == std::string_view::npos) return bad();
    int p = 0, s = 0;
    if (!absl::SimpleAtoi(AsAbsl(args.substr(0, comma)), &p) || !absl::SimpleAtoi(AsAbsl(args.substr(comma + 1)), &s) ||
        p < 1 || p > 38 || s < 0 || s > p) {
      return bad();
    }
    ValueType t{ValueKind::kDecimal, p <= 9 ? 4 : p <= 18 ? 8 : 16};
    t.precision = p;
    t.scale = s;
    return t;
  }
  return bad();
}

Result<std::vector<format::Column>> ToTableColumns(const Field& field, Array array) {
  std::vector<format::Column> out;
  FW_RETURN_IF_ERROR(Convert(field, std::move(array), {}, field.name, &out));
  return out;
}

Result<std::unique_ptr<interop::RecordBatchReader>> OpenParquetSource(const std::string& path,
                                                                      const SourceOptions& options) {
  FW_ASSIGN_OR_RETURN(auto r, ParquetReader::Open(path));
  r->set_verify_page_crc(options.verify_page_crc);
  std::vector<const Field*> fields;
  if (options.columns.empty()) {
    for (const Field& f : r->fields()) fields.push_back(&f);
  } else {
    for (const std::string& c : options.columns) {
      const Field* found = nullptr;
      for (const Field& f : r->fields()) {
        if (f.name == c) found = &f;
      }
      if (!found) return absl::NotFoundError(absl::StrCat(path, " has no column '", c, "'"));
      fields.push_back(found);
    }
  }
  format::Schema schema;
  for (const Field* f : fields) {
    FW_ASSIGN_OR_RETURN(auto ff, ToTableFields(*f));
    for (auto& x : ff) schema.fields.push_back(std::move(x));
  }
  FW_RETURN_IF_ERROR_CTX(schema.Validate(), path);
  std::vector<std::string> columns;
  for (const Field* f : fields) columns.push_back(f->name);
  return std::unique_ptr<interop::RecordBatchReader>(
      new ParquetSource(std::move(r), std::move(columns), std::move(schema), std::move(fields)));
}

}  // namespace flywheel::interop::parquet
