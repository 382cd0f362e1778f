#include "flywheel/interop/parquet/metadata.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "flywheel/interop/parquet/thrift.h"
#include "nlohmann/json.hpp"

namespace flywheel::interop::parquet {
namespace {

using ::testing::HasSubstr;
using CT = CompactType;
using Kind = LogicalType::Kind;

const uint8_t* Bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

Result<FileMetaData> Parse(const std::string& s) { return ParseFileMetaData(Bytes(s), s.size()); }

std::string Hex(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}

// ---------------------------------------------------------------------------
// Fixtures

SchemaElement Leaf(std::string name, PhysicalType type, Repetition rep = Repetition::kOptional) {
  SchemaElement e;
  e.name = std::move(name);
  e.type = type;
  e.repetition = rep;
  return e;
}

SchemaElement Group(std::string name, int32_t children, Repetition rep = Repetition::kOptional) {
  SchemaElement e;
  e.name = std::move(name);
  e.repetition = rep;
  e.num_children = children;
  return e;
}

LogicalType Logical(Kind kind) {
  LogicalType lt;
  lt.kind = kind;
  return lt;
}

// A schema using every LogicalType kind, groups and every optional
// SchemaElement field; two row groups, one with every optional field set and
// one with none.
FileMetaData RichFileMetaData() {
  FileMetaData m;
  m.version = 2;
  std::vector<SchemaElement>& s = m.schema;
  s.push_back(Group("schema", 0));
  s[0].repetition.reset();
  int32_t root_children = 0;
  auto child = [&](SchemaElement e) {
    ++root_children;
    s.push_back(std::move(e));
  };

  SchemaElement str = Leaf("s", PhysicalType::kByteArray);
  str.converted_type = ConvertedType::kUtf8;
  str.logical_type = Logical(Kind::kString);
  str.field_id = 1;
  child(str);

  SchemaElement map = Group("m", 1);
  map.converted_type = ConvertedType::kMap;
  map.logical_type = Logical(Kind::kMap);
  child(map);
  SchemaElement kv = Group("key_value", 2, Repetition::kRepeated);
  kv.converted_type = ConvertedType::kMapKeyValue;
  s.push_back(kv);
  s.push_back(Leaf("key", PhysicalType::kByteArray, Repetition::kRequired));
  s.push_back(Leaf("value", PhysicalType::kInt32));

  SchemaElement list = Group("l", 1);
  list.converted_type = ConvertedType::kList;
  list.logical_type = Logical(Kind::kList);
  list.field_id = -7;
  child(list);
  s.push_back(Group("list", 1, Repetition::kRepeated));
  s.push_back(Leaf("element", PhysicalType::kDouble));

  SchemaElement en = Leaf("e", PhysicalType::kByteArray);
  en.converted_type = ConvertedType::kEnum;
  en.logical_type = Logical(Kind::kEnum);
  child(en);

  SchemaElement dec = Leaf("d", PhysicalType::kFixedLenByteArray, Repetition::kRequired);
  dec.type_length = 16;
  dec.converted_type = ConvertedType::kDecimal;
  dec.scale = 3;
  dec.precision = 30;
  dec.logical_type = Logical(Kind::kDecimal);
  dec.logical_type.decimal_scale = 3;
  dec.logical_type.decimal_precision = 30;
  child(dec);

  SchemaElement date = Leaf("date", PhysicalType::kInt32);
  date.converted_type = ConvertedType::kDate;
  date.logical_type = Logical(Kind::kDate);
  child(date);

  SchemaElement time = Leaf("t", PhysicalType::kInt64);
  time.converted_type = ConvertedType::kTimeMicros;
  time.logical_type = Logical(Kind::kTime);
  time.logical_type.adjusted_to_utc = true;
  time.logical_type.unit = TimeUnit::kMicros;
  child(time);

  SchemaElement ts = Leaf("ts", PhysicalType::kInt64);
  ts.logical_type = Logical(Kind::kTimestamp);
  ts.logical_type.adjusted_to_utc = false;
  ts.logical_type.unit = TimeUnit::kNanos;
  child(ts);

  SchemaElement ts_ms = Leaf("ts_ms", PhysicalType::kInt64);
  ts_ms.converted_type = ConvertedType::kTimestampMillis;
  ts_ms.logical_type = Logical(Kind::kTimestamp);
  ts_ms.logical_type.adjusted_to_utc = true;
  ts_ms.logical_type.unit = TimeUnit::kMillis;
  child(ts_ms);

  SchemaElement i8 = Leaf("i8", PhysicalType::kInt32);
  i8.converted_type = ConvertedType::kInt8;
  i8.logical_type = Logical(Kind::kInteger);
  i8.logical_type.bit_width = 8;
  i8.logical_type.is_signed = true;
  child(i8);

  SchemaElement u64 = Leaf("u64", PhysicalType::kInt64);
  u64.converted_type = ConvertedType::kUint64;
  u64.logical_type = Logical(Kind::kInteger);
  u64.logical_type.bit_width = 64;
  u64.logical_type.is_signed = false;
  child(u64);

  SchemaElement null = Leaf("null", PhysicalType::kInt32);
  null.logical_type = Logical(Kind::kUnknown);
  child(null);

  SchemaElement json = Leaf("json", PhysicalType::kByteArray);
  json.converted_type = ConvertedType::kJson;
  json.logical_type = Logical(Kind::kJson);
  child(json);

  SchemaElement bson = Leaf("bson", PhysicalType::kByteArray);
  bson.converted_type = ConvertedType::kBson;
  bson.logical_type = Logical(Kind::kBson);
  child(bson);

  SchemaElement uuid = Leaf("uuid", PhysicalType::kFixedLenByteArray);
  uuid.type_length = 16;
  uuid.logical_type = Logical(Kind::kUuid);
  child(uuid);

  SchemaElement f16 = Leaf("f16", PhysicalType::kFixedLenByteArray);
  f16.type_length = 2;
  f16.logical_type = Logical(Kind::kFloat16);
  child(f16);

  SchemaElement future = Leaf("future", PhysicalType::kByteArray);
  future.logical_type = Logical(Kind::kOther);
  future.logical_type.other_field_id = 17;  // GEOMETRY, unknown to this reader
  child(future);

  SchemaElement interval = Leaf("interval", PhysicalType::kFixedLenByteArray);
  interval.type_length = 12;
  interval.converted_type = ConvertedType::kInterval;
  child(interval);

  child(Leaf("int96", PhysicalType::kInt96, Repetition::kRepeated));
  child(Leaf("flag", PhysicalType::kBoolean, Repetition::kRequired));
  child(Leaf("f", PhysicalType::kFloat));
  s[0].num_children = root_children;

  m.num_rows = (int64_t{1} << 40) + 3;

  RowGroup full;
  ColumnChunk c1;
  c1.file_path = "other/part-0.parquet";
  c1.file_offset = 4;
  ColumnMetaData md;
  md.type = PhysicalType::kByteArray;
  md.encodings = {Encoding::kPlain,
                  Encoding::kRle,
                  Encoding::kRleDictionary,
                  Encoding::kPlainDictionary,
                  Encoding::kBitPacked,
                  Encoding::kDeltaBinaryPacked,
                  Encoding::kDeltaLengthByteArray,
                  Encoding::kDeltaByteArray,
                  Encoding::kByteStreamSplit};
  md.path_in_schema = {"m", "key_value", "key"};
  md.codec = CompressionCodec::kZstd;
  md.num_values = 1000;
  md.total_uncompressed_size = 123456;
  md.total_compressed_size = 65432;
  md.data_page_offset = 1 << 20;
  md.index_page_offset = 77;
  md.dictionary_page_offset = 4;
  Statistics st;
  st.max = std::string("\xff\x00z", 3);
  st.min = "";
  st.null_count = 12;
  st.distinct_count = 0;
  st.max_value = "zzz";
  st.min_value = std::string(300, 'a');
  md.statistics = st;
  c1.meta_data = md;
  full.columns.push_back(c1);
  ColumnChunk c2;  // no meta_data: it lives elsewhere
  c2.file_offset = 99;
  full.columns.push_back(c2);
  ColumnChunk c3;
  c3.file_offset = 1000;
  ColumnMetaData md3;
  md3.type = PhysicalType::kInt96;
  md3.path_in_schema = {"int96"};
  md3.codec = CompressionCodec::kLz4Raw;
  md3.data_page_offset = 0;
  md3.statistics = Statistics{};  // present but empty
  c3.meta_data = md3;
  full.columns.push_back(c3);
  full.total_byte_size = 5000000000;
  full.num_rows = (int64_t{1} << 40);
  full.file_offset = 4;
  full.total_compressed_size = 65432;
  full.ordinal = -3;
  m.row_groups.push_back(full);

  RowGroup bare;
  bare.num_rows = 3;
  m.row_groups.push_back(bare);

  m.key_value_metadata = {
      {"ARROW:schema", std::string("\x00\x01\x02", 3)}, {"novalue", std::nullopt}, {"", ""}};
  m.created_by = "flywheel test";
  return m;
}

FileMetaData MinimalFileMetaData() {
  FileMetaData m;
  m.schema.push_back(Group("schema", 0));
  m.schema[0].repetition.reset();
  return m;
}

std::vector<PageHeader> RichPageHeaders() {
  std::vector<PageHeader> out;
  PageHeader v1;
  v1.type = PageType::kDataPage;
  v1.uncompressed_page_size = 100;
  v1.compressed_page_size = 80;
  v1.crc = -12345;
  DataPageHeader d;
  d.num_values = 10;
  d.encoding = Encoding::kRleDictionary;
  d.definition_level_encoding = Encoding::kRle;
  d.repetition_level_encoding = Encoding::kBitPacked;
  Statistics st;
  st.min_value = "a";
  st.max_value = "b";
  st.null_count = 2;
  d.statistics = st;
  v1.data_page_header = d;
  out.push_back(v1);

  PageHeader v1_plain;  // no optional fields
  v1_plain.uncompressed_page_size = 0;
  v1_plain.compressed_page_size = 0;
  v1_plain.data_page_header = DataPageHeader{};
  out.push_back(v1_plain);

  for (std::optional<bool> sorted :
       {std::optional<bool>(), std::optional<bool>(true), std::optional<bool>(false)}) {
    PageHeader dict;
    dict.type = PageType::kDictionaryPage;
    dict.uncompressed_page_size = 1 << 30;
    dict.compressed_page_size = 2147483647;
    DictionaryPageHeader dh;
    dh.num_values = 4;
    dh.encoding = Encoding::kPlainDictionary;
    dh.is_sorted = sorted;
    dict.dictionary_page_header = dh;
    out.push_back(dict);
  }

  for (bool compressed : {true, false}) {
    PageHeader v2;
    v2.type = PageType::kDataPageV2;
    v2.uncompressed_page_size = 5000;
    v2.compressed_page_size = 4000;
    DataPageHeaderV2 h;
    h.num_values = 300;
    h.num_nulls = 20;
    h.num_rows = 100;
    h.encoding = Encoding::kDeltaBinaryPacked;
    h.definition_levels_byte_length = 17;
    h.repetition_levels_byte_length = 33;
    h.is_compressed = compressed;
    if (compressed) h.statistics = Statistics{std::nullopt, std::nullopt, 0, 5, "x", "y"};
    v2.data_page_header_v2 = h;
    out.push_back(v2);
  }

  PageHeader index;
  index.type = PageType::kIndexPage;
  index.uncompressed_page_size = 7;
  index.compressed_page_size = 7;
  out.push_back(index);
  return out;
}

// ---------------------------------------------------------------------------
// Round trips and the wire format

TEST(MetadataTest, MinimalFileMetaDataWireBytes) {
  // Worked by hand from parquet.thrift and the compact protocol: version 1,
  // schema [root "schema" with 0 children], num_rows 0, row_groups [].
  const std::string expected = Hex({0x15, 0x02,                                 // version
                                    0x19, 0x1c,                                 // schema: 1 struct
                                    0x48, 0x06, 's',  'c', 'h', 'e', 'm', 'a',  // name
                                    0x15, 0x00, 0x00,  // num_children, stop
                                    0x16, 0x00,        // num_rows
                                    0x19, 0x0c,        // row_groups: []
                                    0x00});
  EXPECT_EQ(SerializeFileMetaData(MinimalFileMetaData()), expected);
  auto m = Parse(expected);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, MinimalFileMetaData());
}

TEST(MetadataTest, DataPageHeaderWireBytes) {
  PageHeader h;
  h.uncompressed_page_size = 100;
  h.compressed_page_size = 80;
  DataPageHeader d;
  d.num_values = 10;
  h.data_page_header = d;
  const std::string expected = Hex({0x15, 0x00,        // type DATA_PAGE
                                    0x15, 0xc8, 0x01,  // uncompressed 100
                                    0x15, 0xa0, 0x01,  // compressed 80
                                    0x2c,              // field 5: struct
                                    0x15, 0x14, 0x15, 0x00, 0x15, 0x06, 0x15, 0x06, 0x00, 0x00});
  EXPECT_EQ(SerializePageHeader(h), expected);
  size_t consumed = 0;
  const std::string with_page = expected + "page bytes";
  auto parsed = ParsePageHeader(Bytes(with_page), with_page.size(), &consumed);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(consumed, expected.size());
  EXPECT_EQ(*parsed, h);
}

TEST(MetadataTest, RichFileMetaDataRoundTrips) {
  const FileMetaData m = RichFileMetaData();
  const std::string bytes = SerializeFileMetaData(m);
  auto parsed = Parse(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, m);
  // Spot checks that equality covers what it should.
  EXPECT_EQ(parsed->schema.size(), m.schema.size());
  EXPECT_EQ(parsed->schema[6].logical_type.kind, Kind::kList);
  EXPECT_EQ(parsed->row_groups[0].columns[0].meta_data->statistics->min_value,
            std::string(300, 'a'));
  EXPECT_FALSE(parsed->row_groups[1].file_offset.has_value());
  EXPECT_FALSE(parsed->key_value_metadata[1].value.has_value());
  EXPECT_EQ(SerializeFileMetaData(*parsed), bytes);
}

TEST(MetadataTest, EveryLogicalTypeKindRoundTrips) {
  const FileMetaData m = RichFileMetaData();
  std::set<Kind> kinds;
  for (const SchemaElement& e : m.schema) kinds.insert(e.logical_type.kind);
  // Every kind of the enum is in the fixture.
  EXPECT_EQ(kinds.size(), static_cast<size_t>(Kind::kOther) + 1);
  auto parsed = Parse(SerializeFileMetaData(m));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  for (size_t i = 0; i < m.schema.size(); ++i) {
    EXPECT_EQ(parsed->schema[i].logical_type, m.schema[i].logical_type) << m.schema[i].name;
  }
}

TEST(MetadataTest, MinimalFileMetaDataRoundTripsWithNothingOptional) {
  FileMetaData m = MinimalFileMetaData();
  m.version = -1;  // not validated: the reader decides what versions mean
  auto parsed = Parse(SerializeFileMetaData(m));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, m);
  EXPECT_FALSE(parsed->created_by.has_value());
  EXPECT_TRUE(parsed->key_value_metadata.empty());
}

TEST(MetadataTest, PageHeadersRoundTrip) {
  for (const PageHeader& h : RichPageHeaders()) {
    const std::string bytes = SerializePageHeader(h);
    size_t consumed = 0;
    auto parsed = ParsePageHeader(Bytes(bytes), bytes.size(), &consumed);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, h);
    EXPECT_EQ(consumed, bytes.size());
    EXPECT_EQ(SerializePageHeader(*parsed), bytes);
  }
}

TEST(MetadataTest, DataPageHeaderV2IsCompressedDefaultsToTrue) {
  // Written without field 7, as some writers do.
  CompactWriter w;
  w.BeginStruct();
  w.WriteFieldHeader(CT::kI32, 1);
  w.WriteI32(3);  // DATA_PAGE_V2
  w.WriteFieldHeader(CT::kI32, 2);
  w.WriteI32(10);
  w.WriteFieldHeader(CT::kI32, 3);
  w.WriteI32(10);
  w.WriteFieldHeader(CT::kStruct, 8);
  w.BeginStruct();
  for (int16_t id = 1; id <= 6; ++id) {
    w.WriteFieldHeader(CT::kI32, id);
    w.WriteI32(0);
  }
  w.EndStruct();
  w.EndStruct();
  size_t consumed = 0;
  auto h = ParsePageHeader(Bytes(w.data()), w.data().size(), &consumed);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE(h->data_page_header_v2.has_value());
  EXPECT_TRUE(h->data_page_header_v2->is_compressed);
  EXPECT_EQ(consumed, w.data().size());
}

// ---------------------------------------------------------------------------
// Malformed input

TEST(MetadataTest, EveryTruncationOfFileMetaDataFails) {
  const std::string bytes = SerializeFileMetaData(RichFileMetaData());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto m = ParseFileMetaData(Bytes(bytes), n);
    ASSERT_FALSE(m.ok()) << "prefix of " << n << " bytes parsed";
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(MetadataTest, EveryTruncationOfPageHeaderFails) {
  for (const PageHeader& h : RichPageHeaders()) {
    const std::string bytes = SerializePageHeader(h);
    for (size_t n = 0; n < bytes.size(); ++n) {
      size_t consumed = 0;
      EXPECT_FALSE(ParsePageHeader(Bytes(bytes), n, &consumed).ok()) << n;
    }
  }
}

TEST(MetadataTest, TrailingBytesAfterFileMetaDataFail) {
  const std::string bytes = SerializeFileMetaData(MinimalFileMetaData()) + "x";
  auto m = Parse(bytes);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("1 bytes left after the structure"));
}

TEST(MetadataTest, UnknownEnumValuesNameFieldAndValue) {
  struct Case {
    std::function<void(FileMetaData&)> corrupt;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](FileMetaData& m) {
         m.row_groups[0].columns[0].meta_data->codec = static_cast<CompressionCodec>(42);
       },
       "ColumnMetaData.codec at byte"},
      {[](FileMetaData& m) {
         m.row_groups[0].columns[0].meta_data->type = static_cast<PhysicalType>(8);
       },
       "unknown Type 8"},
      {[](FileMetaData& m) { m.schema[1].type = static_cast<PhysicalType>(-1); },
       "SchemaElement.type at byte"},
      {[](FileMetaData& m) { m.schema[1].repetition = static_cast<Repetition>(3); },
       "unknown FieldRepetitionType 3"},
      {[](FileMetaData& m) { m.schema[1].converted_type = static_cast<ConvertedType>(22); },
       "unknown ConvertedType 22"},
  };
  for (const Case& c : cases) {
    FileMetaData m = RichFileMetaData();
    c.corrupt(m);
    auto parsed = Parse(SerializeFileMetaData(m));
    ASSERT_FALSE(parsed.ok()) << c.message;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(), HasSubstr(c.message));
  }
  FileMetaData codec = RichFileMetaData();
  codec.row_groups[0].columns[0].meta_data->codec = static_cast<CompressionCodec>(42);
  auto parsed = Parse(SerializeFileMetaData(codec));
  EXPECT_THAT(parsed.status().message(), HasSubstr("unknown CompressionCodec 42"));
  // The path to the bad value is in the message.
  EXPECT_THAT(parsed.status().message(), HasSubstr("row_groups[0]: columns[0]: meta_data"));
}

TEST(MetadataTest, UnknownPageEnumsFail) {
  PageHeader h = RichPageHeaders()[0];
  h.type = static_cast<PageType>(4);
  std::string bytes = SerializePageHeader(h);
  auto parsed = ParsePageHeader(Bytes(bytes), bytes.size(), nullptr);
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("PageHeader.type"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("unknown PageType 4"));

  h = RichPageHeaders()[0];
  h.data_page_header->encoding = static_cast<Encoding>(1);  // GROUP_VAR_INT, never used
  bytes = SerializePageHeader(h);
  parsed = ParsePageHeader(Bytes(bytes), bytes.size(), nullptr);
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("DataPageHeader.encoding"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("unknown Encoding 1"));
}

TEST(MetadataTest, UnknownEncodingsInColumnMetaDataAreKept) {
  FileMetaData m = RichFileMetaData();
  m.row_groups[0].columns[0].meta_data->encodings = {Encoding::kPlain, static_cast<Encoding>(1),
                                                     static_cast<Encoding>(77)};
  auto parsed = Parse(SerializeFileMetaData(m));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const auto& enc = parsed->row_groups[0].columns[0].meta_data->encodings;
  ASSERT_EQ(enc.size(), 3u);
  EXPECT_EQ(static_cast<int32_t>(enc[1]), 1);
  EXPECT_EQ(static_cast<int32_t>(enc[2]), 77);
}

TEST(MetadataTest, NegativeCountsAndSizesFail) {
  const std::vector<std::pair<std::function<void(FileMetaData&)>, std::string>> cases = {
      {[](FileMetaData& m) { m.num_rows = -1; }, "FileMetaData.num_rows"},
      {[](FileMetaData& m) { m.row_groups[0].num_rows = -5; }, "RowGroup.num_rows"},
      {[](FileMetaData& m) { m.row_groups[0].total_byte_size = -1; }, "RowGroup.total_byte_size"},
      {[](FileMetaData& m) { m.row_groups[0].file_offset = -4; }, "RowGroup.file_offset"},
      {[](FileMetaData& m) { m.row_groups[0].columns[1].file_offset = -1; },
       "ColumnChunk.file_offset"},
      {[](FileMetaData& m) { m.row_groups[0].columns[0].meta_data->num_values = -2; },
       "ColumnMetaData.num_values"},
      {[](FileMetaData& m) { m.row_groups[0].columns[0].meta_data->data_page_offset = -9; },
       "ColumnMetaData.data_page_offset"},
      {[](FileMetaData& m) { m.row_groups[0].columns[0].meta_data->dictionary_page_offset = -9; },
       "ColumnMetaData.dictionary_page_offset"},
      {[](FileMetaData& m) { m.row_groups[0].columns[0].meta_data->total_compressed_size = -100; },
       "ColumnMetaData.total_compressed_size"},
      {[](FileMetaData& m) { m.row_groups[0].columns[0].meta_data->statistics->null_count = -1; },
       "Statistics.null_count"},
      {[](FileMetaData& m) { m.schema[0].num_children = -1; }, "SchemaElement.num_children"},
      {[](FileMetaData& m) { m.schema[5].type_length = -16; }, "SchemaElement.type_length"},
  };
  for (const auto& [corrupt, field] : cases) {
    FileMetaData m = RichFileMetaData();
    corrupt(m);
    auto parsed = Parse(SerializeFileMetaData(m));
    ASSERT_FALSE(parsed.ok()) << field;
    EXPECT_THAT(parsed.status().message(), HasSubstr(field));
    EXPECT_THAT(parsed.status().message(), HasSubstr("negative value"));
  }

  PageHeader h = RichPageHeaders()[5];  // v2
  h.data_page_header_v2->num_nulls = -1;
  const std::string bytes = SerializePageHeader(h);
  auto parsed = ParsePageHeader(Bytes(bytes), bytes.size(), nullptr);
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("DataPageHeaderV2.num_nulls"));
  h = RichPageHeaders()[0];
  h.compressed_page_size = -1;
  const std::string bytes2 = SerializePageHeader(h);
  parsed = ParsePageHeader(Bytes(bytes2), bytes2.size(), nullptr);
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("PageHeader.compressed_page_size"));
}

TEST(MetadataTest, SchemaChildrenMustConsumeExactlyAllElements) {
  {
    FileMetaData m = RichFileMetaData();
    m.schema[0].num_children += 1;  // one child more than there are elements
    auto parsed = Parse(SerializeFileMetaData(m));
    ASSERT_FALSE(parsed.ok());
    EXPECT_THAT(parsed.status().message(), HasSubstr("element 0 ('schema') declares"));
    EXPECT_THAT(parsed.status().message(), HasSubstr("the schema ends"));
  }
  {
    FileMetaData m = RichFileMetaData();
    m.schema[0].num_children -= 1;  // the last element belongs to no group
    auto parsed = Parse(SerializeFileMetaData(m));
    ASSERT_FALSE(parsed.ok());
    EXPECT_THAT(parsed.status().message(), HasSubstr("belong to no group"));
  }
  {
    FileMetaData m = RichFileMetaData();
    m.schema[2].num_children = 1000000;  // the map group
    auto parsed = Parse(SerializeFileMetaData(m));
    ASSERT_FALSE(parsed.ok());
    EXPECT_THAT(parsed.status().message(), HasSubstr("element 2 ('m') declares 1000000"));
  }
  {
    FileMetaData m = MinimalFileMetaData();
    m.schema.clear();
    auto parsed = Parse(SerializeFileMetaData(m));
    ASSERT_FALSE(parsed.ok());
    EXPECT_THAT(parsed.status().message(), HasSubstr("schema is empty"));
  }
  {
    // A 100000-deep chain of single-child groups is valid and walks without
    // recursion.
    FileMetaData m = MinimalFileMetaData();
    m.schema[0].num_children = 1;
    for (int i = 0; i < 100000; ++i) m.schema.push_back(Group("g", 1));
    m.schema.push_back(Leaf("x", PhysicalType::kInt32));
    auto parsed = Parse(SerializeFileMetaData(m));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->schema.size(), 100002u);
  }
}

// A FileMetaData whose single leaf gets extra SchemaElement fields from
// `leaf_fields` (written after name, id 4).
std::string FileWithLeaf(const std::function<void(CompactWriter&)>& leaf_fields) {
  CompactWriter w;
  w.BeginStruct();
  w.WriteFieldHeader(CT::kI32, 1);
  w.WriteI32(1);
  w.WriteFieldHeader(CT::kList, 2);
  w.WriteListHeader(CT::kStruct, 2);
  w.BeginStruct();
  w.WriteFieldHeader(CT::kBinary, 4);
  w.WriteBinary("root");
  w.WriteFieldHeader(CT::kI32, 5);
  w.WriteI32(1);
  w.EndStruct();
  w.BeginStruct();
  w.WriteFieldHeader(CT::kBinary, 4);
  w.WriteBinary("leaf");
  leaf_fields(w);
  w.EndStruct();
  w.WriteFieldHeader(CT::kI64, 3);
  w.WriteI64(0);
  w.WriteFieldHeader(CT::kList, 4);
  w.WriteListHeader(CT::kStruct, 0);
  w.EndStruct();
  return std::move(w).Finish();
}

TEST(MetadataTest, UnknownFieldsAndUnionMembersAreSkipped) {
  const std::string bytes = FileWithLeaf([](CompactWriter& w) {
    // logicalType = VARIANT (16) { 1: byte specification_version }
    w.WriteFieldHeader(CT::kStruct, 10);
    w.BeginStruct();
    w.WriteFieldHeader(CT::kStruct, 16);
    w.BeginStruct();
    w.WriteFieldHeader(CT::kByte, 1);
    w.WriteByte(1);
    w.EndStruct();
    w.EndStruct();
    // Fields from a future parquet.thrift, of every shape.
    w.WriteFieldHeader(CT::kMap, 30);
    w.WriteMapHeader(CT::kBinary, CT::kList, 1);
    w.WriteBinary("k");
    w.WriteListHeader(CT::kDouble, 2);
    w.WriteDouble(1);
    w.WriteDouble(2);
    w.WriteBoolField(31, true);
    w.WriteFieldHeader(CT::kStruct, 1000);
    w.BeginStruct();
    w.WriteFieldHeader(CT::kSet, 1);
    w.WriteSetHeader(CT::kBoolTrue, 2);
    w.WriteBoolElement(false);
    w.WriteBoolElement(true);
    w.EndStruct();
  });
  auto m = Parse(bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->schema.size(), 2u);
  EXPECT_EQ(m->schema[1].name, "leaf");
  EXPECT_EQ(m->schema[1].logical_type.kind, Kind::kOther);
  EXPECT_EQ(m->schema[1].logical_type.other_field_id, 16);
}

TEST(MetadataTest, MissingRequiredFieldsNameStructAndField) {
  // SchemaElement without a name.
  {
    CompactWriter w;
    w.BeginStruct();
    w.WriteFieldHeader(CT::kI32, 1);
    w.WriteI32(1);
    w.WriteFieldHeader(CT::kList, 2);
    w.WriteListHeader(CT::kStruct, 1);
    w.BeginStruct();
    w.WriteFieldHeader(CT::kI32, 5);
    w.WriteI32(0);
    w.EndStruct();
    w.WriteFieldHeader(CT::kI64, 3);
    w.WriteI64(0);
    w.WriteFieldHeader(CT::kList, 4);
    w.WriteListHeader(CT::kStruct, 0);
    w.EndStruct();
    auto m = Parse(w.data());
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(m.status().message(), HasSubstr("SchemaElement.name"));
    EXPECT_THAT(m.status().message(), HasSubstr("required field 4 is missing"));
    EXPECT_THAT(m.status().message(), HasSubstr("schema[0]"));
  }
  // FileMetaData without row_groups.
  {
    std::string bytes = SerializeFileMetaData(MinimalFileMetaData());
    // Drop "row_groups: []" (0x19 0x0c) before the stop byte.
    ASSERT_EQ(bytes.substr(bytes.size() - 3), Hex({0x19, 0x0c, 0x00}));
    bytes.erase(bytes.size() - 3, 2);
    auto m = Parse(bytes);
    ASSERT_FALSE(m.ok());
    EXPECT_THAT(m.status().message(), HasSubstr("FileMetaData.row_groups"));
  }
  // LogicalType members with missing fields.
  {
    auto m = Parse(FileWithLeaf([](CompactWriter& w) {
      w.WriteFieldHeader(CT::kStruct, 10);
      w.BeginStruct();
      w.WriteFieldHeader(CT::kStruct, 5);  // DECIMAL without precision
      w.BeginStruct();
      w.WriteFieldHeader(CT::kI32, 1);
      w.WriteI32(2);
      w.EndStruct();
      w.EndStruct();
    }));
    ASSERT_FALSE(m.ok());
    EXPECT_THAT(m.status().message(), HasSubstr("DecimalType.precision"));
  }
  {
    auto m = Parse(FileWithLeaf([](CompactWriter& w) {
      w.WriteFieldHeader(CT::kStruct, 10);
      w.BeginStruct();
      w.WriteFieldHeader(CT::kStruct, 8);  // TIMESTAMP without unit
      w.BeginStruct();
      w.WriteBoolField(1, true);
      w.EndStruct();
      w.EndStruct();
    }));
    ASSERT_FALSE(m.ok());
    EXPECT_THAT(m.status().message(), HasSubstr("TimestampType.unit"));
  }
  // ColumnMetaData without data_page_offset.
  {
    CompactWriter w;
    w.BeginStruct();
    w.WriteFieldHeader(CT::kI32, 1);
    w.WriteI32(1);
    w.WriteFieldHeader(CT::kList, 2);
    w.WriteListHeader(CT::kStruct, 1);
    w.BeginStruct();
    w.WriteFieldHeader(CT::kBinary, 4);
    w.WriteBinary("r");
    w.EndStruct();
    w.WriteFieldHeader(CT::kI64, 3);
    w.WriteI64(0);
    w.WriteFieldHeader(CT::kList, 4);
    w.WriteListHeader(CT::kStruct, 1);
    w.BeginStruct();  // RowGroup
    w.WriteFieldHeader(CT::kList, 1);
    w.WriteListHeader(CT::kStruct, 1);
    w.BeginStruct();  // ColumnChunk
    w.WriteFieldHeader(CT::kI64, 2);
    w.WriteI64(0);
    w.WriteFieldHeader(CT::kStruct, 3);
    w.BeginStruct();  // ColumnMetaData without 9
    w.WriteFieldHeader(CT::kI32, 1);
    w.WriteI32(1);
    w.WriteFieldHeader(CT::kList, 2);
    w.WriteListHeader(CT::kI32, 0);
    w.WriteFieldHeader(CT::kList, 3);
    w.WriteListHeader(CT::kBinary, 0);
    for (int16_t id = 4; id <= 7; ++id) {
      w.WriteFieldHeader(id == 4 ? CT::kI32 : CT::kI64, id);
      if (id == 4) {
        w.WriteI32(0);
      } else {
        w.WriteI64(0);
      }
    }
    w.EndStruct();
    w.EndStruct();
    w.WriteFieldHeader(CT::kI64, 2);
    w.WriteI64(0);
    w.WriteFieldHeader(CT::kI64, 3);
    w.WriteI64(0);
    w.EndStruct();
    w.EndStruct();
    auto m = Parse(w.data());
    ASSERT_FALSE(m.ok());
    EXPECT_THAT(m.status().message(), HasSubstr("ColumnMetaData.data_page_offset"));
    EXPECT_THAT(m.status().message(), HasSubstr("row_groups[0]: columns[0]: meta_data"));
  }
}

TEST(MetadataTest, PageHeaderNeedsTheHeaderForItsType) {
  for (PageType type : {PageType::kDataPage, PageType::kDictionaryPage, PageType::kDataPageV2}) {
    PageHeader h;
    h.type = type;
    const std::string bytes = SerializePageHeader(h);
    auto parsed = ParsePageHeader(Bytes(bytes), bytes.size(), nullptr);
    ASSERT_FALSE(parsed.ok());
    EXPECT_THAT(parsed.status().message(), HasSubstr("missing for page type"));
  }
  // Required fields of the sub-header.
  CompactWriter w;
  w.BeginStruct();
  w.WriteFieldHeader(CT::kI32, 1);
  w.WriteI32(2);
  w.WriteFieldHeader(CT::kI32, 2);
  w.WriteI32(0);
  w.WriteFieldHeader(CT::kI32, 3);
  w.WriteI32(0);
  w.WriteFieldHeader(CT::kStruct, 7);
  w.BeginStruct();
  w.WriteFieldHeader(CT::kI32, 1);
  w.WriteI32(0);
  w.EndStruct();
  w.EndStruct();
  auto parsed = ParsePageHeader(Bytes(w.data()), w.data().size(), nullptr);
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("DictionaryPageHeader.encoding"));
}

TEST(MetadataTest, WrongWireTypeForKnownFieldFails) {
  CompactWriter w;
  w.BeginStruct();
  w.WriteFieldHeader(CT::kI32, 1);
  w.WriteI32(1);
  w.WriteFieldHeader(CT::kI32, 3);  // num_rows is an i64
  w.WriteI32(5);
  w.EndStruct();
  auto m = Parse(w.data());
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("FileMetaData.num_rows"));
  EXPECT_THAT(m.status().message(), HasSubstr("wire type i32, expected i64"));
}

TEST(MetadataTest, LogicalTypeUnionNeedsExactlyOneMember) {
  auto none = Parse(FileWithLeaf([](CompactWriter& w) {
    w.WriteFieldHeader(CT::kStruct, 10);
    w.BeginStruct();
    w.EndStruct();
  }));
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("LogicalType"));
  EXPECT_THAT(none.status().message(), HasSubstr("no member"));

  auto two = Parse(FileWithLeaf([](CompactWriter& w) {
    w.WriteFieldHeader(CT::kStruct, 10);
    w.BeginStruct();
    w.WriteFieldHeader(CT::kStruct, 1);
    w.BeginStruct();
    w.EndStruct();
    w.WriteFieldHeader(CT::kStruct, 6);
    w.BeginStruct();
    w.EndStruct();
    w.EndStruct();
  }));
  ASSERT_FALSE(two.ok());
  EXPECT_THAT(two.status().message(), HasSubstr("several members"));

  auto bad_unit = Parse(FileWithLeaf([](CompactWriter& w) {
    w.WriteFieldHeader(CT::kStruct, 10);
    w.BeginStruct();
    w.WriteFieldHeader(CT::kStruct, 7);
    w.BeginStruct();
    w.WriteBoolField(1, false);
    w.WriteFieldHeader(CT::kStruct, 2);
    w.BeginStruct();
    w.WriteFieldHeader(CT::kStruct, 4);  // no such TimeUnit
    w.BeginStruct();
    w.EndStruct();
    w.EndStruct();
    w.EndStruct();
    w.EndStruct();
  }));
  ASSERT_FALSE(bad_unit.ok());
  EXPECT_THAT(bad_unit.status().message(), HasSubstr("TimeUnit"));
}

TEST(MetadataTest, LyingListSizeFailsWithoutAllocating) {
  CompactWriter w;
  w.BeginStruct();
  w.WriteFieldHeader(CT::kI32, 1);
  w.WriteI32(1);
  w.WriteFieldHeader(CT::kList, 2);
  w.WriteListHeader(CT::kStruct, 2147483647);
  w.WriteRaw(std::string(64, '\0'));
  auto m = Parse(w.data());
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("list of 2147483647 struct elements cannot fit"));
}

TEST(MetadataTest, DeeplyNestedUnknownFieldFails) {
  const std::string bytes = FileWithLeaf([](CompactWriter& w) {
    w.WriteFieldHeader(CT::kList, 40);
    w.WriteRaw(std::string(5000, '\x19'));  // lists of lists of ...
  });
  auto m = Parse(bytes);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("deeper than 64"));
}

// ---------------------------------------------------------------------------
// Reference files: the footers of files from independent writers.

std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint32_t LoadLe32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

std::string CodecJsonName(CompressionCodec c) {
  switch (c) {
    case CompressionCodec::kUncompressed:
      return "UNCOMPRESSED";
    case CompressionCodec::kSnappy:
      return "SNAPPY";
    case CompressionCodec::kGzip:
      return "GZIP";
    case CompressionCodec::kLzo:
      return "LZO";
    case CompressionCodec::kBrotli:
      return "BROTLI";
    case CompressionCodec::kLz4:
      return "LZ4";
    case CompressionCodec::kZstd:
      return "ZSTD";
    case CompressionCodec::kLz4Raw:
      return "LZ4_RAW";
  }
  return "?";
}

std::string EncodingJsonName(Encoding e) {
  switch (e) {
    case Encoding::kPlain:
      return "PLAIN";
    case Encoding::kPlainDictionary:
      return "PLAIN_DICTIONARY";
    case Encoding::kRle:
      return "RLE";
    case Encoding::kBitPacked:
      return "BIT_PACKED";
    case Encoding::kDeltaBinaryPacked:
      return "DELTA_BINARY_PACKED";
    case Encoding::kDeltaLengthByteArray:
      return "DELTA_LENGTH_BYTE_ARRAY";
    case Encoding::kDeltaByteArray:
      return "DELTA_BYTE_ARRAY";
    case Encoding::kRleDictionary:
      return "RLE_DICTIONARY";
    case Encoding::kByteStreamSplit:
      return "BYTE_STREAM_SPLIT";
  }
  return "?";
}

// The physical type a DuckDB type name is stored as by both writers, or
// nullopt for nested types (a group).
std::optional<PhysicalType> ExpectedPhysicalType(const std::string& t) {
  static const std::map<std::string, PhysicalType> kTypes = {
      {"INTEGER", PhysicalType::kInt32},   {"TINYINT", PhysicalType::kInt32},
      {"SMALLINT", PhysicalType::kInt32},  {"UTINYINT", PhysicalType::kInt32},
      {"DATE", PhysicalType::kInt32},      {"BIGINT", PhysicalType::kInt64},
      {"UBIGINT", PhysicalType::kInt64},   {"TIMESTAMP", PhysicalType::kInt64},
      {"FLOAT", PhysicalType::kFloat},     {"DOUBLE", PhysicalType::kDouble},
      {"BOOLEAN", PhysicalType::kBoolean}, {"VARCHAR", PhysicalType::kByteArray},
      {"BLOB", PhysicalType::kByteArray},  {"DECIMAL(12,2)", PhysicalType::kInt64},
  };
  auto it = kTypes.find(t);
  if (it == kTypes.end()) return std::nullopt;
  return it->second;
}

// What the schema element says about the DuckDB type beyond the physical
// type, through LogicalType or (older writers) ConvertedType.
void ExpectAnnotation(const SchemaElement& e, const std::string& t) {
  const LogicalType& lt = e.logical_type;
  const auto conv = e.converted_type;
  if (t == "VARCHAR") {
    EXPECT_TRUE(lt.kind == Kind::kString || conv == ConvertedType::kUtf8) << e.name;
  } else if (t == "DATE") {
    EXPECT_TRUE(lt.kind == Kind::kDate || conv == ConvertedType::kDate) << e.name;
  } else if (t == "TIMESTAMP") {
    EXPECT_TRUE((lt.kind == Kind::kTimestamp && lt.unit == TimeUnit::kMicros) ||
                conv == ConvertedType::kTimestampMicros)
        << e.name;
  } else if (t == "DECIMAL(12,2)") {
    const bool logical =
        lt.kind == Kind::kDecimal && lt.decimal_precision == 12 && lt.decimal_scale == 2;
    const bool legacy = conv == ConvertedType::kDecimal && e.precision == 12 && e.scale == 2;
    EXPECT_TRUE(logical || legacy) << e.name;
  } else if (t == "TINYINT") {
    EXPECT_TRUE((lt.kind == Kind::kInteger && lt.bit_width == 8 && lt.is_signed) ||
                conv == ConvertedType::kInt8)
        << e.name;
  } else if (t == "SMALLINT") {
    EXPECT_TRUE((lt.kind == Kind::kInteger && lt.bit_width == 16 && lt.is_signed) ||
                conv == ConvertedType::kInt16)
        << e.name;
  } else if (t == "UTINYINT") {
    EXPECT_TRUE((lt.kind == Kind::kInteger && lt.bit_width == 8 && !lt.is_signed) ||
                conv == ConvertedType::kUint8)
        << e.name;
  } else if (t == "UBIGINT") {
    EXPECT_TRUE((lt.kind == Kind::kInteger && lt.bit_width == 64 && !lt.is_signed) ||
                conv == ConvertedType::kUint64)
        << e.name;
  } else if (t == "BLOB") {
    EXPECT_NE(lt.kind, Kind::kString) << e.name;
    EXPECT_NE(conv, ConvertedType::kUtf8) << e.name;
  }
}

std::vector<std::string> SplitEncodings(const nlohmann::json& list) {
  // One file lists them as a single "A, B, C" string.
  std::vector<std::string> out;
  for (const auto& item : list) {
    std::string s = item.get<std::string>();
    size_t start = 0;
    while (start <= s.size()) {
      size_t comma = s.find(',', start);
      if (comma == std::string::npos) comma = s.size();
      std::string part = s.substr(start, comma - start);
      while (!part.empty() && part.front() == ' ') part.erase(0, 1);
      if (!part.empty()) out.push_back(part);
      start = comma + 1;
    }
  }
  return out;
}

TEST(ReferenceFilesTest, FootersMatchExpectedFacts) {
  const std::filesystem::path dir = FLYWHEEL_PARQUET_TESTDATA;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".parquet") continue;
    ++files;
    const std::string name = entry.path().stem().string();
    SCOPED_TRACE(name);
    const std::string file = ReadFile(entry.path());
    ASSERT_GE(file.size(), 12u);
    ASSERT_EQ(file.substr(0, 4), "PAR1");
    ASSERT_EQ(file.substr(file.size() - 4), "PAR1");
    const uint32_t footer_len = LoadLe32(file.data() + file.size() - 8);
    ASSERT_LE(footer_len, file.size() - 12);
    const size_t footer_start = file.size() - 8 - footer_len;
    auto parsed = ParseFileMetaData(Bytes(file) + footer_start, footer_len);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    const FileMetaData& m = *parsed;

    std::ifstream json_in(dir / (name + ".expected.json"));
    ASSERT_TRUE(json_in.good());
    const nlohmann::json expected = nlohmann::json::parse(json_in);

    // The writers named in testdata/parquet/README.md.
    ASSERT_TRUE(m.created_by.has_value());
    EXPECT_EQ(m.created_by->rfind(name.rfind("arrowrs_", 0) == 0 ? "parquet-rs" : "DuckDB", 0), 0u)
        << *m.created_by;

    EXPECT_EQ(m.num_rows, expected["num_rows"].get<int64_t>());
    ASSERT_EQ(m.row_groups.size(), expected["row_groups"].get<size_t>());
    int64_t rows = 0;
    for (const RowGroup& g : m.row_groups) rows += g.num_rows;
    EXPECT_EQ(rows, m.num_rows);

    // Top-level columns: the root's children, in order, by name and type.
    std::vector<const SchemaElement*> top;
    size_t leaves = 0;
    for (const SchemaElement& e : m.schema) leaves += e.type.has_value() ? 1 : 0;
    {
      size_t i = 1;
      for (int32_t c = 0; c < m.schema[0].num_children; ++c) {
        top.push_back(&m.schema[i]);
        // Skip the child's subtree.
        int64_t pending = 1;
        while (pending > 0) {
          pending += m.schema[i].num_children - 1;
          ++i;
        }
      }
      EXPECT_EQ(i, m.schema.size());
    }
    const auto& columns = expected["schema"];
    ASSERT_EQ(top.size(), columns.size());
    for (size_t c = 0; c < top.size(); ++c) {
      const std::string col_name = columns[c]["name"].get<std::string>();
      const std::string col_type = columns[c]["type"].get<std::string>();
      SCOPED_TRACE(col_name);
      EXPECT_EQ(top[c]->name, col_name);
      const std::optional<PhysicalType> want = ExpectedPhysicalType(col_type);
      EXPECT_EQ(top[c]->type, want) << col_type;
      if (want) ExpectAnnotation(*top[c], col_type);
    }

    // Column chunks: one per leaf, in schema order, with the codecs and
    // encodings DuckDB reports.
    std::set<std::string> codecs, encodings;
    for (const RowGroup& g : m.row_groups) {
      ASSERT_EQ(g.columns.size(), leaves);
      int64_t chunk_bytes = 0;
      for (size_t c = 0; c < g.columns.size(); ++c) {
        const ColumnChunk& chunk = g.columns[c];
        EXPECT_TRUE(chunk.file_path.empty());
        ASSERT_TRUE(chunk.meta_data.has_value());
        const ColumnMetaData& md = *chunk.meta_data;
        ASSERT_FALSE(md.path_in_schema.empty());
        EXPECT_EQ(md.num_values >= g.num_rows, true) << md.path_in_schema[0];
        codecs.insert(CodecJsonName(md.codec));
        for (Encoding e : md.encodings) encodings.insert(EncodingJsonName(e));
        chunk_bytes += md.total_compressed_size;
      }
      // All chunks lie between the magic and the footer.
      EXPECT_LE(chunk_bytes, static_cast<int64_t>(footer_start - 4));
    }
    std::set<std::string> want_codecs;
    for (const auto& c : expected["codecs"]) want_codecs.insert(c.get<std::string>());
    EXPECT_EQ(codecs, want_codecs);
    for (const std::string& e : SplitEncodings(expected["encodings"])) {
      EXPECT_TRUE(encodings.count(e)) << "encoding " << e << " not in any column chunk";
    }
  }
  EXPECT_GE(files, 8);
}

TEST(ReferenceFilesTest, EveryPageHeaderOfEveryChunkParses) {
  const std::filesystem::path dir = FLYWHEEL_PARQUET_TESTDATA;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".parquet") continue;
    SCOPED_TRACE(entry.path().filename().string());
    const std::string file = ReadFile(entry.path());
    const uint32_t footer_len = LoadLe32(file.data() + file.size() - 8);
    const size_t footer_start = file.size() - 8 - footer_len;
    auto m = ParseFileMetaData(Bytes(file) + footer_start, footer_len);
    ASSERT_TRUE(m.ok()) << m.status();
    size_t chunks = 0;
    int total_pages = 0;
    for (const RowGroup& g : m->row_groups) {
      for (const ColumnChunk& chunk : g.columns) {
        ++chunks;
        const ColumnMetaData& md = *chunk.meta_data;
        SCOPED_TRACE(md.path_in_schema.back());
        const bool has_dict =
            md.dictionary_page_offset.has_value() && *md.dictionary_page_offset > 0;
        const int64_t start = has_dict ? *md.dictionary_page_offset : md.data_page_offset;
        ASSERT_GE(start, 4);
        ASSERT_LT(start + md.total_compressed_size, static_cast<int64_t>(footer_start) + 1);

        // First page: a dictionary page exactly when the chunk has one.
        size_t consumed = 0;
        auto first = ParsePageHeader(Bytes(file) + start, footer_start - start, &consumed);
        ASSERT_TRUE(first.ok()) << first.status();
        if (has_dict) {
          EXPECT_EQ(first->type, PageType::kDictionaryPage);
          ASSERT_TRUE(first->dictionary_page_header.has_value());
          EXPECT_GT(first->dictionary_page_header->num_values, 0);
        } else {
          EXPECT_TRUE(first->type == PageType::kDataPage || first->type == PageType::kDataPageV2);
        }

        // Walk every page: headers plus bodies add up to the chunk's
        // compressed size, data pages' values to its num_values.
        int64_t pos = start;
        int64_t values = 0;
        int pages = 0;
        while (pos < start + md.total_compressed_size) {
          auto h = ParsePageHeader(Bytes(file) + pos, footer_start - pos, &consumed);
          ASSERT_TRUE(h.ok()) << "page " << pages << " at " << pos << ": " << h.status();
          EXPECT_GE(h->compressed_page_size, 0);
          if (md.codec == CompressionCodec::kUncompressed && h->type == PageType::kDataPage) {
            EXPECT_EQ(h->uncompressed_page_size, h->compressed_page_size);
          }
          if (h->data_page_header) values += h->data_page_header->num_values;
          if (h->data_page_header_v2) {
            values += h->data_page_header_v2->num_values;
            EXPECT_LE(h->data_page_header_v2->num_nulls, h->data_page_header_v2->num_values);
            EXPECT_LE(h->data_page_header_v2->definition_levels_byte_length +
                          h->data_page_header_v2->repetition_levels_byte_length,
                      h->compressed_page_size);
          }
          pos += static_cast<int64_t>(consumed) + h->compressed_page_size;
          ++pages;
        }
        EXPECT_EQ(pos, start + md.total_compressed_size);
        EXPECT_EQ(values, md.num_values);
        EXPECT_GE(pages, has_dict ? 2 : 1);
        total_pages += pages;
      }
    }
    EXPECT_GT(chunks, 0u);
    EXPECT_GE(total_pages, static_cast<int>(chunks));
  }
}

}  // namespace
}  // namespace flywheel::interop::parquet
