// safetensors: round trips (single file and shards), files transformers and
// the safetensors library would refuse, and headers that lie under a cap.
#include "flywheel/llm/safetensors.h"

#include <cstring>
#include <string>
#include <vector>

#include "flywheel/io/file_system.h"
#include "flywheel/io/memory_cap_testing.h"
#include "flywheel/io/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace flywheel::llm {
namespace {

using ::testing::HasSubstr;

std::string File(const std::string& header, const std::string& data) {
  std::string out;
  const uint64_t n = header.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  return out + header + data;
}

TEST(SafetensorsTest, WritesAndReadsBackSingleAndSharded) {
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<uint16_t> b = {7, 8};
  std::vector<TensorToWrite> t = {{"a", DType::kF32, {2, 3}, a.data()}, {"b", DType::kBF16, {2}, b.data()}};
  io::TempDir dir("fw_safetensors");
  for (uint64_t shard : {uint64_t{1} << 30, uint64_t{8}}) {
    const std::string d = dir.path() + "/ck" + std::to_string(shard);
    WriteOptions o;
    o.max_shard_bytes = shard;
    ASSERT_TRUE(WriteCheckpoint(d, t, o).ok());
    auto fs = io::PosixFileSystem();
    EXPECT_EQ(*fs->Exists(d + "/model.safetensors.index.json"), shard == 8);
    auto ck = Checkpoint::Open(d);
    ASSERT_TRUE(ck.ok()) << ck.status();
    const TensorView* va = (*ck)->Find("a");
    ASSERT_NE(va, nullptr);
    EXPECT_EQ(va->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(std::memcmp(va->data, a.data(), 24), 0);
    const TensorView* vb = (*ck)->Find("b");
    ASSERT_NE(vb, nullptr);
    EXPECT_EQ(vb->dtype, DType::kBF16);
    EXPECT_EQ(std::memcmp(vb->data, b.data(), 4), 0);
    EXPECT_EQ((*ck)->tensors().size(), 2u);
  }
}

TEST(SafetensorsTest, RefusesMalformedHeadersNamingTheTensor) {
  const std::string data(8, '\0');
  auto err = [&](const std::string& header, const std::string& d) {
    auto s = SafetensorsFile::Parse(File(header, d));
    return s.ok() ? std::string("ok") : std::string(s.status().message());
  };
  EXPECT_EQ(err(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data), "ok");
  EXPECT_THAT(err(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data),
              HasSubstr("tensor 'w': F32 [3] takes 12 bytes, data_offsets give 8"));
  EXPECT_THAT(err(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", data), HasSubstr("lie outside"));
  EXPECT_THAT(err(R"({"w":{"dtype":"Q9","shape":[2],"data_offsets":[0,8]}})", data), HasSubstr("dtype 'Q9'"));
  EXPECT_THAT(err(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data), HasSubstr("non-negative"));
  EXPECT_THAT(err(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"v":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                  std::string(4, '\0')),
              HasSubstr("overlap"));
  EXPECT_THAT(err(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data), HasSubstr("a hole"));
  EXPECT_THAT(err("[1,2]", data), HasSubstr("not a JSON object"));
  EXPECT_THAT(err("{", data), HasSubstr("not a JSON object"));
  EXPECT_THAT(err(R"({"__metadata__":{"format":1}})", ""), HasSubstr("is not a string"));
}

TEST(SafetensorsTest, ShardIndexThatLiesIsRefused) {
  std::vector<float> a = {1, 2};
  io::TempDir dir("fw_safetensors");
  WriteOptions o;
  o.max_shard_bytes = 4;
  std::vector<TensorToWrite> t = {{"a", DType::kF32, {1}, a.data()}, {"b", DType::kF32, {1}, a.data() + 1}};
  ASSERT_TRUE(WriteCheckpoint(dir.path(), t, o).ok());
  auto fs = io::PosixFileSystem();
  const std::string index = dir.path() + "/model.safetensors.index.json";
  auto j = nlohmann::json::parse(*fs->ReadFile(index));
  j["weight_map"]["c"] = "model-00001-of-00002.safetensors";
  ASSERT_TRUE(fs->Replace(index, j.dump()).ok());
  EXPECT_THAT(Checkpoint::Open(dir.path()).status().message(), HasSubstr("lists tensor 'c'"));
  j["weight_map"].erase("c");
  j["weight_map"]["a"] = "../elsewhere.safetensors";
  ASSERT_TRUE(fs->Replace(index, j.dump()).ok());
  EXPECT_THAT(Checkpoint::Open(dir.path()).status().message(), HasSubstr("is not a file name"));
  EXPECT_THAT(Checkpoint::Open(dir.path() + "/none").status().message(), HasSubstr("holds neither"));
}

TEST(SafetensorsTest, HeadersThatLieAreRefusedUnderTheCap) {
  auto under_cap = [](const std::string& bytes) {
    return io::UnderMemoryCap(256, [&]() -> std::string {
      auto s = SafetensorsFile::Parse(bytes);
      return s.ok() ? "ok" : "error: " + std::string(s.status().message());
    });
  };
  std::string huge;
  const uint64_t n = uint64_t{1} << 40;
  huge.append(reinterpret_cast<const char*>(&n), 8);
  huge += "{}";
  EXPECT_THAT(under_cap(huge), HasSubstr("header length 1099511627776 exceeds"));
  EXPECT_THAT(under_cap(File(R"({"w":{"dtype":"F32","shape":[100000,100000],"data_offsets":[0,8]}})",
                             std::string(8, '\0'))),
              HasSubstr("takes 40000000000 bytes"));
  EXPECT_THAT(under_cap(File(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}})",
                             std::string(8, '\0'))),
              HasSubstr("shape overflows"));
  EXPECT_THAT(under_cap("1234"), HasSubstr("needs 8 bytes"));
}

}  // namespace
}  // namespace flywheel::llm
