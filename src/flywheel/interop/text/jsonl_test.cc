#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "flywheel/format/column.h"
#include "flywheel/interop/text/internal.h"
#include "flywheel/format/json_column.h"
#include "flywheel/interop/text/text_reader.h"
#include "flywheel/io/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flywheel::interop::internal_text {

// Helpers shared with csv_test.cc (same test binary).

std::string TestWrite(const io::TempDir& dir, const std::string& name, std::string_view data) {
  const std::string path = dir.Sub(name);
  std::ofstream out(path, std::ios::binary);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  return path;
}

struct TestRead {
  format::RecordBatch all;          // every batch concatenated
  std::vector<int64_t> batch_rows;  // rows of each batch
};

Result<TestRead> TestReadAll(RecordBatchReader& r) {
  TestRead out;
  out.all.schema = r.schema();
  std::vector<std::vector<format::Column>> parts(r.schema().fields.size());
  while (true) {
    FW_ASSIGN_OR_RETURN(auto batch, r.Next());
    if (!batch.has_value()) break;
    FW_RETURN_IF_ERROR(batch->Validate());
    if (!(batch->schema == r.schema())) return absl::InternalError("batch schema differs");
    out.batch_rows.push_back(batch->num_rows);
    out.all.num_rows += batch->num_rows;
    for (size_t i = 0; i < parts.size(); ++i) parts[i].push_back(batch->columns[i]);
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    out.all.columns.push_back(parts[i].empty()
                                  ? format::MakeNullColumn(r.schema().fields[i].type, 0, false)
                                  : format::ConcatColumns(parts[i]));
  }
  // Reading past the end stays at the end.
  FW_ASSIGN_OR_RETURN(auto again, r.Next());
  if (again.has_value()) return absl::InternalError("Next returned a batch after the end");
  return out;
}

namespace {

float HalfToFloat(uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    v = mant ? NAN : INFINITY;
  } else {
    v = std::ldexp(static_cast<float>(mant + 1024), exp - 25);
  }
  return (h & 0x8000) ? -v : v;
}

std::string ScalarText(format::TypeId id, const uint8_t* p) {
  auto get = [&](auto x) {
    std::memcpy(&x, p, sizeof x);
    return x;
  };
  switch (id) {
    case format::TypeId::kBool:
      return get(uint8_t{}) ? "true" : "false";
    case format::TypeId::kInt8:
      return absl::StrCat(get(int8_t{}));
    case format::TypeId::kInt16:
      return absl::StrCat(get(int16_t{}));
    case format::TypeId::kInt32:
      return absl::StrCat(get(int32_t{}));
    case format::TypeId::kInt64:
      return absl::StrCat(get(int64_t{}));
    case format::TypeId::kUInt8:
      return absl::StrCat(get(uint8_t{}));
    case format::TypeId::kUInt16:
      return absl::StrCat(get(uint16_t{}));
    case format::TypeId::kUInt32:
      return absl::StrCat(get(uint32_t{}));
    case format::TypeId::kUInt64:
      return absl::StrCat(get(uint64_t{}));
    case format::TypeId::kFloat16:
      return absl::StrCat(HalfToFloat(get(uint16_t{})));
    case format::TypeId::kFloat32:
      return absl::StrCat(get(float{}));
    case format::TypeId::kFloat64:
      return absl::StrCat(get(double{}));
    default:
      return "?";
  }
}

}  // namespace

// Each cell as text: "null", numbers, strings as is, lists/tensors "[a,b]".
std::vector<std::string> TestCells(const format::Column& c) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < c.length; ++i) {
    if (!c.IsValid(i)) {
      out.push_back("null");
      continue;
    }
    const format::DataType& t = c.type;
    if (t.id == format::TypeId::kString || t.id == format::TypeId::kBinary) {
      out.emplace_back(c.GetBytes(i));
    } else if (t.id == format::TypeId::kList || !t.shape.empty()) {
      const format::TypeId elem = t.id == format::TypeId::kList ? t.elem : t.id;
      const size_t es = format::ScalarSize(elem);
      int64_t begin, end;
      const uint8_t* base;
      if (t.id == format::TypeId::kList) {
        begin = c.offsets_data()[i];
        end = c.offsets_data()[i + 1];
        base = c.values.data;
      } else {
        begin = 0;
        end = t.num_elements();
        base = c.FixedRow(i);
      }
      std::string s = "[";
      for (int64_t k = begin; k < end; ++k) {
        if (k > begin) s += ",";
        s += ScalarText(elem, base + k * es);
      }
      out.push_back(s + "]");
    } else {
      out.push_back(ScalarText(t.id, c.FixedRow(i)));
    }
  }
  return out;
}

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class JsonLinesTest : public ::testing::Test {
 protected:
  Result<std::unique_ptr<RecordBatchReader>> Open(std::string_view data,
                                                  const TextReadOptions& o = {}) {
    return OpenJsonLines(TestWrite(tmp_, "data.jsonl", data), o);
  }
  // Opens and reads everything, returning the error if any step fails.
  Result<TestRead> Read(std::string_view data, const TextReadOptions& o = {}) {
    FW_ASSIGN_OR_RETURN(auto r, Open(data, o));
    return TestReadAll(*r);
  }
  Status ReadStatus(std::string_view data, const TextReadOptions& o = {}) {
    auto r = Read(data, o);
    return r.ok() ? absl::OkStatus() : r.status();
  }
  std::string ReadError(std::string_view data, const TextReadOptions& o = {}) {
    return std::string(ReadStatus(data, o).message());
  }
  const format::Column& Col(const TestRead& r, std::string_view name) {
    return r.all.columns[r.all.schema.FieldIndex(name)];
  }

  io::TempDir tmp_{"fw_jsonl_test"};
  const std::string path_ = tmp_.Sub("data.jsonl");
};

TEST_F(JsonLinesTest, InfersEachType) {
  auto r = Read(
      R"({"i": 1, "f": 1.5, "b": true, "s": "x", "li": [1, 2], "lf": [1, 2.5], "o": {"k": [1, null], "z": "a"}, "ls": ["a", null], "mix": 1, "e": 1e3})"
      "\n"
      R"({"i": -2, "f": 2, "b": false, "s": "y", "li": [], "lf": [3], "o": {"k": []}, "ls": [], "mix": 2.5, "e": 2})"
      "\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->all.schema.ToString(),
            "i:int64, f:float64, b:bool, s:string, li:list<int64>, lf:list<float64>, "
            "o:struct<k: list<int64?>, z: string?>, ls:list<string?>, "
            "mix:float64, e:float64");
  EXPECT_THAT(TestCells(Col(*r, "i")), ElementsAre("1", "-2"));
  EXPECT_THAT(TestCells(Col(*r, "f")), ElementsAre("1.5", "2"));
  EXPECT_THAT(TestCells(Col(*r, "b")), ElementsAre("true", "false"));
  EXPECT_THAT(TestCells(Col(*r, "s")), ElementsAre("x", "y"));
  EXPECT_THAT(TestCells(Col(*r, "li")), ElementsAre("[1,2]", "[]"));
  EXPECT_THAT(TestCells(Col(*r, "lf")), ElementsAre("[1,2.5]", "[3]"));
  const format::Column& o = Col(*r, "o");
  EXPECT_EQ(format::ValueToJson(o, 0), R"({"k":[1,null],"z":"a"})");
  EXPECT_EQ(format::ValueToJson(o, 1), R"({"k":[],"z":null})");
  const format::Column& ls = Col(*r, "ls");
  EXPECT_EQ(format::ValueToJson(ls, 0), R"(["a",null])");
  EXPECT_EQ(format::ValueToJson(ls, 1), "[]");
  EXPECT_THAT(TestCells(Col(*r, "mix")), ElementsAre("1", "2.5"));
  EXPECT_THAT(TestCells(Col(*r, "e")), ElementsAre("1000", "2"));
}

TEST_F(JsonLinesTest, NestedShapesThatConflictNameTheLineFieldAndPath) {
  auto r = Read(R"({"o": {"k": [1, {"z": null}]}})" "\n");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr(":1:7: field 'o': k[1]: an object where earlier rows have an integer"));
  r = Read(R"({"ls": ["a"]})" "\n" R"({"ls": [1]})" "\n");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr(":2:8: field 'ls': [0]: an integer where earlier rows have a string"));
}

TEST_F(JsonLinesTest, MixedKindsAndOnlyNullsBecomeString) {
  auto r = Read("{\"a\": 1, \"n\": null, \"bi\": true}\n{\"a\": \"x\", \"n\": null, \"bi\": 0}\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->all.schema.ToString(), "a:string, n:string?, bi:string");
  EXPECT_THAT(TestCells(Col(*r, "a")), ElementsAre("1", "x"));
  EXPECT_THAT(TestCells(Col(*r, "n")), ElementsAre("null", "null"));
  EXPECT_THAT(TestCells(Col(*r, "bi")), ElementsAre("true", "0"));
}

TEST_F(JsonLinesTest, NullOrAbsentMakesNullable) {
  auto r = Read(
      "{\"a\": 1, \"b\": null, \"c\": \"x\"}\n{\"a\": 2, \"b\": 3}\n{\"d\": [1], \"a\": 3, \"b\": "
      "4}\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->all.schema.ToString(), "a:int64, b:int64?, c:string?, d:list<int64>?");
  EXPECT_THAT(TestCells(Col(*r, "b")), ElementsAre("null", "3", "4"));
  EXPECT_THAT(TestCells(Col(*r, "c")), ElementsAre("x", "null", "null"));
  EXPECT_THAT(TestCells(Col(*r, "d")), ElementsAre("null", "null", "[1]"));
  EXPECT_EQ(Col(*r, "c").null_count, 2);
}

TEST_F(JsonLinesTest, LargeIntegers) {
  auto r = Read(
      "{\"a\": 9223372036854775807, \"u\": 18446744073709551615, \"m\": 9223372036854775808, "
      "\"h\": "
      "18446744073709551616}\n"
      "{\"a\": -9223372036854775808, \"u\": 1, \"m\": -1, \"h\": 1}\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->all.schema.ToString(), "a:int64, u:uint64, m:float64, h:float64");
  EXPECT_THAT(TestCells(Col(*r, "a")), ElementsAre("9223372036854775807", "-9223372036854775808"));
  EXPECT_THAT(TestCells(Col(*r, "u")), ElementsAre("18446744073709551615", "1"));
  EXPECT_THAT(TestCells(Col(*r, "m")), ElementsAre("9.22337e+18", "-1"));

  TextReadOptions o;
  o.overrides = {{"a", "int64"}};
  o.schema = format::Schema::Parse("a:int64").value();
  EXPECT_EQ(
      ReadError("{\"a\": 9223372036854775808}\n", o),
      absl::StrCat(path_, ":1:7: field 'a': value 9223372036854775808 is out of range for int64"));
}

TEST_F(JsonLinesTest, OverridesReplaceInferredTypes) {
  TextReadOptions o;
  o.overrides = {{"a", "int32"}, {"b", "float32?"}, {"c", "float16"}, {"t", "uint8[2]"}};
  auto r = Read(
      "{\"a\": 1, \"b\": 2.5, \"c\": 1.5, \"t\": [1, 2]}\n{\"a\": -7, \"b\": 1, \"c\": 65504, "
      "\"t\": [3, 4]}\n",
      o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->all.schema.ToString(), "a:int32, b:float32?, c:float16, t:uint8[2]");
  EXPECT_THAT(TestCells(Col(*r, "a")), ElementsAre("1", "-7"));
  EXPECT_THAT(TestCells(Col(*r, "b")), ElementsAre("2.5", "1"));
  EXPECT_THAT(TestCells(Col(*r, "c")), ElementsAre("1.5", "65504"));
  EXPECT_THAT(TestCells(Col(*r, "t")), ElementsAre("[1,2]", "[3,4]"));
}

TEST_F(JsonLinesTest, OverrideRangeErrors) {
  TextReadOptions o;
  o.overrides = {{"a", "int8"}};
  EXPECT_EQ(
      ReadError("{\"a\": 1}\n{\"a\": 300}\n", o),
      absl::StrCat(path_,
                   ":2:7: field 'a': value 300 is out of range for int8 (the schema was inferred "
                   "from the first 1000 rows; pass an explicit schema, an override such as "
                   "'int64?' or a larger infer_rows)"));
  o.overrides = {{"a", "uint32"}};
  EXPECT_THAT(ReadError("{\"a\": -1}\n", o),
              HasSubstr(":1:7: field 'a': value -1 is out of range for uint32"));
  o.overrides = {{"a", "float16"}};
  EXPECT_THAT(ReadError("{\"a\": 70000}\n", o),
              HasSubstr(":1:7: field 'a': value 70000 is out of range for float16"));
  o.overrides = {{"a", "float32"}};
  EXPECT_THAT(ReadError("{\"a\": 1e39}\n", o),
              HasSubstr(":1:7: field 'a': value 1e39 is out of range for float32"));
  o.overrides = {{"a", "int32"}};
  EXPECT_THAT(ReadError("{\"a\": 1.5}\n", o),
              HasSubstr(":1:7: field 'a': expected int32, got 1.5"));
  o.overrides = {{"zz", "int32"}};
  auto s = ReadStatus("{\"a\": 1}\n", o);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("override for field 'zz', which the source does not have (fields: a)"));
}

TEST_F(JsonLinesTest, ExplicitSchemaSkipsInference) {
  TextReadOptions o;
  o.schema =
      format::Schema::Parse(
          "id:int32, name:string?, emb:float32[2], tags:list<int32>?, h:float16, raw:binary?")
          .value();
  o.infer_rows = 1;
  auto r = Read(
      "{\"id\": 1, \"emb\": [0.5, 1], \"h\": 0.25}\n"
      "{\"id\": 2, \"name\": \"b\", \"emb\": [[2], [3]], \"tags\": [7, 8], \"h\": -2, \"raw\": "
      "\"\\u0000z\"}\n"
      "{\"id\": 3, \"name\": 5, \"emb\": [4, 5], \"tags\": null, \"h\": 1, \"raw\": null}\n",
      o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->all.schema, *o.schema);
  EXPECT_THAT(TestCells(Col(*r, "id")), ElementsAre("1", "2", "3"));
  EXPECT_THAT(TestCells(Col(*r, "name")), ElementsAre("null", "b", "5"));
  EXPECT_THAT(TestCells(Col(*r, "emb")), ElementsAre("[0.5,1]", "[2,3]", "[4,5]"));
  EXPECT_THAT(TestCells(Col(*r, "tags")), ElementsAre("null", "[7,8]", "null"));
  EXPECT_THAT(TestCells(Col(*r, "h")), ElementsAre("0.25", "-2", "1"));
  EXPECT_THAT(TestCells(Col(*r, "raw")), ElementsAre("null", std::string("\0z", 2), "null"));

  EXPECT_EQ(
      ReadError("{\"id\": 1, \"emb\": [1, 2, 3], \"h\": 0}\n", o),
      absl::StrCat(path_, ":1:18: field 'emb': expected float32[2] (2 elements), got 3 elements"));
  EXPECT_EQ(ReadError("{\"id\": 1, \"emb\": [1, 2], \"h\": 0, \"tags\": [1, \"x\"]}\n", o),
            absl::StrCat(path_, ":1:46: field 'tags': expected int32, got \"x\""));
  EXPECT_EQ(
      ReadError("{\"id\": 1, \"emb\": [1, 2], \"h\": 0, \"extra\": 1}\n", o),
      absl::StrCat(path_,
                   ":1:34: field 'extra' is not in the schema (select columns to leave it out)"));
}

TEST_F(JsonLinesTest, ProjectionKeepsColumnsInOrder) {
  TextReadOptions o;
  o.columns = {"c", "a"};
  o.infer_rows = 1;
  auto r = Read(
      "{\"a\": 1, \"b\": \"x\", \"c\": true}\n{\"a\": 2, \"b\": {}, \"c\": false, \"later\": "
      "[1]}\n",
      o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->all.schema.ToString(), "c:bool, a:int64");
  EXPECT_THAT(TestCells(r->all.columns[0]), ElementsAre("true", "false"));
  EXPECT_THAT(TestCells(r->all.columns[1]), ElementsAre("1", "2"));

  o.columns = {"a", "q"};
  auto s = ReadStatus("{\"a\": 1, \"b\": 2}\n", o);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), absl::StrCat(path_, ": column 'q' not found (fields: a, b)"));
}

TEST_F(JsonLinesTest, TypeErrorNamesLineAndByteColumn) {
  TextReadOptions o;
  o.schema = format::Schema::Parse("a:int64, b:bool?").value();
  auto s = ReadStatus("{\"a\": 1}\n{\"a\": \"abc\"}\n", o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), absl::StrCat(path_, ":2:7: field 'a': expected int64, got \"abc\""));
  EXPECT_EQ(ReadError("{\"a\": 1, \"b\": 1}\n", o),
            absl::StrCat(path_, ":1:15: field 'b': expected bool, got 1"));
  EXPECT_EQ(ReadError("{\"a\": [1]}\n", o),
            absl::StrCat(path_, ":1:7: field 'a': expected int64, got [1]"));
  // Inferred: the message says where the schema came from.
  TextReadOptions one;
  one.infer_rows = 1;
  EXPECT_THAT(ReadError("{\"a\": 1}\n{\"a\": \"abc\"}\n", one),
              AllOf(StartsWith(absl::StrCat(path_, ":2:7: field 'a': expected int64, got \"abc\"")),
                    HasSubstr("inferred from the first 1 rows")));
}

TEST_F(JsonLinesTest, MalformedJsonErrors) {
  auto msg = [&](std::string_view data) { return ReadError(data); };
  const std::string& p = path_;
  EXPECT_EQ(msg("{\"a\": 1,}\n"),
            absl::StrCat(p, ":1:9: invalid JSON: expected a field name in double quotes"));
  EXPECT_EQ(msg("{\"a\": 1}\n{\"a\" 1}\n"),
            absl::StrCat(p, ":2:6: invalid JSON: expected ':' after a field name"));
  EXPECT_EQ(msg("{\"a\": 1} x\n"),
            absl::StrCat(p, ":1:10: unexpected text after the JSON object (one object per line)"));
  EXPECT_EQ(msg("[1, 2]\n"), absl::StrCat(p, ":1:1: expected a JSON object, got [1, 2]"));
  EXPECT_EQ(msg("{\"a\": \"abc}\n"), absl::StrCat(p, ":1:7: invalid JSON: unterminated string"));
  EXPECT_EQ(msg("{\"a\": 01}\n"), absl::StrCat(p, ":1:8: invalid JSON: expected ',' or '}'"));
  EXPECT_EQ(msg("{\"a\": 1.}\n"),
            absl::StrCat(p, ":1:7: invalid JSON: malformed number (no digits after '.')"));
  EXPECT_EQ(msg("{\"a\": tru}\n"),
            absl::StrCat(p, ":1:7: invalid JSON: expected a value, got tru}"));
  EXPECT_EQ(msg("{\"a\": \"\\x\"}\n"),
            absl::StrCat(p, ":1:8: invalid JSON: invalid escape sequence"));
  EXPECT_EQ(msg("{\"a\": \"\\ud800\"}\n"),
            absl::StrCat(p, ":1:8: invalid JSON: unpaired UTF-16 surrogate"));
  EXPECT_EQ(msg("{\"a\": [1, 2\n"), absl::StrCat(p, ":1:7: invalid JSON: unterminated array"));
  EXPECT_EQ(msg("{\"a\": \"x\ty\"}\n"),
            absl::StrCat(p, ":1:9: invalid JSON: control character in a string (must be escaped)"));
  EXPECT_EQ(msg("{\"a\": 1, \"a\": 2}\n"),
            absl::StrCat(p, ":1:10: field 'a' appears twice in the object"));
  EXPECT_EQ(msg(std::string(300, '[')),
            absl::StrCat(p, ":1:1: expected a JSON object, got [[[[[[[[[[[[[[[["));
  EXPECT_EQ(msg("{\"a\": " + std::string(300, '[') + "\n"),
            absl::StrCat(p, ":1:134: nesting deeper than 128 levels"));
}

TEST_F(JsonLinesTest, FieldNotInInferredSchemaIsAnError) {
  TextReadOptions o;
  o.infer_rows = 2;
  EXPECT_EQ(ReadError("{\"a\": 1}\n{\"a\": 2}\n{\"a\": 3, \"b\": 4}\n", o),
            absl::StrCat(
                path_,
                ":3:10: field 'b' is not in the schema (it is not in the first 2 rows the schema "
                "was inferred from; pass an explicit schema, a larger infer_rows, or columns to "
                "select)"));
}

TEST_F(JsonLinesTest, NullAndMissingInNonNullableField) {
  TextReadOptions o;
  o.infer_rows = 1;
  EXPECT_THAT(ReadError("{\"a\": 1, \"b\": 1}\n{\"a\": null, \"b\": 2}\n", o),
              StartsWith(absl::StrCat(
                  path_,
                  ":2:7: field 'a': null, but the field is not nullable (the schema was "
                  "inferred from the first 1 rows")));
  EXPECT_THAT(
      ReadError("{\"a\": 1, \"b\": 1}\n\n{\"b\": 2}\n", o),
      StartsWith(absl::StrCat(path_, ":3: field 'a' is missing, and the field is not nullable")));
}

TEST_F(JsonLinesTest, InvalidUtf8IsAnErrorWithItsColumn) {
  EXPECT_EQ(ReadError("{\"a\": \"ok\"}\n{\"a\": \"x\xff\"}\n"),
            absl::StrCat(path_, ":2:9: invalid UTF-8"));
  EXPECT_EQ(ReadError("{\"a\": \"\xed\xa0\x80\"}\n"), absl::StrCat(path_, ":1:8: invalid UTF-8"));
}

TEST_F(JsonLinesTest, EscapesDecode) {
  auto r = Read(R"({"\u0061": "q\"b\\s\/\n\u00e9\ud83d\ude00", "b": "plain"})"
                "\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->all.schema.ToString(), "a:string, b:string");
  EXPECT_THAT(TestCells(Col(*r, "a")), ElementsAre("q\"b\\s/\n\xc3\xa9\xf0\x9f\x98\x80"));
  EXPECT_THAT(TestCells(Col(*r, "b")), ElementsAre("plain"));
}

TEST_F(JsonLinesTest, BlankLinesCrlfAndBom) {
  auto r = Read("\xEF\xBB\xBF{\"a\": 1}\r\n\r\n  \t\r\n{\"a\": 2}\r\n{\"a\": 3}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(TestCells(Col(*r, "a")), ElementsAre("1", "2", "3"));
  // Line numbers count the blank lines.
  TextReadOptions o;
  o.infer_rows = 1;
  EXPECT_THAT(ReadError("{\"a\": 1}\r\n\r\n\r\n{\"a\": \"x\"}\r\n", o),
              StartsWith(absl::StrCat(path_, ":4:7: field 'a': expected int64, got \"x\"")));
}

TEST_F(JsonLinesTest, BatchBoundaries) {
  std::string data;
  for (int i = 0; i < 10; ++i)
    data += absl::StrCat("{\"i\": ", i, ", \"s\": \"", std::string(i, 'x'), "\"}\n");
  TextReadOptions o;
  o.batch_rows = 3;
  o.infer_rows = 4;
  auto reader = Open(data, o);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->bytes_read(), 0);
  auto r = TestReadAll(**reader);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->batch_rows, ElementsAre(3, 3, 3, 1));
  EXPECT_THAT(TestCells(Col(*r, "i")),
              ElementsAre("0", "1", "2", "3", "4", "5", "6", "7", "8", "9"));
  EXPECT_EQ(TestCells(Col(*r, "s"))[9], "xxxxxxxxx");
  EXPECT_EQ((*reader)->bytes_read(), static_cast<int64_t>(data.size()));

  // The same through an in-memory input handed out a few bytes at a time: every
  // record straddles refills, and inference rewinds across them.
  for (size_t chunk : {1, 5, 64}) {
    auto m = OpenJsonLinesInput("mem", InputBuffer::FromMemory(data, chunk), o);
    ASSERT_TRUE(m.ok()) << m.status();
    auto rm = TestReadAll(**m);
    ASSERT_TRUE(rm.ok()) << rm.status();
    EXPECT_THAT(rm->batch_rows, ElementsAre(3, 3, 3, 1));
    EXPECT_THAT(TestCells(Col(*rm, "i")),
                ElementsAre("0", "1", "2", "3", "4", "5", "6", "7", "8", "9"));
  }
}

TEST_F(JsonLinesTest, EmptyFileNeedsASchema) {
  auto s = ReadStatus("");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), absl::StrCat(path_,
                                      ": no rows to infer a schema from (the file is empty or "
                                      "blank); pass an explicit schema"));
  EXPECT_EQ(ReadError("\n  \n"), std::string(s.message()));
  TextReadOptions o;
  o.schema = format::Schema::Parse("a:int64").value();
  auto r = Read("", o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->all.schema.ToString(), "a:int64");
  EXPECT_TRUE(r->batch_rows.empty());
}

TEST_F(JsonLinesTest, ErrorsAreSticky) {
  TextReadOptions o;
  o.batch_rows = 1;
  o.infer_rows = 1;
  auto reader = Open("{\"a\": 1}\n{\"a\": x}\n{\"a\": 3}\n", o);
  ASSERT_TRUE(reader.ok());
  auto b1 = (*reader)->Next();
  ASSERT_TRUE(b1.ok() && b1->has_value());
  auto b2 = (*reader)->Next();
  EXPECT_FALSE(b2.ok());
  auto b3 = (*reader)->Next();
  EXPECT_EQ(b3.status(), b2.status());
}

TEST_F(JsonLinesTest, MissingFileIsNotFound) {
  auto r = OpenJsonLines(tmp_.Sub("nope.jsonl"), {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("nope.jsonl"));
}

TEST(TextReadOptionsTest, ValidateExplainsBadOptions) {
  auto msg = [](auto change) {
    TextReadOptions o;
    change(o);
    return std::string(o.Validate().message());
  };
  EXPECT_TRUE(TextReadOptions{}.Validate().ok());
  EXPECT_EQ(msg([](TextReadOptions& o) { o.infer_rows = 0; }),
            "text options: infer_rows must be >= 1 (got 0)");
  EXPECT_EQ(msg([](TextReadOptions& o) { o.batch_rows = -1; }),
            "text options: batch_rows must be >= 1 (got -1)");
  EXPECT_EQ(msg([](TextReadOptions& o) { o.delimiter = '"'; }),
            "text options: the CSV delimiter and quote must differ");
  EXPECT_EQ(msg([](TextReadOptions& o) { o.delimiter = '\n'; }),
            "text options: the CSV delimiter cannot be a line break");
  EXPECT_THAT(msg([](TextReadOptions& o) {
                o.overrides = {{"a", "int65"}};
              }),
              StartsWith("text options: override for field 'a': "));
  EXPECT_EQ(msg([](TextReadOptions& o) {
              o.columns = {"a", "a"};
            }),
            "text options: column 'a' is listed twice in columns");
  EXPECT_EQ(msg([](TextReadOptions& o) { o.schema = format::Schema{}; }),
            "text options: the explicit schema has no fields");
}

TEST(FloatToHalfTest, RoundsToNearestEven) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);         // tie to even
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);         // 1.5 ulp -> 2
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(3.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(FloatToHalf(INFINITY), 0x7c00);
  EXPECT_EQ(FloatToHalf(NAN) & 0x7e00, 0x7e00);
}

}  // namespace
}  // namespace flywheel::interop::internal_text
