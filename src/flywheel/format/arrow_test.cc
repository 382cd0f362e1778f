#include "flywheel/format/arrow.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace flywheel::format {
namespace {

// A struct schema (Arrow's record-batch form) with one child of `format`
// named `name`, owned by the test; release callbacks only mark it released.
// Not copyable: `top` points at `child`.
struct OneChildSchema {
  ArrowSchema child{};
  ArrowSchema* kids[1] = {&child};
  ArrowSchema top{};
  OneChildSchema(const char* format, const char* name, int64_t flags = 0) {
    child.format = format;
    child.name = name;
    child.flags = flags;
    child.release = [](ArrowSchema* x) { x->release = nullptr; };
    top.format = "+s";
    top.n_children = 1;
    top.children = kids;
    top.release = child.release;
  }
  OneChildSchema(const OneChildSchema&) = delete;
  OneChildSchema& operator=(const OneChildSchema&) = delete;
};

using ::testing::HasSubstr;

RecordBatch SampleBatch() {
  RecordBatch b;
  b.num_rows = 4;
  b.schema = *Schema::Parse("i:int64, f:float16?, flag:bool?, s:string?, bin:binary, l:list<int32>, t:float32[2,3]");
  b.columns.push_back(MakeFixedColumn(DataType::Scalar(TypeId::kInt64), std::vector<int64_t>{1, -2, 3, 1LL << 40}));
  b.columns.push_back(MakeFixedColumn(DataType::Scalar(TypeId::kFloat16), std::vector<uint16_t>{0x3c00, 0, 0xc000, 7}));
  SetValidity(b.columns.back(), {true, false, true, true});
  b.columns.push_back(MakeFixedColumn(DataType::Scalar(TypeId::kBool), std::vector<uint8_t>{1, 0, 1, 1}));
  SetValidity(b.columns.back(), {true, true, false, true});
  b.columns.push_back(MakeStringColumn({"a", "", "héllo", "xyz"}));
  SetValidity(b.columns.back(), {true, true, true, false});
  b.columns.push_back(MakeStringColumn({"\x00\x01", "b", "", "ccc"}, /*binary=*/true));
  b.columns.push_back(MakeListColumn<int32_t>(TypeId::kInt32, {{1, 2}, {}, {3}, {4, 5, 6}}));
  std::vector<float> t(24);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<float>(i) * 0.5f;
  b.columns.push_back(MakeFixedColumn(DataType::Tensor(TypeId::kFloat32, {2, 3}), t));
  EXPECT_TRUE(b.Validate().ok()) << b.Validate();
  return b;
}

void ExpectSameBatch(const RecordBatch& a, const RecordBatch& b) {
  ASSERT_EQ(a.num_rows, b.num_rows);
  ASSERT_EQ(a.schema.fields.size(), b.schema.fields.size());
  for (size_t i = 0; i < a.columns.size(); ++i) {
    const Column& x = a.columns[i];
    const Column& y = b.columns[i];
    SCOPED_TRACE(a.schema.fields[i].name);
    EXPECT_EQ(x.type, y.type);
    EXPECT_EQ(a.schema.fields[i].name, b.schema.fields[i].name);
    for (int64_t r = 0; r < x.length; ++r) {
      ASSERT_EQ(x.IsValid(r), y.IsValid(r)) << "row " << r;
      if (!x.IsValid(r)) continue;
      if (x.type.is_fixed_width()) {
        EXPECT_EQ(0, std::memcmp(x.FixedRow(r), y.FixedRow(r), x.type.fixed_width())) << "row " << r;
      } else if (x.type.id == TypeId::kList) {
        const size_t w = ScalarSize(x.type.elem);
        const int64_t* xo = x.offsets_data();
        const int64_t* yo = y.offsets_data();
        ASSERT_EQ(xo[r + 1] - xo[r], yo[r + 1] - yo[r]);
        EXPECT_EQ(0, std::memcmp(x.values.data + xo[r] * w, y.values.data + yo[r] * w, (xo[r + 1] - xo[r]) * w));
      } else {
        EXPECT_EQ(x.GetBytes(r), y.GetBytes(r)) << "row " << r;
      }
    }
  }
}

TEST(ArrowTest, SchemaRoundTripKeepsTypesNamesAndNullability) {
  const Schema s = SampleBatch().schema;
  ArrowSchema a{};
  ASSERT_TRUE(ExportSchema(s, &a).ok());
  EXPECT_STREQ(a.format, "+s");
  EXPECT_STREQ(a.children[0]->format, "l");
  EXPECT_STREQ(a.children[1]->format, "e");
  EXPECT_STREQ(a.children[3]->format, "U");
  EXPECT_STREQ(a.children[4]->format, "Z");
  EXPECT_STREQ(a.children[5]->format, "+L");
  EXPECT_STREQ(a.children[6]->format, "+w:6");
  EXPECT_EQ(ArrowTypeText(*a.children[6]), "fixed_size_list<float32>[6]");
  auto back = ImportSchema(a);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToString(), s.ToString());
  a.release(&a);
  EXPECT_EQ(a.release, nullptr);
}

TEST(ArrowTest, BatchRoundTripIsExactAndZeroCopyForFixedWidth) {
  const RecordBatch b = SampleBatch();
  ArrowSchema s{};
  ArrowArray a{};
  ASSERT_TRUE(ExportSchema(b.schema, &s).ok());
  ASSERT_TRUE(ExportBatch(b, &a).ok());
  EXPECT_EQ(a.length, 4);
  EXPECT_EQ(a.n_children, 7);
  // int64 values and string data are the flywheel buffers themselves.
  EXPECT_EQ(a.children[0]->buffers[1], b.columns[0].values.data);
  EXPECT_EQ(a.children[3]->buffers[2], b.columns[3].values.data);
  EXPECT_EQ(a.children[6]->children[0]->buffers[1], b.columns[6].values.data);
  auto back = ImportBatch(&a, s);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(a.release, nullptr);  // ownership moved into the batch
  ExpectSameBatch(b, *back);
  // Import is zero-copy too: the same bytes again.
  EXPECT_EQ(back->columns[0].values.data, b.columns[0].values.data);
  s.release(&s);
}

TEST(ArrowTest, ImportHonoursArrayOffsetsAndInt32Offsets) {
  // A hand-built slice: int32-offset strings with offset 1, validity unaligned.
  const int32_t offsets[] = {0, 1, 3, 6, 6};
  const char data[] = "abbccc";
  const uint8_t validity[] = {0b1011};  // rows 0,1,3 valid
  const void* bufs[] = {validity, offsets, data};
  ArrowArray col{};
  col.length = 3;
  col.offset = 1;
  col.null_count = -1;
  col.n_buffers = 3;
  col.buffers = bufs;
  col.release = [](ArrowArray* x) { x->release = nullptr; };
  ArrowArray* kids[] = {&col};
  static bool released = false;
  ArrowArray top{};
  top.length = 3;
  top.n_buffers = 1;
  const void* top_bufs[] = {nullptr};
  top.buffers = top_bufs;
  top.n_children = 1;
  top.children = kids;
  top.release = [](ArrowArray* x) {
    released = true;
    x->release = nullptr;
  };
  OneChildSchema schema("u", "s", ARROW_FLAG_NULLABLE);
  ArrowSchema& top_s = schema.top;
  {
    auto b = ImportBatch(&top, top_s);
    ASSERT_TRUE(b.ok()) << b.status();
    const Column& c = b->columns[0];
    EXPECT_EQ(c.length, 3);
    EXPECT_EQ(c.null_count, 1);
    EXPECT_TRUE(c.IsValid(0));
    EXPECT_FALSE(c.IsValid(1));
    EXPECT_TRUE(c.IsValid(2));
    EXPECT_EQ(c.GetBytes(0), "bb");
    EXPECT_EQ(c.GetBytes(2), "");
    EXPECT_FALSE(released);
  }
  EXPECT_TRUE(released);  // the producer's release ran once nothing referred to it
}

TEST(ArrowTest, ASlicedStructReadsOnlyItsRowsOfLongerChildren) {
  const RecordBatch b = SampleBatch();
  ArrowSchema s{};
  ArrowArray a{};
  ASSERT_TRUE(ExportSchema(b.schema, &s).ok());
  ASSERT_TRUE(ExportBatch(b, &a).ok());
  a.offset = 1;  // rows 1 and 2 of children that hold 4
  a.length = 2;
  auto got = ImportBatch(&a, s);
  ASSERT_TRUE(got.ok()) << got.status();
  RecordBatch want;
  want.schema = b.schema;
  want.num_rows = 2;
  for (const Column& c : b.columns) want.columns.push_back(c.Slice(1, 2));
  ExpectSameBatch(want, *got);
  EXPECT_EQ(got->columns[3].GetBytes(1), "héllo");
  s.release(&s);
}

TEST(ArrowTest, ChildShorterThanTheBatchIsRefused) {
  const RecordBatch b = SampleBatch();
  ArrowSchema s{};
  ArrowArray a{};
  ASSERT_TRUE(ExportSchema(b.schema, &s).ok());
  ASSERT_TRUE(ExportBatch(b, &a).ok());
  a.length = 5;  // children hold 4
  auto got = ImportBatch(&a, s);
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("column 'i' has 4 rows but the batch has 5"));
  s.release(&s);
}

// A fixed_size_list<int32>[2] column of 2 rows; row 1 null, its elements as
// `child_validity` says.
Result<RecordBatch> ImportTensorColumn(uint8_t child_validity) {
  static const int32_t values[] = {1, 2, 3, 4};
  const uint8_t parent_validity = 0b01;
  const void* child_bufs[] = {&child_validity, values};
  ArrowArray child{};
  child.length = 4;
  child.null_count = -1;
  child.n_buffers = 2;
  child.buffers = child_bufs;
  child.release = [](ArrowArray* x) { x->release = nullptr; };
  ArrowArray* grandkids[] = {&child};
  const void* col_bufs[] = {&parent_validity};
  ArrowArray col{};
  col.length = 2;
  col.null_count = 1;
  col.n_buffers = 1;
  col.buffers = col_bufs;
  col.n_children = 1;
  col.children = grandkids;
  col.release = child.release;
  ArrowArray* kids[] = {&col};
  const void* top_bufs[] = {nullptr};
  ArrowArray top{};
  top.length = 2;
  top.n_buffers = 1;
  top.buffers = top_bufs;
  top.n_children = 1;
  top.children = kids;
  top.release = child.release;
  ArrowSchema item{};
  item.format = "i";
  item.name = "item";
  item.release = [](ArrowSchema* x) { x->release = nullptr; };
  ArrowSchema* item_kids[] = {&item};
  ArrowSchema t{};
  t.format = "+w:2";
  t.name = "t";
  t.flags = ARROW_FLAG_NULLABLE;
  t.n_children = 1;
  t.children = item_kids;
  t.release = item.release;
  ArrowSchema* fields[] = {&t};
  ArrowSchema top_s{};
  top_s.format = "+s";
  top_s.n_children = 1;
  top_s.children = fields;
  top_s.release = item.release;
  return ImportBatch(&top, top_s);
}

TEST(ArrowTest, TensorElementsMayBeNullOnlyInNullRows) {
  auto ok = ImportTensorColumn(0b0011);  // row 1's elements null, as Polars writes them
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->columns[0].type, DataType::Tensor(TypeId::kInt32, {2}));
  EXPECT_TRUE(ok->columns[0].IsValid(0));
  EXPECT_FALSE(ok->columns[0].IsValid(1));
  auto bad = ImportTensorColumn(0b1110);  // an element of valid row 0 is null
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("row 0 of a tensor holds a null element"));
}

TEST(ArrowTest, TemporalTypesMapToIntegersWithTheirTagsAndBack) {
  const char* formats[] = {"tsu:UTC", "tsn:", "tss:Europe/Paris", "tdD", "tdm", "ttm", "ttn", "tDu"};
  const char* tags[] = {"timestamp(us, UTC)", "timestamp(ns)", "timestamp(s, Europe/Paris)", "date32", "date64",
                        "time(ms)", "time(ns)", "duration(us)"};
  const TypeId storage[] = {TypeId::kInt64, TypeId::kInt64, TypeId::kInt64, TypeId::kInt32, TypeId::kInt64,
                            TypeId::kInt32, TypeId::kInt64, TypeId::kInt64};
  for (int i = 0; i < 8; ++i) {
    SCOPED_TRACE(formats[i]);
    OneChildSchema one(formats[i], "t");
    LogicalTypes logical;
    auto schema = ImportSchema(one.top, &logical);
    ASSERT_TRUE(schema.ok()) << schema.status();
    EXPECT_EQ(schema->fields[0].type, DataType::Scalar(storage[i]));
    EXPECT_EQ(logical["t"], tags[i]);
    ArrowSchema back{};
    ASSERT_TRUE(ExportSchema(*schema, &back, &logical).ok());
    EXPECT_STREQ(back.children[0]->format, formats[i]);
    back.release(&back);
  }
  // A tag that does not fit the column's storage exports the integers.
  Schema s = *Schema::Parse("t:int32");
  LogicalTypes wrong{{"t", "timestamp(us)"}};
  ArrowSchema out{};
  ASSERT_TRUE(ExportSchema(s, &out, &wrong).ok());
  EXPECT_STREQ(out.children[0]->format, "i");
  out.release(&out);
}

TEST(ArrowTest, UnsupportedTypesNameTheColumnAndType) {
  OneChildSchema one("d:12,2", "when");
  ArrowSchema& ts = one.child;
  ArrowSchema& top = one.top;
  auto r = ImportSchema(top);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("column 'when'"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("decimal(12,2)"));
  ts.format = "+m";
  r = ImportSchema(top);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("map"));
}

TEST(ArrowTest, StreamExportsEveryBatchThenEnds) {
  const RecordBatch b = SampleBatch();
  int calls = 0;
  ArrowArrayStream st{};
  ExportStream(b.schema, [&]() -> Result<std::optional<RecordBatch>> {
    if (calls++ < 3) return std::optional<RecordBatch>(b);
    return std::optional<RecordBatch>();
  }, &st);
  int batches = 0;
  int64_t rows = 0;
  Status s = ImportStream(&st, [&](const Schema& sc, const LogicalTypes&) {
    EXPECT_EQ(sc.ToString(), b.schema.ToString());
    return absl::OkStatus();
  }, [&](RecordBatch got) {
    ++batches;
    rows += got.num_rows;
    ExpectSameBatch(b, got);
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(batches, 3);
  EXPECT_EQ(rows, 12);
  EXPECT_EQ(st.release, nullptr);
}

TEST(ArrowTest, StreamErrorsReachTheConsumer) {
  ArrowArrayStream st{};
  ExportStream(SampleBatch().schema, []() -> Result<std::optional<RecordBatch>> {
    return absl::DataLossError("page 3 of /t/f.shard: checksum mismatch");
  }, &st);
  Status s = ImportStream(&st, [](const Schema&, const LogicalTypes&) { return absl::OkStatus(); },
                          [](RecordBatch) { return absl::OkStatus(); });
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("checksum mismatch"));
}

}  // namespace
}  // namespace flywheel::format
