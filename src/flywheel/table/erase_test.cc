// Erasure across every retained version (docs/format/table.md, "Erasure").
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "flywheel/format/column.h"
#include "flywheel/io/temp_dir.h"
#include "flywheel/table/internal.h"
#include "flywheel/table/table.h"

namespace flywheel::table {
namespace {

using format::Column;
using format::DataType;
using format::RecordBatch;
using format::Schema;
using format::TypeId;

// (user_id, payload) rows of one version, in row order.
using Rows = std::vector<std::pair<int64_t, std::string>>;

class EraseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    uri_ = dir_.path() + "/t";
    options_.fs = io::PosixFileSystem(io::PosixOptions{.sync = false});
    options_.shard.page_size = 1024;
  }

  RecordBatch Batch(const std::vector<int64_t>& users, const std::string& tag) {
    RecordBatch b;
    b.schema = *Schema::Parse("user_id:int64, payload:string");
    b.num_rows = static_cast<int64_t>(users.size());
    std::vector<std::string> payload;
    for (size_t i = 0; i < users.size(); ++i) payload.push_back(tag + ":" + std::to_string(users[i]) + ":" + std::to_string(i));
    b.columns.push_back(format::MakeFixedColumn<int64_t>(DataType::Scalar(TypeId::kInt64), users));
    b.columns.push_back(format::MakeStringColumn(payload));
    return b;
  }

  Rows Read(const Table& t, int64_t version) {
    auto v = t.Checkout(version);
    EXPECT_TRUE(v.ok()) << v.status();
    ScanOptions so;
    so.columns = {"user_id", "payload"};
    auto it = (*v)->Scan(so);
    EXPECT_TRUE(it.ok()) << it.status();
    Rows out;
    while (true) {
      auto b = (*it)->Next();
      EXPECT_TRUE(b.ok()) << b.status();
      if (!b.ok() || !*b) break;
      for (int64_t i = 0; i < (*b)->num_rows; ++i) {
        out.emplace_back((*b)->columns[0].values.as<int64_t>()[i], std::string((*b)->columns[1].GetBytes(i)));
      }
    }
    return out;
  }

  // Every value of user_id stored in any data file on disk.
  std::multiset<int64_t> UsersOnDisk() {
    std::multiset<int64_t> out;
    for (const auto& e : std::filesystem::directory_iterator(uri_ + "/data")) {
      auto r = format::ShardReader::Open(options_.fs.get(), e.path().string());
      if (!r.ok()) continue;
      for (int c = 0; c < (*r)->schema().num_fields(); ++c) {
        if ((*r)->schema().fields[c].name != "user_id") continue;
        auto col = (*r)->Read(c, 0, (*r)->num_rows());
        for (int64_t i = 0; i < col->length; ++i) out.insert(col->values.as<int64_t>()[i]);
      }
    }
    return out;
  }

  // Five versions with user 7's rows spread over them, a delete, a
  // compaction and an added column in between.
  std::shared_ptr<Table> MakeHistory() {
    auto t = *Table::Create(uri_, *Schema::Parse("user_id:int64, payload:string"), options_);  // v1
    EXPECT_TRUE(t->Append(Batch({1, 7, 2, 3, 7}, "a")).ok());                                 // v2
    EXPECT_TRUE(t->Append(Batch({4, 5, 7, 6}, "b")).ok());                                    // v3
    EXPECT_TRUE(t->Delete({0, 5}).ok());                                                      // v4: rows 1 and 4
    EXPECT_TRUE(t->Append(Batch({7, 8, 9}, "c")).ok());                                       // v5
    EXPECT_TRUE(t->Compact(CompactOptions{.target_rows = 4, .max_deleted_fraction = 0.1}).ok());  // v6
    EXPECT_TRUE(t->Append(Batch({10, 7}, "d")).ok());                                         // v7
    return t;
  }

  io::TempDir dir_;
  std::string uri_;
  TableOptions options_;
};

TEST_F(EraseTest, NoRetainedVersionReturnsTheRowsAndOtherRowsAreUnchanged) {
  auto t = MakeHistory();
  auto versions = *t->Versions();
  std::map<int64_t, Rows> before;
  for (const auto& v : versions) before[v.version] = Read(*t, v.version);
  ASSERT_GT(UsersOnDisk().count(7), 0u);

  auto res = t->Erase(*Predicate::Parse("user_id == 7"));
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_GT(res->rows_erased, 0);
  EXPECT_FALSE(res->files_deleted.empty());
  for (const auto& v : versions) {
    Rows expect;
    int64_t gone = 0;
    for (const auto& r : before[v.version]) {
      if (r.first == 7) ++gone;
      else expect.push_back(r);
    }
    EXPECT_EQ(Read(*t, v.version), expect) << "version " << v.version;
    EXPECT_EQ(res->rows_by_version.count(v.version) ? res->rows_by_version.at(v.version) : 0, gone)
        << "version " << v.version;
  }
  // Not a byte of user 7 remains in any data file, and the old files are gone.
  EXPECT_EQ(UsersOnDisk().count(7), 0u);
  for (const auto& rel : res->files_deleted) EXPECT_FALSE(std::filesystem::exists(uri_ + "/" + rel)) << rel;
  // A fresh handle agrees, and the table still takes writes.
  auto reopened = *Table::Open(uri_, {}, options_);
  size_t sevens = 0;
  for (const auto& r : before[reopened->version()]) sevens += r.first == 7;
  EXPECT_EQ(Read(*reopened, reopened->version()).size(), before[reopened->version()].size() - sevens);
  ASSERT_TRUE(reopened->Append(Batch({11}, "e")).ok());
  EXPECT_EQ(Read(*reopened, reopened->version()).back().first, 11);
}

TEST_F(EraseTest, DryRunCountsAndChangesNothing) {
  auto t = MakeHistory();
  const auto on_disk = UsersOnDisk();
  auto res = t->Erase(*Predicate::Parse("user_id == 7"), EraseOptions{.dry_run = true});
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_GT(res->rows_erased, 0);
  EXPECT_TRUE(res->files_deleted.empty());
  EXPECT_TRUE(res->versions_rewritten.empty());
  EXPECT_EQ(UsersOnDisk(), on_disk);
  EXPECT_EQ(res->rows_by_version.at(2), 2);
}

TEST_F(EraseTest, TheKeyIndexSkipsFilesThatCannotHoldTheKey) {
  auto t = MakeHistory();
  ASSERT_TRUE(t->Erase(*Predicate::Parse("user_id == 7")).ok());
  // The first erasure indexed every file it read; erasing a key held by
  // one file now reads about that one.
  auto res = t->Erase(*Predicate::Parse("user_id == 9"));
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_GE(res->fragments_rewritten, 1);
  EXPECT_GT(res->fragments_skipped, 0);
  EXPECT_LE(res->fragments_scanned, res->fragments_rewritten + 1);
  EXPECT_EQ(UsersOnDisk().count(9), 0u);
  // A key nobody has: nothing read beyond false positives, nothing changed.
  auto none = t->Erase(*Predicate::Parse("user_id == 123456"));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->rows_erased, 0);
  EXPECT_TRUE(none->versions_rewritten.empty());
}

TEST_F(EraseTest, UnreferencedFilesHoldingTheRowsAreDeletedToo) {
  auto t = MakeHistory();
  // Expire the early versions without vacuuming: their files stay on disk.
  ASSERT_TRUE(t->Expire(ExpireOptions{.older_than_ms = -1, .keep_last = 1}).ok());
  ASSERT_GT(UsersOnDisk().count(7), 0u);
  auto res = t->Erase(*Predicate::Parse("user_id == 7"));
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(UsersOnDisk().count(7), 0u);
}

TEST_F(EraseTest, BadPredicatesAreRefused) {
  auto t = MakeHistory();
  EXPECT_TRUE(absl::IsNotFound(t->Erase(*Predicate::Parse("nope == 1")).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(t->Erase(*Predicate::Parse("user_id == \"x\"")).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(t->Erase(*Predicate::Parse("payload == 3")).status()));
}

TEST_F(EraseTest, StringKeysAndAFragmentErasedWhole) {
  auto t = *Table::Create(uri_, *Schema::Parse("email:string, n:int64"), options_);
  RecordBatch b;
  b.schema = t->schema();
  b.num_rows = 2;
  b.columns.push_back(format::MakeStringColumn({"x@a.com", "x@a.com"}));
  b.columns.push_back(format::MakeFixedColumn<int64_t>(DataType::Scalar(TypeId::kInt64), {1, 2}));
  ASSERT_TRUE(t->Append(b).ok());
  b.columns[0] = format::MakeStringColumn({"y@a.com", "x@a.com"});
  ASSERT_TRUE(t->Append(b).ok());
  auto res = t->Erase(*Predicate::Parse("email == \"x@a.com\""));
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->rows_erased, 3);
  auto v2 = *t->Checkout(2);
  EXPECT_EQ(v2->num_rows(), 0);
  EXPECT_EQ(v2->manifest().fragments.size(), 0u);
  auto v3 = *t->Checkout(3);
  EXPECT_EQ(v3->num_rows(), 1);
}

}  // namespace
}  // namespace flywheel::table

namespace flywheel::table {
namespace {

// Keys above 2^53 are not doubles: 9007199254740993 must not match ...992.
TEST(PredicateMatcherRegression, IntegersAbove2To53CompareExactly) {
  io::TempDir dir;
  TableOptions o;
  o.fs = io::PosixFileSystem(io::PosixOptions{.sync = false});
  auto t = *Table::Create(dir.path() + "/t", *format::Schema::Parse("id:int64, u:uint64"), o);
  format::RecordBatch b;
  b.schema = t->schema();
  b.num_rows = 3;
  const int64_t big = int64_t{1} << 53;
  b.columns.push_back(format::MakeFixedColumn<int64_t>(format::DataType::Scalar(format::TypeId::kInt64),
                                                       {big, big + 1, -big - 1}));
  b.columns.push_back(format::MakeFixedColumn<uint64_t>(format::DataType::Scalar(format::TypeId::kUInt64),
                                                        {~uint64_t{0}, ~uint64_t{0} - 1, 5}));
  ASSERT_TRUE(t->Append(b).ok());
  EXPECT_EQ(*t->DeleteWhere(*Predicate::Parse("id == 9007199254740993")), 1);
  EXPECT_EQ(t->num_rows(), 2);
  EXPECT_EQ(*t->DeleteWhere(*Predicate::Parse("u == 18446744073709551614")), 0);  // that row is gone
  EXPECT_EQ(*t->DeleteWhere(*Predicate::Parse("id < -9007199254740992")), 1);
  auto res = t->Erase(*Predicate::Parse("u == 18446744073709551615"));
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->rows_erased, 1);
  EXPECT_EQ(t->num_rows(), 0);
}

// A key index whose bit count does not fit its words is refused (the word
// count must not wrap to zero and let probes read past the words).
TEST(KeyIndexRegression, ABitCountLargerThanTheWordsIsRefused) {
  std::string data("FWBLOOM2", 8);
  const uint32_t k = 7;
  const uint64_t bits = ~uint64_t{0}, sum = 0;
  data.append(reinterpret_cast<const char*>(&k), 4);
  data.append(reinterpret_cast<const char*>(&bits), 8);
  data.append(reinterpret_cast<const char*>(&sum), 8);
  EXPECT_FALSE(KeyIndexMayContain(data, 12345).has_value());
  data.append(std::string(8, '\xff'));  // one word: still far too few for that many bits
  EXPECT_FALSE(KeyIndexMayContain(data, 12345).has_value());
}

}  // namespace
}  // namespace flywheel::table
