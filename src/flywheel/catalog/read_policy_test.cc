#include "flywheel/catalog/read_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "flywheel/io/temp_dir.h"
#include "flywheel/loader/loader.h"
#include "flywheel/loader/loader_testing.h"
#include "flywheel/table/table.h"

namespace flywheel::catalog {
namespace {

using format::DataType;
using format::TypeId;
using Mode = ReadPolicy::Mode;

const char kSalt[] = "00112233445566778899aabbccddeeff";

ReadGuard::Column Rule(const std::string& name, Mode mode) { return {name, mode, kSalt, "hr/people", {"pii"}}; }

format::RecordBatch People() {
  format::RecordBatch b;
  b.schema = *format::Schema::Parse(
      "email:string?, blob:binary, uid:int64, small:int32, tiny:uint8, score:float32, emb:float32[2], "
      "toks:list<int32>");
  b.num_rows = 3;
  format::Column email = format::MakeStringColumn({"ann@example.com", "", "ann@example.com"});
  format::SetValidity(email, {true, false, true});
  b.columns.push_back(std::move(email));
  b.columns.push_back(format::MakeStringColumn({std::string("\x01\x02", 2), "x", std::string("\x01\x02", 2)}, true));
  b.columns.push_back(format::MakeFixedColumn(DataType::Scalar(TypeId::kInt64), std::vector<int64_t>{42, -7, 42}));
  b.columns.push_back(format::MakeFixedColumn(DataType::Scalar(TypeId::kInt32), std::vector<int32_t>{42, -7, 1}));
  b.columns.push_back(format::MakeFixedColumn(DataType::Scalar(TypeId::kUInt8), std::vector<uint8_t>{200, 42, 0}));
  b.columns.push_back(format::MakeFixedColumn(DataType::Scalar(TypeId::kFloat32), std::vector<float>{1, 2, 3}));
  b.columns.push_back(
      format::MakeFixedColumn(DataType::Tensor(TypeId::kFloat32, {2}), std::vector<float>{1, 2, 3, 4, 5, 6}));
  b.columns.push_back(format::MakeListColumn<int32_t>(TypeId::kInt32, {{1, 2}, {}, {3}}));
  return b;
}

template <typename T>
T At(const format::Column& c, int64_t i) {
  T v;
  std::memcpy(&v, c.FixedRow(i), sizeof(T));
  return v;
}

// Known answers: SHA256(salt, 0x00, value) computed independently (Python's
// hashlib) for the values above.
TEST(ReadGuardTest, HashModeMatchesTheDocumentedDigests) {
  ReadGuard g(nullptr, "bob",
              {Rule("email", Mode::kHash), Rule("blob", Mode::kHash), Rule("uid", Mode::kHash),
               Rule("small", Mode::kHash), Rule("tiny", Mode::kHash), Rule("score", Mode::kHash),
               Rule("emb", Mode::kHash), Rule("toks", Mode::kHash)});
  auto m = g.Mask(People());
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(m->Validate().ok()) << m->Validate();
  const auto& email = m->columns[0];
  EXPECT_EQ(email.GetBytes(0), "h:cf82632e41262348");
  EXPECT_FALSE(email.IsValid(1));  // nulls stay null
  EXPECT_EQ(email.GetBytes(2), email.GetBytes(0));
  EXPECT_EQ(m->columns[1].GetBytes(0), std::string("\x12\x50\x29\xcb\x7f\xd5\xc2\xb0", 8));
  EXPECT_EQ(m->columns[1].GetBytes(0).size(), 8u);
  EXPECT_EQ(At<int64_t>(m->columns[2], 0), -1563233583617648391);
  EXPECT_EQ(At<int64_t>(m->columns[2], 1), -2675922842965397225);
  EXPECT_EQ(At<int64_t>(m->columns[2], 2), At<int64_t>(m->columns[2], 0));
  EXPECT_EQ(At<int32_t>(m->columns[3], 0), -1954391815);  // the low bytes of the same digest
  EXPECT_EQ(At<int32_t>(m->columns[3], 1), 447852823);
  EXPECT_EQ(At<uint8_t>(m->columns[4], 0), 138);  // decimal text of the unsigned value ("200")
  EXPECT_EQ(At<uint8_t>(m->columns[4], 1), 249);
  // Floats, tensors and lists have no joinable hash: null, storage zeroed.
  for (int c : {5, 6, 7}) {
    const auto& col = m->columns[c];
    EXPECT_EQ(col.null_count, 3) << c;
    EXPECT_TRUE(m->schema.fields[c].nullable) << c;
    for (int64_t r = 0; r < 3; ++r) EXPECT_FALSE(col.IsValid(r));
    for (size_t i = 0; i < col.values.size; ++i) ASSERT_EQ(col.values.data[i], 0) << c;
  }
  EXPECT_EQ(m->columns[7].num_values(), 0);
}

TEST(ReadGuardTest, NullModeLeavesNoOriginalByteAndUnguardedColumnsShareBuffers) {
  ReadGuard g(nullptr, "bob", {Rule("email", Mode::kNull), Rule("uid", Mode::kNull)});
  format::RecordBatch in = People();
  const uint8_t* score = in.columns[5].values.data;
  auto m = g.Mask(in);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->columns[0].null_count, 3);
  EXPECT_EQ(m->columns[0].num_values(), 0);
  EXPECT_EQ(m->columns[2].null_count, 3);
  EXPECT_EQ(At<int64_t>(m->columns[2], 0), 0);
  EXPECT_TRUE(m->schema.fields[2].nullable);
  EXPECT_EQ(m->columns[5].values.data, score);
  EXPECT_TRUE(ReadGuard(nullptr, "", {}).empty());
}

TEST(ReadGuardTest, RefusalsNameTheColumnPrincipalAndRule) {
  ReadGuard g(nullptr, "bob", {Rule("email", Mode::kRefuse), Rule("uid", Mode::kHash)});
  Status s = g.CheckRead({});
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(s.message()), testing::HasSubstr("column 'email' of 'hr/people' is tagged pii"));
  EXPECT_THAT(std::string(s.message()), testing::HasSubstr("'bob'"));
  EXPECT_TRUE(g.CheckRead({"uid", "score"}).ok());  // hashed, not refused
  EXPECT_FALSE(g.CheckRead({"score", "email"}).ok());
  EXPECT_FALSE(g.Check({"email"}).ok());  // the Loader's check is the read check
  // File exports refuse every uncleared column, whatever the mode.
  s = g.CheckExport({"score", "uid", "email"}, "/t");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(s.message()), testing::HasSubstr("columns 'uid', 'email' of /t are tagged"));
  EXPECT_TRUE(g.CheckExport({"score"}, "/t").ok());
  s = g.CheckPredicate("uid", "/t", "delete");
  EXPECT_THAT(std::string(s.message()), testing::HasSubstr("cannot be used in a predicate (delete)"));
  EXPECT_TRUE(g.CheckPredicate("score", "/t", "delete").ok());
}

// The Loader applies the guard as its BatchTransform: batches carry exactly
// what Mask gives for the same rows taken from the table.
TEST(ReadGuardTest, LoaderBatchesAreMaskedLikeTake) {
  io::TempDir tmp("fw_read_policy_test");
  auto rows = loader::testing_util::Rows(0, 50);
  auto t = table::Table::Create(tmp.path() + "/t", rows.schema);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE((*t)->Append(rows).ok());
  auto g = std::make_shared<const ReadGuard>(
      nullptr, "bob", std::vector<ReadGuard::Column>{Rule("name", Mode::kHash), Rule("id", Mode::kHash),
                                                     Rule("tokens", Mode::kNull)});
  loader::LoaderOptions o;
  o.batch_size = 8;
  o.seed = 3;
  o.batch_transform = g;
  auto l = loader::Loader::Open({{tmp.path() + "/t"}}, o);
  ASSERT_TRUE(l.ok()) << l.status();
  int64_t seen = 0;
  while (true) {
    auto b = (*l)->Next();
    ASSERT_TRUE(b.ok()) << b.status();
    if (*b == nullptr) break;
    auto taken = (*t)->Take((*b)->indices, {});
    ASSERT_TRUE(taken.ok());
    auto want = g->Mask(*taken);
    ASSERT_TRUE(want.ok());
    for (size_t c = 0; c < want->columns.size(); ++c) {
      const format::Column& w = want->columns[c];
      const loader::BatchColumn& got = (*b)->columns[c];
      ASSERT_EQ(got.null_count, w.null_count) << got.name;
      for (int64_t r = 0; r < (*b)->num_rows; ++r) {
        const bool valid = got.validity == nullptr || ((got.validity[r >> 3] >> (r & 7)) & 1);
        ASSERT_EQ(valid, w.IsValid(r)) << got.name << " row " << r;
        if (w.type.is_fixed_width()) {
          ASSERT_EQ(std::memcmp(got.values + r * w.type.fixed_width(), w.FixedRow(r), w.type.fixed_width()), 0);
        } else if (w.type.id == TypeId::kString) {
          ASSERT_EQ(std::string_view(reinterpret_cast<const char*>(got.values) + got.offsets[r],
                                     got.offsets[r + 1] - got.offsets[r]),
                    w.GetBytes(r));
          if (valid) {
            ASSERT_EQ(w.GetBytes(r).substr(0, 2), "h:");
          }
        } else {
          ASSERT_EQ(got.offsets[r + 1] - got.offsets[r], 0);  // a masked list is empty (and null)
        }
      }
    }
    seen += (*b)->num_rows;
  }
  EXPECT_EQ(seen, 50);

  // A refused column fails the open, before anything is read.
  auto refuse = std::make_shared<const ReadGuard>(nullptr, "bob",
                                                  std::vector<ReadGuard::Column>{Rule("emb", Mode::kRefuse)});
  o.batch_transform = refuse;
  auto bad = loader::Loader::Open({{tmp.path() + "/t"}}, o);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kPermissionDenied);
  o.columns = {"id", "name"};
  EXPECT_TRUE(loader::Loader::Open({{tmp.path() + "/t"}}, o).ok());
}

}  // namespace
}  // namespace flywheel::catalog
