#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "flywheel/format/column.h"
#include "flywheel/interop/text/internal.h"
#include "flywheel/interop/text/text_reader.h"
#include "flywheel/io/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::interop::internal_text {

// Defined in jsonl_test.cc (same test binary).
std::string TestWrite(const io::TempDir& dir, const std::string& name, std::string_view data);
struct TestRead {
  format::RecordBatch all;
  std::vector<int64_t> batch_rows;
};
Result<TestRead> TestReadAll(RecordBatchReader& r);
std::vector<std::string> TestCells(const format::Column& c);

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class CsvTest : public ::testing::Test {
 protected:
  Result<std::unique_ptr<RecordBatchReader>> Open(std::string_view data,
                                                  const TextReadOptions& o = {}) {
    return OpenCsv(TestWrite(tmp_, "data.csv", data), o);
  }
  Result<TestRead> Read(std::string_view data, const TextReadOptions& o = {}) {
    FW_ASSIGN_OR_RETURN(auto r, Open(data, o));
    return TestReadAll(*r);
  }
  std::string ReadError(std::string_view data, const TextReadOptions& o = {}) {
    auto r = Read(data, o);
    return r.ok() ? "OK" : std::string(r.status().message());
  }
  const format::Column& Col(const TestRead& r, std::string_view name) {
    return r.all.columns[r.all.schema.FieldIndex(name)];
  }

  io::TempDir tmp_{"fw_csv_test"};
  const std::string path_ = tmp_.Sub("data.csv");
};

TEST_F(CsvTest, InfersEachType) {
  auto r = Read(
      "i,f,b,s,n,u,e\n"
      "1,1.5,TRUE,x,,18446744073709551615, 7 \n"
      "-2,3,false,y,,1,+8\n"
      "+3,1e-2,True,007,,2,9\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->all.schema.ToString(),
            "i:int64, f:float64, b:bool, s:string, n:string?, u:uint64, e:int64");
  EXPECT_THAT(TestCells(Col(*r, "i")), ElementsAre("1", "-2", "3"));
  EXPECT_THAT(TestCells(Col(*r, "f")), ElementsAre("1.5", "3", "0.01"));
  EXPECT_THAT(TestCells(Col(*r, "b")), ElementsAre("true", "false", "true"));
  EXPECT_THAT(TestCells(Col(*r, "s")), ElementsAre("x", "y", "007"));
  EXPECT_THAT(TestCells(Col(*r, "n")), ElementsAre("null", "null", "null"));
  EXPECT_THAT(TestCells(Col(*r, "u")), ElementsAre("18446744073709551615", "1", "2"));
  EXPECT_THAT(TestCells(Col(*r, "e")), ElementsAre("7", "8", "9"));
}

TEST_F(CsvTest, NullsAndQuotedEmptyStrings) {
  TextReadOptions o;
  o.null_text = "NA";
  auto r = Read("a,b,c\n1,NA,\"\"\nNA,x,\"NA\"\n3,,z\n", o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->all.schema.ToString(), "a:int64?, b:string?, c:string");
  EXPECT_THAT(TestCells(Col(*r, "a")), ElementsAre("1", "null", "3"));
  EXPECT_THAT(TestCells(Col(*r, "b")), ElementsAre("null", "x", "null"));
  EXPECT_THAT(TestCells(Col(*r, "c")), ElementsAre("", "NA", "z"));
  EXPECT_EQ(Col(*r, "b").null_count, 2);
}

TEST_F(CsvTest, QuotingCrlfAndNewlinesInFields) {
  auto r = Read(
      "name,text,n\r\n"
      "\"a,b\",\"he said \"\"hi\"\"\",1\r\n"
      "plain,\"line1\r\nline2\nline3\",2\r\n"
      "\"\",x\"y,3\r\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->all.schema.ToString(), "name:string, text:string, n:int64");
  EXPECT_THAT(TestCells(Col(*r, "name")), ElementsAre("a,b", "plain", ""));
  EXPECT_THAT(TestCells(Col(*r, "text")),
              ElementsAre("he said \"hi\"", "line1\r\nline2\nline3", "x\"y"));
  EXPECT_THAT(TestCells(Col(*r, "n")), ElementsAre("1", "2", "3"));
  // Line numbers count the line breaks inside quoted fields.
  TextReadOptions o;
  o.overrides = {{"n", "int8"}};
  EXPECT_EQ(
      ReadError("name,text,n\n\"a\",\"x\ny\nz\",1\nb,c,999\n", o),
      absl::StrCat(path_, ":5:3: field 'n' (CSV field 3): value \"999\" is out of range for int8"));
}

TEST_F(CsvTest, BomIsSkipped) {
  auto r = Read("\xEF\xBB\xBFid,v\n1,2\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->all.schema.ToString(), "id:int64, v:int64");
}

TEST_F(CsvTest, BlankLinesAreSkippedAndLastLineNeedsNoBreak) {
  auto r = Read("a,b\n\n1,2\r\n\r\n3,4");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(TestCells(Col(*r, "a")), ElementsAre("1", "3"));
  EXPECT_THAT(TestCells(Col(*r, "b")), ElementsAre("2", "4"));
}

TEST_F(CsvTest, WrongFieldCount) {
  EXPECT_EQ(ReadError("a,b\n1,2\n1,2,3\n"), absl::StrCat(path_, ":3: expected 2 fields, got 3"));
  TextReadOptions o;
  o.infer_rows = 1;
  EXPECT_EQ(ReadError("a,b\n1,2\n3,4\n5\n", o),
            absl::StrCat(path_, ":4: expected 2 fields, got 1"));
}

TEST_F(CsvTest, UnterminatedQuoteAndTextAfterClosingQuote) {
  EXPECT_EQ(ReadError("a,b\n1,\"abc\n2,3\n"),
            absl::StrCat(path_, ":2:2: unterminated quoted field (CSV field 2 starts here)"));
  EXPECT_EQ(ReadError("a,b\n1,\"ab\"c\n"),
            absl::StrCat(
                path_,
                ":2:2: unexpected \"c\" after the closing quote of CSV field 2 (a quote inside a "
                "quoted field is written twice)"));
}

TEST_F(CsvTest, TypeErrorNamesLineAndFieldNumber) {
  TextReadOptions o;
  o.schema = format::Schema::Parse("a:int64, b:int64, c:bool?").value();
  EXPECT_EQ(ReadError("a,b,c\n1,2,true\n3,abc,\n", o),
            absl::StrCat(path_, ":3:2: field 'b' (CSV field 2): expected int64, got \"abc\""));
  EXPECT_EQ(ReadError("a,b,c\n1,2,yes\n", o),
            absl::StrCat(path_, ":2:3: field 'c' (CSV field 3): expected bool, got \"yes\""));
  EXPECT_EQ(
      ReadError("a,b,c\n1,,true\n", o),
      absl::StrCat(
          path_,
          ":2:2: field 'b' (CSV field 2): null (an empty field), but the field is not nullable"));
  // Inferred types say so.
  o.schema.reset();
  o.infer_rows = 1;
  EXPECT_THAT(ReadError("a\n1\nx\n", o),
              AllOf(StartsWith(absl::StrCat(
                        path_, ":3:1: field 'a' (CSV field 1): expected int64, got \"x\"")),
                    HasSubstr("inferred from the first 1 rows")));
}

TEST_F(CsvTest, OverridesAndRanges) {
  TextReadOptions o;
  o.overrides = {{"a", "int8"}, {"b", "float32?"}, {"c", "uint16"}, {"d", "float16"}};
  auto r = Read("a,b,c,d\n-128,1.5,65535,0.5\n127,,0,-1\n", o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->all.schema.ToString(), "a:int8, b:float32?, c:uint16, d:float16");
  EXPECT_THAT(TestCells(Col(*r, "a")), ElementsAre("-128", "127"));
  EXPECT_THAT(TestCells(Col(*r, "b")), ElementsAre("1.5", "null"));
  EXPECT_THAT(TestCells(Col(*r, "c")), ElementsAre("65535", "0"));
  EXPECT_THAT(TestCells(Col(*r, "d")), ElementsAre("0.5", "-1"));
  EXPECT_EQ(
      ReadError("a,b,c,d\n128,1,1,1\n", o),
      absl::StrCat(path_, ":2:1: field 'a' (CSV field 1): value \"128\" is out of range for int8"));
  EXPECT_EQ(ReadError("a,b,c,d\n1,1,-1,1\n", o),
            absl::StrCat(path_,
                         ":2:3: field 'c' (CSV field 3): value \"-1\" is out of range for uint16"));
  EXPECT_EQ(ReadError("a,b,c,d\n1,1,1,1e6\n", o),
            absl::StrCat(
                path_, ":2:4: field 'd' (CSV field 4): value \"1e6\" is out of range for float16"));
}

TEST_F(CsvTest, LargeIntegers) {
  auto r = Read(
      "a,m,h\n9223372036854775807,9223372036854775808,18446744073709551616\n-9223372036854775808,-"
      "1,1\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->all.schema.ToString(), "a:int64, m:float64, h:float64");
  EXPECT_THAT(TestCells(Col(*r, "a")), ElementsAre("9223372036854775807", "-9223372036854775808"));
  TextReadOptions o;
  o.overrides = {{"a", "int64"}};
  EXPECT_EQ(ReadError("a\n9223372036854775808\n", o),
            absl::StrCat(path_,
                         ":2:1: field 'a' (CSV field 1): value \"9223372036854775808\" is out of "
                         "range for int64"));
}

TEST_F(CsvTest, ExplicitSchemaMapsHeaderNames) {
  TextReadOptions o;
  o.schema =
      format::Schema::Parse("b:float64, a:int32, missing:string?, v:list<int32>, t:float32[2]?")
          .value();
  auto r = Read("a,b,v,t\n1,2.5,\"[1, 2]\",\n3,4,[],\"[[1],[2]]\"\n", o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->all.schema, *o.schema);
  EXPECT_THAT(TestCells(Col(*r, "b")), ElementsAre("2.5", "4"));
  EXPECT_THAT(TestCells(Col(*r, "a")), ElementsAre("1", "3"));
  EXPECT_THAT(TestCells(Col(*r, "missing")), ElementsAre("null", "null"));
  EXPECT_THAT(TestCells(Col(*r, "v")), ElementsAre("[1,2]", "[]"));
  EXPECT_THAT(TestCells(Col(*r, "t")), ElementsAre("null", "[1,2]"));
  EXPECT_EQ(ReadError("a,b,v,t\n1,2,\"[1, 2.5]\",\n", o),
            absl::StrCat(path_, ":2:3: field 'v' (CSV field 3): expected int32, got 2.5"));
  EXPECT_EQ(ReadError("a,b,v,t,z\n1,2,[],,\n", o),
            absl::StrCat(path_,
                         ":1:5: column 'z' is not in the schema (select columns to leave it out)"));
  o.schema = format::Schema::Parse("a:int32, q:string").value();
  EXPECT_EQ(
      ReadError("a\n1\n", o),
      absl::StrCat(
          path_,
          ": the schema's field 'q' is not a column of the file and is not nullable (columns: a)"));
}

TEST_F(CsvTest, ProjectionKeepsColumnsInOrder) {
  TextReadOptions o;
  o.columns = {"c", "a"};
  auto r = Read("a,b,c\n1,not valid \xff utf8,x\n2,,y\n", o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->all.schema.ToString(), "c:string, a:int64");
  EXPECT_THAT(TestCells(r->all.columns[0]), ElementsAre("x", "y"));
  EXPECT_THAT(TestCells(r->all.columns[1]), ElementsAre("1", "2"));
  o.columns = {"zz"};
  auto s = Read("a,b\n1,2\n", o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), absl::StrCat(path_, ": column 'zz' not found (fields: a, b)"));
  // With an explicit schema, columns outside the projection may be absent from it.
  o.schema = format::Schema::Parse("b:int64").value();
  o.columns = {"b"};
  r = Read("a,b\nx,2\n", o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(TestCells(r->all.columns[0]), ElementsAre("2"));
}

TEST_F(CsvTest, TsvNoHeaderAndCustomQuote) {
  TextReadOptions o;
  o.delimiter = '\t';
  o.header = false;
  o.quote = '\'';
  auto r = Read("1\t'a\tb'\tx\n2\t'it''s'\ty\n", o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->all.schema.ToString(), "f0:int64, f1:string, f2:string");
  EXPECT_THAT(TestCells(Col(*r, "f1")), ElementsAre("a\tb", "it's"));
  o.schema = format::Schema::Parse("x:int64, y:string, z:string").value();
  r = Read("1\t'a'\tx\n", o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(TestCells(Col(*r, "y")), ElementsAre("a"));
}

TEST_F(CsvTest, HeaderNamesAreCheckedAndDefaulted) {
  auto r = Read("a,,c\n1,2,3\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->all.schema.ToString(), "a:int64, f1:int64, c:int64");
  EXPECT_EQ(ReadError("a,b,a\n1,2,3\n"), absl::StrCat(path_, ":1:3: duplicate column name 'a'"));
  EXPECT_EQ(ReadError("a,b\xff\n1,2\n"),
            absl::StrCat(path_, ":1:2: column name (CSV field 2) is not valid UTF-8 at byte 2"));
}

TEST_F(CsvTest, Utf8IsCheckedForStringsNotBinary) {
  EXPECT_EQ(
      ReadError("a,b\n1,ok\n2,\"x\xc3\"\n"),
      absl::StrCat(path_, ":3:2: field 'b' (CSV field 2): not valid UTF-8 at byte 2 of the value"));
  TextReadOptions o;
  o.overrides = {{"b", "binary"}};
  auto r = Read("a,b\n1,ok\n2,\"x\xc3\"\n", o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(TestCells(Col(*r, "b")), ElementsAre("ok", "x\xc3"));
}

TEST_F(CsvTest, EmptyFileAndHeaderOnly) {
  EXPECT_EQ(ReadError(""),
            absl::StrCat(path_,
                         ": the file is empty (no header row) so there is no schema to infer; "
                         "pass an explicit schema"));
  TextReadOptions o;
  o.header = false;
  EXPECT_EQ(ReadError("\n\n", o), absl::StrCat(path_,
                                               ": no rows to infer a schema from (the file is "
                                               "empty or blank); pass an explicit schema"));
  auto r = Read("a,b\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->all.schema.ToString(), "a:string?, b:string?");
  EXPECT_EQ(r->all.num_rows, 0);
  TextReadOptions s;
  s.schema = format::Schema::Parse("a:int64").value();
  r = Read("", s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->all.num_rows, 0);
}

TEST_F(CsvTest, BatchBoundaries) {
  std::string data = "i,s\r\n";
  for (int i = 0; i < 10; ++i)
    data += absl::StrCat(i, ",\"", std::string(i, 'q'), "\"\"x\r\n", "\"\r\n");
  TextReadOptions o;
  o.batch_rows = 3;
  o.infer_rows = 4;
  auto reader = Open(data, o);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto r = TestReadAll(**reader);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->batch_rows, ElementsAre(3, 3, 3, 1));
  EXPECT_THAT(TestCells(Col(*r, "i")),
              ElementsAre("0", "1", "2", "3", "4", "5", "6", "7", "8", "9"));
  EXPECT_EQ(TestCells(Col(*r, "s"))[2], "qq\"x\r\n");
  EXPECT_EQ((*reader)->bytes_read(), static_cast<int64_t>(data.size()));
  for (size_t chunk : {1, 2, 7, 64}) {
    auto m = OpenCsvInput("mem", InputBuffer::FromMemory(data, chunk), o);
    ASSERT_TRUE(m.ok()) << m.status();
    auto rm = TestReadAll(**m);
    ASSERT_TRUE(rm.ok()) << rm.status();
    EXPECT_THAT(rm->batch_rows, ElementsAre(3, 3, 3, 1));
    EXPECT_THAT(
        TestCells(Col(*rm, "s")),
        ElementsAre("\"x\r\n", "q\"x\r\n", "qq\"x\r\n", "qqq\"x\r\n", "qqqq\"x\r\n", "qqqqq\"x\r\n",
                    "qqqqqq\"x\r\n", "qqqqqqq\"x\r\n", "qqqqqqqq\"x\r\n", "qqqqqqqqq\"x\r\n"));
  }
}

TEST_F(CsvTest, NanAndInfAreFloats) {
  auto r = Read("x\n1.5\nnan\n-inf\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->all.schema.ToString(), "x:float64");
  EXPECT_THAT(TestCells(Col(*r, "x")), ElementsAre("1.5", "nan", "-inf"));
}

}  // namespace
}  // namespace flywheel::interop::internal_text
