#include "flywheel/cli/json_rows.h"

#include <gtest/gtest.h>

#include <sstream>

namespace flywheel::cli {
namespace {

format::Schema TestSchema() {
  return *format::Schema::Parse("id:int64, v:float32[2], h:float16, name:string?, tok:list<int32>?, ok:bool");
}

TEST(JsonRowsTest, ParsesEveryKindOfColumnAndRoundTrips) {
  std::istringstream in(
      "{\"id\": 1, \"v\": [0.5, 1.5], \"h\": 0.25, \"name\": \"a\", \"tok\": [1, 2, 3], \"ok\": true}\n"
      "\n"
      "{\"id\": -2, \"v\": [[2], [3]], \"h\": -1, \"name\": null, \"ok\": false}\n");
  auto b = ReadJsonLines(in, "rows.jsonl", TestSchema());
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->num_rows, 2);
  ASSERT_TRUE(b->Validate().ok()) << b->Validate();
  EXPECT_EQ(RowToJson(*b, 0),
            "{\"id\":1,\"v\":[0.5,1.5],\"h\":0.25,\"name\":\"a\",\"tok\":[1,2,3],\"ok\":true}");
  EXPECT_EQ(RowToJson(*b, 1),
            "{\"id\":-2,\"v\":[2.0,3.0],\"h\":-1.0,\"name\":null,\"tok\":null,\"ok\":false}");
}

TEST(JsonRowsTest, ErrorsNameFileLineAndField) {
  struct Case {
    std::string text, expect;
  } cases[] = {
      {"{\"id\": 1, \"v\": [1, 2], \"h\": 0, \"ok\": true}\n{\"id\": \"x\", \"v\": [1,2], \"h\": 0, \"ok\": true}\n",
       "rows.jsonl:2: field 'id': expected a number"},
      {"{\"id\": 1.5, \"v\": [1, 2], \"h\": 0, \"ok\": true}\n", "rows.jsonl:1: field 'id': expected an integer"},
      {"{\"id\": 1, \"v\": [1, 2, 3], \"h\": 0, \"ok\": true}\n", "expected 2 elements, got 3"},
      {"{\"id\": 1, \"v\": [1, 2], \"h\": 0}\n", "rows.jsonl:1: field 'ok' is missing and not nullable"},
      {"{\"id\": 1, \"zzz\": 1}\n", "rows.jsonl:1: field 'zzz' is not in the schema"},
      {"{\"id\": 1,\n", "rows.jsonl:1: invalid JSON"},
      {"[1, 2]\n", "rows.jsonl:1: expected a JSON object"},
  };
  for (const auto& c : cases) {
    std::istringstream in(c.text);
    auto b = ReadJsonLines(in, "rows.jsonl", TestSchema());
    ASSERT_FALSE(b.ok()) << c.text;
    EXPECT_NE(std::string(b.status().message()).find(c.expect), std::string::npos)
        << b.status() << " expected: " << c.expect;
  }
  auto small = *format::Schema::Parse("x:int8");
  std::istringstream in("{\"x\": 300}\n");
  auto b = ReadJsonLines(in, "f", small);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(std::string(b.status().message()).find("out of range for int8"), std::string::npos) << b.status();
}

}  // namespace
}  // namespace flywheel::cli
