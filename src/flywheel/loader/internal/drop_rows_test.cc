#include "flywheel/loader/internal/drop_rows.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace flywheel::internal_loader {
namespace {

using format::DataType;
using format::TypeId;

// A 5-row batch over buffers the test owns: id int32, name string (row 1
// null), toks list<int16>.
struct Fixture {
  std::vector<int32_t> ids{10, 11, 12, 13, 14};
  std::string names = "aabbbcdddd";  // "aa", "" (null), "bbb", "c", "dddd"
  std::vector<int64_t> name_off{0, 2, 2, 5, 6, 10};
  std::vector<uint8_t> name_valid{0b11101};
  std::vector<int16_t> toks{1, 2, 3, 4, 5, 6};  // [1], [2, 3], [], [4, 5], [6]
  std::vector<int64_t> tok_off{0, 1, 3, 3, 5, 6};
  loader::Batch b;

  Fixture() {
    b.num_rows = 5;
    b.indices = {100, 101, 102, 103, 104};
    b.tables = {0, 1, 0, 1, 0};
    loader::BatchColumn id{"id", DataType::Scalar(TypeId::kInt32), false,
                           reinterpret_cast<const uint8_t*>(ids.data()), ids.size() * 4};
    loader::BatchColumn name{"name", DataType::String(), true, reinterpret_cast<const uint8_t*>(names.data()),
                             names.size(), name_off.data(), name_valid.data(), 1};
    loader::BatchColumn tok{"toks", DataType::List(TypeId::kInt16), false,
                            reinterpret_cast<const uint8_t*>(toks.data()), toks.size() * 2, tok_off.data()};
    b.columns = {id, name, tok};
  }
};

std::string Row(const loader::BatchColumn& c, int64_t r) {
  return std::string(reinterpret_cast<const char*>(c.values) + c.offsets[r], c.offsets[r + 1] - c.offsets[r]);
}

TEST(DropRowsTest, CompactsEveryKindOfColumnInOrder) {
  Fixture f;
  DropRows(f.b, {0, 0, 1, 0, 1});  // keep rows 0, 1, 3
  ASSERT_EQ(f.b.num_rows, 3);
  EXPECT_EQ(f.b.indices, (std::vector<int64_t>{100, 101, 103}));
  EXPECT_EQ(f.b.tables, (std::vector<int32_t>{0, 1, 1}));
  EXPECT_EQ(f.ids[0], 10);
  EXPECT_EQ(f.ids[1], 11);
  EXPECT_EQ(f.ids[2], 13);
  EXPECT_EQ(f.b.columns[0].values_size, 12u);
  const auto& name = f.b.columns[1];
  EXPECT_EQ(Row(name, 0), "aa");
  EXPECT_EQ(Row(name, 1), "");
  EXPECT_EQ(Row(name, 2), "c");
  EXPECT_EQ(name.values_size, 3u);
  ASSERT_NE(name.validity, nullptr);
  EXPECT_EQ(name.null_count, 1);
  EXPECT_EQ(name.validity[0] & 0b111, 0b101);
  const auto& tok = f.b.columns[2];
  EXPECT_EQ((std::vector<int64_t>(tok.offsets, tok.offsets + 4)), (std::vector<int64_t>{0, 1, 3, 5}));
  EXPECT_EQ((std::vector<int16_t>(f.toks.begin(), f.toks.begin() + 5)), (std::vector<int16_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(tok.values_size, 10u);
}

TEST(DropRowsTest, DroppingTheOnlyNullRemovesTheValidity) {
  Fixture f;
  DropRows(f.b, {0, 1, 0, 0, 0});
  ASSERT_EQ(f.b.num_rows, 4);
  EXPECT_EQ(f.b.columns[1].null_count, 0);
  EXPECT_EQ(f.b.columns[1].validity, nullptr);
  EXPECT_EQ(Row(f.b.columns[1], 1), "bbb");
}

TEST(DropRowsTest, AllOrNothing) {
  Fixture f;
  DropRows(f.b, {0, 0, 0, 0, 0});
  EXPECT_EQ(f.b.num_rows, 5);
  EXPECT_EQ(Row(f.b.columns[1], 4), "dddd");
  DropRows(f.b, {1, 1, 1, 1, 1});
  EXPECT_EQ(f.b.num_rows, 0);
  EXPECT_TRUE(f.b.indices.empty());
  EXPECT_EQ(f.b.columns[0].values_size, 0u);
  EXPECT_EQ(f.b.columns[2].offsets[0], 0);
}

}  // namespace
}  // namespace flywheel::internal_loader
