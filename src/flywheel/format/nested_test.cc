// Nested types end to end in the format layer: the type grammar, columns
// (slice, concat, take, validate), JSON values, shard pages (round trips,
// page cuts, the feature flag, corruption) and the Arrow C data interface.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "flywheel/format/arrow.h"
#include "flywheel/format/column.h"
#include "flywheel/format/internal/nested_page.h"
#include "flywheel/format/json_column.h"
#include "flywheel/format/shard.h"
#include "flywheel/format/types.h"
#include "flywheel/io/file_system.h"
#include "flywheel/io/temp_dir.h"

namespace flywheel::format {
namespace {

using ::testing::HasSubstr;

Field F(const std::string& name, const std::string& type, bool nullable = true) {
  auto t = DataType::Parse(type);
  EXPECT_TRUE(t.ok()) << type << ": " << t.status();
  return Field{name, t.ok() ? *t : DataType{}, nullable};
}

Column Build(const Field& f, const std::vector<std::string>& rows) {
  JsonColumnBuilder b(f);
  for (const auto& r : rows) {
    Status s = b.AppendText(r);
    EXPECT_TRUE(s.ok()) << r << ": " << s;
  }
  Column c = b.Finish();
  EXPECT_TRUE(c.Validate(f.name).ok()) << c.Validate(f.name);
  return c;
}

std::vector<std::string> Json(const Column& c) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < c.length; ++i) out.push_back(ValueToJson(c, i));
  return out;
}

// The shapes the issue names, each with nulls at every level it allows.
struct Shape {
  std::string type;
  std::vector<std::string> rows;
};
std::vector<Shape> Shapes() {
  return {
      {"list<struct<role: string, content: string?>>",
       {R"([{"role":"system","content":"be brief"},{"role":"user","content":"hi"}])", "[]", "null",
        R"([{"role":"assistant","content":null}])"}},
      {"struct<bytes: binary?, path: string?>",
       {R"({"bytes":{"hex":"89504e47"},"path":"a.png"})", R"({"bytes":null,"path":"b.png"})", "null",
        R"({"bytes":{"hex":""},"path":null})"}},
      {"list<string?>", {R"(["a","b"])", "[]", "null", R"([null,"c",null])"}},
      {"list<list<int64>?>", {"[[1,2],[3]]", "[[]]", "null", "[null,[4,5,6]]", "[]"}},
      {"map<string, float64?>", {R"({"a":1.5,"b":null})", "{}", "null", R"({"z":-2.25})"}},
      {"struct<id: int64, turns: list<struct<role: string, tokens: list<int32>>>?>",
       {R"({"id":1,"turns":[{"role":"user","tokens":[1,2,3]},{"role":"assistant","tokens":[]}]})",
        R"({"id":2,"turns":null})", "null", R"({"id":3,"turns":[]})"}},
      {"list<int64?>", {"[1,null,3]", "null", "[]"}},
      {"map<int32, list<string>>", {R"([[1,["x"]],[2,[]]])", "[]", "null"}},
      {"list<float32[2]>", {"[[1.5,-2.5],[3.25,4.5]]", "[]", "null"}},
  };
}

TEST(NestedTypesTest, GrammarRoundTripsAndCanonicalises) {
  for (const Shape& s : Shapes()) {
    SCOPED_TRACE(s.type);
    auto t = DataType::Parse(s.type);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->ToString(), s.type);
    EXPECT_TRUE(t->is_nested());
    EXPECT_TRUE(t->Validate().ok());
  }
  // A list of non-null scalars is the packed list it always was.
  auto packed = DataType::Parse("list<int32>");
  ASSERT_TRUE(packed.ok());
  EXPECT_EQ(*packed, DataType::List(TypeId::kInt32));
  EXPECT_FALSE(packed->is_nested());
  EXPECT_EQ(DataType::ListOf(DataType::Scalar(TypeId::kInt32), false), DataType::List(TypeId::kInt32));
  // Whitespace and quoted names.
  auto q = DataType::Parse(" struct < \"a b\" : int8 , c:list< string ? > ? > ");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->ToString(), "struct<\"a b\": int8, c: list<string?>?>");
  EXPECT_EQ(*DataType::Parse(q->ToString()), *q);
  EXPECT_EQ(q->depth(), 2);
  // Schemas hold them too.
  auto schema = Schema::Parse("messages: list<struct<role: string, content: string>>?, id:int64");
  ASSERT_TRUE(schema.ok()) << schema.status();
  EXPECT_EQ(schema->fields[0].type.ToString(), "list<struct<role: string, content: string>>");
  EXPECT_TRUE(schema->fields[0].nullable);
}

TEST(NestedTypesTest, ParseErrorsPointAtTheCharacter) {
  struct Case {
    std::string text, part;
  };
  const std::vector<Case> cases = {
      {"list<struct<role: strin>>", "character 19: unknown type 'strin'"},
      {"struct<a: int8, a: int16>", "character 17: duplicate struct field name 'a'"},
      {"map<string?, int8>", "character 5: map keys cannot be null"},
      {"map<list<int8>, int8>", "map keys must be scalars, strings or binary"},
      {"struct<>", "character 8: expected a field name"},
      {"struct<a int8>", "character 10: expected ':', found 'i'"},
      {"list<int8", "missing '>'"},
      {"list<int8>>", "character 11: unexpected '>'"},
      {"struct<\"a: int8>", "character 8: unterminated quoted field name"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    auto t = DataType::Parse(c.text);
    ASSERT_FALSE(t.ok()) << t->ToString();
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(c.part));
  }
  // Nesting past the documented limit.
  std::string deep;
  for (int i = 0; i < 40; ++i) deep += "list<";
  deep += "int8?";
  for (int i = 0; i < 40; ++i) deep += ">";
  auto t = DataType::Parse(deep);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("nest at most 32 levels"));
}

TEST(NestedTypesTest, JsonValuesRoundTripWithNullsAtEveryLevel) {
  for (const Shape& s : Shapes()) {
    SCOPED_TRACE(s.type);
    const Field f = F("x", s.type);
    const Column c = Build(f, s.rows);
    EXPECT_EQ(Json(c), s.rows);
  }
  // A null list, an empty list and a list holding a null differ.
  const Column c = Build(F("x", "list<int64?>"), {"null", "[]", "[null]"});
  EXPECT_FALSE(c.IsValid(0));
  EXPECT_TRUE(c.IsValid(1));
  EXPECT_EQ(c.offsets_data()[2] - c.offsets_data()[1], 0);
  EXPECT_EQ(c.children[0].length, 1);
  EXPECT_FALSE(c.children[0].IsValid(0));
}

TEST(NestedTypesTest, JsonErrorsNameThePath) {
  struct Case {
    std::string type, row, part;
  };
  const std::vector<Case> cases = {
      {"list<struct<role: string, content: string>>", R"([{"role":"user","content":"a"},{"role":3}])",
       "[1].role: expected a string, got 3"},
      {"list<struct<role: string, content: string>>", R"([{"role":"user"}])",
       "[0].content: is null but the type does not allow null"},
      {"struct<a: int8>", R"({"a":1,"b":2})", "key 'b' is not a field of struct<a: int8>"},
      {"map<string, int8>", R"({"a":300})", "[\"a\"]: 300 is out of range for int8"},
      {"list<int32>", "[1,null]", "[1]: is null but list elements of list<int32> are not nullable"},
      {"map<int32, int8>", "[[null,1]]", "[0]: map keys cannot be null"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.row);
    JsonColumnBuilder b(F("m", c.type, false));
    Status s = b.AppendText(c.row);
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.part));
  }
}

TEST(NestedColumnsTest, SliceConcatTakeKeepValues) {
  for (const Shape& s : Shapes()) {
    SCOPED_TRACE(s.type);
    const Field f = F("x", s.type);
    const Column c = Build(f, s.rows);
    const int64_t n = c.length;
    for (int64_t a = 0; a <= n; ++a) {
      for (int64_t len = 0; a + len <= n; ++len) {
        const Column sl = c.Slice(a, len);
        ASSERT_TRUE(sl.Validate("slice").ok()) << sl.Validate("slice");
        const std::vector<std::string> want(s.rows.begin() + a, s.rows.begin() + a + len);
        EXPECT_EQ(Json(sl), want);
      }
    }
    const Column joined = ConcatColumns({c.Slice(0, 1), c.Slice(1, n - 1), c.Slice(0, 0), c});
    ASSERT_TRUE(joined.Validate("joined").ok()) << joined.Validate("joined");
    std::vector<std::string> want = s.rows;
    want.insert(want.end(), s.rows.begin(), s.rows.end());
    EXPECT_EQ(Json(joined), want);
    std::vector<int64_t> idx;
    for (int64_t i = n - 1; i >= 0; --i) idx.push_back(i);
    idx.push_back(0);
    const Column taken = TakeColumn(c, idx.data(), idx.size());
    ASSERT_TRUE(taken.Validate("taken").ok()) << taken.Validate("taken");
    std::vector<std::string> want_taken;
    for (int64_t i : idx) want_taken.push_back(s.rows[static_cast<size_t>(i)]);
    EXPECT_EQ(Json(taken), want_taken);
    // A null column of the type: every row null, children consistent.
    const Column nulls = MakeNullColumn(f.type, 3, true);
    ASSERT_TRUE(nulls.Validate("nulls").ok()) << nulls.Validate("nulls");
    EXPECT_EQ(Json(nulls), std::vector<std::string>(3, "null"));
  }
}

TEST(NestedColumnsTest, ValidateRejectsInconsistentChildren) {
  Column c = Build(F("x", "list<string?>"), {R"(["a"])"});
  Column bad = c;
  bad.children[0].length = 0;  // the offsets point past it
  bad.children[0].offsets.size = 8;
  EXPECT_THAT(std::string(bad.Validate("x").message()), HasSubstr("offsets point past the elements"));
  Column s = Build(F("s", "struct<a: int8?>"), {R"({"a":null})"});
  s.type = DataType::Struct({Field{"a", DataType::Scalar(TypeId::kInt8), false}});
  EXPECT_THAT(std::string(s.Validate("s").message()), HasSubstr("column 's.a' has nulls but is not nullable"));
}

class NestedShardTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) { return tmp_.path() + "/" + name; }
  io::TempDir tmp_{"fw_nested_test"};
  std::shared_ptr<io::FileSystem> fs_holder_ = io::PosixFileSystem();
  io::FileSystem* fs_ = fs_holder_.get();
};

TEST_F(NestedShardTest, EveryShapeRoundTripsThroughShardsAndArrow) {
  for (const Codec codec : {Codec::kNone, Codec::kZstd}) {
    for (const Shape& s : Shapes()) {
      SCOPED_TRACE(s.type + (codec == Codec::kNone ? " none" : " zstd"));
      Schema schema;
      schema.fields = {F("id", "int64", false), F("x", s.type)};
      RecordBatch b;
      b.schema = schema;
      b.num_rows = static_cast<int64_t>(s.rows.size());
      std::vector<std::string> ids;
      for (size_t i = 0; i < s.rows.size(); ++i) ids.push_back(std::to_string(i));
      b.columns = {Build(schema.fields[0], ids), Build(schema.fields[1], s.rows)};
      static int counter = 0;
      const std::string file = Path(absl::StrCat("shape", counter++, ".fws"));
      ShardWriterOptions opt;
      opt.codec = codec;
      auto w = ShardWriter::Open(fs_, file, schema, opt);
      ASSERT_TRUE(w.ok()) << w.status();
      ASSERT_TRUE((*w)->Write(b).ok());
      ASSERT_TRUE((*w)->Write(b).ok());
      ASSERT_TRUE((*w)->Finish().ok());
      auto r = ShardReader::Open(fs_, file);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ((*r)->schema(), schema);
      auto all = (*r)->Read(1, 0, (*r)->num_rows());
      ASSERT_TRUE(all.ok()) << all.status();
      ASSERT_TRUE(all->Validate("x").ok());
      std::vector<std::string> want = s.rows;
      want.insert(want.end(), s.rows.begin(), s.rows.end());
      EXPECT_EQ(Json(*all), want);
      std::vector<int64_t> rows{static_cast<int64_t>(want.size()) - 1, 0, 2, 2};
      auto taken = (*r)->Take(1, rows.data(), rows.size());
      ASSERT_TRUE(taken.ok()) << taken.status();
      EXPECT_EQ(Json(*taken), (std::vector<std::string>{want.back(), want[0], want[2], want[2]}));

      // Arrow: export, import, conform; values and type identical.
      ArrowSchema as{};
      ArrowArray aa{};
      RecordBatch back;
      back.schema = schema;
      back.num_rows = all->length;
      back.columns = {MakeNullColumn(DataType::Scalar(TypeId::kInt64), all->length, false), *all};
      ASSERT_TRUE(ExportSchema(back.schema, &as).ok());
      ASSERT_TRUE(ExportBatch(back, &aa).ok());
      auto imported = ImportBatch(&aa, as);
      as.release(&as);
      ASSERT_TRUE(imported.ok()) << imported.status();
      EXPECT_EQ(imported->schema, schema);
      EXPECT_EQ(Json(imported->columns[1]), want);
    }
  }
}

TEST_F(NestedShardTest, ManyRowsCutIntoPagesAndReadZeroCopy) {
  const Field f = F("messages", "list<struct<role: string, content: string?>>");
  std::vector<std::string> rows;
  for (int i = 0; i < 3000; ++i) {
    rows.push_back(i % 97 == 0 ? "null"
                               : absl::StrCat(R"([{"role":"user","content":")", std::string(i % 50, 'x'),
                                              R"("},{"role":"assistant","content":)",
                                              i % 7 == 0 ? "null" : absl::StrCat("\"", i, "\""), "}]"));
  }
  Schema schema;
  schema.fields = {f};
  RecordBatch b{schema, {Build(f, rows)}, static_cast<int64_t>(rows.size())};
  ShardWriterOptions opt;
  opt.page_size = 4096;
  const std::string file = Path("pages.fws");
  auto w = ShardWriter::Open(fs_, file, schema, opt);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Write(b).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  auto r = ShardReader::Open(fs_, file);
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& pages = (*r)->pages(0);
  EXPECT_GT(pages.size(), 20u);
  for (const PageInfo& p : pages) EXPECT_LE(p.stored_size, 4096u + 4096u / 2) << p.num_rows;
  for (int64_t start : {0, 1, 1234, 2999}) {
    auto part = (*r)->Read(0, start, std::min<int64_t>(100, 3000 - start));
    ASSERT_TRUE(part.ok()) << part.status();
    for (int64_t i = 0; i < part->length; ++i) EXPECT_EQ(ValueToJson(*part, i), rows[static_cast<size_t>(start + i)]);
  }
  // A page of a mapped uncompressed file is a view of the mapping.
  auto page = (*r)->ReadPage(0, 1);
  ASSERT_TRUE(page.ok());
  ASSERT_TRUE((*r)->mapped());
  EXPECT_EQ(page->children[0].children[0].values.owner.get(), page->offsets.owner.get());
}

TEST_F(NestedShardTest, FilesWithoutNestedColumnsStayVersionOneWithoutFeatures) {
  Schema schema;
  schema.fields = {F("tok", "list<int32>", false)};
  const std::string file = Path("flat.fws");
  auto w = ShardWriter::Open(fs_, file, schema);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Write(RecordBatch{schema, {Build(schema.fields[0], {"[1,2]"})}, 1}).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  auto read = fs_->ReadFile(file);
  ASSERT_TRUE(read.ok());
  const std::string bytes = *read;
  EXPECT_EQ(bytes[bytes.size() - 6], 0);  // required features, low byte
  EXPECT_EQ(bytes[bytes.size() - 8], 1);  // version
}

TEST_F(NestedShardTest, NestedFilesRequireTheFeatureAndOlderReadersWouldRefuse) {
  Schema schema;
  schema.fields = {F("m", "map<string, int64>")};
  const std::string file = Path("nested.fws");
  auto w = ShardWriter::Open(fs_, file, schema);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Write(RecordBatch{schema, {Build(schema.fields[0], {R"({"a":1})"})}, 1}).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  auto read = fs_->ReadFile(file);
  ASSERT_TRUE(read.ok());
  const std::string bytes = *read;
  uint16_t features;
  std::memcpy(&features, bytes.data() + bytes.size() - 6, 2);
  EXPECT_EQ(features, kShardFeatureNested);
  // A reader that knows no features (the one before nested types) checks
  // this field first: the same bit it does not know reads "upgrade flywheel".
  EXPECT_NE(features & ~uint16_t{0}, 0);
  // Clearing the bit makes the file inconsistent, not misread.
  std::string cleared = bytes;
  cleared[cleared.size() - 6] = 0;
  const std::string bad = Path("nested_cleared.fws");
  ASSERT_TRUE(fs_->Put(bad, cleared).ok());
  auto r = ShardReader::Open(fs_, bad);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("does not require the nested feature"));
  // An unknown feature bit is refused with the upgrade message.
  std::string future = bytes;
  future[future.size() - 6] = 0x3;
  const std::string fut = Path("nested_future.fws");
  ASSERT_TRUE(fs_->Put(fut, future).ok());
  auto rf = ShardReader::Open(fs_, fut);
  ASSERT_FALSE(rf.ok());
  EXPECT_EQ(rf.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(rf.status().message()), HasSubstr("features 0x2 that this reader does not know"));
}

TEST(NestedPageTest, CorruptBodiesAreDataLossNeverOutOfBounds) {
  const Field f = F("m", "list<struct<role: string, content: string?>>");
  const Column c = Build(f, {R"([{"role":"a","content":"b"},{"role":"c","content":null}])", "[]", "null"});
  std::string body;
  internal_format::EncodeNestedPage(c, 0, c.length, &body);
  auto copy = [&](const std::string& b) {
    return Buffer::Copy(b.data(), b.size());
  };
  auto ok = internal_format::DecodeNestedPage(f, 3, 1, copy(body), true);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ValueToJson(*ok, 0), R"([{"role":"a","content":"b"},{"role":"c","content":null}])");
  // Every single-byte change and every truncation decodes or fails cleanly.
  int failures = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    for (uint8_t x : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::string b = body;
      b[i] = static_cast<char>(b[i] ^ x);
      auto r = internal_format::DecodeNestedPage(f, 3, 1, copy(b), true);
      if (!r.ok()) {
        EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
        failures++;
      } else {
        EXPECT_TRUE(r->Validate("m").ok()) << r->Validate("m");
      }
    }
  }
  EXPECT_GT(failures, 0);
  for (size_t n = 0; n < body.size(); n += 8) {
    auto r = internal_format::DecodeNestedPage(f, 3, 1, copy(body.substr(0, n)), true);
    EXPECT_FALSE(r.ok());
  }
}

}  // namespace
}  // namespace flywheel::format
