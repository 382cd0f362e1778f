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

long double DecimalValue(const uint8_t* p, int width, int scale) {
  __int128 v = 0;
  std::memcpy(&v, p, static_cast<size_t>(width));
  if (width < 16 && (p[width - 1] & 0x80)) v |= ~static_cast<__int128>(0) << (8 * width);
  return static_cast<long double>(v) / std::pow(10.0L, scale);
}

// The table type of a Parquet field (structs stay structs, lists lists, maps
// maps; decimals become float64, fixed binary binary, UNKNOWN a string).
Result<DataType> TableType(const Field& f, const std::string& path) {
  const ValueKind k = f.type.kind;
  if (k == ValueKind::kStruct) {
    std::vector<format::Field> fields;
    for (const Field& c : f.children) {
      FW_ASSIGN_OR_RETURN(DataType ct, TableType(c, absl::StrCat(path, ".", c.name)));
      fields.push_back(format::Field{c.name, std::move(ct), c.nullable || c.type.kind == ValueKind::kNull});
    }
    return DataType::Struct(std::move(fields));
  }
  if (k == ValueKind::kList) {
    const Field& e = f.children.at(0);
    if (f.map) {
      const Field& key = e.children.at(0);
      const Field& value = e.children.at(1);
      FW_ASSIGN_OR_RETURN(DataType kt, TableType(key, absl::StrCat(path, "[key]")));
      FW_ASSIGN_OR_RETURN(DataType vt, TableType(value, absl::StrCat(path, "[value]")));
      return DataType::Map(std::move(kt), std::move(vt), value.nullable || value.type.kind == ValueKind::kNull);
    }
    FW_ASSIGN_OR_RETURN(DataType et, TableType(e, absl::StrCat(path, "[item]")));
    return DataType::ListOf(std::move(et), e.nullable || e.type.kind == ValueKind::kNull);
  }
  const TypeId id = ScalarId(f.type);
  if (id == TypeId::kNone) {
    return absl::InvalidArgumentError(absl::StrCat("column ", path, ": Parquet type ", ValueTypeName(f.type),
                                                   " has no table type"));
  }
  return DataType::Scalar(id);
}

// The column of `a` (a Parquet array of `f`) as a table column of `type`
// (TableType(f)): buffers moved, not copied, where the layouts agree.
Result<Column> ToColumn(const Field& f, Array a, const DataType& type, const std::string& path) {
  Column col;
  col.type = type;
  col.length = a.length;
  int64_t nulls = 0;
  for (int64_t i = 0; i < a.length && !a.validity.empty(); ++i) nulls += !a.IsValid(i);
  col.null_count = nulls;
  if (nulls > 0) col.validity = Buffer::FromVector(std::move(a.validity));
  const ValueKind k = f.type.kind;
  if (k == ValueKind::kStruct) {
    for (size_t c = 0; c < f.children.size(); ++c) {
      FW_ASSIGN_OR_RETURN(Column ch, ToColumn(f.children[c], std::move(a.children[c]), type.children[c].type,
                                              absl::StrCat(path, ".", f.children[c].name)));
      col.children.push_back(std::move(ch));
    }
    FW_RETURN_IF_ERROR(format::ClearChildNullsUnderNullRows(&col, path));
    return col;
  }
  if (k == ValueKind::kList) {
    col.offsets = Buffer::FromVector(std::move(a.offsets));
    Array& e = a.children.at(0);
    if (f.map) {
      for (int c = 0; c < 2; ++c) {
        const Field& kf = f.children[0].children[c];
        FW_ASSIGN_OR_RETURN(Column ch, ToColumn(kf, std::move(e.children[c]), type.children[c].type,
                                                absl::StrCat(path, c == 0 ? "[key]" : "[value]")));
        col.children.push_back(std::move(ch));
      }
      return col;
    }
    if (!type.is_nested()) {
      // A packed list<T>: the element values are the values buffer.
      if (e.type.kind == ValueKind::kDecimal) {
        return absl::InvalidArgumentError(absl::StrCat("column ", path, ": lists of decimals are not supported"));
      }
      for (int64_t j = 0; j < e.length && !e.validity.empty(); ++j) {
        if (!e.IsValid(j)) return absl::InvalidArgumentError(absl::StrCat("column ", path, ": a null list element"));
      }
      col.values = Buffer::FromVector(std::move(e.values));
      return col;
    }
    FW_ASSIGN_OR_RETURN(Column ch, ToColumn(f.children[0], std::move(e), type.children[0].type,
                                            absl::StrCat(path, "[item]")));
    col.children.push_back(std::move(ch));
    return col;
  }
  if (k == ValueKind::kNull) {
    col.values = Buffer::FromVector(std::vector<uint8_t>(8, 0));
    col.offsets = Buffer::FromVector(std::vector<int64_t>(static_cast<size_t>(a.length) + 1, 0));
    if (a.length > 0) {
      col.validity = Buffer::FromVector(std::vector<uint8_t>(static_cast<size_t>((a.length + 7) / 8), 0));
      col.null_count = a.length;
    }
    return col;
  }
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
  return col;
}

Status Convert(const Field& f, Array a, const std::string& name, std::vector<Column>* out) {
  FW_ASSIGN_OR_RETURN(DataType type, TableType(f, name));
  FW_ASSIGN_OR_RETURN(Column col, ToColumn(f, std::move(a), type, name));
  FW_RETURN_IF_ERROR(col.Validate(name));
  out->push_back(std::move(col));
  return absl::OkStatus();
}

const char* UnitName(TimeUnit u) { return u == TimeUnit::kMillis ? "ms" : u == TimeUnit::kMicros ? "us" : "ns"; }

void CollectTags(const Field& f, const std::string& prefix, std::map<std::string, std::string>* out) {
  const std::string name = prefix.empty() ? f.name : absl::StrCat(prefix, ".", f.name);
  const ValueType& t = f.type;
  switch (t.kind) {
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
      FW_RETURN_IF_ERROR(Convert(*fields_[i], std::move(arrays[i]), fields_[i]->name, &b.columns));
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
  FW_ASSIGN_OR_RETURN(DataType type, TableType(field, field.name));
  return std::vector<format::Field>{
      format::Field{field.name, std::move(type), field.nullable || field.type.kind == ValueKind::kNull}};
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
  FW_RETURN_IF_ERROR(Convert(field, std::move(array), field.name, &out));
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
