// The io_uring page source (page_source.h) and the loader reading through it.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "flywheel/format/column.h"
#include "flywheel/format/shard.h"
#include "flywheel/io/temp_dir.h"
#include "flywheel/loader/loader.h"
#include "flywheel/loader/loader_testing.h"
#include "flywheel/loader/page_source.h"

namespace flywheel::loader {
namespace {

using format::Column;
using format::DataType;
using format::RecordBatch;
using format::TypeId;

using testing_util::Rows;
std::string Bytes(const Batch& b) { return testing_util::BatchBytes(b); }

std::string ColumnBytes(const Column& c) {
  std::string s(reinterpret_cast<const char*>(c.values.data), c.values.size);
  s.append(reinterpret_cast<const char*>(c.offsets.data), c.offsets.size);
  s.append(reinterpret_cast<const char*>(c.validity.data), c.validity.size);
  return s;
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

class UringTest : public ::testing::Test {
 protected:
  UringTest() {
    topt_.fs = io::PosixFileSystem(io::PosixOptions{.sync = false});
    topt_.shard.page_size = 1024;
  }

  std::shared_ptr<table::Table> MakeTable(const std::string& name, int64_t n, int fragments,
                                          format::Codec codec) {
    table::TableOptions o = topt_;
    o.shard.codec = codec;
    auto t = table::Table::Create(tmp_.Sub(name), Rows(0, 0).schema, o);
    EXPECT_TRUE(t.ok()) << t.status();
    int64_t done = 0;
    for (int f = 0; f < fragments; ++f) {
      const int64_t k = f + 1 == fragments ? n - done : n / fragments;
      EXPECT_TRUE((*t)->Append(Rows(done, k)).ok());
      done += k;
    }
    return *t;
  }

  std::shared_ptr<format::ShardReader> Shard(const std::string& name, format::Codec codec,
                                             bool mmap = true) {
    format::ShardWriterOptions w;
    w.codec = codec;
    w.page_size = 1024;
    const std::string path = tmp_.Sub(name);
    auto writer = format::ShardWriter::Open(topt_.fs.get(), path, Rows(0, 0).schema, w);
    EXPECT_TRUE(writer.ok()) << writer.status();
    EXPECT_TRUE((*writer)->Write(Rows(0, 600)).ok());
    EXPECT_TRUE((*writer)->Finish().ok());
    format::ShardReaderOptions r;
    r.mmap = mmap;
    auto reader = format::ShardReader::Open(topt_.fs.get(), path, r);
    EXPECT_TRUE(reader.ok()) << reader.status();
    return *reader;
  }

  static std::vector<PageRef> AllPages(const format::ShardReader& r, int column) {
    std::vector<PageRef> refs;
    for (int p = 0; p < static_cast<int>(r.pages(column).size()); ++p) {
      refs.push_back(PageRef{&r, column, p});
    }
    return refs;
  }

  std::vector<std::string> Epoch(const std::shared_ptr<table::Table>& t, int threads, bool uring,
                                 LoaderStats* stats = nullptr) {
    LoaderOptions o;
    o.batch_size = 64;
    o.seed = 5;
    o.num_threads = threads;
    o.use_io_uring = uring;
    auto l = Loader::Create({t}, o);
    EXPECT_TRUE(l.ok()) << l.status();
    std::vector<std::string> got;
    while (l.ok()) {
      auto b = (*l)->Next(absl::Seconds(30));
      EXPECT_TRUE(b.ok()) << b.status();
      if (!b.ok() || !*b) break;
      got.push_back(Bytes(**b));
    }
    if (stats && l.ok()) *stats = (*l)->stats();
    return got;
  }

  io::TempDir tmp_{"fw_loader_uring_test"};
  table::TableOptions topt_;
};

TEST_F(UringTest, PrefetchReadsPagesInOneBatchAndPageHitsTheCache) {
  if (!IoUringAvailable()) GTEST_SKIP() << "io_uring unavailable here";
  auto r = Shard("s", format::Codec::kZstd);
  const int column = 3;  // tokens: values, offsets
  const auto refs = AllPages(*r, column);
  ASSERT_GT(refs.size(), 3u);
  PageSourceOptions o;
  o.cache_bytes = 64 << 20;
  o.io_uring = true;
  o.ring_entries = 2;  // more pages than entries: the ring is refilled as reads complete
  auto src = NewPageSource(o);
  ASSERT_TRUE(src->prefetches());
  ASSERT_TRUE(src->Prefetch(refs, nullptr).ok());
  PageSourceStats s = src->stats();
  EXPECT_EQ(s.batches, 1);
  EXPECT_EQ(s.batched, static_cast<int64_t>(refs.size()));
  EXPECT_EQ(s.fetched, static_cast<int64_t>(refs.size()));
  EXPECT_EQ(s.uring_unavailable, 0);
  for (const PageRef& p : refs) {
    auto got = src->Page(*r, column, p.page);
    ASSERT_TRUE(got.ok()) << got.status();
    auto want = r->ReadPage(column, p.page);
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_EQ(ColumnBytes(*got), ColumnBytes(*want)) << "page " << p.page;
  }
  s = src->stats();
  EXPECT_EQ(s.hits, static_cast<int64_t>(refs.size()));
  EXPECT_EQ(s.fetched, static_cast<int64_t>(refs.size()));
  // Cached pages are not read again.
  ASSERT_TRUE(src->Prefetch(refs, nullptr).ok());
  EXPECT_EQ(src->stats().batches, 1);
}

TEST_F(UringTest, PrefetchSkipsMappedUncompressedPagesButReadsUnmappedOnes) {
  if (!IoUringAvailable()) GTEST_SKIP() << "io_uring unavailable here";
  PageSourceOptions o;
  o.cache_bytes = 64 << 20;
  o.io_uring = true;
  auto mapped = Shard("m", format::Codec::kNone, /*mmap=*/true);
  auto src = NewPageSource(o);
  ASSERT_TRUE(src->Prefetch(AllPages(*mapped, 0), nullptr).ok());
  EXPECT_EQ(src->stats().batched, 0);
  auto unmapped = Shard("u", format::Codec::kNone, /*mmap=*/false);
  ASSERT_FALSE(unmapped->mapped());
  const auto refs = AllPages(*unmapped, 1);
  ASSERT_TRUE(src->Prefetch(refs, nullptr).ok());
  EXPECT_EQ(src->stats().batched, static_cast<int64_t>(refs.size()));
  auto got = src->Page(*unmapped, 1, 1);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(ColumnBytes(*got), ColumnBytes(*unmapped->ReadPage(1, 1)));
}

TEST_F(UringTest, PrefetchReadsAtMostHalfTheCache) {
  if (!IoUringAvailable()) GTEST_SKIP() << "io_uring unavailable here";
  auto r = Shard("s", format::Codec::kZstd);
  const auto refs = AllPages(*r, 0);
  PageSourceOptions o;
  o.cache_bytes = static_cast<int64_t>(r->pages(0)[0].uncompressed_size()) * 4;
  o.io_uring = true;
  auto src = NewPageSource(o);
  ASSERT_TRUE(src->Prefetch(refs, nullptr).ok());
  EXPECT_EQ(src->stats().batched, 2);
}

TEST_F(UringTest, CorruptPageFailsPrefetchNamingFileColumnAndPage) {
  if (!IoUringAvailable()) GTEST_SKIP() << "io_uring unavailable here";
  auto r = Shard("s", format::Codec::kZstd);
  FlipByte(r->path(), r->pages(1)[2].offset + 3);
  PageSourceOptions o;
  o.cache_bytes = 64 << 20;
  o.io_uring = true;
  auto src = NewPageSource(o);
  const auto refs = AllPages(*r, 1);
  size_t failed = 99;
  Status s = src->Prefetch(refs, &failed);
  ASSERT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_EQ(failed, 2u);
  const std::string msg(s.message());
  EXPECT_NE(msg.find(r->path()), std::string::npos) << msg;
  EXPECT_NE(msg.find("column 'emb' page 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("checksum mismatch"), std::string::npos) << msg;
  // The pages before it were cached, the bad one was not.
  EXPECT_TRUE(src->Page(*r, 1, 0).ok());
  EXPECT_EQ(src->stats().hits, 1);
  EXPECT_TRUE(absl::IsDataLoss(src->Page(*r, 1, 2).status()));
}

TEST_F(UringTest, UnavailableRingFallsBackToPread) {
  auto r = Shard("s", format::Codec::kZstd);
  PageSourceOptions o;
  o.cache_bytes = 64 << 20;
  o.io_uring = true;
  o.simulate_uring_unavailable = true;
  auto src = NewPageSource(o);
  const auto refs = AllPages(*r, 2);
  ASSERT_TRUE(src->Prefetch(refs, nullptr).ok());
  PageSourceStats s = src->stats();
  EXPECT_EQ(s.uring_unavailable, 1);
  EXPECT_EQ(s.batched, 0);
  EXPECT_EQ(s.fetched, 0);
  for (const PageRef& p : refs) {
    auto got = src->Page(*r, 2, p.page);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(ColumnBytes(*got), ColumnBytes(*r->ReadPage(2, p.page)));
  }
  EXPECT_EQ(src->stats().fetched, static_cast<int64_t>(refs.size()));
}

TEST_F(UringTest, BatchesAreIdenticalWithAndWithoutUringAcrossThreadCounts) {
  auto t = MakeTable("t", 700, 3, format::Codec::kZstd);
  const std::vector<std::string> reference = Epoch(t, 1, false);
  ASSERT_EQ(reference.size(), 11u);  // ceil(700 / 64)
  for (int threads : {1, 2, 4}) {
    LoaderStats stats;
    EXPECT_EQ(Epoch(t, threads, true, &stats), reference) << threads << " threads, io_uring";
    if (IoUringAvailable()) {
      // Every page came through a batch: the walk only hit the cache.
      EXPECT_GT(stats.pages_fetched, 0);
      EXPECT_GT(stats.page_cache_hits, 0);
    }
    EXPECT_EQ(Epoch(t, threads, false), reference) << threads << " threads, pread";
  }
}

TEST_F(UringTest, CorruptPageErrorNamesTableFragmentAndPage) {
  auto t = MakeTable("t", 400, 1, format::Codec::kZstd);
  auto src = t->OpenColumn(0, "emb");
  ASSERT_TRUE(src.ok()) << src.status();
  FlipByte(src->reader->path(), src->reader->pages(src->column).at(1).offset + 5);
  for (bool uring : {true, false}) {
    LoaderOptions o;
    o.batch_size = 400;
    o.shuffle = false;
    o.use_io_uring = uring;
    auto l = Loader::Open({TableRef{tmp_.Sub("t")}}, o, topt_);
    ASSERT_TRUE(l.ok()) << l.status();
    auto b = (*l)->Next(absl::Seconds(30));
    ASSERT_FALSE(b.ok());
    EXPECT_TRUE(absl::IsDataLoss(b.status())) << b.status();
    const std::string msg(b.status().message());
    EXPECT_NE(msg.find(tmp_.Sub("t")), std::string::npos) << msg;
    EXPECT_NE(msg.find("fragment"), std::string::npos) << msg;
    EXPECT_NE(msg.find("column 'emb' page 1"), std::string::npos) << msg;
    EXPECT_EQ((*l)->state().consumed, 0);
    EXPECT_TRUE(absl::IsDataLoss((*l)->Next(absl::Seconds(30)).status()));
  }
}

}  // namespace
}  // namespace flywheel::loader
