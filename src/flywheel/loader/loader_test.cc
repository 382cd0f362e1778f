#include "flywheel/loader/loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "flywheel/format/column.h"
#include "flywheel/io/temp_dir.h"
#include "flywheel/loader/loader_testing.h"

namespace flywheel::loader {
namespace {

using format::Column;
using format::DataType;
using format::RecordBatch;
using format::TypeId;

using testing_util::Rows;

class LoaderTest : public ::testing::Test {
 protected:
  LoaderTest() {
    topt_.fs = io::PosixFileSystem(io::PosixOptions{.sync = false});
    topt_.shard.page_size = 1024;
  }

  // A table of `n` rows with ids [base, base + n) in `fragments` appends.
  std::shared_ptr<table::Table> MakeTable(const std::string& name, int64_t n, int fragments = 3,
                                          int64_t base = 0,
                                          format::Codec codec = format::Codec::kNone) {
    table::TableOptions o = topt_;
    o.shard.codec = codec;
    auto t = table::Table::Create(tmp_.Sub(name), Rows(0, 0).schema, o);
    EXPECT_TRUE(t.ok()) << t.status();
    int64_t done = 0;
    for (int f = 0; f < fragments; ++f) {
      const int64_t k = f + 1 == fragments ? n - done : n / fragments;
      EXPECT_TRUE((*t)->Append(Rows(base + done, k)).ok());
      done += k;
    }
    return *t;
  }

  std::unique_ptr<Loader> Make(std::vector<std::shared_ptr<const table::Table>> tables,
                               const LoaderOptions& o) {
    auto l = Loader::Create(std::move(tables), o);
    EXPECT_TRUE(l.ok()) << l.status();
    return l.ok() ? std::move(*l) : nullptr;
  }

  // Takes `max_batches` batches (or up to the end of the epoch) and returns
  // the ids served, checking every column against the id.
  std::vector<int64_t> Take(Loader& l, int64_t max_batches = INT64_MAX, bool* ended = nullptr) {
    std::vector<int64_t> ids;
    if (ended) *ended = false;
    for (int64_t k = 0; k < max_batches; ++k) {
      auto b = l.Next(absl::Seconds(30));
      EXPECT_TRUE(b.ok()) << b.status();
      if (!b.ok()) break;
      if (!*b) {
        if (ended) *ended = true;
        break;
      }
      CheckBatch(**b);
      const BatchColumn* id = (*b)->column("id");
      for (int64_t i = 0; i < (*b)->num_rows; ++i)
        ids.push_back(reinterpret_cast<const int64_t*>(id->values)[i]);
    }
    return ids;
  }

  static void CheckBatch(const Batch& b) {
    const BatchColumn* id = b.column("id");
    const BatchColumn* emb = b.column("emb");
    const BatchColumn* name = b.column("name");
    const BatchColumn* tokens = b.column("tokens");
    ASSERT_NE(id, nullptr);
    ASSERT_EQ(b.indices.size(), static_cast<size_t>(b.num_rows));
    ASSERT_EQ(id->values_size, static_cast<size_t>(b.num_rows) * 8);
    for (int64_t i = 0; i < b.num_rows; ++i) {
      const int64_t v = reinterpret_cast<const int64_t*>(id->values)[i];
      if (emb) {
        ASSERT_FLOAT_EQ(reinterpret_cast<const float*>(emb->values)[i * 4 + 3],
                        static_cast<float>(v) + 0.75f);
      }
      if (name) {
        const bool valid = name->validity == nullptr || ((name->validity[i >> 3] >> (i & 7)) & 1);
        ASSERT_EQ(valid, v % 7 != 0) << v;
        if (valid) {
          const std::string s(reinterpret_cast<const char*>(name->values) + name->offsets[i],
                              name->offsets[i + 1] - name->offsets[i]);
          ASSERT_EQ(s, "r" + std::to_string(v));
        }
      }
      if (tokens) {
        ASSERT_EQ(tokens->offsets[i + 1] - tokens->offsets[i], v % 5) << v;
        const int32_t* t = reinterpret_cast<const int32_t*>(tokens->values) + tokens->offsets[i];
        for (int k = 0; k < v % 5; ++k) ASSERT_EQ(t[k], v + k);
      }
    }
  }

  static std::string Bytes(const Batch& b) { return testing_util::BatchBytes(b); }

  static std::vector<int64_t> Sorted(std::vector<int64_t> v) {
    std::sort(v.begin(), v.end());
    return v;
  }
  static std::vector<int64_t> Range(int64_t a, int64_t b) {
    std::vector<int64_t> v;
    for (int64_t i = a; i < b; ++i) v.push_back(i);
    return v;
  }

  io::TempDir tmp_{"fw_loader_test"};
  table::TableOptions topt_;
};

TEST_F(LoaderTest, BatchesAreIdenticalAcrossRunsAndThreadCounts) {
  auto t = MakeTable("t", 500, 3, 0, format::Codec::kZstd);
  std::vector<std::string> reference;
  // The consumer's wait varies too: sleep at once, poll long, automatic.
  const int64_t spins[] = {0, 5000, -1, -1};
  int run = 0;
  for (int threads : {1, 2, 4, 4}) {
    LoaderOptions o;
    o.batch_size = 32;
    o.seed = 17;
    o.num_threads = threads;
    o.consumer_spin_us = spins[run++];
    o.prefetch_bytes = threads == 2 ? (1 << 20) : (64 << 20);  // read-ahead depth varies too
    auto l = Make({t}, o);
    std::vector<std::string> got;
    while (true) {
      auto b = l->Next(absl::Seconds(30));
      ASSERT_TRUE(b.ok()) << b.status();
      if (!*b) break;
      CheckBatch(**b);
      got.push_back(Bytes(**b));
    }
    EXPECT_EQ(got.size(), 16u);  // ceil(500 / 32)
    if (reference.empty()) {
      reference = got;
    } else {
      EXPECT_EQ(got, reference) << threads << " threads";
    }
  }
}

TEST_F(LoaderTest, EveryRowOncePerEpochAcrossRanks) {
  auto t = MakeTable("t", 203);
  for (int w = 1; w <= 4; ++w) {
    std::vector<int64_t> all;
    std::vector<size_t> batches;
    for (int r = 0; r < w; ++r) {
      LoaderOptions o;
      o.batch_size = 7;
      o.seed = 3;
      o.rank = r;
      o.world_size = w;
      auto l = Make({t}, o);
      const int64_t before = static_cast<int64_t>(all.size());
      bool ended = false;
      auto ids = Take(*l, INT64_MAX, &ended);
      EXPECT_TRUE(ended);
      all.insert(all.end(), ids.begin(), ids.end());
      batches.push_back(static_cast<size_t>(l->stats().batches));
      EXPECT_EQ(l->stats().rows, static_cast<int64_t>(all.size()) - before);
      EXPECT_EQ(l->stats().batches, l->batches_per_epoch());
    }
    EXPECT_EQ(Sorted(all), Range(0, 203)) << "world " << w;
    for (size_t b : batches)
      EXPECT_EQ(b, batches[0]) << "every rank yields the same number of batches";
  }
}

TEST_F(LoaderTest, DropLastYieldsOnlyFullBatches) {
  auto t = MakeTable("t", 100, 2);
  LoaderOptions o;
  o.batch_size = 8;
  o.world_size = 3;
  o.rank = 2;
  o.drop_last = true;
  auto l = Make({t}, o);
  EXPECT_EQ(l->batches_per_epoch(), 4);
  int n = 0;
  while (true) {
    auto b = *l->Next(absl::Seconds(30));
    if (!b) break;
    EXPECT_EQ(b->num_rows, 8);
    n++;
  }
  EXPECT_EQ(n, 4);
}

struct Elastic {
  int w1;
  int64_t b1;
  int w2;
  int64_t b2;
};

// A state saved at world W1 / batch B1 resumes at W2 / B2: the samples seen
// before and after are exactly the epoch.
TEST_F(LoaderTest, ElasticResumeServesTheRestOfTheEpochExactlyOnce) {
  auto t = MakeTable("t", 1000);
  for (const Elastic& e : {Elastic{1, 32, 2, 32}, Elastic{2, 32, 3, 32}, Elastic{4, 32, 1, 32},
                           Elastic{2, 32, 2, 48}, Elastic{3, 32, 2, 48}}) {
    SCOPED_TRACE(testing::Message() << e.w1 << "x" << e.b1 << " -> " << e.w2 << "x" << e.b2);
    std::vector<int64_t> seen;
    std::string saved;
    for (int r = 0; r < e.w1; ++r) {
      LoaderOptions o;
      o.batch_size = e.b1;
      o.seed = 77;
      o.rank = r;
      o.world_size = e.w1;
      auto l = Make({t}, o);
      auto ids = Take(*l, 5);
      seen.insert(seen.end(), ids.begin(), ids.end());
      const std::string json = l->state().ToJson();
      if (r == 0) saved = json;
      EXPECT_EQ(json, saved) << "every rank saves the same state";
    }
    auto state = LoaderState::FromJson(saved);
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ(state->consumed, 5 * e.w1 * e.b1);
    for (int r = 0; r < e.w2; ++r) {
      LoaderOptions o;
      o.batch_size = e.b2;
      o.seed = 77;
      o.rank = r;
      o.world_size = e.w2;
      auto l = Make({t}, o);
      ASSERT_TRUE(l->Restore(*state).ok());
      bool ended = false;
      auto ids = Take(*l, INT64_MAX, &ended);
      EXPECT_TRUE(ended);
      seen.insert(seen.end(), ids.begin(), ids.end());
      EXPECT_EQ(l->state().epoch, 1);
      EXPECT_EQ(l->state().consumed, 0);
    }
    EXPECT_EQ(Sorted(seen), Range(0, 1000));
  }
}

TEST_F(LoaderTest, EpochsEndWithNullThenContinueInANewOrder) {
  auto t = MakeTable("t", 50, 1);
  LoaderOptions o;
  o.batch_size = 16;
  o.seed = 5;
  o.num_threads = 2;
  auto l = Make({t}, o);
  bool ended = false;
  auto e0 = Take(*l, INT64_MAX, &ended);
  ASSERT_TRUE(ended);
  EXPECT_EQ(l->state().epoch, 1);
  auto e1 = Take(*l, INT64_MAX, &ended);
  ASSERT_TRUE(ended);
  EXPECT_EQ(Sorted(e0), Range(0, 50));
  EXPECT_EQ(Sorted(e1), Range(0, 50));
  EXPECT_NE(e0, e1);
  // SetEpoch goes back to the start of an epoch: the same order again.
  ASSERT_TRUE(l->SetEpoch(0).ok());
  EXPECT_EQ(Take(*l), e0);
  // Without shuffling, the table order.
  o.shuffle = false;
  auto plain = Make({t}, o);
  EXPECT_EQ(Take(*plain), Range(0, 50));
}

TEST_F(LoaderTest, ResumeMidEpochRepeatsTheSameBatches) {
  auto t = MakeTable("t", 300);
  LoaderOptions o;
  o.batch_size = 20;
  o.seed = 9;
  o.shuffle_mode = ShuffleMode::kBlock;
  o.window_blocks = 4;
  auto a = Make({t}, o);
  Take(*a, 4);
  const LoaderState s = a->state();
  // A page's worth of the first column: 100-row fragments fit one 1 KiB page of int64.
  EXPECT_EQ(s.tables[0].block_rows, 100);
  auto rest = Take(*a);
  auto b = Make({t}, o);
  ASSERT_TRUE(b->Restore(s).ok());
  EXPECT_EQ(Take(*b), rest);
}

TEST_F(LoaderTest, BlockShuffleServesEveryRowOnceAndReadsFewerPages) {
  auto t = MakeTable("t", 2000, 2);
  int64_t pages[2];
  for (int mode = 0; mode < 2; ++mode) {
    LoaderOptions o;
    o.batch_size = 64;
    o.columns = {"id"};
    o.shuffle_mode = mode ? ShuffleMode::kBlock : ShuffleMode::kRow;
    o.block_rows = 32;
    o.window_blocks = 4;
    o.prefetch_bytes = 1 << 20;
    auto l = Make({t}, o);
    std::vector<int64_t> ids;
    pages[mode] = 0;
    while (true) {
      auto b = *l->Next(absl::Seconds(30));
      if (!b) break;
      // Pages of int64 ids: 128 rows each within each 1000-row fragment.
      std::set<std::pair<int64_t, int64_t>> touched;
      for (int64_t i = 0; i < b->num_rows; ++i) {
        const int64_t id = reinterpret_cast<const int64_t*>(b->columns[0].values)[i];
        ids.push_back(id);
        touched.insert({id / 1000, id % 1000 / 128});
      }
      pages[mode] += static_cast<int64_t>(touched.size());
    }
    EXPECT_EQ(Sorted(ids), Range(0, 2000));
    EXPECT_GT(l->stats().pages_fetched + l->stats().page_views, 0);
  }
  // Block mode reads a window's few pages per batch, row mode nearly every page.
  EXPECT_LT(pages[1] * 3, pages[0]) << pages[1] << " vs " << pages[0];
}

TEST_F(LoaderTest, DeletedRowsAreSkipped) {
  auto t = MakeTable("t", 120, 2);
  ASSERT_TRUE(t->Delete({0, 5, 59, 60, 119}).ok());  // ids are the indices before the delete
  LoaderOptions o;
  o.batch_size = 10;
  o.world_size = 2;
  std::vector<int64_t> all;
  for (int r = 0; r < 2; ++r) {
    o.rank = r;
    auto l = Make({t}, o);
    auto ids = Take(*l);
    all.insert(all.end(), ids.begin(), ids.end());
  }
  std::vector<int64_t> want;
  for (int64_t i = 0; i < 120; ++i) {
    if (i != 0 && i != 5 && i != 59 && i != 60 && i != 119) want.push_back(i);
  }
  EXPECT_EQ(Sorted(all), want);
}

TEST_F(LoaderTest, ColumnsAddedLaterReadTheirDefault) {
  auto t = MakeTable("t", 40, 1);
  format::Field score{"score", DataType::Scalar(TypeId::kFloat64), false, -1, "2.5"};
  ASSERT_TRUE(t->AddColumn(score).ok());
  LoaderOptions o;
  o.batch_size = 40;
  o.columns = {"score", "id"};
  auto l = Make({t}, o);
  auto b = *l->Next(absl::Seconds(30));
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->columns[0].name, "score");
  for (int i = 0; i < 40; ++i)
    EXPECT_EQ(reinterpret_cast<const double*>(b->columns[0].values)[i], 2.5);
}

TEST_F(LoaderTest, MixtureFollowsWeightsAndResumesExactly) {
  auto a = MakeTable("a", 300, 2, 0);
  auto b = MakeTable("b", 900, 2, 100000);
  LoaderOptions o;
  o.batch_size = 50;
  o.seed = 21;
  o.mixture_weights = {1, 3};
  o.samples_per_epoch = 4000;
  auto l = Make({a, b}, o);
  EXPECT_EQ(l->epoch_size(), 4000);
  auto first = Take(*l, 40);
  ASSERT_EQ(first.size(), 2000u);
  std::vector<int64_t> from_a, from_b;
  for (int64_t id : first) (id < 100000 ? from_a : from_b).push_back(id);
  const double sd = std::sqrt(2000 * 0.25 * 0.75);
  EXPECT_NEAR(static_cast<double>(from_a.size()), 500, 5 * sd);
  // Each table walks its own order: its first pass serves each row once.
  std::vector<int64_t> pass_a(from_a.begin(), from_a.begin() + 300);
  EXPECT_EQ(Sorted(pass_a), Range(0, 300));
  ASSERT_GT(from_b.size(), 900u);
  std::vector<int64_t> pass_b(from_b.begin(), from_b.begin() + 900);
  EXPECT_EQ(Sorted(pass_b), Range(100000, 100900));
  std::set<int64_t> second_b(from_b.begin() + 900, from_b.end());
  EXPECT_EQ(second_b.size(), from_b.size() - 900) << "the second pass has no repeats either";

  const LoaderState s = l->state();
  ASSERT_TRUE(s.mixture.has_value());
  EXPECT_EQ(s.mixture->drawn[0], static_cast<int64_t>(from_a.size()));
  EXPECT_EQ(s.mixture->drawn[1], static_cast<int64_t>(from_b.size()));
  auto rest = Take(*l, 10);
  auto again = Make({a, b}, o);
  auto restored = LoaderState::FromJson(s.ToJson());
  ASSERT_TRUE(restored.ok()) << restored.status();
  ASSERT_TRUE(again->Restore(*restored).ok());
  EXPECT_EQ(Take(*again, 10), rest);
  // Another weighting is another loader configuration.
  o.mixture_weights = {1, 1};
  auto other = Make({a, b}, o);
  Status st = other->Restore(s);
  EXPECT_TRUE(absl::IsInvalidArgument(st));
  EXPECT_NE(std::string(st.message()).find("mixture.weights"), std::string::npos) << st;
}

TEST_F(LoaderTest, MixtureIsExactlyOnceAcrossRanksAndElastic) {
  auto a = MakeTable("a", 100, 1, 0);
  auto b = MakeTable("b", 100, 1, 100000);
  LoaderOptions o;
  o.batch_size = 16;
  o.seed = 2;
  // Two ranks for 3 batches, then three ranks: the per-position draws and
  // each table's stream positions are the same as one rank reading alone.
  o.world_size = 1;
  auto solo = Make({a, b}, o);
  auto want = Take(*solo);  // 200 positions
  std::vector<int64_t> got;
  std::string saved;
  for (int r = 0; r < 2; ++r) {
    o.world_size = 2;
    o.rank = r;
    auto l = Make({a, b}, o);
    auto ids = Take(*l, 3);
    got.insert(got.end(), ids.begin(), ids.end());
    saved = l->state().ToJson();
  }
  for (int r = 0; r < 3; ++r) {
    o.world_size = 3;
    o.rank = r;
    o.batch_size = 10;
    auto l = Make({a, b}, o);
    ASSERT_TRUE(l->Restore(*LoaderState::FromJson(saved)).ok());
    auto ids = Take(*l);
    got.insert(got.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(Sorted(got), Sorted(want));
}

TEST_F(LoaderTest, OpensByVersionAndTag) {
  auto t = MakeTable("t", 30, 1);
  const int64_t v = t->version();
  ASSERT_TRUE(t->Tag("good").ok());
  ASSERT_TRUE(t->Append(Rows(30, 10)).ok());
  LoaderOptions o;
  o.batch_size = 100;
  o.columns = {"id"};
  auto by_version = Loader::Open({TableRef{tmp_.Sub("t"), v, std::nullopt}}, o, topt_);
  ASSERT_TRUE(by_version.ok()) << by_version.status();
  EXPECT_EQ((*by_version)->epoch_size(), 30);
  auto by_tag = Loader::Open({TableRef{tmp_.Sub("t"), std::nullopt, "good"}}, o, topt_);
  ASSERT_TRUE(by_tag.ok()) << by_tag.status();
  EXPECT_EQ((*by_tag)->state().tables[0].version, v);
  auto latest = Loader::Open({TableRef{tmp_.Sub("t")}}, o, topt_);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ((*latest)->epoch_size(), 40);
  // A state from version v does not resume a loader over the latest version.
  Status st = (*latest)->Restore((*by_version)->state());
  EXPECT_TRUE(absl::IsInvalidArgument(st));
  EXPECT_NE(std::string(st.message()).find("tables[0].version"), std::string::npos) << st;
}

TEST_F(LoaderTest, BadInputGivesClearErrors) {
  auto t = MakeTable("t", 30, 1);
  auto expect = [](const Status& s, absl::StatusCode code, const std::string& text) {
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_NE(std::string(s.message()).find(text), std::string::npos)
        << "'" << text << "' not in: " << s;
  };
  LoaderOptions o;
  o.batch_size = 4;
  o.columns = {"id", "nope"};
  expect(Loader::Create({t}, o).status(), absl::StatusCode::kNotFound, "nope");
  o.columns = {"id", "id"};
  expect(Loader::Create({t}, o).status(), absl::StatusCode::kInvalidArgument, "twice");
  o.columns = {};
  o.batch_size = 0;
  expect(Loader::Create({t}, o).status(), absl::StatusCode::kInvalidArgument, "batch_size");
  o.batch_size = 4;
  o.rank = 2;
  o.world_size = 2;
  expect(Loader::Create({t}, o).status(), absl::StatusCode::kInvalidArgument, "rank");
  o.rank = 0;
  o.num_threads = 0;
  expect(Loader::Create({t}, o).status(), absl::StatusCode::kInvalidArgument, "num_threads");
  o.num_threads = 1;
  o.consumer_spin_us = -2;
  expect(Loader::Create({t}, o).status(), absl::StatusCode::kInvalidArgument, "consumer_spin_us");
  o.consumer_spin_us = -1;
  o.prefetch_bytes = 10;
  expect(Loader::Create({t}, o).status(), absl::StatusCode::kInvalidArgument, "prefetch_bytes");
  o.prefetch_bytes = 1 << 20;
  o.mixture_weights = {1, 2};
  expect(Loader::Create({t}, o).status(), absl::StatusCode::kInvalidArgument, "mixture weights");
  o.mixture_weights = {};
  o.samples_per_epoch = 5;
  expect(Loader::Create({t}, o).status(), absl::StatusCode::kInvalidArgument, "samples_per_epoch");
  o.samples_per_epoch = 0;
  expect(Loader::Create({}, o).status(), absl::StatusCode::kInvalidArgument, "no tables");
  expect(Loader::Open({TableRef{tmp_.Sub("t"), 99, std::nullopt}}, o, topt_).status(),
         absl::StatusCode::kNotFound, "99");
  expect(Loader::Open({TableRef{tmp_.Sub("t"), std::nullopt, "missing"}}, o, topt_).status(),
         absl::StatusCode::kNotFound, "missing");
  expect(Loader::Open({TableRef{tmp_.Sub("t"), 1, "x"}}, o, topt_).status(),
         absl::StatusCode::kInvalidArgument, "not both");
  expect(Loader::Open({TableRef{tmp_.Sub("nowhere")}}, o, topt_).status(),
         absl::StatusCode::kNotFound, "nowhere");
  // Mixtures need the columns with the same types in every table.
  auto other = *table::Table::Create(tmp_.Sub("o"), *format::Schema::Parse("id:int32"), topt_);
  ASSERT_TRUE(other
                  ->Append(RecordBatch{other->schema(),
                                       {format::MakeFixedColumn(DataType::Scalar(TypeId::kInt32),
                                                                std::vector<int32_t>{1})},
                                       1})
                  .ok());
  o.columns = {"id"};
  expect(Loader::Create({t, other}, o).status(), absl::StatusCode::kInvalidArgument, "int32");
  // A state of another seed.
  o.columns = {};
  auto l = Make({t}, o);
  LoaderState s = l->state();
  s.seed = 1234;
  expect(l->Restore(s), absl::StatusCode::kInvalidArgument, "seed");
  s = l->state();
  s.consumed = 31;
  expect(l->Restore(s), absl::StatusCode::kInvalidArgument, "consumed");
  expect(l->SetEpoch(-1), absl::StatusCode::kInvalidArgument, "epoch");
}

TEST_F(LoaderTest, CorruptPageErrorNamesTableFragmentAndPage) {
  auto t = MakeTable("t", 400, 1);
  // Find page 1 of column 'emb' and damage one byte of it.
  auto src = t->OpenColumn(0, "emb");
  ASSERT_TRUE(src.ok()) << src.status();
  const auto& pi = src->reader->pages(src->column).at(1);
  const std::string path = src->reader->path();
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(pi.offset + 5));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(pi.offset + 5));
    f.write(&c, 1);
  }
  LoaderOptions o;
  o.batch_size = 400;
  o.shuffle = false;
  auto l = Loader::Open({TableRef{tmp_.Sub("t")}}, o, topt_);
  ASSERT_TRUE(l.ok()) << l.status();
  auto b = (*l)->Next(absl::Seconds(30));
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(absl::IsDataLoss(b.status())) << b.status();
  const std::string msg(b.status().message());
  EXPECT_NE(msg.find(tmp_.Sub("t")), std::string::npos) << msg;
  EXPECT_NE(msg.find("fragment"), std::string::npos) << msg;
  EXPECT_NE(msg.find("page 1"), std::string::npos) << msg;
  // The position did not move: the next call fails the same way, no hang.
  EXPECT_EQ((*l)->state().consumed, 0);
  EXPECT_TRUE(absl::IsDataLoss((*l)->Next(absl::Seconds(30)).status()));
}

TEST_F(LoaderTest, BatchesOutliveTheLoaderAndCancelStopsNext) {
  auto t = MakeTable("t", 100, 1);
  LoaderOptions o;
  o.batch_size = 10;
  std::shared_ptr<const Batch> held;
  {
    auto l = Make({t}, o);
    held = *l->Next(absl::Seconds(30));
    l->Cancel();
    EXPECT_TRUE(absl::IsCancelled(l->Next(absl::Seconds(1)).status()));
  }
  ASSERT_NE(held, nullptr);
  CheckBatch(*held);
  EXPECT_EQ(held->num_rows, 10);
}

TEST_F(LoaderTest, HeldBatchesKeepTheirContentsWhileLaterOnesAreFilled) {
  auto t = MakeTable("t", 200, 2);
  LoaderOptions o;
  o.batch_size = 10;
  o.prefetch_bytes = 1 << 20;
  auto l = Make({t}, o);
  std::vector<std::shared_ptr<const Batch>> all;
  std::vector<std::string> bytes;
  while (true) {
    auto b = *l->Next(absl::Seconds(30));
    if (!b) break;
    bytes.push_back(Bytes(*b));
    all.push_back(std::move(b));
  }
  ASSERT_EQ(all.size(), 20u);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(Bytes(*all[i]), bytes[i]) << i;
  const LoaderStats s = l->stats();
  EXPECT_EQ(s.batches, 20);
  EXPECT_EQ(s.rows, 200);
  EXPECT_GT(s.bytes, 0);
  EXPECT_GE(s.readahead_batches, 1);
  EXPECT_GE(s.assemble_seconds, 0);
}

}  // namespace
}  // namespace flywheel::loader
