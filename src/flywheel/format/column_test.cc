#include "flywheel/format/column.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace flywheel::format {
namespace {

using ::testing::HasSubstr;

std::vector<int32_t> Int32s(const Column& c) {
  std::vector<int32_t> out(static_cast<size_t>(c.length));
  std::memcpy(out.data(), c.values.data, out.size() * 4);
  return out;
}

std::vector<std::string> Strings(const Column& c) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < c.length; ++i) out.emplace_back(c.GetBytes(i));
  return out;
}

std::vector<std::vector<int32_t>> Lists(const Column& c) {
  std::vector<std::vector<int32_t>> out;
  const int64_t* o = c.offsets_data();
  const int32_t* v = c.values.as<int32_t>();
  for (int64_t i = 0; i < c.length; ++i) out.emplace_back(v + o[i], v + o[i + 1]);
  return out;
}

std::vector<bool> Validity(const Column& c) {
  std::vector<bool> out;
  for (int64_t i = 0; i < c.length; ++i) out.push_back(c.IsValid(i));
  return out;
}

Column Iota32(int n, int start = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + i;
  return MakeFixedColumn(DataType::Scalar(TypeId::kInt32), v);
}

TEST(ColumnTest, MakeFixedColumnCountsRowsFromTheShape) {
  Column c = MakeFixedColumn(DataType::Tensor(TypeId::kFloat32, {3}), std::vector<float>(12, 1.5f));
  EXPECT_EQ(c.length, 4);
  EXPECT_EQ(c.values.size, 48u);
  EXPECT_EQ(c.num_values(), 12);
  EXPECT_TRUE(c.Validate("t").ok());
  const float* row2 = reinterpret_cast<const float*>(c.FixedRow(2));
  EXPECT_EQ(row2, c.values.as<float>() + 6);
}

TEST(ColumnTest, SliceOfFixedWidthColumnIsZeroCopy) {
  Column c = Iota32(100);
  Column s = c.Slice(10, 20);
  EXPECT_EQ(s.length, 20);
  EXPECT_EQ(s.values.data, c.values.data + 40);
  EXPECT_EQ(s.values.size, 80u);
  EXPECT_EQ(s.values.owner, c.values.owner);
  EXPECT_EQ(Int32s(s)[0], 10);
  EXPECT_EQ(Int32s(s)[19], 29);
  EXPECT_TRUE(s.Validate("s").ok());

  // Tensor rows slice by whole rows.
  Column t = MakeFixedColumn(DataType::Tensor(TypeId::kUInt8, {2, 3}), std::vector<uint8_t>(60, 7));
  Column ts = t.Slice(3, 4);
  EXPECT_EQ(ts.values.data, t.values.data + 18);
  EXPECT_EQ(ts.values.size, 24u);
}

TEST(ColumnTest, SliceOfStringColumnSharesValuesAndOffsets) {
  Column c = MakeStringColumn({"a", "bb", "", "dddd", "eeeee"});
  Column s = c.Slice(1, 3);
  EXPECT_EQ(s.values.data, c.values.data);
  EXPECT_EQ(s.offsets.data, c.offsets.data + 8);
  EXPECT_EQ(s.offsets_data()[0], 1);  // offsets of a slice need not start at 0
  EXPECT_EQ(Strings(s), (std::vector<std::string>{"bb", "", "dddd"}));
  EXPECT_EQ(s.num_values(), 6);
  EXPECT_TRUE(s.Validate("s").ok());
}

TEST(ColumnTest, SliceAtNonByteAlignedOffsetRepacksValidity) {
  const int n = 37;
  Column c = Iota32(n);
  std::vector<bool> valid(n);
  for (int i = 0; i < n; ++i) valid[static_cast<size_t>(i)] = (i % 3) != 0;
  SetValidity(c, valid);
  EXPECT_EQ(c.null_count, 13);

  for (int offset : {1, 3, 5, 7, 9, 13}) {
    for (int len : {1, 7, 8, 9, 20}) {
      if (offset + len > n) continue;
      SCOPED_TRACE(testing::Message() << "offset " << offset << " len " << len);
      Column s = c.Slice(offset, len);
      std::vector<bool> want(valid.begin() + offset, valid.begin() + offset + len);
      int64_t nulls = 0;
      for (bool v : want) nulls += !v;
      EXPECT_EQ(s.null_count, nulls);
      if (nulls > 0) {
        EXPECT_EQ(Validity(s), want);
        EXPECT_GE(s.validity.size, static_cast<size_t>((len + 7) / 8));
      } else {
        EXPECT_TRUE(s.validity.empty());
      }
      EXPECT_EQ(s.values.data, c.values.data + offset * 4);  // values still shared
      EXPECT_TRUE(s.Validate("s").ok());
    }
  }
}

TEST(ColumnTest, SliceAtByteAlignedOffsetSharesTheBitmap) {
  Column c = Iota32(32);
  std::vector<bool> valid(32, true);
  valid[9] = false;
  valid[20] = false;
  SetValidity(c, valid);
  Column s = c.Slice(8, 16);
  EXPECT_EQ(s.validity.data, c.validity.data + 1);
  EXPECT_EQ(s.null_count, 2);
  EXPECT_FALSE(s.IsValid(1));
  EXPECT_FALSE(s.IsValid(12));
  EXPECT_TRUE(s.IsValid(0));
}

TEST(ColumnTest, SliceWithoutNullsDropsValidity) {
  Column c = Iota32(16);
  std::vector<bool> valid(16, true);
  valid[0] = false;
  SetValidity(c, valid);
  Column s = c.Slice(1, 15);
  EXPECT_EQ(s.null_count, 0);
  EXPECT_TRUE(s.validity.empty());
}

TEST(ColumnTest, ConcatFixedWidthColumnsPreservesOrder) {
  Column a = Iota32(5, 0);
  Column b = Iota32(3, 100);
  Column empty = Iota32(0);
  Column out = ConcatColumns({a, empty, b});
  EXPECT_EQ(out.length, 8);
  EXPECT_EQ(Int32s(out), (std::vector<int32_t>{0, 1, 2, 3, 4, 100, 101, 102}));
  EXPECT_TRUE(out.validity.empty());
  EXPECT_TRUE(out.Validate("out").ok());
}

TEST(ColumnTest, ConcatOfOneColumnReturnsItUncopied) {
  Column a = Iota32(5);
  Column out = ConcatColumns({a});
  EXPECT_EQ(out.values.data, a.values.data);
  Column none = ConcatColumns({});
  EXPECT_EQ(none.length, 0);
}

TEST(ColumnTest, ConcatStringSlicesRebasesOffsets) {
  Column c = MakeStringColumn({"zero", "one", "two", "three", "four"});
  Column out = ConcatColumns({c.Slice(3, 2), c.Slice(0, 2), MakeStringColumn({}), c.Slice(2, 1)});
  ASSERT_TRUE(out.Validate("out").ok()) << out.Validate("out");
  EXPECT_EQ(out.offsets_data()[0], 0);
  EXPECT_EQ(Strings(out), (std::vector<std::string>{"three", "four", "zero", "one", "two"}));
  EXPECT_EQ(out.values.size, 19u);
}

TEST(ColumnTest, ConcatListColumnsCountsOffsetsInElements) {
  Column a = MakeListColumn<int32_t>(TypeId::kInt32, {{1, 2}, {}, {3}});
  Column b = MakeListColumn<int32_t>(TypeId::kInt32, {{4, 5, 6}, {7}});
  Column out = ConcatColumns({a.Slice(1, 2), b});
  ASSERT_TRUE(out.Validate("out").ok()) << out.Validate("out");
  EXPECT_EQ(Lists(out), (std::vector<std::vector<int32_t>>{{}, {3}, {4, 5, 6}, {7}}));
  EXPECT_EQ(out.num_values(), 5);
}

TEST(ColumnTest, ConcatMergesValidityAcrossPartsWithAndWithoutNulls) {
  Column a = Iota32(5);
  SetValidity(a, {true, false, true, true, false});
  Column b = Iota32(4, 10);  // no validity: all valid
  Column c = MakeStringColumn({"x", "y", "z"});
  SetValidity(c, {false, true, true});
  Column out = ConcatColumns({a, b, a.Slice(1, 3)});
  EXPECT_EQ(out.length, 12);
  EXPECT_EQ(out.null_count, 3);
  EXPECT_EQ(Validity(out), (std::vector<bool>{true, false, true, true, false, true, true, true,
                                              true, false, true, true}));
  Column strs = ConcatColumns({MakeStringColumn({"a"}), c});
  EXPECT_EQ(Validity(strs), (std::vector<bool>{true, false, true, true}));
  EXPECT_EQ(strs.null_count, 1);
  EXPECT_EQ(Strings(strs), (std::vector<std::string>{"a", "x", "y", "z"}));
}

TEST(ColumnTest, TakeGathersRandomAndRepeatedRows) {
  Column c = Iota32(10);
  SetValidity(c, {true, true, false, true, true, true, true, false, true, true});
  const std::vector<int64_t> idx = {9, 2, 2, 0, 7, 5, 9};
  Column out = TakeColumn(c, idx.data(), idx.size());
  EXPECT_EQ(Int32s(out), (std::vector<int32_t>{9, 2, 2, 0, 7, 5, 9}));
  EXPECT_EQ(Validity(out), (std::vector<bool>{true, false, false, true, false, true, true}));
  EXPECT_EQ(out.null_count, 3);
  EXPECT_TRUE(out.Validate("out").ok());

  Column s = MakeStringColumn({"alpha", "", "gamma", "delta"});
  Column so = TakeColumn(s.Slice(1, 3), std::vector<int64_t>{2, 0, 1, 2}.data(), 4);
  EXPECT_EQ(Strings(so), (std::vector<std::string>{"delta", "", "gamma", "delta"}));
  EXPECT_TRUE(so.validity.empty());

  Column l = MakeListColumn<int32_t>(TypeId::kInt32, {{1}, {2, 3}, {}, {4, 5, 6}});
  Column lo = TakeColumn(l, std::vector<int64_t>{3, 3, 2, 1}.data(), 4);
  EXPECT_EQ(Lists(lo), (std::vector<std::vector<int32_t>>{{4, 5, 6}, {4, 5, 6}, {}, {2, 3}}));

  Column t = MakeFixedColumn(DataType::Tensor(TypeId::kUInt16, {2}),
                             std::vector<uint16_t>{1, 2, 3, 4, 5, 6});
  Column to = TakeColumn(t, std::vector<int64_t>{2, 0}.data(), 2);
  const uint16_t* v = to.values.as<uint16_t>();
  EXPECT_EQ((std::vector<uint16_t>(v, v + 4)), (std::vector<uint16_t>{5, 6, 1, 2}));

  Column none = TakeColumn(c, nullptr, 0);
  EXPECT_EQ(none.length, 0);
  EXPECT_TRUE(none.Validate("none").ok());
}

TEST(ColumnTest, MakeNullColumnIsValidAndAllNull) {
  for (const DataType& t :
       {DataType::Scalar(TypeId::kFloat64), DataType::String(), DataType::List(TypeId::kInt8)}) {
    SCOPED_TRACE(t.ToString());
    Column c = MakeNullColumn(t, 11, /*nullable=*/true);
    EXPECT_EQ(c.length, 11);
    EXPECT_EQ(c.null_count, 11);
    for (int64_t i = 0; i < 11; ++i) EXPECT_FALSE(c.IsValid(i));
    EXPECT_TRUE(c.Validate("n").ok()) << c.Validate("n");
    Column z = MakeNullColumn(t, 3, /*nullable=*/false);
    EXPECT_EQ(z.null_count, 0);
    EXPECT_TRUE(z.validity.empty());
    EXPECT_TRUE(z.Validate("z").ok());
  }
}

void ExpectInvalid(const Column& c, const std::string& part) {
  Status s = c.Validate("col7");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("column 'col7'"));
  EXPECT_THAT(std::string(s.message()), HasSubstr(part));
}

TEST(ColumnTest, ValidateReportsEachInconsistency) {
  {
    Column c = Iota32(4);
    c.length = -1;
    ExpectInvalid(c, "negative length");
  }
  {
    Column c = Iota32(4);
    c.length = 5;
    ExpectInvalid(c, "values have 16 bytes, expected 5 rows of 4");
  }
  {
    Column c = Iota32(16);
    c.validity = Buffer::FromVector(std::vector<uint8_t>{0xff});
    ExpectInvalid(c, "validity bitmap has 1 bytes, need 2");
  }
  {
    Column c = MakeStringColumn({"a", "b"});
    c.offsets.size = 16;
    ExpectInvalid(c, "offsets have 16 bytes, expected 24");
  }
  {
    Column c = MakeStringColumn({"a", "b"});
    c.offsets = Buffer::FromVector(std::vector<int64_t>{0, 2, 1});
    ExpectInvalid(c, "offsets decrease at row 1");
  }
  {
    Column c = MakeStringColumn({"a", "b"});
    c.offsets = Buffer::FromVector(std::vector<int64_t>{-1, 0, 1});
    ExpectInvalid(c, "negative first offset");
  }
  {
    Column c = MakeStringColumn({"a", "b"});
    c.offsets = Buffer::FromVector(std::vector<int64_t>{0, 1, 3});
    ExpectInvalid(c, "offsets point past the values (3 > 2)");
  }
  {
    // List offsets count elements, not bytes.
    Column c = MakeListColumn<int32_t>(TypeId::kInt32, {{1, 2}});
    c.offsets = Buffer::FromVector(std::vector<int64_t>{0, 3});
    ExpectInvalid(c, "offsets point past the values (3 > 2)");
  }
}

// length * fixed_width overflowed size_t, so a huge claimed length "matched"
// an empty values buffer.
TEST(ColumnTest, RegressionValidateFixedWidthOverflow) {
  Column c;
  c.type = DataType::Tensor(TypeId::kFloat64, {65536, 65536});  // 2^35 bytes per row
  ASSERT_TRUE(c.type.Validate().ok());
  c.length = int64_t{1} << 29;  // 2^64 bytes in all
  ExpectInvalid(c, "values have 0 bytes");
}

RecordBatch TwoColumnBatch() {
  RecordBatch b;
  b.schema = *Schema::Parse("id:int32, name:string?");
  b.columns = {Iota32(3), MakeStringColumn({"a", "b", "c"})};
  b.num_rows = 3;
  return b;
}

TEST(RecordBatchTest, ValidBatchPasses) {
  RecordBatch b = TwoColumnBatch();
  SetValidity(b.columns[1], {true, false, true});
  EXPECT_TRUE(b.Validate().ok()) << b.Validate();
}

TEST(RecordBatchTest, ValidateReportsEachMismatch) {
  auto expect = [](const RecordBatch& b, const std::string& part) {
    Status s = b.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(part));
  };
  {
    RecordBatch b = TwoColumnBatch();
    b.columns.pop_back();
    expect(b, "batch has 1 columns, schema has 2");
  }
  {
    RecordBatch b = TwoColumnBatch();
    b.columns[0] = MakeFixedColumn(DataType::Scalar(TypeId::kInt64), std::vector<int64_t>{1, 2, 3});
    expect(b, "column 'id' has type int64, schema says int32");
  }
  {
    RecordBatch b = TwoColumnBatch();
    b.columns[0] = Iota32(4);
    expect(b, "column 'id' has 4 rows, batch has 3");
  }
  {
    RecordBatch b = TwoColumnBatch();
    SetValidity(b.columns[0], {true, false, true});
    expect(b, "column 'id' has nulls but the field is not nullable");
  }
  {
    RecordBatch b = TwoColumnBatch();
    b.columns[1].offsets = Buffer::FromVector(std::vector<int64_t>{0, 2, 1, 3});
    expect(b, "column 'name' (string): offsets decrease at row 1");
  }
}

}  // namespace
}  // namespace flywheel::format
