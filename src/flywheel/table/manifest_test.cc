#include "flywheel/table/manifest.h"

#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>

#include "flywheel/base/checksum.h"

namespace flywheel::table {
namespace {

Manifest Sample() {
  Manifest m;
  m.version = 7;
  m.timestamp_ms = 1700000000123;
  m.operation = Operation{"delete", "host:1", {{"job", "j1"}}, {{"rows", "2"}}};
  m.schema = *format::Schema::Parse("x:int64, s:string?");
  m.schema.fields[0].id = 0;
  m.schema.fields[1].id = 3;
  m.schema.fields[1].default_json = "\"n/a\"";
  m.next_field_id = 4;
  m.next_fragment_id = 9;
  Fragment f;
  f.id = 8;
  f.num_rows = 100;
  f.files.push_back(DataFile{"data/abc.shard", {0, 3}, 4096});
  f.deletion = DeletionFile{"deletions/d.dv", 2};
  m.fragments.push_back(f);
  m.config = {{"codec", "zstd"}};
  return m;
}

// Wraps a JSON body in a valid header so only the body is under test.
std::string WithHeader(const std::string& body) {
  char header[96];
  std::snprintf(header, sizeof header, "flywheel-manifest 1 %016" PRIx64 " %zu\n", Checksum64(body), body.size());
  return header + body;
}

TEST(ManifestTest, EncodeDecodeRoundTrip) {
  const Manifest m = Sample();
  auto d = Manifest::Decode(m.Encode(), "m7");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->Encode(), m.Encode());
  EXPECT_EQ(d->schema, m.schema);
  EXPECT_EQ(d->num_rows(), 98);
  EXPECT_EQ(d->fragments[0].files[0].field_ids, (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(d->config.at("codec"), "zstd");
}

TEST(ManifestTest, RejectsCorruptionNamingTheFile) {
  std::string data = Sample().Encode();
  data[data.size() / 2] ^= 1;
  auto d = Manifest::Decode(data, "/t/_versions/7.manifest");
  EXPECT_TRUE(absl::IsDataLoss(d.status()));
  EXPECT_NE(std::string(d.status().message()).find("/t/_versions/7.manifest"), std::string::npos);
  EXPECT_NE(std::string(d.status().message()).find("checksum"), std::string::npos);
  EXPECT_TRUE(absl::IsDataLoss(Manifest::Decode("garbage", "x").status()));
}

TEST(ManifestTest, RefusesNewerFormatVersion) {
  std::string data = Sample().Encode();
  data.replace(data.find(" 1 "), 3, " 2 ");
  auto d = Manifest::Decode(data, "m");
  EXPECT_TRUE(absl::IsFailedPrecondition(d.status())) << d.status();
  EXPECT_NE(std::string(d.status().message()).find("not supported"), std::string::npos);
}

// Regression (found by table_fuzz): a float where an integer belongs was
// converted with undefined behaviour instead of being refused.
TEST(ManifestTest, RegressionFloatWhereIntegerBelongs) {
  std::string body = Sample().Encode();
  body = body.substr(body.find('\n') + 1);
  const size_t at = body.find("\"next_field_id\":4");
  ASSERT_NE(at, std::string::npos);
  body.replace(at, 17, "\"next_field_id\":1.1e121");
  auto d = Manifest::Decode(WithHeader(body), "m");
  EXPECT_TRUE(absl::IsDataLoss(d.status())) << d.status();
}

TEST(ManifestTest, RejectsDeletionEntryWithoutFileOrRows) {
  std::string body = Sample().Encode();
  body = body.substr(body.find('\n') + 1);
  const size_t at = body.find("\"path\":\"deletions/d.dv\"");
  ASSERT_NE(at, std::string::npos);
  body.replace(at, 23, "\"path\":\"\"");
  EXPECT_TRUE(absl::IsDataLoss(Manifest::Decode(WithHeader(body), "m").status()));
}

TEST(SchemaJsonTest, RoundTrip) {
  auto s = *format::Schema::Parse("a:uint8[2,3], b:list<float16>?, c:binary");
  auto back = SchemaFromJson(SchemaToJson(s));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, s);
  EXPECT_FALSE(SchemaFromJson("{").ok());
  EXPECT_FALSE(SchemaFromJson("{\"fields\": [{\"name\": \"x\", \"type\": \"int99\"}]}").ok());
}

}  // namespace
}  // namespace flywheel::table
