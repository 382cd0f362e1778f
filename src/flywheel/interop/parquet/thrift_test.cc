#include "flywheel/interop/parquet/thrift.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace flywheel::interop::parquet {
namespace {

using ::testing::HasSubstr;

const uint8_t* Bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

std::string Hex(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}

TEST(CompactReaderTest, VarintEdgeValues) {
  const std::vector<std::pair<uint64_t, std::string>> cases = {
      {0, Hex({0x00})},
      {1, Hex({0x01})},
      {127, Hex({0x7f})},
      {128, Hex({0x80, 0x01})},
      {300, Hex({0xac, 0x02})},
      {16383, Hex({0xff, 0x7f})},
      {16384, Hex({0x80, 0x80, 0x01})},
      {uint64_t{1} << 63, Hex({0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01})},
      {std::numeric_limits<uint64_t>::max(),
       Hex({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})},
  };
  for (const auto& [value, bytes] : cases) {
    CompactWriter w;
    w.WriteVarint(value);
    EXPECT_EQ(w.data(), bytes) << value;
    CompactReader r(Bytes(bytes), bytes.size());
    auto got = r.ReadVarint("v");
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, value);
    EXPECT_EQ(r.offset(), bytes.size());
  }
}

TEST(CompactReaderTest, VarintNonMinimalIsAccepted) {
  const std::string bytes = Hex({0x80, 0x80, 0x00});
  CompactReader r(Bytes(bytes), bytes.size());
  auto got = r.ReadVarint("v");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, 0u);
}

TEST(CompactReaderTest, VarintRejectsElevenBytes) {
  const std::string bytes = Hex({0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00});
  CompactReader r(Bytes(bytes), bytes.size());
  auto got = r.ReadVarint("RowGroup.num_rows");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr("RowGroup.num_rows at byte 0"));
  EXPECT_THAT(got.status().message(), HasSubstr("longer than 10 bytes"));
}

TEST(CompactReaderTest, VarintRejectsBitsBeyond64) {
  const std::string bytes = Hex({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02});
  CompactReader r(Bytes(bytes), bytes.size());
  auto got = r.ReadVarint("v");
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(), HasSubstr("overflows 64 bits"));
}

TEST(CompactReaderTest, VarintTruncatedNamesOffset) {
  const std::string bytes = Hex({0x05, 0x80, 0x80});
  CompactReader r(Bytes(bytes), bytes.size());
  ASSERT_TRUE(r.ReadVarint("first").ok());
  auto got = r.ReadVarint("second");
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(), HasSubstr("second at byte 1: truncated varint"));
}

TEST(CompactReaderTest, ZigzagI32Edges) {
  const std::vector<std::pair<int32_t, uint64_t>> cases = {
      {0, 0}, {-1, 1}, {1, 2}, {-2, 3}, {2147483647, 4294967294u}, {-2147483647 - 1, 4294967295u},
  };
  for (const auto& [value, zigzag] : cases) {
    CompactWriter w;
    w.WriteI32(value);
    CompactWriter expect;
    expect.WriteVarint(zigzag);
    EXPECT_EQ(w.data(), expect.data()) << value;
    CompactReader r(Bytes(w.data()), w.data().size());
    auto got = r.ReadI32("i32");
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, value);
  }
}

TEST(CompactReaderTest, ZigzagI64Edges) {
  for (int64_t value : {int64_t{0}, int64_t{-1}, int64_t{1}, int64_t{1} << 40, -(int64_t{1} << 40),
                        std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}) {
    CompactWriter w;
    w.WriteI64(value);
    CompactReader r(Bytes(w.data()), w.data().size());
    auto got = r.ReadI64("i64");
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, value);
  }
  CompactWriter w;
  w.WriteI64(std::numeric_limits<int64_t>::min());
  EXPECT_EQ(w.data(), Hex({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}));
}

TEST(CompactReaderTest, ZigzagI16Edges) {
  for (int16_t value : {int16_t{0}, int16_t{-1}, int16_t{32767}, int16_t{-32768}}) {
    CompactWriter w;
    w.WriteI16(value);
    CompactReader r(Bytes(w.data()), w.data().size());
    auto got = r.ReadI16("i16");
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, value);
  }
}

TEST(CompactReaderTest, I16RejectsOutOfRange) {
  CompactWriter w;
  w.WriteVarint(65536);  // zigzag of 32768
  CompactReader r(Bytes(w.data()), w.data().size());
  auto got = r.ReadI16("RowGroup.ordinal");
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(), HasSubstr("RowGroup.ordinal at byte 0"));
  EXPECT_THAT(got.status().message(), HasSubstr("overflows i16"));
}

TEST(CompactReaderTest, I32RejectsOutOfRange) {
  CompactWriter w;
  w.WriteVarint(uint64_t{1} << 32);
  CompactReader r(Bytes(w.data()), w.data().size());
  auto got = r.ReadI32("x");
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(), HasSubstr("overflows i32"));
}

TEST(CompactReaderTest, ByteAndDouble) {
  CompactWriter w;
  w.WriteByte(-8);
  w.WriteDouble(1.5);
  w.WriteDouble(-0.0);
  w.WriteDouble(std::numeric_limits<double>::infinity());
  // 1.5 is 0x3FF8000000000000, written little-endian.
  EXPECT_EQ(w.data().substr(1, 8), Hex({0, 0, 0, 0, 0, 0, 0xf8, 0x3f}));
  CompactReader r(Bytes(w.data()), w.data().size());
  EXPECT_EQ(*r.ReadByte("b"), -8);
  EXPECT_EQ(*r.ReadDouble("d"), 1.5);
  const double neg_zero = *r.ReadDouble("d");
  EXPECT_EQ(neg_zero, 0.0);
  EXPECT_TRUE(std::signbit(neg_zero));
  EXPECT_EQ(*r.ReadDouble("d"), std::numeric_limits<double>::infinity());
  EXPECT_EQ(r.remaining(), 0u);
  auto truncated = r.ReadDouble("Stats.x");
  ASSERT_FALSE(truncated.ok());
  EXPECT_THAT(truncated.status().message(), HasSubstr("Stats.x at byte 25: truncated double"));
}

TEST(CompactReaderTest, BinaryRoundTripAndBounds) {
  CompactWriter w;
  w.WriteBinary("");
  w.WriteBinary(std::string(200, 'x'));
  CompactReader r(Bytes(w.data()), w.data().size());
  EXPECT_EQ(*r.ReadBinary("a"), "");
  EXPECT_EQ(*r.ReadBinary("b"), std::string(200, 'x'));
  EXPECT_EQ(r.remaining(), 0u);

  // A length claiming more than what is left.
  const std::string lying = Hex({0x05, 'a', 'b'});
  CompactReader r2(Bytes(lying), lying.size());
  auto got = r2.ReadBinary("SchemaElement.name");
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(),
              HasSubstr("SchemaElement.name at byte 0: length 5 exceeds the 2 bytes left"));

  // A length near 2^64 must not wrap the bounds check.
  CompactWriter huge;
  huge.WriteVarint(std::numeric_limits<uint64_t>::max());
  CompactReader r3(Bytes(huge.data()), huge.data().size());
  EXPECT_FALSE(r3.ReadBinary("x").ok());
}

TEST(CompactReaderTest, BoolElements) {
  const std::string bytes = Hex({0x01, 0x02, 0x00, 0x03});
  CompactReader r(Bytes(bytes), bytes.size());
  EXPECT_TRUE(*r.ReadBoolElement("b"));
  EXPECT_FALSE(*r.ReadBoolElement("b"));
  EXPECT_FALSE(*r.ReadBoolElement("b"));  // what the spec once said false was
  auto bad = r.ReadBoolElement("flags");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("flags at byte 3"));
}

TEST(CompactReaderTest, FieldHeadersDeltaAndAbsolute) {
  CompactWriter w;
  w.BeginStruct();
  w.WriteFieldHeader(CompactType::kI32, 1);  // delta 1
  w.WriteI32(7);
  w.WriteFieldHeader(CompactType::kI32, 16);  // delta 15, still short
  w.WriteI32(8);
  w.WriteFieldHeader(CompactType::kI32, 40);  // delta 24: absolute
  w.WriteI32(9);
  w.WriteFieldHeader(CompactType::kI32, 3);  // backwards: absolute
  w.WriteI32(10);
  w.WriteFieldHeader(CompactType::kI32, -5);  // negative ids exist in Thrift
  w.WriteI32(11);
  w.WriteBoolField(6, true);
  w.WriteBoolField(7, false);
  w.EndStruct();

  const std::string& s = w.data();
  EXPECT_EQ(static_cast<uint8_t>(s[0]), 0x15);  // delta 1, type i32
  EXPECT_EQ(static_cast<uint8_t>(s[2]), 0xf5);  // delta 15
  EXPECT_EQ(static_cast<uint8_t>(s[4]), 0x05);  // absolute follows
  EXPECT_EQ(static_cast<uint8_t>(s[5]), 80);    // zigzag(40)

  CompactReader r(Bytes(s), s.size());
  std::vector<std::pair<int, int>> seen;  // (id, i32 value or bool)
  ASSERT_TRUE(r.ReadStruct("T", [&](const FieldHeader& f) -> Status {
                 if (f.type == CompactType::kI32) {
                   FW_ASSIGN_OR_RETURN(int32_t v, r.ReadI32("v"));
                   seen.emplace_back(f.id, v);
                 } else {
                   seen.emplace_back(f.id, f.type == CompactType::kBoolTrue ? 1 : 0);
                 }
                 return absl::OkStatus();
               }).ok());
  EXPECT_EQ(seen, (std::vector<std::pair<int, int>>{
                      {1, 7}, {16, 8}, {40, 9}, {3, 10}, {-5, 11}, {6, 1}, {7, 0}}));
  EXPECT_EQ(r.remaining(), 0u);
  EXPECT_EQ(r.depth(), 0);
}

TEST(CompactReaderTest, FieldHeaderRejectsInvalidTypeAndOverflow) {
  {
    const std::string bytes = Hex({0x1e});  // type 14
    CompactReader r(Bytes(bytes), bytes.size());
    ASSERT_TRUE(r.BeginStruct("S").ok());
    auto f = r.ReadFieldHeader("S");
    ASSERT_FALSE(f.ok());
    EXPECT_THAT(f.status().message(), HasSubstr("S at byte 0: field header has invalid type"));
  }
  {
    const std::string bytes = Hex({0x10});  // delta 1, type 0
    CompactReader r(Bytes(bytes), bytes.size());
    ASSERT_TRUE(r.BeginStruct("S").ok());
    EXPECT_FALSE(r.ReadFieldHeader("S").ok());
  }
  {
    // id 32767 then a delta of 1 overflows i16.
    CompactWriter w;
    w.BeginStruct();
    w.WriteFieldHeader(CompactType::kByte, 32767);
    w.WriteByte(0);
    w.WriteRaw(Hex({0x13, 0x00}));
    CompactReader r(Bytes(w.data()), w.data().size());
    ASSERT_TRUE(r.BeginStruct("S").ok());
    auto f = r.ReadFieldHeader("S");
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->id, 32767);
    ASSERT_TRUE(r.Skip(f->type).ok());
    auto g = r.ReadFieldHeader("S");
    ASSERT_FALSE(g.ok());
    EXPECT_THAT(g.status().message(), HasSubstr("overflows i16"));
  }
}

TEST(CompactReaderTest, ListHeadersShortAndLongForm) {
  for (uint32_t size : {0u, 1u, 14u, 15u, 16u, 300u}) {
    CompactWriter w;
    w.WriteListHeader(CompactType::kI32, size);
    for (uint32_t i = 0; i < size; ++i) w.WriteI32(static_cast<int32_t>(i) - 5);
    if (size < 15) {
      EXPECT_EQ(static_cast<uint8_t>(w.data()[0]), (size << 4) | 5);
    } else {
      EXPECT_EQ(static_cast<uint8_t>(w.data()[0]), 0xf5);
    }
    CompactReader r(Bytes(w.data()), w.data().size());
    auto h = r.ReadListHeader("l");
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->size, size);
    EXPECT_EQ(h->elem_type, CompactType::kI32);
    for (uint32_t i = 0; i < size; ++i) EXPECT_EQ(*r.ReadI32("e"), static_cast<int32_t>(i) - 5);
    EXPECT_EQ(r.remaining(), 0u);
  }
}

TEST(CompactReaderTest, BoolListElementTypeIsNormalized) {
  // Writers use 1 or 2 for the bool element type; both mean bool.
  const std::string bytes = Hex({0x32, 0x01, 0x02, 0x01});
  CompactReader r(Bytes(bytes), bytes.size());
  auto h = r.ReadListHeader("l");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->elem_type, CompactType::kBoolTrue);
  EXPECT_EQ(h->size, 3u);
  EXPECT_TRUE(*r.ReadBoolElement("b"));
  EXPECT_FALSE(*r.ReadBoolElement("b"));
  EXPECT_TRUE(*r.ReadBoolElement("b"));
}

TEST(CompactReaderTest, ListSizeMustFitRemainingBytes) {
  CompactWriter w;
  w.WriteListHeader(CompactType::kStruct, 1000000);
  w.WriteRaw(std::string(10, '\0'));
  CompactReader r(Bytes(w.data()), w.data().size());
  auto h = r.ReadListHeader("FileMetaData.row_groups");
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.status().message(),
              HasSubstr("FileMetaData.row_groups at byte 0: list of 1000000"));
  EXPECT_THAT(h.status().message(), HasSubstr("cannot fit in the 10 bytes left"));

  // Doubles take 8 bytes each: 2 fit in 16 bytes, 3 do not.
  for (uint32_t n : {2u, 3u}) {
    CompactWriter d;
    d.WriteListHeader(CompactType::kDouble, n);
    d.WriteRaw(std::string(16, '\0'));
    CompactReader rd(Bytes(d.data()), d.data().size());
    EXPECT_EQ(rd.ReadListHeader("d").ok(), n == 2);
  }

  // Long-form sizes beyond i32 are refused before any bounds arithmetic.
  CompactWriter big;
  big.WriteRaw(Hex({0xf5}));
  big.WriteVarint(uint64_t{1} << 40);
  CompactReader rb(Bytes(big.data()), big.data().size());
  auto hb = rb.ReadListHeader("big");
  ASSERT_FALSE(hb.ok());
  EXPECT_THAT(hb.status().message(), HasSubstr("exceeds i32"));
}

TEST(CompactReaderTest, MapHeaders) {
  CompactWriter w;
  w.WriteMapHeader(CompactType::kBinary, CompactType::kI64, 0);
  w.WriteMapHeader(CompactType::kBinary, CompactType::kI64, 2);
  w.WriteBinary("a");
  w.WriteI64(-1);
  w.WriteBinary("bc");
  w.WriteI64(1LL << 50);
  EXPECT_EQ(w.data().substr(0, 3), Hex({0x00, 0x02, 0x86}));
  CompactReader r(Bytes(w.data()), w.data().size());
  auto empty = r.ReadMapHeader("m");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->size, 0u);
  auto h = r.ReadMapHeader("m");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->size, 2u);
  EXPECT_EQ(h->key_type, CompactType::kBinary);
  EXPECT_EQ(h->value_type, CompactType::kI64);
  EXPECT_EQ(*r.ReadBinary("k"), "a");
  EXPECT_EQ(*r.ReadI64("v"), -1);
  EXPECT_EQ(*r.ReadBinary("k"), "bc");
  EXPECT_EQ(*r.ReadI64("v"), 1LL << 50);

  // 3 entries of at least 2 bytes each cannot fit in 5 bytes.
  const std::string lying = Hex({0x03, 0x55, 0, 0, 0, 0, 0});
  CompactReader r2(Bytes(lying), lying.size());
  EXPECT_FALSE(r2.ReadMapHeader("m").ok());
  const std::string bad_types = Hex({0x01, 0xe5, 0, 0});
  CompactReader r3(Bytes(bad_types), bad_types.size());
  EXPECT_FALSE(r3.ReadMapHeader("m").ok());
}

// A struct holding one field of every type, containers of every element
// type, and nesting: what Skip must get past.
std::string EveryTypeStruct() {
  CompactWriter w;
  w.BeginStruct();
  w.WriteBoolField(1, true);
  w.WriteBoolField(2, false);
  w.WriteFieldHeader(CompactType::kByte, 3);
  w.WriteByte(-1);
  w.WriteFieldHeader(CompactType::kI16, 4);
  w.WriteI16(-300);
  w.WriteFieldHeader(CompactType::kI32, 5);
  w.WriteI32(1 << 30);
  w.WriteFieldHeader(CompactType::kI64, 6);
  w.WriteI64(-(int64_t{1} << 60));
  w.WriteFieldHeader(CompactType::kDouble, 7);
  w.WriteDouble(3.25);
  w.WriteFieldHeader(CompactType::kBinary, 8);
  w.WriteBinary("hello");
  w.WriteFieldHeader(CompactType::kList, 9);
  w.WriteListHeader(CompactType::kBoolTrue, 3);
  w.WriteBoolElement(true);
  w.WriteBoolElement(false);
  w.WriteBoolElement(true);
  w.WriteFieldHeader(CompactType::kSet, 10);
  w.WriteSetHeader(CompactType::kDouble, 2);
  w.WriteDouble(1);
  w.WriteDouble(2);
  w.WriteFieldHeader(CompactType::kMap, 11);
  w.WriteMapHeader(CompactType::kBinary, CompactType::kStruct, 2);
  for (const char* key : {"k1", "k2"}) {
    w.WriteBinary(key);
    w.BeginStruct();
    w.WriteFieldHeader(CompactType::kList, 1);
    w.WriteListHeader(CompactType::kList, 1);
    w.WriteListHeader(CompactType::kI64, 2);
    w.WriteI64(1);
    w.WriteI64(2);
    w.EndStruct();
  }
  w.WriteFieldHeader(CompactType::kStruct, 12);
  w.BeginStruct();
  w.WriteFieldHeader(CompactType::kStruct, 1);
  w.BeginStruct();
  w.WriteFieldHeader(CompactType::kBinary, 200);
  w.WriteBinary("");
  w.EndStruct();
  w.EndStruct();
  w.WriteFieldHeader(CompactType::kUuid, 13);
  w.WriteRaw(std::string(16, '\x42'));
  w.WriteFieldHeader(CompactType::kList, 14);
  w.WriteListHeader(CompactType::kUuid, 1);
  w.WriteRaw(std::string(16, '\x43'));
  w.WriteFieldHeader(CompactType::kMap, 15);
  w.WriteMapHeader(CompactType::kI32, CompactType::kBoolTrue, 1);
  w.WriteI32(5);
  w.WriteBoolElement(false);
  w.WriteFieldHeader(CompactType::kList, 16);
  w.WriteListHeader(CompactType::kStruct, 20);
  for (int i = 0; i < 20; ++i) {
    w.BeginStruct();
    w.EndStruct();
  }
  w.EndStruct();
  return std::move(w).Finish();
}

TEST(CompactReaderTest, SkipsEveryType) {
  const std::string s = EveryTypeStruct() + "TAIL";
  CompactReader r(Bytes(s), s.size());
  ASSERT_TRUE(r.Skip(CompactType::kStruct).ok());
  EXPECT_EQ(r.remaining(), 4u);
  EXPECT_EQ(r.depth(), 0);
}

TEST(CompactReaderTest, SkipsEachFieldIndividually) {
  // Reading the struct field by field and skipping each value lands exactly
  // on the stop byte: every type's skip consumes exactly its encoding.
  const std::string s = EveryTypeStruct();
  CompactReader r(Bytes(s), s.size());
  std::vector<int> ids;
  ASSERT_TRUE(r.ReadStruct("T", [&](const FieldHeader& f) -> Status {
                 ids.push_back(f.id);
                 return r.Skip(f.type);
               }).ok());
  EXPECT_EQ(ids, (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}));
  EXPECT_EQ(r.remaining(), 0u);
}

TEST(CompactReaderTest, SkipEveryTruncationFails) {
  const std::string s = EveryTypeStruct();
  for (size_t n = 0; n < s.size(); ++n) {
    CompactReader r(Bytes(s), n);
    EXPECT_FALSE(r.Skip(CompactType::kStruct).ok()) << "prefix of " << n << " bytes";
  }
}

TEST(CompactReaderTest, SkipElementBoolConsumesOneByte) {
  const std::string bytes = Hex({0x02, 0x7f});
  CompactReader r(Bytes(bytes), bytes.size());
  ASSERT_TRUE(r.SkipElement(CompactType::kBoolTrue).ok());
  EXPECT_EQ(r.offset(), 1u);
  ASSERT_TRUE(r.Skip(CompactType::kBoolTrue).ok());  // a field: no body
  EXPECT_EQ(r.offset(), 1u);
  EXPECT_FALSE(r.Skip(CompactType::kStop).ok());
  EXPECT_FALSE(r.Skip(static_cast<CompactType>(14)).ok());
}

std::string NestedStructs(int depth) {
  CompactWriter w;
  for (int i = 0; i < depth; ++i) {
    w.BeginStruct();
    if (i + 1 < depth) w.WriteFieldHeader(CompactType::kStruct, 1);
  }
  for (int i = 0; i < depth; ++i) w.EndStruct();
  return std::move(w).Finish();
}

TEST(CompactReaderTest, DepthLimitOnStructs) {
  const std::string ok = NestedStructs(CompactReader::kMaxDepth);
  CompactReader r(Bytes(ok), ok.size());
  ASSERT_TRUE(r.Skip(CompactType::kStruct).ok());
  EXPECT_EQ(r.remaining(), 0u);

  const std::string deep = NestedStructs(CompactReader::kMaxDepth + 1);
  CompactReader r2(Bytes(deep), deep.size());
  auto st = r2.Skip(CompactType::kStruct);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("deeper than 64"));

  // BeginStruct refuses the 65th open struct too.
  CompactReader r3(Bytes(deep), deep.size());
  for (int i = 0; i < CompactReader::kMaxDepth; ++i) ASSERT_TRUE(r3.BeginStruct("s").ok());
  EXPECT_FALSE(r3.BeginStruct("s").ok());
}

TEST(CompactReaderTest, DepthLimitOnContainersStopsHugeNesting) {
  // 100000 nested one-element lists: recursion must stop at the limit, not
  // at the end of the stack.
  const std::string s(100000, '\x19');
  CompactReader r(Bytes(s), s.size());
  auto st = r.Skip(CompactType::kList);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("deeper than 64"));

  // Maps nested in map values: same.
  std::string m;
  for (int i = 0; i < 1000; ++i) m += Hex({0x01, 0x5b, 0x00});  // {i32: map}
  CompactReader rm(Bytes(m), m.size());
  EXPECT_FALSE(rm.Skip(CompactType::kMap).ok());
}

TEST(CompactReaderTest, ErrorsNameWhatAndOffset) {
  CompactWriter w;
  w.BeginStruct();
  w.WriteFieldHeader(CompactType::kI64, 1);
  w.WriteI64(5);
  std::string s = std::move(w).Finish();  // no stop byte
  CompactReader r(Bytes(s), s.size());
  auto st = r.ReadStruct("RowGroup", [&](const FieldHeader&) { return r.Skip(CompactType::kI64); });
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("RowGroup at byte 2: truncated"));
}

TEST(CompactTypeNameTest, Names) {
  EXPECT_EQ(CompactTypeName(CompactType::kI32), "i32");
  EXPECT_EQ(CompactTypeName(CompactType::kBoolFalse), "bool");
  EXPECT_EQ(CompactTypeName(CompactType::kStruct), "struct");
  EXPECT_EQ(CompactTypeName(static_cast<CompactType>(14)), "type 14");
}

}  // namespace
}  // namespace flywheel::interop::parquet
