#include "flywheel/table/table.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <algorithm>
#include <numeric>
#include <thread>

#include "flywheel/format/column.h"
#include "flywheel/io/temp_dir.h"

namespace flywheel::table {
namespace {

using format::Column;
using format::DataType;
using format::RecordBatch;
using format::Schema;
using format::TypeId;

class TableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    uri_ = dir_ + "/t";
    options_.fs = io::PosixFileSystem(io::PosixOptions{.sync = false});
    options_.shard.page_size = 1024;
  }

  Schema TestSchema() { return *Schema::Parse("id:int64, emb:float32[4], name:string?"); }

  // Rows [start, start+n): id = i, emb = (i, i+.25, i+.5, i+.75), name = "r<i>" or null when i%7==0.
  RecordBatch Rows(int64_t start, int64_t n) {
    RecordBatch b;
    b.schema = TestSchema();
    b.num_rows = n;
    std::vector<int64_t> ids(n);
    std::vector<float> emb(n * 4);
    std::vector<std::string> names(n);
    std::vector<bool> valid(n);
    for (int64_t i = 0; i < n; ++i) {
      ids[i] = start + i;
      for (int k = 0; k < 4; ++k) emb[i * 4 + k] = static_cast<float>(start + i) + 0.25f * k;
      names[i] = "r" + std::to_string(start + i);
      valid[i] = (start + i) % 7 != 0;
    }
    b.columns.push_back(format::MakeFixedColumn(DataType::Scalar(TypeId::kInt64), std::move(ids)));
    b.columns.push_back(format::MakeFixedColumn(DataType::Tensor(TypeId::kFloat32, {4}), std::move(emb)));
    Column names_col = format::MakeStringColumn(names);
    format::SetValidity(names_col, valid);
    b.columns.push_back(std::move(names_col));
    return b;
  }

  // All ids of a table version, in scan order.
  std::vector<int64_t> Ids(const Table& t, int64_t batch_rows = 0) {
    std::vector<int64_t> out;
    auto it = t.Scan(ScanOptions{{"id"}, batch_rows});
    EXPECT_TRUE(it.ok()) << it.status();
    while (true) {
      auto b = (*it)->Next();
      EXPECT_TRUE(b.ok()) << b.status();
      if (!b.ok() || !b->has_value()) break;
      const Column& c = (**b).columns[0];
      for (int64_t i = 0; i < c.length; ++i) out.push_back(c.values.as<int64_t>()[i]);
    }
    return out;
  }

  std::vector<int64_t> Range(int64_t a, int64_t b) {
    std::vector<int64_t> v(b - a);
    std::iota(v.begin(), v.end(), a);
    return v;
  }

  io::TempDir tmp_{"fw_table_test"};
  std::string dir_ = tmp_.path();
  std::string uri_;
  TableOptions options_;
};

TEST_F(TableTest, CreateAppendScanAndTimeTravel) {
  auto t = Table::Create(uri_, TestSchema(), options_);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->version(), 1);
  EXPECT_EQ((*t)->num_rows(), 0);
  ASSERT_TRUE((*t)->Append(Rows(0, 500)).ok());
  ASSERT_TRUE((*t)->Append(Rows(500, 300)).ok());
  EXPECT_EQ((*t)->version(), 3);
  EXPECT_EQ((*t)->num_rows(), 800);
  EXPECT_EQ(Ids(**t), Range(0, 800));
  EXPECT_EQ(Ids(**t, 64), Range(0, 800));

  auto v2 = Table::Open(uri_, OpenOptions{.version = 2}, options_);
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(Ids(**v2), Range(0, 500));
  auto latest = Table::Open(uri_, {}, options_);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ((*latest)->version(), 3);

  auto missing = Table::Open(uri_, OpenOptions{.version = 9}, options_);
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_NE(missing.status().message().find("retained versions: 1..3"), std::string::npos)
      << missing.status();
  EXPECT_TRUE(absl::IsAlreadyExists(Table::Create(uri_, TestSchema(), options_).status()));
}

TEST_F(TableTest, AppendTransactionCommitsPartsFromSeveralThreadsAsOneVersion) {
  auto t = Table::Create(uri_, TestSchema(), options_);
  ASSERT_TRUE(t.ok()) << t.status();
  auto tx = (*t)->BeginAppend();
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back([&, w] { EXPECT_TRUE(tx->Write(Rows(w * 100, 100)).ok()); });
  }
  for (auto& th : writers) th.join();
  EXPECT_EQ(tx->rows(), 400);
  EXPECT_EQ(tx->files(), 4);
  // A concurrent append by another handle lands first; the transaction rebases.
  auto other = Table::Open(uri_, {}, options_);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE((*other)->Append(Rows(1000, 10)).ok());
  EXPECT_EQ((*t)->num_rows(), 0);  // nothing visible before Commit
  ASSERT_TRUE(tx->Commit(CommitOptions{{{"source", "test"}}}).ok());
  EXPECT_EQ((*t)->version(), 3);
  EXPECT_EQ((*t)->num_rows(), 410);
  std::vector<int64_t> ids = Ids(**t);
  std::sort(ids.begin(), ids.end());
  std::vector<int64_t> want = Range(0, 400);
  for (int64_t i = 1000; i < 1010; ++i) want.push_back(i);
  EXPECT_EQ(ids, want);
  EXPECT_TRUE(absl::IsFailedPrecondition(tx->Commit()));
  EXPECT_TRUE(absl::IsFailedPrecondition(tx->Write(Rows(0, 1))));
  // Parts written in their own transaction join another by Absorb.
  {
    auto main_tx = (*t)->BeginAppend();
    auto part = (*t)->BeginAppend();
    ASSERT_TRUE(part->Write(Rows(2000, 5)).ok());
    ASSERT_TRUE(main_tx->Absorb(*part).ok());
    EXPECT_EQ(main_tx->rows(), 5);
    EXPECT_TRUE(absl::IsFailedPrecondition(part->Commit()));  // its parts moved
    ASSERT_TRUE(main_tx->Commit().ok());
    EXPECT_EQ((*t)->num_rows(), 415);
    ASSERT_TRUE((*t)->Delete({410, 411, 412, 413, 414}).ok());  // back to 410 rows, new version
  }
  // A transaction dropped without Commit changes nothing.
  {
    auto dropped = (*t)->BeginAppend();
    ASSERT_TRUE(dropped->Write(Rows(5000, 50)).ok());
  }
  auto latest = Table::Open(uri_, {}, options_);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ((*latest)->version(), 5);
  EXPECT_EQ((*latest)->num_rows(), 410);
  // A part that does not fit the schema is refused naming the table.
  RecordBatch wrong;
  wrong.schema = *Schema::Parse("other:int64");
  wrong.num_rows = 1;
  wrong.columns.push_back(format::MakeFixedColumn(DataType::Scalar(TypeId::kInt64), std::vector<int64_t>{1}));
  auto tx2 = (*t)->BeginAppend();
  Status s = tx2->Write(wrong);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(uri_), std::string::npos) << s;
}

TEST_F(TableTest, ScanReturnsValuesNullsAndZeroCopyViews) {
  auto t = *Table::Create(uri_, TestSchema(), options_);
  ASSERT_TRUE(t->Append(Rows(0, 100)).ok());
  auto it = *t->Scan();
  int64_t row = 0;
  while (true) {
    auto b = *it->Next();
    if (!b) break;
    for (int64_t i = 0; i < b->num_rows; ++i, ++row) {
      EXPECT_EQ(b->columns[0].values.as<int64_t>()[i], row);
      EXPECT_FLOAT_EQ(b->columns[1].values.as<float>()[i * 4 + 3], row + 0.75f);
      EXPECT_EQ(b->columns[2].IsValid(i), row % 7 != 0);
      if (row % 7 != 0) {
        EXPECT_EQ(b->columns[2].GetBytes(i), "r" + std::to_string(row));
      }
    }
    // Uncompressed fixed-width pages are views of the mapped file.
    EXPECT_NE(b->columns[0].values.owner, nullptr);
  }
  EXPECT_EQ(row, 100);
}

TEST_F(TableTest, TakeAcrossFragmentsInAnyOrder) {
  auto t = *Table::Create(uri_, TestSchema(), options_);
  ASSERT_TRUE(t->Append(Rows(0, 300)).ok());
  ASSERT_TRUE(t->Append(Rows(300, 300)).ok());
  std::vector<int64_t> idx = {599, 0, 301, 299, 42, 42, 300};
  auto b = t->Take(idx);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->num_rows, 7);
  for (size_t i = 0; i < idx.size(); ++i) {
    EXPECT_EQ(b->columns[0].values.as<int64_t>()[i], idx[i]);
    EXPECT_FLOAT_EQ(b->columns[1].values.as<float>()[i * 4 + 1], idx[i] + 0.25f);
    EXPECT_EQ(b->columns[2].IsValid(i), idx[i] % 7 != 0);
    if (idx[i] % 7) {
      EXPECT_EQ(b->columns[2].GetBytes(i), "r" + std::to_string(idx[i]));
    }
  }
  auto bad = t->Take({600});
  EXPECT_TRUE(absl::IsOutOfRange(bad.status()));
  auto nocol = t->Take({1}, {"nope"});
  EXPECT_TRUE(absl::IsNotFound(nocol.status()));
}

TEST_F(TableTest, DeleteByIndexAndPredicateThenCompact) {
  auto t = *Table::Create(uri_, TestSchema(), options_);
  ASSERT_TRUE(t->Append(Rows(0, 100)).ok());
  ASSERT_TRUE(t->Append(Rows(100, 100)).ok());
  ASSERT_TRUE(t->Delete({0, 5, 150}).ok());
  EXPECT_EQ(t->num_rows(), 197);
  auto where = t->DeleteWhere(*Predicate::Parse("id >= 190"));
  ASSERT_TRUE(where.ok()) << where.status();
  EXPECT_EQ(*where, 10);
  std::vector<int64_t> expect;
  for (int64_t i = 0; i < 190; ++i) {
    if (i != 0 && i != 5 && i != 150) expect.push_back(i);
  }
  EXPECT_EQ(Ids(*t), expect);
  // Take sees live rows only.
  auto b = *t->Take({0, 4, 5});
  EXPECT_EQ(b.columns[0].values.as<int64_t>()[0], 1);
  EXPECT_EQ(b.columns[0].values.as<int64_t>()[1], 6);
  EXPECT_EQ(b.columns[0].values.as<int64_t>()[2], 7);
  const int64_t before = t->version();
  auto n = t->Compact();
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 2);
  EXPECT_EQ(t->manifest().fragments.size(), 1u);
  EXPECT_EQ(t->manifest().fragments[0].deletion.count, 0);
  EXPECT_EQ(Ids(*t), expect);
  // Older versions still read their rows.
  EXPECT_EQ(Ids(**t->Checkout(before - 2)), Range(0, 200));
  // Predicate on strings.
  auto sdel = t->DeleteWhere(*Predicate::Parse("name == \"r10\""));
  ASSERT_TRUE(sdel.ok()) << sdel.status();
  EXPECT_EQ(*sdel, 1);
  EXPECT_FALSE(Predicate::Parse("id ~ 3").ok());
  // Regression (found by text_fuzz): a non-UTF-8 bare value threw from the JSON library.
  auto bad_utf8 = Predicate::Parse("id >= 10\xff\xff");
  EXPECT_TRUE(absl::IsInvalidArgument(bad_utf8.status())) << bad_utf8.status();
  EXPECT_TRUE(absl::IsInvalidArgument(format::Schema::Parse("a\xfe:int64").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      t->Append(Rows(0, 1), CommitOptions{{{"k", "\xc3\x28"}}})));
}

TEST_F(TableTest, LocateSkipsDeletedRowsAndOpenColumnNamesTheShardColumn) {
  auto t = *Table::Create(uri_, TestSchema(), options_);
  ASSERT_TRUE(t->Append(Rows(0, 100)).ok());
  ASSERT_TRUE(t->Append(Rows(100, 100)).ok());
  ASSERT_TRUE(t->Delete({0, 5, 150}).ok());
  std::vector<int64_t> idx = {0, 4, 5, 98, 146, 147, 148, 196};
  std::vector<RowAddress> addr(idx.size());
  ASSERT_TRUE(t->Locate(idx.data(), idx.size(), addr.data()).ok());
  // Live 0 -> physical 1 (0 deleted); live 4 -> 6; live 98 -> fragment 1 row 0;
  // fragment 1 lost physical row 50.
  const std::vector<std::pair<int, int64_t>> want = {{0, 1}, {0, 6}, {0, 7}, {1, 0},
                                                     {1, 48}, {1, 49}, {1, 51}, {1, 99}};
  for (size_t i = 0; i < idx.size(); ++i) {
    EXPECT_EQ(addr[i].fragment, want[i].first) << i;
    EXPECT_EQ(addr[i].row, want[i].second) << i;
  }
  const int64_t bad = 197;
  EXPECT_TRUE(absl::IsOutOfRange(t->Locate(&bad, 1, addr.data())));
  auto src = t->OpenColumn(1, "emb");
  ASSERT_TRUE(src.ok()) << src.status();
  ASSERT_NE(src->reader, nullptr);
  auto page = src->reader->ReadPage(src->column, src->reader->FindPage(src->column, 49));
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_TRUE(absl::IsNotFound(t->OpenColumn(0, "nope").status()));
  EXPECT_TRUE(absl::IsOutOfRange(t->OpenColumn(2, "id").status()));
  format::Field score{"score", DataType::Scalar(TypeId::kFloat64), false, -1, "1.5"};
  ASSERT_TRUE(t->AddColumn(score).ok());
  auto old = t->OpenColumn(0, "score");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->reader, nullptr);
  ASSERT_EQ(old->fill.length, 1);
  EXPECT_DOUBLE_EQ(old->fill.values.as<double>()[0], 1.5);
}

TEST_F(TableTest, AddColumnReadsNullOrDefaultForOldRows) {
  auto t = *Table::Create(uri_, TestSchema(), options_);
  ASSERT_TRUE(t->Append(Rows(0, 10)).ok());
  format::Field score{"score", DataType::Scalar(TypeId::kFloat64), false, -1, "1.5"};
  ASSERT_TRUE(t->AddColumn(score).ok());
  format::Field note{"note", DataType::String(), true, -1, ""};
  ASSERT_TRUE(t->AddColumn(note).ok());
  format::Field flag{"flag", DataType::Scalar(TypeId::kBool), false, -1, "true"};
  ASSERT_TRUE(t->AddColumn(flag).ok());  // regression: a boolean default once threw out of the library
  EXPECT_EQ(t->Take({0}, {"flag"})->columns[0].values.data[0], 1);
  format::Field bad{"bad", DataType::Scalar(TypeId::kInt32), false, -1, ""};
  EXPECT_TRUE(absl::IsInvalidArgument(t->AddColumn(bad)));
  EXPECT_TRUE(absl::IsAlreadyExists(t->AddColumn(note)));
  auto b = *t->Take({3}, {"score", "note"});
  EXPECT_DOUBLE_EQ(b.columns[0].values.as<double>()[0], 1.5);
  EXPECT_FALSE(b.columns[1].IsValid(0));
  // New rows carry the new columns; the field ids are stable.
  RecordBatch more = Rows(10, 2);
  more.schema.fields.push_back(score);
  more.columns.push_back(format::MakeFixedColumn(DataType::Scalar(TypeId::kFloat64), std::vector<double>{7, 8}));
  ASSERT_TRUE(t->Append(more).ok());
  auto c = *t->Take({11, 0}, {"score"});
  EXPECT_DOUBLE_EQ(c.columns[0].values.as<double>()[0], 8);
  EXPECT_DOUBLE_EQ(c.columns[0].values.as<double>()[1], 1.5);
}

TEST_F(TableTest, AppendRejectsMismatchedBatches) {
  auto t = *Table::Create(uri_, TestSchema(), options_);
  RecordBatch b = Rows(0, 3);
  b.columns[0] = format::MakeFixedColumn(DataType::Scalar(TypeId::kInt32), std::vector<int32_t>{1, 2, 3});
  Status s = t->Append(b);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("'id'"), std::string::npos) << s;
  EXPECT_EQ(t->version(), 1);
}

TEST_F(TableTest, TagsExpireAndVacuum) {
  auto t = *Table::Create(uri_, TestSchema(), options_);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(t->Append(Rows(i * 10, 10)).ok());
  ASSERT_TRUE(t->Tag("v3", 3).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(t->Tag("v3", 4)));
  EXPECT_FALSE(t->Tag("../x").ok());
  auto tagged = Table::Open(uri_, OpenOptions{.tag = "v3"}, options_);
  ASSERT_TRUE(tagged.ok());
  EXPECT_EQ((*tagged)->version(), 3);
  ASSERT_TRUE(t->Overwrite(Rows(1000, 5)).ok());  // version 7 replaces all rows
  auto exp = t->Expire(ExpireOptions{.older_than_ms = -1, .keep_last = 1});
  ASSERT_TRUE(exp.ok()) << exp.status();
  EXPECT_EQ(exp->expired, (std::vector<int64_t>{1, 2, 4, 5, 6}));
  auto versions = *t->Versions();
  ASSERT_EQ(versions.size(), 2u);
  EXPECT_EQ(versions[0].version, 3);
  EXPECT_EQ(versions[1].version, 7);
  auto vac = t->Vacuum(VacuumOptions{.grace_period_ms = 0});
  ASSERT_TRUE(vac.ok()) << vac.status();
  // Appends 3..5 wrote files no retained version uses: versions 4, 5 and 6.
  EXPECT_EQ(vac->deleted.size(), 3u);
  EXPECT_EQ(Ids(**Table::Open(uri_, OpenOptions{.tag = "v3"}, options_)), Range(0, 20));
  EXPECT_EQ(Ids(*t), Range(1000, 1005));
  ASSERT_TRUE(t->Untag("v3").ok());
  EXPECT_TRUE(absl::IsNotFound(t->Untag("v3")));
}

TEST_F(TableTest, ConcurrentAppendsFromTwoHandlesRebase) {
  auto a = *Table::Create(uri_, TestSchema(), options_);
  auto b = *Table::Open(uri_, {}, options_);
  ASSERT_TRUE(a->Append(Rows(0, 10)).ok());
  ASSERT_TRUE(b->Append(Rows(10, 10)).ok());  // based on v1, rebases onto v2
  EXPECT_EQ(b->version(), 3);
  EXPECT_EQ(b->num_rows(), 20);
}

TEST_F(TableTest, DeleteRacingCompactionOneWinsOtherConflicts) {
  auto t = *Table::Create(uri_, TestSchema(), options_);
  ASSERT_TRUE(t->Append(Rows(0, 10)).ok());
  ASSERT_TRUE(t->Append(Rows(10, 10)).ok());
  auto deleter = *Table::Open(uri_, {}, options_);
  auto compactor = *Table::Open(uri_, {}, options_);
  ASSERT_TRUE(compactor->Compact().ok());
  Status s = deleter->Delete({3});
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_NE(s.message().find("delete"), std::string::npos) << s;
  EXPECT_NE(s.message().find("compact"), std::string::npos) << s;
  auto latest = *Table::Open(uri_, {}, options_);
  EXPECT_EQ(Ids(*latest), Range(0, 20));  // nothing lost or resurrected
}

TEST_F(TableTest, DisjointDeletesRebaseOverlappingConflict) {
  auto t = *Table::Create(uri_, TestSchema(), options_);
  ASSERT_TRUE(t->Append(Rows(0, 10)).ok());
  auto a = *Table::Open(uri_, {}, options_);
  auto b = *Table::Open(uri_, {}, options_);
  auto c = *Table::Open(uri_, {}, options_);
  ASSERT_TRUE(a->Delete({1}).ok());
  ASSERT_TRUE(b->Delete({2}).ok());
  EXPECT_EQ(b->num_rows(), 8);
  Status s = c->Delete({2, 3});
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  auto latest = *Table::Open(uri_, {}, options_);
  std::vector<int64_t> expect = {0, 3, 4, 5, 6, 7, 8, 9};
  EXPECT_EQ(Ids(*latest), expect);
}

TEST_F(TableTest, OverwriteConflictsWithConcurrentAppend) {
  auto t = *Table::Create(uri_, TestSchema(), options_);
  auto other = *Table::Open(uri_, {}, options_);
  ASSERT_TRUE(t->Append(Rows(0, 10)).ok());
  Status s = other->Overwrite(Rows(100, 1));
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_NE(s.message().find("overwrite"), std::string::npos);
  EXPECT_NE(s.message().find("append"), std::string::npos);
}

TEST_F(TableTest, CommitRecordsOperationWriterAndProperties) {
  auto t = *Table::Create(uri_, TestSchema(), options_);
  ASSERT_TRUE(t->Append(Rows(0, 3), CommitOptions{{{"job", "ingest-7"}}}).ok());
  auto versions = *t->Versions();
  ASSERT_EQ(versions.size(), 2u);
  EXPECT_EQ(versions[1].operation.type, "append");
  EXPECT_EQ(versions[1].operation.properties.at("job"), "ingest-7");
  EXPECT_FALSE(versions[1].operation.writer.empty());
  EXPECT_EQ(versions[1].num_rows, 3);
}

}  // namespace
}  // namespace flywheel::table

namespace flywheel::table {
namespace {

TEST(TableConfigTest, CodecChosenAtCreateIsUsedByLaterWriters) {
  io::TempDir tmp("fw_table_cfg");
  const std::string uri = tmp.Sub("t");
  TableOptions opts;
  opts.fs = io::PosixFileSystem(io::PosixOptions{.sync = false});
  opts.shard.codec = format::Codec::kZstd;
  auto schema = *format::Schema::Parse("x:int64");
  ASSERT_TRUE(Table::Create(uri, schema, opts).ok());
  auto t = *Table::Open(uri, {}, TableOptions{.fs = opts.fs});  // default options
  format::RecordBatch b;
  b.schema = schema;
  b.num_rows = 1000;
  b.columns.push_back(format::MakeFixedColumn(format::DataType::Scalar(format::TypeId::kInt64),
                                              std::vector<int64_t>(1000, 7)));
  ASSERT_TRUE(t->Append(b).ok());
  auto reader = *format::ShardReader::Open(opts.fs.get(), uri + "/" + t->manifest().fragments[0].files[0].path);
  EXPECT_EQ(reader->pages(0)[0].codec, format::Codec::kZstd);
  EXPECT_EQ(t->manifest().config.at("codec"), "zstd");
}

}  // namespace
}  // namespace flywheel::table

namespace flywheel::table {
namespace {

TEST(TableTakeTest, FixedWidthNullsAcrossFragmentsKeepTheirPositions) {
  io::TempDir tmp("fw_table_take");
  const std::string uri = tmp.Sub("t");
  TableOptions opts;
  opts.fs = io::PosixFileSystem(io::PosixOptions{.sync = false});
  opts.shard.page_size = 1024;
  auto schema = *format::Schema::Parse("v:int32?");
  auto t = *Table::Create(uri, schema, opts);
  for (int f = 0; f < 3; ++f) {
    format::RecordBatch b;
    b.schema = schema;
    b.num_rows = 700;
    std::vector<int32_t> v(700);
    std::vector<bool> valid(700);
    for (int i = 0; i < 700; ++i) {
      v[i] = f * 1000 + i;
      valid[i] = i % 3 != 0;
    }
    auto col = format::MakeFixedColumn(format::DataType::Scalar(format::TypeId::kInt32), v);
    format::SetValidity(col, valid);
    b.columns.push_back(col);
    ASSERT_TRUE(t->Append(b).ok());
  }
  std::vector<int64_t> idx;
  for (int k = 0; k < 500; ++k) idx.push_back((k * 7919) % 2100);
  auto got = t->Take(idx);
  ASSERT_TRUE(got.ok()) << got.status();
  const format::Column& c = got->columns[0];
  int64_t nulls = 0;
  for (size_t k = 0; k < idx.size(); ++k) {
    const int64_t f = idx[k] / 700, i = idx[k] % 700;
    ASSERT_EQ(c.IsValid(static_cast<int64_t>(k)), i % 3 != 0) << k;
    if (i % 3 != 0) {
      ASSERT_EQ(c.values.as<int32_t>()[k], f * 1000 + i);
    }
    nulls += i % 3 == 0;
  }
  EXPECT_EQ(c.null_count, nulls);
}

}  // namespace
}  // namespace flywheel::table
