// Parquet metadata <-> Thrift compact protocol. Field ids and types are those
// of parquet.thrift (apache/parquet-format); docs/format/parquet.md.
//
// Reading is strict about what flywheel keeps (wire type, range, presence of
// required fields) and lenient about everything else: unknown fields and
// union members are skipped, so files from newer writers parse.

#include "flywheel/interop/parquet/metadata.h"

#include <initializer_list>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "flywheel/interop/parquet/thrift.h"

namespace flywheel::interop::parquet {
namespace {

using CT = CompactType;

Status Invalid(std::string_view what, size_t at, std::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("thrift: ", AsAbsl(what), " at byte ", at, ": ", AsAbsl(problem)));
}

// ---------------------------------------------------------------------------
// Field readers: each checks the wire type before reading, so a field id
// reused with another type is reported rather than misread.

Status ExpectType(const CompactReader& r, const FieldHeader& f, CT want, std::string_view what) {
  const bool is_bool = f.type == CT::kBoolTrue || f.type == CT::kBoolFalse;
  if (want == CT::kBoolTrue ? is_bool : f.type == want) return absl::OkStatus();
  return Invalid(what, r.offset(),
                 absl::StrCat("field ", f.id, " has wire type ", CompactTypeName(f.type),
                              ", expected ", CompactTypeName(want)));
}

Result<bool> BoolField(const CompactReader& r, const FieldHeader& f, std::string_view what) {
  FW_RETURN_IF_ERROR(ExpectType(r, f, CT::kBoolTrue, what));
  return f.type == CT::kBoolTrue;
}

Result<int8_t> ByteField(CompactReader& r, const FieldHeader& f, std::string_view what) {
  FW_RETURN_IF_ERROR(ExpectType(r, f, CT::kByte, what));
  return r.ReadByte(what);
}

Result<int16_t> I16Field(CompactReader& r, const FieldHeader& f, std::string_view what) {
  FW_RETURN_IF_ERROR(ExpectType(r, f, CT::kI16, what));
  return r.ReadI16(what);
}

Result<int32_t> I32Field(CompactReader& r, const FieldHeader& f, std::string_view what) {
  FW_RETURN_IF_ERROR(ExpectType(r, f, CT::kI32, what));
  return r.ReadI32(what);
}

Result<int64_t> I64Field(CompactReader& r, const FieldHeader& f, std::string_view what) {
  FW_RETURN_IF_ERROR(ExpectType(r, f, CT::kI64, what));
  return r.ReadI64(what);
}

// Stores a parsed value into a struct member (switch cases stay one line).
template <typename T, typename U>
Status Set(T& target, Result<U> value) {
  if (!value.ok()) return value.status();
  target = *std::move(value);
  return absl::OkStatus();
}

// Counts, sizes and offsets: a negative one is corrupt, and rejecting it here
// spares every user of the metadata a signed/unsigned trap.
Result<int32_t> CountI32Field(CompactReader& r, const FieldHeader& f, std::string_view what) {
  const size_t at = r.offset();
  FW_ASSIGN_OR_RETURN(int32_t v, I32Field(r, f, what));
  if (v < 0) return Invalid(what, at, absl::StrCat("negative value ", v));
  return v;
}

Result<int64_t> CountI64Field(CompactReader& r, const FieldHeader& f, std::string_view what) {
  const size_t at = r.offset();
  FW_ASSIGN_OR_RETURN(int64_t v, I64Field(r, f, what));
  if (v < 0) return Invalid(what, at, absl::StrCat("negative value ", v));
  return v;
}

Result<std::string> StringField(CompactReader& r, const FieldHeader& f, std::string_view what) {
  FW_RETURN_IF_ERROR(ExpectType(r, f, CT::kBinary, what));
  return r.ReadBinary(what);
}

// Thrift enums are i32 on the wire; `known` says which values this reader
// understands.
template <typename E>
Result<E> EnumValue(CompactReader& r, std::string_view what, std::string_view enum_name,
                    bool (*known)(int32_t)) {
  const size_t at = r.offset();
  FW_ASSIGN_OR_RETURN(int32_t v, r.ReadI32(what));
  if (!known(v)) return Invalid(what, at, absl::StrCat("unknown ", AsAbsl(enum_name), " ", v));
  return static_cast<E>(v);
}

template <typename E>
Result<E> EnumField(CompactReader& r, const FieldHeader& f, std::string_view what,
                    std::string_view enum_name, bool (*known)(int32_t)) {
  FW_RETURN_IF_ERROR(ExpectType(r, f, CT::kI32, what));
  return EnumValue<E>(r, what, enum_name, known);
}

bool KnownPhysicalType(int32_t v) { return v >= 0 && v <= 7; }
bool KnownRepetition(int32_t v) { return v >= 0 && v <= 2; }
bool KnownConvertedType(int32_t v) { return v >= 0 && v <= 21; }
bool KnownCodec(int32_t v) { return v >= 0 && v <= 7; }
bool KnownEncoding(int32_t v) { return v == 0 || (v >= 2 && v <= 9); }
bool KnownPageType(int32_t v) { return v >= 0 && v <= 3; }
bool AnyI32(int32_t) { return true; }

// Reads a list field whose elements have wire type `elem`, calling
// `element(i)` -> Status for each; element i reads itself.
template <typename F>
Status ListField(CompactReader& r, const FieldHeader& f, CT elem, std::string_view what,
                 F&& element) {
  FW_RETURN_IF_ERROR(ExpectType(r, f, CT::kList, what));
  const size_t at = r.offset();
  FW_ASSIGN_OR_RETURN(ListHeader h, r.ReadListHeader(what));
  if (h.size > 0 && h.elem_type != elem) {
    return Invalid(what, at,
                   absl::StrCat("list of ", CompactTypeName(h.elem_type), ", expected list of ",
                                CompactTypeName(elem)));
  }
  for (uint32_t i = 0; i < h.size; ++i) {
    FW_RETURN_IF_ERROR_CTX(element(i), AsAbsl(what), "[", i, "]");
  }
  return absl::OkStatus();
}

// Presence of required fields: bit `id` of `seen` is set once field `id` was
// read.
class Seen {
 public:
  void Mark(int16_t id) {
    if (id >= 0 && id < 32) bits_ |= uint32_t{1} << id;
  }
  Status Require(std::string_view strct, size_t end,
                 std::initializer_list<std::pair<int, std::string_view>> fields) const {
    for (const auto& [id, name] : fields) {
      if ((bits_ & (uint32_t{1} << id)) == 0) {
        return Invalid(absl::StrCat(AsAbsl(strct), ".", AsAbsl(name)), end,
                       absl::StrCat("required field ", id, " is missing"));
      }
    }
    return absl::OkStatus();
  }

 private:
  uint32_t bits_ = 0;
};

// ---------------------------------------------------------------------------
// Parsers, one per structure.

Status ParseStatistics(CompactReader& r, Statistics* s) {
  return r.ReadStruct("Statistics", [&](const FieldHeader& f) -> Status {
    switch (f.id) {
      case 1:
        return Set(s->max, StringField(r, f, "Statistics.max"));
      case 2:
        return Set(s->min, StringField(r, f, "Statistics.min"));
      case 3:
        return Set(s->null_count, CountI64Field(r, f, "Statistics.null_count"));
      case 4:
        return Set(s->distinct_count, CountI64Field(r, f, "Statistics.distinct_count"));
      case 5:
        return Set(s->max_value, StringField(r, f, "Statistics.max_value"));
      case 6:
        return Set(s->min_value, StringField(r, f, "Statistics.min_value"));
      default:
        return r.Skip(f.type);
    }
  });
}

// union TimeUnit { 1: MilliSeconds MILLIS; 2: MicroSeconds MICROS; 3: NanoSeconds NANOS }
Result<TimeUnit> ParseTimeUnit(CompactReader& r) {
  int members = 0;
  TimeUnit unit = TimeUnit::kMillis;
  FW_RETURN_IF_ERROR(r.ReadStruct("TimeUnit", [&](const FieldHeader& f) -> Status {
    if (f.id < 1 || f.id > 3) {
      return Invalid("TimeUnit", r.offset(), absl::StrCat("unknown union member ", f.id));
    }
    if (++members > 1) return Invalid("TimeUnit", r.offset(), "union has several members");
    FW_RETURN_IF_ERROR(ExpectType(r, f, CT::kStruct, "TimeUnit"));
    unit = static_cast<TimeUnit>(f.id - 1);
    return r.Skip(f.type);  // MilliSeconds etc. are empty structs
  }));
  if (members == 0) return Invalid("TimeUnit", r.offset(), "union has no member");
  return unit;
}

// TimeType and TimestampType: 1: required bool isAdjustedToUTC, 2: required TimeUnit unit.
Status ParseTimeLike(CompactReader& r, std::string_view name, LogicalType* lt) {
  Seen seen;
  const std::string adjusted = absl::StrCat(AsAbsl(name), ".isAdjustedToUTC");
  const std::string unit = absl::StrCat(AsAbsl(name), ".unit");
  FW_RETURN_IF_ERROR(r.ReadStruct(name, [&](const FieldHeader& f) -> Status {
    seen.Mark(f.id);
    switch (f.id) {
      case 1:
        return Set(lt->adjusted_to_utc, BoolField(r, f, adjusted));
      case 2:
        FW_RETURN_IF_ERROR(ExpectType(r, f, CT::kStruct, unit));
        return Set(lt->unit, ParseTimeUnit(r));
      default:
        return r.Skip(f.type);
    }
  }));
  return seen.Require(name, r.offset(), {{1, "isAdjustedToUTC"}, {2, "unit"}});
}

Status ParseDecimalType(CompactReader& r, LogicalType* lt) {
  Seen seen;
  FW_RETURN_IF_ERROR(r.ReadStruct("DecimalType", [&](const FieldHeader& f) -> Status {
    seen.Mark(f.id);
    switch (f.id) {
      case 1:
        return Set(lt->decimal_scale, I32Field(r, f, "DecimalType.scale"));
      case 2:
        return Set(lt->decimal_precision, I32Field(r, f, "DecimalType.precision"));
      default:
        return r.Skip(f.type);
    }
  }));
  return seen.Require("DecimalType", r.offset(), {{1, "scale"}, {2, "precision"}});
}

Status ParseIntType(CompactReader& r, LogicalType* lt) {
  Seen seen;
  FW_RETURN_IF_ERROR(r.ReadStruct("IntType", [&](const FieldHeader& f) -> Status {
    seen.Mark(f.id);
    switch (f.id) {
      case 1:
        return Set(lt->bit_width, ByteField(r, f, "IntType.bitWidth"));
      case 2:
        return Set(lt->is_signed, BoolField(r, f, "IntType.isSigned"));
      default:
        return r.Skip(f.type);
    }
  }));
  return seen.Require("IntType", r.offset(), {{1, "bitWidth"}, {2, "isSigned"}});
}

// The LogicalType union member ids (parquet.thrift); 0: not a member.
int16_t LogicalTypeId(LogicalType::Kind kind) {
  using K = LogicalType::Kind;
  switch (kind) {
    case K::kString:
      return 1;
    case K::kMap:
      return 2;
    case K::kList:
      return 3;
    case K::kEnum:
      return 4;
    case K::kDecimal:
      return 5;
    case K::kDate:
      return 6;
    case K::kTime:
      return 7;
    case K::kTimestamp:
      return 8;
    case K::kInteger:
      return 10;
    case K::kUnknown:
      return 11;
    case K::kJson:
      return 12;
    case K::kBson:
      return 13;
    case K::kUuid:
      return 14;
    case K::kFloat16:
      return 15;
    case K::kNone:
    case K::kOther:
      break;
  }
  return 0;
}

LogicalType::Kind LogicalKindForId(int16_t id) {
  using K = LogicalType::Kind;
  for (K k : {K::kString, K::kMap, K::kList, K::kEnum, K::kDecimal, K::kDate, K::kTime,
              K::kTimestamp, K::kInteger, K::kUnknown, K::kJson, K::kBson, K::kUuid, K::kFloat16}) {
    if (LogicalTypeId(k) == id) return k;
  }
  return K::kOther;
}

Status ParseLogicalType(CompactReader& r, LogicalType* lt) {
  using K = LogicalType::Kind;
  int members = 0;
  FW_RETURN_IF_ERROR(r.ReadStruct("LogicalType", [&](const FieldHeader& f) -> Status {
    if (++members > 1) {
      return Invalid("LogicalType", r.offset(),
                     absl::StrCat("union has several members (another is ", f.id, ")"));
    }
    const K kind = LogicalKindForId(f.id);
    *lt = LogicalType{};
    lt->kind = kind;
    if (kind == K::kOther) {
      // A member added after this reader (VARIANT, GEOMETRY, ...): kept by id.
      lt->other_field_id = f.id;
      return r.Skip(f.type);
    }
    FW_RETURN_IF_ERROR(ExpectType(r, f, CT::kStruct, "LogicalType"));
    switch (kind) {
      case K::kDecimal:
        return ParseDecimalType(r, lt);
      case K::kTime:
        return ParseTimeLike(r, "TimeType", lt);
      case K::kTimestamp:
        return ParseTimeLike(r, "TimestampType", lt);
      case K::kInteger:
        return ParseIntType(r, lt);
      default:
        return r.Skip(f.type);  // an empty struct (StringType, DateType, ...)
    }
  }));
  if (members == 0) return Invalid("LogicalType", r.offset(), "union has no member");
  return absl::OkStatus();
}

Status ParseSchemaElement(CompactReader& r, SchemaElement* e) {
  Seen seen;
  FW_RETURN_IF_ERROR(r.ReadStruct("SchemaElement", [&](const FieldHeader& f) -> Status {
    seen.Mark(f.id);
    switch (f.id) {
      case 1:
        return Set(e->type,
                   EnumField<PhysicalType>(r, f, "SchemaElement.type", "Type", KnownPhysicalType));
      case 2:
        return Set(e->type_length, CountI32Field(r, f, "SchemaElement.type_length"));
      case 3:
        return Set(e->repetition, EnumField<Repetition>(r, f, "SchemaElement.repetition_type",
                                                        "FieldRepetitionType", KnownRepetition));
      case 4:
        return Set(e->name, StringField(r, f, "SchemaElement.name"));
      case 5:
        return Set(e->num_children, CountI32Field(r, f, "SchemaElement.num_children"));
      case 6:
        return Set(e->converted_type,
                   EnumField<ConvertedType>(r, f, "SchemaElement.converted_type", "ConvertedType",
                                            KnownConvertedType));
      case 7:
        return Set(e->scale, I32Field(r, f, "SchemaElement.scale"));
      case 8:
        return Set(e->precision, I32Field(r, f, "SchemaElement.precision"));
      case 9:
        return Set(e->field_id, I32Field(r, f, "SchemaElement.field_id"));
      case 10:
        FW_RETURN_IF_ERROR(ExpectType(r, f, CT::kStruct, "SchemaElement.logicalType"));
        FW_RETURN_IF_ERROR_CTX(ParseLogicalType(r, &e->logical_type), "logicalType");
        return absl::OkStatus();
      default:
        return r.Skip(f.type);
    }
  }));
  return seen.Require("SchemaElement", r.offset(), {{4, "name"}});
}

Status ParseKeyValue(CompactReader& r, KeyValue* kv) {
  Seen seen;
  FW_RETURN_IF_ERROR(r.ReadStruct("KeyValue", [&](const FieldHeader& f) -> Status {
    seen.Mark(f.id);
    switch (f.id) {
      case 1:
        return Set(kv->key, StringField(r, f, "KeyValue.key"));
      case 2:
        return Set(kv->value, StringField(r, f, "KeyValue.value"));
      default:
        return r.Skip(f.type);
    }
  }));
  return seen.Require("KeyValue", r.offset(), {{1, "key"}});
}

Status ParseColumnMetaData(CompactReader& r, ColumnMetaData* m) {
  Seen seen;
  FW_RETURN_IF_ERROR(r.ReadStruct("ColumnMetaData", [&](const FieldHeader& f) -> Status {
    seen.Mark(f.id);
    switch (f.id) {
      case 1:
        return Set(m->type,
                   EnumField<PhysicalType>(r, f, "ColumnMetaData.type", "Type", KnownPhysicalType));
      case 2:
        m->encodings.clear();
        return ListField(r, f, CT::kI32, "ColumnMetaData.encodings", [&](uint32_t) -> Status {
          // Unknown encodings are kept as their numbers (metadata.h says why).
          FW_ASSIGN_OR_RETURN(
              Encoding e, EnumValue<Encoding>(r, "ColumnMetaData.encodings", "Encoding", AnyI32));
          m->encodings.push_back(e);
          return absl::OkStatus();
        });
      case 3:
        m->path_in_schema.clear();
        return ListField(
            r, f, CT::kBinary, "ColumnMetaData.path_in_schema", [&](uint32_t) -> Status {
              FW_ASSIGN_OR_RETURN(std::string s, r.ReadBinary("ColumnMetaData.path_in_schema"));
              m->path_in_schema.push_back(std::move(s));
              return absl::OkStatus();
            });
      case 4:
        return Set(m->codec, EnumField<CompressionCodec>(r, f, "ColumnMetaData.codec",
                                                         "CompressionCodec", KnownCodec));
      case 5:
        return Set(m->num_values, CountI64Field(r, f, "ColumnMetaData.num_values"));
      case 6:
        return Set(m->total_uncompressed_size,
                   CountI64Field(r, f, "ColumnMetaData.total_uncompressed_size"));
      case 7:
        return Set(m->total_compressed_size,
                   CountI64Field(r, f, "ColumnMetaData.total_compressed_size"));
      case 9:
        return Set(m->data_page_offset, CountI64Field(r, f, "ColumnMetaData.data_page_offset"));
      case 10:
        return Set(m->index_page_offset, CountI64Field(r, f, "ColumnMetaData.index_page_offset"));
      case 11:
        return Set(m->dictionary_page_offset,
                   CountI64Field(r, f, "ColumnMetaData.dictionary_page_offset"));
      case 12:
        FW_RETURN_IF_ERROR(ExpectType(r, f, CT::kStruct, "ColumnMetaData.statistics"));
        m->statistics.emplace();
        FW_RETURN_IF_ERROR_CTX(ParseStatistics(r, &*m->statistics), "statistics");
        return absl::OkStatus();
      default:  // 8 key_value_metadata, 13 encoding_stats, 14 bloom filter, ...
        return r.Skip(f.type);
    }
  }));
  return seen.Require("ColumnMetaData", r.offset(),
                      {{1, "type"},
                       {2, "encodings"},
                       {3, "path_in_schema"},
                       {4, "codec"},
                       {5, "num_values"},
                       {6, "total_uncompressed_size"},
                       {7, "total_compressed_size"},
                       {9, "data_page_offset"}});
}

Status ParseColumnChunk(CompactReader& r, ColumnChunk* c) {
  Seen seen;
  FW_RETURN_IF_ERROR(r.ReadStruct("ColumnChunk", [&](const FieldHeader& f) -> Status {
    seen.Mark(f.id);
    switch (f.id) {
      case 1:
        return Set(c->file_path, StringField(r, f, "ColumnChunk.file_path"));
      case 2:
        return Set(c->file_offset, CountI64Field(r, f, "ColumnChunk.file_offset"));
      case 3:
        FW_RETURN_IF_ERROR(ExpectType(r, f, CT::kStruct, "ColumnChunk.meta_data"));
        c->meta_data.emplace();
        FW_RETURN_IF_ERROR_CTX(ParseColumnMetaData(r, &*c->meta_data), "meta_data");
        return absl::OkStatus();
      default:  // page index offsets, encryption
        return r.Skip(f.type);
    }
  }));
  return seen.Require("ColumnChunk", r.offset(), {{2, "file_offset"}});
}

Status ParseRowGroup(CompactReader& r, RowGroup* g) {
  Seen seen;
  FW_RETURN_IF_ERROR(r.ReadStruct("RowGroup", [&](const FieldHeader& f) -> Status {
    seen.Mark(f.id);
    switch (f.id) {
      case 1:
        g->columns.clear();
        return ListField(r, f, CT::kStruct, "columns", [&](uint32_t) -> Status {
          g->columns.emplace_back();
          return ParseColumnChunk(r, &g->columns.back());
        });
      case 2:
        return Set(g->total_byte_size, CountI64Field(r, f, "RowGroup.total_byte_size"));
      case 3:
        return Set(g->num_rows, CountI64Field(r, f, "RowGroup.num_rows"));
      case 5:
        return Set(g->file_offset, CountI64Field(r, f, "RowGroup.file_offset"));
      case 6:
        return Set(g->total_compressed_size, CountI64Field(r, f, "RowGroup.total_compressed_size"));
      case 7:
        return Set(g->ordinal, I16Field(r, f, "RowGroup.ordinal"));
      default:  // 4 sorting_columns
        return r.Skip(f.type);
    }
  }));
  return seen.Require("RowGroup", r.offset(),
                      {{1, "columns"}, {2, "total_byte_size"}, {3, "num_rows"}});
}

Status ParseFileMetaDataStruct(CompactReader& r, FileMetaData* m) {
  Seen seen;
  FW_RETURN_IF_ERROR(r.ReadStruct("FileMetaData", [&](const FieldHeader& f) -> Status {
    seen.Mark(f.id);
    switch (f.id) {
      case 1:
        return Set(m->version, I32Field(r, f, "FileMetaData.version"));
      case 2:
        m->schema.clear();
        return ListField(r, f, CT::kStruct, "schema", [&](uint32_t) -> Status {
          m->schema.emplace_back();
          return ParseSchemaElement(r, &m->schema.back());
        });
      case 3:
        return Set(m->num_rows, CountI64Field(r, f, "FileMetaData.num_rows"));
      case 4:
        m->row_groups.clear();
        return ListField(r, f, CT::kStruct, "row_groups", [&](uint32_t) -> Status {
          m->row_groups.emplace_back();
          return ParseRowGroup(r, &m->row_groups.back());
        });
      case 5:
        m->key_value_metadata.clear();
        return ListField(r, f, CT::kStruct, "key_value_metadata", [&](uint32_t) -> Status {
          m->key_value_metadata.emplace_back();
          return ParseKeyValue(r, &m->key_value_metadata.back());
        });
      case 6:
        return Set(m->created_by, StringField(r, f, "FileMetaData.created_by"));
      default:  // 7 column_orders, encryption
        return r.Skip(f.type);
    }
  }));
  return seen.Require("FileMetaData", r.offset(),
                      {{1, "version"}, {2, "schema"}, {3, "num_rows"}, {4, "row_groups"}});
}

// The schema is a tree flattened depth-first: schema[0] is the root and each
// group's num_children elements follow it (each with its own subtree). The
// walk must use exactly all elements. Iterative, so a deep schema cannot
// exhaust the stack.
Status CheckSchemaTree(const std::vector<SchemaElement>& schema) {
  if (schema.empty()) return absl::InvalidArgumentError("FileMetaData.schema is empty");
  // (element index, children still to visit) of each open group.
  std::vector<std::pair<size_t, int32_t>> open;
  open.emplace_back(0, schema[0].num_children);
  size_t next = 1;
  while (!open.empty()) {
    auto& [group, left] = open.back();
    if (left == 0) {
      open.pop_back();
      continue;
    }
    if (next >= schema.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("FileMetaData.schema: element ", group, " ('", schema[group].name,
                       "') declares ", schema[group].num_children,
                       " children but the schema ends after ", schema.size(), " elements"));
    }
    --left;
    const size_t child = next++;
    if (schema[child].num_children > 0) open.emplace_back(child, schema[child].num_children);
  }
  if (next != schema.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("FileMetaData.schema: the root's tree ends at element ", next, " of ",
                     schema.size(), "; the rest belong to no group"));
  }
  return absl::OkStatus();
}

Status ParseDataPageHeader(CompactReader& r, DataPageHeader* h) {
  Seen seen;
  FW_RETURN_IF_ERROR(r.ReadStruct("DataPageHeader", [&](const FieldHeader& f) -> Status {
    seen.Mark(f.id);
    switch (f.id) {
      case 1:
        return Set(h->num_values, CountI32Field(r, f, "DataPageHeader.num_values"));
      case 2:
        return Set(h->encoding,
                   EnumField<Encoding>(r, f, "DataPageHeader.encoding", "Encoding", KnownEncoding));
      case 3:
        return Set(h->definition_level_encoding,
                   EnumField<Encoding>(r, f, "DataPageHeader.definition_level_encoding", "Encoding",
                                       KnownEncoding));
      case 4:
        return Set(h->repetition_level_encoding,
                   EnumField<Encoding>(r, f, "DataPageHeader.repetition_level_encoding", "Encoding",
                                       KnownEncoding));
      case 5:
        FW_RETURN_IF_ERROR(ExpectType(r, f, CT::kStruct, "DataPageHeader.statistics"));
        h->statistics.emplace();
        FW_RETURN_IF_ERROR_CTX(ParseStatistics(r, &*h->statistics), "statistics");
        return absl::OkStatus();
      default:
        return r.Skip(f.type);
    }
  }));
  return seen.Require("DataPageHeader", r.offset(),
                      {{1, "num_values"},
                       {2, "encoding"},
                       {3, "definition_level_encoding"},
                       {4, "repetition_level_encoding"}});
}

Status ParseDictionaryPageHeader(CompactReader& r, DictionaryPageHeader* h) {
  Seen seen;
  FW_RETURN_IF_ERROR(r.ReadStruct("DictionaryPageHeader", [&](const FieldHeader& f) -> Status {
    seen.Mark(f.id);
    switch (f.id) {
      case 1:
        return Set(h->num_values, CountI32Field(r, f, "DictionaryPageHeader.num_values"));
      case 2:
        return Set(h->encoding, EnumField<Encoding>(r, f, "DictionaryPageHeader.encoding",
                                                    "Encoding", KnownEncoding));
      case 3:
        return Set(h->is_sorted, BoolField(r, f, "DictionaryPageHeader.is_sorted"));
      default:
        return r.Skip(f.type);
    }
  }));
  return seen.Require("DictionaryPageHeader", r.offset(), {{1, "num_values"}, {2, "encoding"}});
}

Status ParseDataPageHeaderV2(CompactReader& r, DataPageHeaderV2* h) {
  Seen seen;
  FW_RETURN_IF_ERROR(r.ReadStruct("DataPageHeaderV2", [&](const FieldHeader& f) -> Status {
    seen.Mark(f.id);
    switch (f.id) {
      case 1:
        return Set(h->num_values, CountI32Field(r, f, "DataPageHeaderV2.num_values"));
      case 2:
        return Set(h->num_nulls, CountI32Field(r, f, "DataPageHeaderV2.num_nulls"));
      case 3:
        return Set(h->num_rows, CountI32Field(r, f, "DataPageHeaderV2.num_rows"));
      case 4:
        return Set(h->encoding, EnumField<Encoding>(r, f, "DataPageHeaderV2.encoding", "Encoding",
                                                    KnownEncoding));
      case 5:
        return Set(h->definition_levels_byte_length,
                   CountI32Field(r, f, "DataPageHeaderV2.definition_levels_byte_length"));
      case 6:
        return Set(h->repetition_levels_byte_length,
                   CountI32Field(r, f, "DataPageHeaderV2.repetition_levels_byte_length"));
      case 7:
        return Set(h->is_compressed, BoolField(r, f, "DataPageHeaderV2.is_compressed"));
      case 8:
        FW_RETURN_IF_ERROR(ExpectType(r, f, CT::kStruct, "DataPageHeaderV2.statistics"));
        h->statistics.emplace();
        FW_RETURN_IF_ERROR_CTX(ParseStatistics(r, &*h->statistics), "statistics");
        return absl::OkStatus();
      default:
        return r.Skip(f.type);
    }
  }));
  return seen.Require("DataPageHeaderV2", r.offset(),
                      {{1, "num_values"},
                       {2, "num_nulls"},
                       {3, "num_rows"},
                       {4, "encoding"},
                       {5, "definition_levels_byte_length"},
                       {6, "repetition_levels_byte_length"}});
}

Status ParsePageHeaderStruct(CompactReader& r, PageHeader* h) {
  Seen seen;
  FW_RETURN_IF_ERROR(r.ReadStruct("PageHeader", [&](const FieldHeader& f) -> Status {
    seen.Mark(f.id);
    switch (f.id) {
      case 1:
        return Set(h->type,
                   EnumField<PageType>(r, f, "PageHeader.type", "PageType", KnownPageType));
      case 2:
        return Set(h->uncompressed_page_size,
                   CountI32Field(r, f, "PageHeader.uncompressed_page_size"));
      case 3:
        return Set(h->compressed_page_size, CountI32Field(r, f, "PageHeader.compressed_page_size"));
      case 4:
        return Set(h->crc, I32Field(r, f, "PageHeader.crc"));
      case 5:
        FW_RETURN_IF_ERROR(ExpectType(r, f, CT::kStruct, "PageHeader.data_page_header"));
        h->data_page_header.emplace();
        FW_RETURN_IF_ERROR_CTX(ParseDataPageHeader(r, &*h->data_page_header), "data_page_header");
        return absl::OkStatus();
      case 7:
        FW_RETURN_IF_ERROR(ExpectType(r, f, CT::kStruct, "PageHeader.dictionary_page_header"));
        h->dictionary_page_header.emplace();
        FW_RETURN_IF_ERROR_CTX(ParseDictionaryPageHeader(r, &*h->dictionary_page_header),
                               "dictionary_page_header");
        return absl::OkStatus();
      case 8:
        FW_RETURN_IF_ERROR(ExpectType(r, f, CT::kStruct, "PageHeader.data_page_header_v2"));
        h->data_page_header_v2.emplace();
        FW_RETURN_IF_ERROR_CTX(ParseDataPageHeaderV2(r, &*h->data_page_header_v2),
                               "data_page_header_v2");
        return absl::OkStatus();
      default:  // 6 index_page_header (an empty struct), bloom filter
        return r.Skip(f.type);
    }
  }));
  FW_RETURN_IF_ERROR(
      seen.Require("PageHeader", r.offset(),
                   {{1, "type"}, {2, "uncompressed_page_size"}, {3, "compressed_page_size"}}));
  const char* missing = nullptr;
  switch (h->type) {
    case PageType::kDataPage:
      if (!h->data_page_header) missing = "data_page_header";
      break;
    case PageType::kDictionaryPage:
      if (!h->dictionary_page_header) missing = "dictionary_page_header";
      break;
    case PageType::kDataPageV2:
      if (!h->data_page_header_v2) missing = "data_page_header_v2";
      break;
    case PageType::kIndexPage:
      break;
  }
  if (missing != nullptr) {
    return Invalid(absl::StrCat("PageHeader.", missing), r.offset(),
                   absl::StrCat("missing for page type ", static_cast<int>(h->type)));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Writers: the inverse, fields in id order, optional fields only when set.

void WriteI32Field(CompactWriter& w, int16_t id, int32_t v) {
  w.WriteFieldHeader(CT::kI32, id);
  w.WriteI32(v);
}

void WriteI64Field(CompactWriter& w, int16_t id, int64_t v) {
  w.WriteFieldHeader(CT::kI64, id);
  w.WriteI64(v);
}

void WriteStringField(CompactWriter& w, int16_t id, std::string_view v) {
  w.WriteFieldHeader(CT::kBinary, id);
  w.WriteBinary(v);
}

template <typename E>
void WriteEnumField(CompactWriter& w, int16_t id, E v) {
  WriteI32Field(w, id, static_cast<int32_t>(v));
}

void WriteEmptyStructField(CompactWriter& w, int16_t id) {
  w.WriteFieldHeader(CT::kStruct, id);
  w.BeginStruct();
  w.EndStruct();
}

void WriteStatistics(CompactWriter& w, const Statistics& s) {
  w.BeginStruct();
  if (s.max) WriteStringField(w, 1, *s.max);
  if (s.min) WriteStringField(w, 2, *s.min);
  if (s.null_count) WriteI64Field(w, 3, *s.null_count);
  if (s.distinct_count) WriteI64Field(w, 4, *s.distinct_count);
  if (s.max_value) WriteStringField(w, 5, *s.max_value);
  if (s.min_value) WriteStringField(w, 6, *s.min_value);
  w.EndStruct();
}

// REQUIRES: lt.kind != kNone.
void WriteLogicalType(CompactWriter& w, const LogicalType& lt) {
  using K = LogicalType::Kind;
  w.BeginStruct();
  const int16_t id = lt.kind == K::kOther ? lt.other_field_id : LogicalTypeId(lt.kind);
  switch (lt.kind) {
    case K::kDecimal:
      w.WriteFieldHeader(CT::kStruct, id);
      w.BeginStruct();
      WriteI32Field(w, 1, lt.decimal_scale);
      WriteI32Field(w, 2, lt.decimal_precision);
      w.EndStruct();
      break;
    case K::kTime:
    case K::kTimestamp:
      w.WriteFieldHeader(CT::kStruct, id);
      w.BeginStruct();
      w.WriteBoolField(1, lt.adjusted_to_utc);
      w.WriteFieldHeader(CT::kStruct, 2);
      w.BeginStruct();  // union TimeUnit
      WriteEmptyStructField(w, static_cast<int16_t>(static_cast<int32_t>(lt.unit) + 1));
      w.EndStruct();
      w.EndStruct();
      break;
    case K::kInteger:
      w.WriteFieldHeader(CT::kStruct, id);
      w.BeginStruct();
      w.WriteFieldHeader(CT::kByte, 1);
      w.WriteByte(static_cast<int8_t>(lt.bit_width));
      w.WriteBoolField(2, lt.is_signed);
      w.EndStruct();
      break;
    default:  // members that are empty structs, and kOther
      WriteEmptyStructField(w, id);
      break;
  }
  w.EndStruct();
}

void WriteSchemaElement(CompactWriter& w, const SchemaElement& e) {
  w.BeginStruct();
  if (e.type) WriteEnumField(w, 1, *e.type);
  // type_length belongs to FIXED_LEN_BYTE_ARRAY; 0 elsewhere means unset.
  if (e.type_length != 0 || e.type == PhysicalType::kFixedLenByteArray) {
    WriteI32Field(w, 2, e.type_length);
  }
  if (e.repetition) WriteEnumField(w, 3, *e.repetition);
  WriteStringField(w, 4, e.name);
  // Readers tell groups from leaves by num_children being set, so leaves
  // (type set, no children) must not carry it.
  if (!e.type || e.num_children != 0) WriteI32Field(w, 5, e.num_children);
  if (e.converted_type) WriteEnumField(w, 6, *e.converted_type);
  if (e.scale) WriteI32Field(w, 7, *e.scale);
  if (e.precision) WriteI32Field(w, 8, *e.precision);
  if (e.field_id) WriteI32Field(w, 9, *e.field_id);
  if (e.logical_type.kind != LogicalType::Kind::kNone) {
    w.WriteFieldHeader(CT::kStruct, 10);
    WriteLogicalType(w, e.logical_type);
  }
  w.EndStruct();
}

void WriteColumnMetaData(CompactWriter& w, const ColumnMetaData& m) {
  w.BeginStruct();
  WriteEnumField(w, 1, m.type);
  w.WriteFieldHeader(CT::kList, 2);
  w.WriteListHeader(CT::kI32, static_cast<uint32_t>(m.encodings.size()));
  for (Encoding e : m.encodings) w.WriteI32(static_cast<int32_t>(e));
  w.WriteFieldHeader(CT::kList, 3);
  w.WriteListHeader(CT::kBinary, static_cast<uint32_t>(m.path_in_schema.size()));
  for (const std::string& p : m.path_in_schema) w.WriteBinary(p);
  WriteEnumField(w, 4, m.codec);
  WriteI64Field(w, 5, m.num_values);
  WriteI64Field(w, 6, m.total_uncompressed_size);
  WriteI64Field(w, 7, m.total_compressed_size);
  WriteI64Field(w, 9, m.data_page_offset);
  if (m.index_page_offset) WriteI64Field(w, 10, *m.index_page_offset);
  if (m.dictionary_page_offset) WriteI64Field(w, 11, *m.dictionary_page_offset);
  if (m.statistics) {
    w.WriteFieldHeader(CT::kStruct, 12);
    WriteStatistics(w, *m.statistics);
  }
  w.EndStruct();
}

void WriteColumnChunk(CompactWriter& w, const ColumnChunk& c) {
  w.BeginStruct();
  if (!c.file_path.empty()) WriteStringField(w, 1, c.file_path);
  WriteI64Field(w, 2, c.file_offset);
  if (c.meta_data) {
    w.WriteFieldHeader(CT::kStruct, 3);
    WriteColumnMetaData(w, *c.meta_data);
  }
  w.EndStruct();
}

void WriteRowGroup(CompactWriter& w, const RowGroup& g) {
  w.BeginStruct();
  w.WriteFieldHeader(CT::kList, 1);
  w.WriteListHeader(CT::kStruct, static_cast<uint32_t>(g.columns.size()));
  for (const ColumnChunk& c : g.columns) WriteColumnChunk(w, c);
  WriteI64Field(w, 2, g.total_byte_size);
  WriteI64Field(w, 3, g.num_rows);
  if (g.file_offset) WriteI64Field(w, 5, *g.file_offset);
  if (g.total_compressed_size) WriteI64Field(w, 6, *g.total_compressed_size);
  if (g.ordinal) {
    w.WriteFieldHeader(CT::kI16, 7);
    w.WriteI16(*g.ordinal);
  }
  w.EndStruct();
}

void WriteStatisticsField(CompactWriter& w, int16_t id, const std::optional<Statistics>& s) {
  if (!s) return;
  w.WriteFieldHeader(CT::kStruct, id);
  WriteStatistics(w, *s);
}

}  // namespace

Result<FileMetaData> ParseFileMetaData(const uint8_t* data, size_t size) {
  CompactReader r(data, size);
  FileMetaData m;
  FW_RETURN_IF_ERROR_CTX(ParseFileMetaDataStruct(r, &m), "parsing FileMetaData");
  if (r.remaining() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("parsing FileMetaData: ", r.remaining(),
                                                   " bytes left after the structure at byte ",
                                                   r.offset()));
  }
  FW_RETURN_IF_ERROR_CTX(CheckSchemaTree(m.schema), "parsing FileMetaData");
  return m;
}

Result<PageHeader> ParsePageHeader(const uint8_t* data, size_t size, size_t* consumed) {
  CompactReader r(data, size);
  PageHeader h;
  FW_RETURN_IF_ERROR_CTX(ParsePageHeaderStruct(r, &h), "parsing PageHeader");
  if (consumed != nullptr) *consumed = r.offset();
  return h;
}

std::string SerializeFileMetaData(const FileMetaData& m) {
  CompactWriter w;
  w.BeginStruct();
  WriteI32Field(w, 1, m.version);
  w.WriteFieldHeader(CT::kList, 2);
  w.WriteListHeader(CT::kStruct, static_cast<uint32_t>(m.schema.size()));
  for (const SchemaElement& e : m.schema) WriteSchemaElement(w, e);
  WriteI64Field(w, 3, m.num_rows);
  w.WriteFieldHeader(CT::kList, 4);
  w.WriteListHeader(CT::kStruct, static_cast<uint32_t>(m.row_groups.size()));
  for (const RowGroup& g : m.row_groups) WriteRowGroup(w, g);
  if (!m.key_value_metadata.empty()) {
    w.WriteFieldHeader(CT::kList, 5);
    w.WriteListHeader(CT::kStruct, static_cast<uint32_t>(m.key_value_metadata.size()));
    for (const KeyValue& kv : m.key_value_metadata) {
      w.BeginStruct();
      WriteStringField(w, 1, kv.key);
      if (kv.value) WriteStringField(w, 2, *kv.value);
      w.EndStruct();
    }
  }
  if (m.created_by) WriteStringField(w, 6, *m.created_by);
  w.EndStruct();
  return std::move(w).Finish();
}

std::string SerializePageHeader(const PageHeader& h) {
  CompactWriter w;
  w.BeginStruct();
  WriteEnumField(w, 1, h.type);
  WriteI32Field(w, 2, h.uncompressed_page_size);
  WriteI32Field(w, 3, h.compressed_page_size);
  if (h.crc) WriteI32Field(w, 4, *h.crc);
  if (const auto& d = h.data_page_header) {
    w.WriteFieldHeader(CT::kStruct, 5);
    w.BeginStruct();
    WriteI32Field(w, 1, d->num_values);
    WriteEnumField(w, 2, d->encoding);
    WriteEnumField(w, 3, d->definition_level_encoding);
    WriteEnumField(w, 4, d->repetition_level_encoding);
    WriteStatisticsField(w, 5, d->statistics);
    w.EndStruct();
  }
  if (const auto& d = h.dictionary_page_header) {
    w.WriteFieldHeader(CT::kStruct, 7);
    w.BeginStruct();
    WriteI32Field(w, 1, d->num_values);
    WriteEnumField(w, 2, d->encoding);
    if (d->is_sorted) w.WriteBoolField(3, *d->is_sorted);
    w.EndStruct();
  }
  if (const auto& d = h.data_page_header_v2) {
    w.WriteFieldHeader(CT::kStruct, 8);
    w.BeginStruct();
    WriteI32Field(w, 1, d->num_values);
    WriteI32Field(w, 2, d->num_nulls);
    WriteI32Field(w, 3, d->num_rows);
    WriteEnumField(w, 4, d->encoding);
    WriteI32Field(w, 5, d->definition_levels_byte_length);
    WriteI32Field(w, 6, d->repetition_levels_byte_length);
    w.WriteBoolField(7, d->is_compressed);
    WriteStatisticsField(w, 8, d->statistics);
    w.EndStruct();
  }
  w.EndStruct();
  return std::move(w).Finish();
}

}  // namespace flywheel::interop::parquet
