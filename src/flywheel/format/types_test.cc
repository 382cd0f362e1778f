#include "flywheel/format/types.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace flywheel::format {
namespace {

using ::testing::HasSubstr;

TEST(DataTypeTest, ParseAndToStringRoundTripEveryType) {
  struct Case {
    std::string text;
    DataType want;
  };
  const std::vector<Case> cases = {
      {"bool", DataType::Scalar(TypeId::kBool)},
      {"int8", DataType::Scalar(TypeId::kInt8)},
      {"int16", DataType::Scalar(TypeId::kInt16)},
      {"int32", DataType::Scalar(TypeId::kInt32)},
      {"int64", DataType::Scalar(TypeId::kInt64)},
      {"uint8", DataType::Scalar(TypeId::kUInt8)},
      {"uint16", DataType::Scalar(TypeId::kUInt16)},
      {"uint32", DataType::Scalar(TypeId::kUInt32)},
      {"uint64", DataType::Scalar(TypeId::kUInt64)},
      {"float16", DataType::Scalar(TypeId::kFloat16)},
      {"float32", DataType::Scalar(TypeId::kFloat32)},
      {"float64", DataType::Scalar(TypeId::kFloat64)},
      {"float32[16]", DataType::Tensor(TypeId::kFloat32, {16})},
      {"uint8[32,32,3]", DataType::Tensor(TypeId::kUInt8, {32, 32, 3})},
      {"string", DataType::String()},
      {"binary", DataType::Binary()},
      {"list<int32>", DataType::List(TypeId::kInt32)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    auto t = DataType::Parse(c.text);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(*t, c.want);
    EXPECT_EQ(t->ToString(), c.text);
    EXPECT_TRUE(t->Validate().ok());
    auto again = DataType::Parse(t->ToString());
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(*again, *t);
  }
}

TEST(DataTypeTest, ParseToleratesWhitespace) {
  auto t = DataType::Parse("  uint8[ 32 , 32, 3 ] ");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, DataType::Tensor(TypeId::kUInt8, {32, 32, 3}));
  auto l = DataType::Parse("list< int64 >");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(*l, DataType::List(TypeId::kInt64));
}

TEST(DataTypeTest, WidthsAndElementCounts) {
  EXPECT_EQ(DataType::Scalar(TypeId::kBool).fixed_width(), 1u);
  EXPECT_EQ(DataType::Scalar(TypeId::kFloat16).fixed_width(), 2u);
  EXPECT_EQ(DataType::Scalar(TypeId::kUInt64).fixed_width(), 8u);
  const DataType img = DataType::Tensor(TypeId::kUInt8, {32, 32, 3});
  EXPECT_EQ(img.num_elements(), 3072);
  EXPECT_EQ(img.fixed_width(), 3072u);
  EXPECT_EQ(DataType::Tensor(TypeId::kFloat32, {16}).fixed_width(), 64u);
  EXPECT_TRUE(img.is_fixed_width());
  EXPECT_TRUE(DataType::String().is_variable_length());
  EXPECT_TRUE(DataType::List(TypeId::kInt32).is_variable_length());
  EXPECT_EQ(DataType::List(TypeId::kInt32).value_type(), TypeId::kInt32);
  EXPECT_EQ(DataType::Binary().value_type(), TypeId::kUInt8);
  EXPECT_EQ(img.value_type(), TypeId::kUInt8);
}

TEST(DataTypeTest, BadInputsAreInvalidArgumentWithHelpfulMessage) {
  struct Case {
    std::string text;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"int65", "unknown type 'int65'"},
      {"float32[0]", "tensor dimension 0 must be positive"},
      {"float32[-2]", "tensor dimension -2 must be positive"},
      {"list<strin>", "character 6: unknown type 'strin'"},
      {"list<int32", "missing '>'"},
      {"list<>", "unknown type ''"},
      {"float32[3", "missing ']'"},
      {"float32[]", "bad dimension ''"},
      {"float32[3,x]", "bad dimension 'x'"},
      {"float32[3]]", "unexpected ']'"},
      {"string[4]", "binary/string types take no shape"},
      {"list", "missing '<'"},
      {"uint8[65536,65536,2]", "tensor shape is too large"},
      {"int8[1,1,1,1,1,1,1,1,1]", "tensor rank must be at most 8"},
      {"", "empty"},
      {"   ", "empty"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("input '" + c.text + "'");
    auto t = DataType::Parse(c.text);
    ASSERT_FALSE(t.ok()) << "parsed as " << t->ToString();
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(c.message_part));
    // Every message quotes the text it could not parse (trimmed).
    EXPECT_THAT(std::string(t.status().message()), HasSubstr("type '"));
  }
}

TEST(DataTypeTest, ValidateRejectsInconsistentHandBuiltTypes) {
  EXPECT_FALSE(DataType{}.Validate().ok());
  EXPECT_FALSE((DataType{TypeId::kList, TypeId::kString, {}}).Validate().ok());
  EXPECT_FALSE((DataType{TypeId::kList, TypeId::kInt32, {2}}).Validate().ok());
  EXPECT_FALSE((DataType{static_cast<TypeId>(99), TypeId::kNone, {}}).Validate().ok());
  // An element type only means something for lists.
  Status s = DataType{TypeId::kInt32, TypeId::kInt8, {}}.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("element type"));
}

TEST(SchemaTest, ParsesFieldsTypesAndNullability) {
  auto s = Schema::Parse("x:int64, emb:float32[16], s:string?, tok:list<int32>");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->num_fields(), 4);
  EXPECT_EQ(s->fields[0].name, "x");
  EXPECT_EQ(s->fields[0].type, DataType::Scalar(TypeId::kInt64));
  EXPECT_FALSE(s->fields[0].nullable);
  EXPECT_EQ(s->fields[1].name, "emb");
  EXPECT_EQ(s->fields[1].type, DataType::Tensor(TypeId::kFloat32, {16}));
  EXPECT_FALSE(s->fields[1].nullable);
  EXPECT_EQ(s->fields[2].name, "s");
  EXPECT_EQ(s->fields[2].type, DataType::String());
  EXPECT_TRUE(s->fields[2].nullable);
  EXPECT_EQ(s->fields[3].name, "tok");
  EXPECT_EQ(s->fields[3].type, DataType::List(TypeId::kInt32));
  EXPECT_FALSE(s->fields[3].nullable);
  for (const Field& f : s->fields) EXPECT_EQ(f.id, -1);

  EXPECT_EQ(s->FieldIndex("s"), 2);
  EXPECT_EQ(s->FieldIndex("tok"), 3);
  EXPECT_EQ(s->FieldIndex("missing"), -1);

  EXPECT_EQ(s->ToString(), "x:int64, emb:float32[16], s:string?, tok:list<int32>");
  auto again = Schema::Parse(s->ToString());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *s);
}

TEST(SchemaTest, CommasInsideTensorShapesDoNotSplitFields) {
  auto s = Schema::Parse("img:uint8[32,32,3]?,label:int16");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->num_fields(), 2);
  EXPECT_EQ(s->fields[0].type, DataType::Tensor(TypeId::kUInt8, {32, 32, 3}));
  EXPECT_TRUE(s->fields[0].nullable);
  EXPECT_EQ(s->fields[1].name, "label");
}

TEST(SchemaTest, DuplicateNamesAreRejected) {
  auto s = Schema::Parse("x:int64, y:float32, x:string");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("duplicate field name 'x'"));
}

TEST(SchemaTest, BadSchemasNameTheProblem) {
  struct Case {
    std::string text;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"", "schema has no fields"},
      {"x", "schema item 'x' is not name:type"},
      {":int64", "field 0 has no name"},
      {"x:int64, y:int65", "field 'y': type 'int65', character 1: unknown type 'int65'"},
      {"x:float32[0]", "field 'x'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("input '" + c.text + "'");
    auto s = Schema::Parse(c.text);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(c.message_part));
  }
}

TEST(SchemaTest, ValidateChecksEveryFieldType) {
  Schema s;
  s.fields.push_back(Field{"a", DataType::Scalar(TypeId::kInt32)});
  s.fields.push_back(Field{"b", DataType{TypeId::kList, TypeId::kBinary, {}}});
  Status st = s.Validate();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("field 'b'"));
}

}  // namespace
}  // namespace flywheel::format
