#include "flywheel/replay/checkpoint.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include "flywheel/table/table.h"
#include "flywheel/io/temp_dir.h"

namespace flywheel::replay {
namespace {

using format::DataType;
using format::TypeId;

std::shared_ptr<io::FileSystem> ScratchFs() {
  return io::PosixFileSystem(io::PosixOptions{.sync = false});
}

// ---------------------------------------------------------------- data

// An episode of `num_chunks` chunks of 4 steps each, two columns:
// "obs" float32[3] with obs[s] = (s, s + 0.5, -s) and "act" int64 with
// act[s] = s, for s the step number (first_step + index).
struct Episode {
  int64_t first_step = 0;
  std::vector<ChunkRef> obs, act;
};

Episode MakeEpisode(ChunkKey first_key, int64_t first_step, int num_chunks) {
  Episode e;
  e.first_step = first_step;
  for (int c = 0; c < num_chunks; ++c) {
    std::vector<float> obs;
    std::vector<int64_t> act;
    for (int j = 0; j < 4; ++j) {
      const int64_t s = first_step + c * 4 + j;
      obs.insert(obs.end(),
                 {static_cast<float>(s), static_cast<float>(s) + 0.5f, -static_cast<float>(s)});
      act.push_back(s);
    }
    e.obs.push_back(
        *Chunk::Make(first_key + 2 * c, DataType::Tensor(TypeId::kFloat32, {3}), 4, obs.data()));
    e.act.push_back(*Chunk::Make(first_key + 2 * c + 1, DataType::Scalar(TypeId::kInt64), 4,
                                 act.data(), format::Codec::kZstd));
  }
  return e;
}

// Steps [start, start+len) of the episode (relative to its first step), so
// windows that overlap share chunks.
TrajectoryColumn Window(const std::string& name, const std::vector<ChunkRef>& chunks, int64_t start,
                        int64_t len) {
  TrajectoryColumn col;
  col.name = name;
  for (int64_t c = start / 4; c <= (start + len - 1) / 4; ++c) col.chunks.push_back(chunks[c]);
  col.offset = start % 4;
  col.length = len;
  return col;
}

Item WindowItem(const Episode& e, ItemKey key, int64_t start, int64_t len, double priority) {
  return Item{
      key, priority, 0, {Window("obs", e.obs, start, len), Window("act", e.act, start, len)}};
}

Signature EpisodeSignature() {
  return Signature{{{"obs", DataType::Tensor(TypeId::kFloat32, {3})},
                    {"act", DataType::Scalar(TypeId::kInt64)}}};
}

// What a table holds, comparable: key -> (priority, times_sampled, columns).
struct ColumnView {
  std::string name;
  std::vector<ChunkKey> chunks;
  int64_t offset, length;
  bool operator==(const ColumnView&) const = default;
};
struct ItemView {
  double priority;
  int32_t times_sampled;
  std::vector<ColumnView> columns;
  bool operator==(const ItemView&) const = default;
};
using Contents = std::map<ItemKey, ItemView>;

Contents ContentsOf(const ReplayTable& t) {
  Contents out;
  for (const auto& s : t.TakeSnapshot().items) {
    ItemView v{s.priority, s.times_sampled, {}};
    for (const auto& c : s.item->columns) {
      ColumnView cv{c.name, {}, c.offset, c.length};
      for (const auto& ch : c.chunks) cv.chunks.push_back(ch->key());
      v.columns.push_back(std::move(cv));
    }
    out.emplace(s.key, std::move(v));
  }
  return out;
}

// Everything a restore must reproduce.
struct TableState {
  Contents contents;
  int64_t max_size;
  int32_t max_times_sampled;
  std::string sampler, remover;
  RateLimiterOptions limiter_options;
  RateLimiterState limiter;
};

TableState StateOf(const ReplayTable& t) {
  const TableInfo info = t.Info();
  return TableState{ContentsOf(t), info.max_size, info.max_times_sampled,
                    info.sampler,  info.remover,  info.limiter_options,
                    info.limiter};
}

void ExpectSameState(const TableState& want, const ReplayTable& got) {
  SCOPED_TRACE("table " + got.name());
  const TableState have = StateOf(got);
  EXPECT_EQ(have.max_size, want.max_size);
  EXPECT_EQ(have.max_times_sampled, want.max_times_sampled);
  EXPECT_EQ(have.sampler, want.sampler);
  EXPECT_EQ(have.remover, want.remover);
  EXPECT_EQ(have.limiter_options.samples_per_insert, want.limiter_options.samples_per_insert);
  EXPECT_EQ(have.limiter_options.min_size_to_sample, want.limiter_options.min_size_to_sample);
  EXPECT_EQ(have.limiter_options.min_diff, want.limiter_options.min_diff);
  EXPECT_EQ(have.limiter_options.max_diff, want.limiter_options.max_diff);
  EXPECT_EQ(have.limiter.inserts, want.limiter.inserts);
  EXPECT_EQ(have.limiter.deletes, want.limiter.deletes);
  EXPECT_EQ(have.limiter.samples, want.limiter.samples);
  ASSERT_EQ(have.contents.size(), want.contents.size());
  EXPECT_TRUE(have.contents == want.contents);
}

std::unique_ptr<ReplayTable> MakeTable(ReplayTableOptions o) {
  auto t = ReplayTable::Create(std::move(o));
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_ + "/ckpt";
    options_.fs = ScratchFs();
    restore_.fs = options_.fs;
  }

  io::TempDir tmp_{"fw_replay_ckpt_test"};
  std::string dir_ = tmp_.path();
  std::string root_;
  CheckpointOptions options_;
  RestoreOptions restore_;
};

// Three tables that share one episode's chunks through overlapping windows.
struct ThreeTables {
  Episode episode;
  std::unique_ptr<ReplayTable> uniform, prioritized, queue;
  std::vector<ReplayTable*> all() { return {uniform.get(), prioritized.get(), queue.get()}; }
};

ThreeTables MakeThreeTables() {
  ThreeTables t;
  t.episode = MakeEpisode(/*first_key=*/1000, /*first_step=*/0, /*num_chunks=*/16);
  ReplayTableOptions u;
  u.name = "uniform";
  u.max_size = 500;
  u.rate_limiter = RateLimiterOptions::SampleToInsertRatio(2.0, 10, 200.0);
  u.signature = EpisodeSignature();
  t.uniform = MakeTable(std::move(u));
  ReplayTableOptions p;
  p.name = "prioritized";
  p.sampler = NewPrioritizedSelector(0.6);
  p.remover = NewMinHeapSelector();
  p.max_size = 40;  // inserts beyond evict the lowest priorities
  p.rate_limiter = RateLimiterOptions::MinSize(3);
  t.prioritized = MakeTable(std::move(p));
  ReplayTableOptions q;
  q.name = "queue";
  q.sampler = NewFifoSelector();
  q.remover = NewFifoSelector();
  q.max_size = 100;
  q.max_times_sampled = 1;
  q.rate_limiter = RateLimiterOptions::Queue(100);
  t.queue = MakeTable(std::move(q));

  // Windows of 3..6 steps starting at every step: neighbours share chunks,
  // and the same chunks are referenced from all three tables.
  for (int64_t s = 0; s + 6 <= 64; ++s) {
    const ItemKey k = static_cast<ItemKey>(s + 1);
    EXPECT_TRUE(t.uniform->Insert(WindowItem(t.episode, k, s, 3 + s % 4, 1.0)).ok());
    EXPECT_TRUE(
        t.prioritized->Insert(WindowItem(t.episode, 100 + k, s, 2, 0.25 + (s * 37 % 11))).ok());
    if (s < 30) {
      EXPECT_TRUE(t.queue->Insert(WindowItem(t.episode, 200 + k, s, 5, 1.0)).ok());
    }
  }
  for (int i = 0; i < 25; ++i) EXPECT_TRUE(t.uniform->Sample(absl::Seconds(1)).ok());
  for (int i = 0; i < 40; ++i) EXPECT_TRUE(t.prioritized->Sample(absl::Seconds(1)).ok());
  for (int i = 0; i < 7; ++i) EXPECT_TRUE(t.queue->Sample(absl::Seconds(1)).ok());
  EXPECT_TRUE(
      t.prioritized->MutatePriorities({{101 + 50, 3.75}, {101 + 40, 0.0}}, {101 + 55}).ok());
  return t;
}

// ---------------------------------------------------------------- tests

TEST(CheckpointSelectorTest, EveryDescribeParsesBackToTheSameSelector) {
  std::vector<std::unique_ptr<ItemSelector>> all;
  all.push_back(NewUniformSelector());
  all.push_back(NewPrioritizedSelector(0.6));
  all.push_back(NewPrioritizedSelector(0));
  all.push_back(NewPrioritizedSelector(1.25));
  all.push_back(NewPrioritizedSelector(0.123456789012345678));  // needs all 17 digits
  all.push_back(NewPrioritizedSelector(1e-300));
  all.push_back(NewFifoSelector());
  all.push_back(NewLifoSelector());
  all.push_back(NewMinHeapSelector());
  all.push_back(NewMaxHeapSelector());
  for (const auto& s : all) {
    auto parsed = SelectorFromDescription(s->Describe());
    ASSERT_TRUE(parsed.ok()) << s->Describe() << ": " << parsed.status();
    EXPECT_EQ((*parsed)->Describe(), s->Describe());
  }
  EXPECT_EQ(NewPrioritizedSelector(0.6)->Describe(), "Prioritized(priority_exponent=0.6)");
  EXPECT_EQ(NewPrioritizedSelector(0.1 + 0.2)->Describe(),
            "Prioritized(priority_exponent=0.30000000000000004)");
  for (const char* bad :
       {"", "uniform", "Prioritized(priority_exponent=)", "Prioritized(priority_exponent=-1)",
        "Prioritized(priority_exponent=nan)", "Prioritized(priority_exponent=1x)",
        "Prioritized(priority_exponent= 1)", "Prioritized(priority_exponent=inf)", "Fifo "}) {
    auto parsed = SelectorFromDescription(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status())) << bad;
    EXPECT_NE(std::string(parsed.status().message()).find(std::string("\"") + bad + "\""),
              std::string::npos)
        << parsed.status();
  }
}

TEST(CheckpointSelectorTest, SignatureJsonRoundTripsAndRejectsBadInput) {
  const Signature sig = EpisodeSignature();
  auto json = SignatureToJson(sig);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(*json, R"([{"name":"obs","type":"float32[3]"},{"name":"act","type":"int64"}])");
  auto back = SignatureFromJson(*json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->columns, sig.columns);
  EXPECT_TRUE(absl::IsInvalidArgument(SignatureFromJson("{").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(SignatureFromJson(R"([{"name":"x"}])").status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(SignatureFromJson(R"([{"name":"x","type":"float99"}])").status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(SignatureToJson(Signature{{{"\xff", DataType::String()}}}).status()));
}

TEST_F(CheckpointTest, RoundTripRestoresItemsPrioritiesTimesSampledSignatureAndLimiter) {
  ThreeTables t = MakeThreeTables();
  std::vector<TableState> before;
  for (ReplayTable* table : t.all()) before.push_back(StateOf(*table));
  ASSERT_GT(before[1].limiter.deletes, 0);  // the prioritized table evicted

  auto ck = Checkpoint(t.all(), root_, options_);
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ(ck->id, 1);
  EXPECT_EQ(ck->path, root_ + "/00000000000000000001");
  EXPECT_EQ(ck->num_items,
            static_cast<int64_t>(before[0].contents.size() + before[1].contents.size() +
                                 before[2].contents.size()));
  EXPECT_EQ(ck->num_chunks, 32);  // the episode's chunks, each once
  ASSERT_EQ(ck->pauses.size(), 3u);
  EXPECT_EQ(ck->pauses[1].first, "prioritized");
  EXPECT_GE(ck->max_pause, ck->pauses[2].second);

  auto restored = Restore(root_, kLatestCheckpoint, restore_);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->id, 1);
  ASSERT_EQ(restored->tables.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(restored->tables[i]->name(), t.all()[i]->name());
    ExpectSameState(before[i], *restored->tables[i]);
  }
  ASSERT_TRUE(restored->signatures.at("uniform").has_value());
  EXPECT_EQ(restored->signatures.at("uniform")->columns, EpisodeSignature().columns);
  EXPECT_FALSE(restored->signatures.at("queue").has_value());

  // Chunks are rebuilt once and shared between items and tables.
  std::map<ChunkKey, const Chunk*> seen;
  for (const auto& table : restored->tables) {
    for (const auto& s : table->TakeSnapshot().items) {
      for (const auto& col : s.item->columns) {
        for (const auto& c : col.chunks) {
          auto [it, inserted] = seen.emplace(c->key(), c.get());
          EXPECT_EQ(it->second, c.get()) << "chunk " << c->key() << " restored twice";
        }
      }
      // And decode to the original steps.
      const auto& obs = s.item->columns[0];
      std::vector<float> got(static_cast<size_t>(obs.length) * 3);
      ASSERT_TRUE(obs.Decode(got.data()).ok());
      const int64_t first =
          static_cast<int64_t>(obs.chunks.front()->key() - 1000) / 2 * 4 + obs.offset;
      for (int64_t j = 0; j < obs.length; ++j)
        EXPECT_EQ(got[j * 3 + 1], static_cast<float>(first + j) + 0.5f);
    }
  }
  EXPECT_EQ(seen.size(), 32u);

  // The restored tables behave as the originals: the signature is enforced,
  // the queue continues in order, the limiter counts on.
  float f = 0;
  auto wrong = *Chunk::Make(1, DataType::Scalar(TypeId::kFloat32), 1, &f);
  EXPECT_TRUE(absl::IsInvalidArgument(
      restored->tables[0]->Insert(Item{999, 1, 0, {TrajectoryColumn{"obs", {wrong}, 0, 1}}})));
  for (int i = 0; i < 5; ++i) {
    auto a = t.queue->Sample(absl::Seconds(1));
    auto b = restored->tables[2]->Sample(absl::Seconds(1));
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->item->key, b->item->key);
    EXPECT_EQ(b->times_sampled, 1);
  }
  // Prioritized probabilities follow the restored priorities.
  auto p = restored->tables[1]->Sample(absl::Seconds(1));
  ASSERT_TRUE(p.ok());
  double sum = 0;
  for (const auto& [k, v] : before[1].contents) sum += std::pow(v.priority, 0.6);
  EXPECT_NEAR(p->probability, std::pow(before[1].contents.at(p->item->key).priority, 0.6) / sum,
              1e-12);
  EXPECT_EQ(p->times_sampled, before[1].contents.at(p->item->key).times_sampled + 1);
}

TEST_F(CheckpointTest, SmallBatchesSplitItemsAcrossCommitsAndStillRoundTrip) {
  ThreeTables t = MakeThreeTables();
  std::vector<TableState> before;
  for (ReplayTable* table : t.all()) before.push_back(StateOf(*table));
  options_.max_batch_rows = 7;
  options_.max_batch_bytes = 100;
  auto ck = Checkpoint(t.all(), root_, options_);
  ASSERT_TRUE(ck.ok()) << ck.status();
  table::TableOptions topts;
  topts.fs = options_.fs;
  auto items = table::Table::Open(ck->path + "/items", {}, topts);
  ASSERT_TRUE(items.ok()) << items.status();
  // Create, then one append per batch of 3 items (6 rows: an item's two
  // rows are never split).
  EXPECT_EQ((*items)->version(), 1 + (ck->num_items + 2) / 3);
  auto restored = Restore(root_, ck->id, restore_);
  ASSERT_TRUE(restored.ok()) << restored.status();
  for (size_t i = 0; i < 3; ++i) ExpectSameState(before[i], *restored->tables[i]);
}

TEST_F(CheckpointTest, CheckpointTablesAreOrdinaryFlywheelTables) {
  ThreeTables t = MakeThreeTables();
  auto ck = Checkpoint(t.all(), root_, options_);
  ASSERT_TRUE(ck.ok()) << ck.status();
  table::TableOptions topts;
  topts.fs = options_.fs;

  auto items = table::Table::Open(ck->path + "/items", {}, topts);
  ASSERT_TRUE(items.ok()) << items.status();
  EXPECT_EQ((*items)->schema().ToString(),
            "table:string, key:uint64, priority:float64, times_sampled:int32, column_index:int32, "
            "column:string, "
            "chunk_keys:list<uint64>, offset:int64, length:int64");
  EXPECT_EQ((*items)->num_rows(), 2 * ck->num_items);  // two columns per item
  auto it = *(*items)->Scan();
  std::set<std::tuple<std::string, ItemKey, std::string>> rows;
  while (true) {
    auto b = *it->Next();
    if (!b) break;
    for (int64_t r = 0; r < b->num_rows; ++r) {
      rows.emplace(std::string(b->columns[0].GetBytes(r)), b->columns[1].values.as<uint64_t>()[r],
                   std::string(b->columns[5].GetBytes(r)));
    }
  }
  EXPECT_EQ(static_cast<int64_t>(rows.size()), 2 * ck->num_items);
  EXPECT_TRUE(rows.contains({"uniform", 1, "obs"}));
  for (const auto& [key, item] : ContentsOf(*t.prioritized))
    EXPECT_TRUE(rows.contains({"prioritized", key, "act"}));

  auto chunks = table::Table::Open(ck->path + "/chunks", {}, topts);
  ASSERT_TRUE(chunks.ok()) << chunks.status();
  EXPECT_EQ((*chunks)->num_rows(), 32);
  auto one = (*chunks)->Take({0}, {"key", "step_type", "num_steps", "codec"});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->columns[0].values.as<uint64_t>()[0], 1000u);
  EXPECT_EQ(one->columns[1].GetBytes(0), "float32[3]");
  EXPECT_EQ(one->columns[2].values.as<int64_t>()[0], 4);
  EXPECT_EQ(one->columns[3].GetBytes(0), "lz4");

  auto tables = table::Table::Open(ck->path + "/tables", {}, topts);
  ASSERT_TRUE(tables.ok()) << tables.status();
  auto all = (*tables)->Take({0, 1, 2}, {"name", "sampler", "remover", "inserts", "signature"});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->columns[0].GetBytes(1), "prioritized");
  EXPECT_EQ(all->columns[1].GetBytes(1), "Prioritized(priority_exponent=0.6)");
  EXPECT_EQ(all->columns[2].GetBytes(1), "MinHeap");
  EXPECT_EQ(all->columns[3].values.as<int64_t>()[2], t.queue->Info().limiter.inserts);
  ASSERT_TRUE(all->columns[4].IsValid(0));  // "uniform" was created with a signature
  EXPECT_NE(std::string(all->columns[4].GetBytes(0)).find("\"type\":\"float32[3]\""), std::string::npos)
      << all->columns[4].GetBytes(0);
  EXPECT_FALSE(all->columns[4].IsValid(2));  // "queue" has none
}

TEST_F(CheckpointTest, LatestSkipsADirectoryWithoutMarkerAndTheNextCheckpointRemovesIt) {
  ThreeTables t = MakeThreeTables();
  ASSERT_TRUE(Checkpoint(t.all(), root_, options_).ok());
  const TableState first = StateOf(*t.uniform);
  ASSERT_TRUE(t.uniform->Insert(WindowItem(t.episode, 5000, 0, 2, 1.0)).ok());
  auto second = Checkpoint(t.all(), root_, options_);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->id, 2);
  // A checkpoint cut short before its marker: everything but the marker.
  ASSERT_TRUE(options_.fs->Delete(second->path + "/CHECKPOINT").ok());

  auto latest = Restore(root_, kLatestCheckpoint, restore_);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->id, 1);
  ExpectSameState(first, *latest->tables[0]);
  auto explicit2 = Restore(root_, 2, restore_);
  EXPECT_TRUE(absl::IsNotFound(explicit2.status())) << explicit2.status();
  EXPECT_NE(std::string(explicit2.status().message()).find("incomplete"), std::string::npos);
  EXPECT_TRUE(absl::IsNotFound(Restore(root_, 7, restore_).status()));
  EXPECT_TRUE(absl::IsNotFound(Restore(dir_ + "/nothing", kLatestCheckpoint, restore_).status()));

  auto third = Checkpoint(t.all(), root_, options_);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->id, 3);  // ids are never reused
  EXPECT_EQ(third->deleted, std::vector<int64_t>{2});
  auto listing = ListCheckpoints(root_, options_.fs);
  ASSERT_TRUE(listing.ok());
  ASSERT_EQ(listing->size(), 2u);
  EXPECT_EQ((*listing)[0].id, 1);
  EXPECT_EQ((*listing)[1].id, 3);
  EXPECT_TRUE((*listing)[0].complete && (*listing)[1].complete);
}

TEST_F(CheckpointTest, MissingChunkIsDataLossNamingTheChunk) {
  ThreeTables t = MakeThreeTables();
  auto ck = Checkpoint(t.all(), root_, options_);
  ASSERT_TRUE(ck.ok()) << ck.status();
  // Delete chunk 1006 from the chunks table and point the marker at that
  // version, as a buggy or tampered writer would.
  table::TableOptions topts;
  topts.fs = options_.fs;
  auto chunks = *table::Table::Open(ck->path + "/chunks", {}, topts);
  auto keys = *chunks->Take({0, 1, 2, 3, 4, 5, 6, 7}, {"key"});
  int64_t row = -1;
  for (int64_t r = 0; r < keys.num_rows; ++r) {
    if (keys.columns[0].values.as<uint64_t>()[r] == 1006) row = r;
  }
  ASSERT_GE(row, 0);
  ASSERT_TRUE(chunks->Delete({row}).ok());
  const std::string marker_path = ck->path + "/CHECKPOINT";
  auto marker = nlohmann::json::parse(*options_.fs->ReadFile(marker_path));
  marker["tables"]["chunks"]["version"] = chunks->version();
  marker["tables"]["chunks"]["num_rows"] = chunks->num_rows();
  ASSERT_TRUE(options_.fs->Delete(marker_path).ok());
  ASSERT_TRUE(options_.fs->PutIfAbsent(marker_path, marker.dump()).ok());

  auto r = Restore(root_, kLatestCheckpoint, restore_);
  EXPECT_TRUE(absl::IsDataLoss(r.status())) << r.status();
  EXPECT_NE(std::string(r.status().message()).find("references chunk 1006"), std::string::npos)
      << r.status();
  EXPECT_NE(std::string(r.status().message()).find("checkpoint 1"), std::string::npos)
      << r.status();

  // A marker whose row count disagrees with its table is DataLoss too.
  marker["tables"]["items"]["num_rows"] = 3;
  ASSERT_TRUE(options_.fs->Delete(marker_path).ok());
  ASSERT_TRUE(options_.fs->PutIfAbsent(marker_path, marker.dump()).ok());
  EXPECT_TRUE(absl::IsDataLoss(Restore(root_, 1, restore_).status()));
  // So is a marker that is not JSON; a newer format is FailedPrecondition.
  ASSERT_TRUE(options_.fs->Delete(marker_path).ok());
  ASSERT_TRUE(options_.fs->PutIfAbsent(marker_path, "{garbage").ok());
  EXPECT_TRUE(absl::IsDataLoss(Restore(root_, 1, restore_).status()));
  marker["format_version"] = 2;
  ASSERT_TRUE(options_.fs->Delete(marker_path).ok());
  ASSERT_TRUE(options_.fs->PutIfAbsent(marker_path, marker.dump()).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(Restore(root_, 1, restore_).status()));
}

TEST_F(CheckpointTest, RetentionKeepsTheLastN) {
  ThreeTables t = MakeThreeTables();
  options_.keep_last = 2;
  std::vector<std::vector<int64_t>> deleted;
  for (int i = 0; i < 4; ++i) {
    auto ck = Checkpoint(t.all(), root_, options_);
    ASSERT_TRUE(ck.ok()) << ck.status();
    EXPECT_EQ(ck->id, i + 1);
    deleted.push_back(ck->deleted);
  }
  EXPECT_EQ(deleted, (std::vector<std::vector<int64_t>>{{}, {}, {1}, {2}}));
  auto listing = ListCheckpoints(root_, options_.fs);
  ASSERT_TRUE(listing.ok()) << listing.status();
  ASSERT_EQ(listing->size(), 2u);
  EXPECT_EQ((*listing)[0].id, 3);
  EXPECT_EQ((*listing)[1].id, 4);
  EXPECT_TRUE(Restore(root_, 3, restore_).ok());
  EXPECT_TRUE(absl::IsNotFound(Restore(root_, 2, restore_).status()));
  options_.keep_last = 0;  // keep everything
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Checkpoint(t.all(), root_, options_).ok());
  auto all = ListCheckpoints(root_, options_.fs);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), 4u);
}

TEST_F(CheckpointTest, BadArgumentsAreInvalidArgument) {
  ThreeTables t = MakeThreeTables();
  EXPECT_TRUE(
      absl::IsInvalidArgument(Checkpoint({t.uniform.get(), nullptr}, root_, options_).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      Checkpoint({t.uniform.get(), t.uniform.get()}, root_, options_).status()));
  CheckpointOptions o = options_;
  o.keep_last = -1;
  EXPECT_TRUE(absl::IsInvalidArgument(Checkpoint(t.all(), root_, o).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Restore(root_, -7, restore_).status()));
  auto listing = ListCheckpoints(root_, options_.fs);
  ASSERT_TRUE(listing.ok()) << listing.status();
  EXPECT_TRUE(listing->empty());  // nothing was written
  // An empty set of tables is a valid (empty) checkpoint.
  auto empty = Checkpoint({}, root_, options_);
  ASSERT_TRUE(empty.ok()) << empty.status();
  auto r = Restore(root_, kLatestCheckpoint, restore_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->tables.empty());
}

// Items for the concurrency and kill tests: item k has column "x", steps
// [2*(k%2), 2*(k%2)+2) of chunk k/2 (so pairs of items share a chunk), and
// column "y", all 4 steps of it; chunk steps are float32[kWidth] rows filled
// with `chunk*4 + step + 0.001*j`.
constexpr int kWidth = 16;
ChunkRef PairChunk(ChunkKey c) {
  std::vector<float> v(4 * kWidth);
  for (int s = 0; s < 4; ++s) {
    for (int j = 0; j < kWidth; ++j) v[s * kWidth + j] = static_cast<float>(c * 4 + s) + 0.001f * j;
  }
  return *Chunk::Make(c, DataType::Tensor(TypeId::kFloat32, {kWidth}), 4, v.data());
}
Item PairItem(ItemKey k, const ChunkRef& chunk) {
  return Item{k,
              1.0 + static_cast<double>(k % 7),
              0,
              {TrajectoryColumn{"x", {chunk}, static_cast<int64_t>(2 * (k % 2)), 2},
               TrajectoryColumn{"y", {chunk}, 0, 4}}};
}
// Whether `item` decodes to the steps PairItem(k) was made with.
bool PairItemIntact(const Item& item) {
  if (item.columns.size() != 2 || item.columns[0].name != "x" || item.columns[1].name != "y") {
    return false;
  }
  const ItemKey c = item.key / 2;
  for (const auto& col : item.columns) {
    if (col.chunks.size() != 1 || col.chunks[0]->key() != c) return false;
  }
  std::vector<float> x(2 * kWidth), y(4 * kWidth);
  if (!item.columns[0].Decode(x.data()).ok() || !item.columns[1].Decode(y.data()).ok())
    return false;
  const int64_t s0 = 2 * static_cast<int64_t>(item.key % 2);
  return x[0] == static_cast<float>(c * 4 + s0) &&
         x[kWidth + 1] == static_cast<float>(c * 4 + s0 + 1) + 0.001f &&
         y[3 * kWidth + 2] == static_cast<float>(c * 4 + 3) + 0.002f;
}

// Checks that checkpoint `path` is self-consistent when read as plain
// flywheel tables: every chunk an item references is in the chunks table.
// Returns the items table's rows; `*straddles` counts scan batches that
// begin inside an item (column_index != 0), which Restore must handle.
int64_t ExpectSelfConsistent(const std::string& path, const std::shared_ptr<io::FileSystem>& fs,
                             int64_t* straddles) {
  table::TableOptions topts;
  topts.fs = fs;
  std::set<ChunkKey> have;
  auto chunks = *table::Table::Open(path + "/chunks", {}, topts);
  auto it = *chunks->Scan(table::ScanOptions{{"key"}, 0});
  while (auto b = *it->Next()) {
    for (int64_t r = 0; r < b->num_rows; ++r) have.insert(b->columns[0].values.as<uint64_t>()[r]);
  }
  auto items = *table::Table::Open(path + "/items", {}, topts);
  auto it2 = *items->Scan();  // all columns, as Restore reads them
  const int keys = items->schema().FieldIndex("chunk_keys");
  const int index = items->schema().FieldIndex("column_index");
  int64_t missing = 0;
  while (auto b = *it2->Next()) {
    const auto& col = b->columns[keys];
    for (int64_t j = col.offsets_data()[0]; j < col.offsets_data()[b->num_rows]; ++j) {
      missing += have.contains(col.values.as<uint64_t>()[j]) ? 0 : 1;
    }
    if (b->num_rows > 0 && b->columns[index].values.as<int32_t>()[0] != 0) ++*straddles;
  }
  EXPECT_EQ(missing, 0) << path;
  return items->num_rows();
}

TEST_F(CheckpointTest, CheckpointWhileTwoWritersAndTwoSamplersRun) {
  ReplayTableOptions o;
  o.name = "busy";
  o.max_size = 20000;
  o.rate_limiter = RateLimiterOptions::MinSize(100);
  auto t = MakeTable(std::move(o));
  constexpr ItemKey kPrefill = 20000;
  for (ItemKey k = 0; k < kPrefill; k += 2) {
    ChunkRef c = PairChunk(k / 2);
    ASSERT_TRUE(t->Insert(PairItem(k, c)).ok());
    ASSERT_TRUE(t->Insert(PairItem(k + 1, c)).ok());
  }
  std::atomic<bool> stop{false};
  std::atomic<ItemKey> next_pair{kPrefill / 2};
  std::atomic<int64_t> inserted{0}, sampled{0}, failures{0};
  std::atomic<int64_t> max_insert_us{0};  // slowest single Insert() seen by a writer
  auto note_max = [](std::atomic<int64_t>& m, absl::Duration d) {
    const int64_t us = absl::ToInt64Microseconds(d);
    int64_t cur = m.load();
    while (us > cur && !m.compare_exchange_weak(cur, us)) {
    }
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&] {
      while (!stop.load()) {
        const ItemKey pair = next_pair.fetch_add(1);
        ChunkRef c = PairChunk(pair);
        for (ItemKey k : {2 * pair, 2 * pair + 1}) {
          const absl::Time before = absl::Now();
          const bool ok = t->Insert(PairItem(k, c), absl::Seconds(5)).ok();
          note_max(max_insert_us, absl::Now() - before);
          if (ok) {
            inserted++;
          } else {
            failures++;
          }
        }
      }
    });
  }
  for (int s = 0; s < 2; ++s) {
    threads.emplace_back([&, s] {
      while (!stop.load()) {
        auto b = t->SampleBatch(8, /*flexible=*/true, absl::Seconds(5));
        if (!b.ok()) {
          failures++;
          continue;
        }
        sampled += static_cast<int64_t>(b->size());
        std::vector<std::pair<ItemKey, double>> updates;
        for (const auto& item : *b) updates.emplace_back(item.item->key, 0.5 + s);
        if (!t->MutatePriorities(updates, {}).ok()) failures++;
      }
    });
  }

  // Checkpoint repeatedly for about a second while they work.
  const absl::Time start = absl::Now();
  std::vector<CheckpointResult> results;
  options_.keep_last = 0;
  while (absl::Now() - start < absl::Seconds(1) || results.size() < 2) {
    auto ck = Checkpoint({t.get()}, root_, options_);
    ASSERT_TRUE(ck.ok()) << ck.status();
    results.push_back(*std::move(ck));
  }
  stop = true;
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(inserted.load(), 0);
  EXPECT_GT(sampled.load(), 0);

  absl::Duration max_pause;
  for (const auto& r : results) max_pause = std::max(max_pause, r.max_pause);
  std::cout << "checkpoints taken: " << results.size() << ", table size ~" << t->Info().size
            << ", max snapshot pause " << absl::FormatDuration(max_pause)
            << ", last checkpoint took " << absl::FormatDuration(results.back().duration) << " ("
            << results.back().num_items << " items, " << results.back().chunk_bytes
            << " chunk bytes); meanwhile " << inserted.load() << " inserts, " << sampled.load()
            << " samples; slowest insert " << max_insert_us.load() << " us\n";
  RecordProperty("max_pause_us", std::to_string(absl::ToInt64Microseconds(max_pause)));
  // Generous bound (sanitizers, a loaded 2-core machine; lock_held includes
  // the wait to acquire the lock): copying ~20k small records takes ~1 ms.
  EXPECT_LT(max_pause, absl::Milliseconds(250));

  int64_t straddles = 0;
  for (const auto& r : results) {
    SCOPED_TRACE("checkpoint " + std::to_string(r.id));
    EXPECT_EQ(ExpectSelfConsistent(r.path, options_.fs, &straddles), 2 * r.num_items);
    auto restored = Restore(root_, r.id, restore_);
    ASSERT_TRUE(restored.ok()) << restored.status();
    ASSERT_EQ(restored->tables.size(), 1u);
    const ReplayTable& rt = *restored->tables[0];
    const TableInfo info = rt.Info();
    // The snapshot is one consistent cut: its items and counters agree.
    EXPECT_EQ(info.size, r.num_items);
    EXPECT_EQ(info.limiter.inserts - info.limiter.deletes, info.size);
    int64_t broken = 0;
    for (const auto& s : rt.TakeSnapshot().items) broken += PairItemIntact(*s.item) ? 0 : 1;
    EXPECT_EQ(broken, 0);
  }
  // 40k rows span several pages, and scan batches end at page boundaries
  // that fall inside items: restoring must carry an item across batches.
  EXPECT_GT(straddles, 0);
}

// The kill test's table: 10000 pairs of items over 10000 chunks of 256 bytes
// of incompressible floats, so a checkpoint takes long enough to interrupt.
std::unique_ptr<ReplayTable> MakeBigTable(uint64_t seed) {
  ReplayTableOptions o;
  o.name = "big";
  o.sampler = NewPrioritizedSelector(0.8);
  o.max_size = 1 << 20;
  auto t = MakeTable(std::move(o));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0, 1);
  for (ItemKey pair = 0; pair < 10000; ++pair) {
    std::vector<float> v(4 * kWidth);
    for (auto& x : v) x = u(rng);
    ChunkRef c = *Chunk::Make(pair, DataType::Tensor(TypeId::kFloat32, {kWidth}), 4, v.data());
    EXPECT_TRUE(t->Insert(PairItem(2 * pair, c)).ok());
    EXPECT_TRUE(t->Insert(PairItem(2 * pair + 1, c)).ok());
  }
  return t;
}

// Forks a child that checkpoints `t` into `root`. With `kill_after`, the
// parent SIGKILLs it that long after the child signalled (through a pipe)
// that it is starting. Returns whether the child finished by itself and how
// long it ran from that signal to its end.
struct ChildRun {
  bool finished = false;
  absl::Duration ran;
};
ChildRun CheckpointInChild(ReplayTable* t, const std::string& root, const CheckpointOptions& options,
                           std::optional<std::chrono::microseconds> kill_after) {
  ChildRun out;
  int ready[2];
  if (pipe(ready) != 0) {
    ADD_FAILURE() << "pipe failed";
    return out;
  }
  // No other threads exist here, so the child may run anything after fork.
  const pid_t child = fork();
  if (child == 0) {
    close(ready[0]);
    const char go = 1;
    if (write(ready[1], &go, 1) != 1) _exit(2);
    auto ck = Checkpoint({t}, root, options);
    _exit(ck.ok() ? 0 : 1);
  }
  close(ready[1]);
  EXPECT_GT(child, 0);
  pollfd pfd{ready[0], POLLIN, 0};
  char go = 0;
  const bool started = poll(&pfd, 1, 10000) == 1 && read(ready[0], &go, 1) == 1;
  close(ready[0]);
  EXPECT_TRUE(started);
  const absl::Time start = absl::Now();
  // The delay is the experiment (a random instant), not synchronisation.
  if (kill_after) {
    std::this_thread::sleep_for(*kill_after);
    kill(child, SIGKILL);
  }
  int wstatus = 0;
  EXPECT_EQ(waitpid(child, &wstatus, 0), child);
  out.ran = absl::Now() - start;
  out.finished = WIFEXITED(wstatus);
  if (out.finished) {
    EXPECT_EQ(WEXITSTATUS(wstatus), 0);
  }
  return out;
}

TEST_F(CheckpointTest, KilledMidCheckpointRestoreLatestReturnsThePreviousCompleteOne) {
  auto t = MakeBigTable(7);
  options_.keep_last = 2;
  auto first = Checkpoint({t.get()}, root_, options_);
  ASSERT_TRUE(first.ok()) << first.status();
  std::map<int64_t, TableState> states = {{first->id, StateOf(*t)}};
  int64_t latest_complete = first->id;

  // Calibrate on a child that is not killed: it is slower than the parent
  // (copy-on-write faults), and its checkpoint becomes the latest.
  ASSERT_TRUE(t->Sample(absl::Seconds(1)).ok());
  const ChildRun calibration = CheckpointInChild(t.get(), root_, options_, std::nullopt);
  ASSERT_TRUE(calibration.finished);
  states[++latest_complete] = StateOf(*t);
  const int64_t child_us = absl::ToInt64Microseconds(calibration.ran);

  std::mt19937 rng(20240611);
  int killed_midway = 0, finished = 0, left_incomplete = 0;
  for (int trial = 0; trial < 10; ++trial) {
    // Change the table so each checkpoint differs from the previous one.
    ASSERT_TRUE(t->MutatePriorities({{static_cast<ItemKey>(trial), 100.0 + trial}}, {}).ok());
    ASSERT_TRUE(t->Sample(absl::Seconds(1)).ok());
    const TableState now = StateOf(*t);
    const auto delay =
        std::chrono::microseconds(std::uniform_int_distribution<int64_t>(0, child_us)(rng));
    const ChildRun run = CheckpointInChild(t.get(), root_, options_, delay);
    (run.finished ? finished : killed_midway)++;
    if (!run.finished) {
      auto listing = ListCheckpoints(root_, options_.fs);
      ASSERT_TRUE(listing.ok()) << listing.status();
      if (!listing->back().complete) left_incomplete++;
    }

    auto restored = Restore(root_, kLatestCheckpoint, restore_);
    ASSERT_TRUE(restored.ok()) << "trial " << trial << ": " << restored.status();
    if (restored->id != latest_complete) {
      // The child published its marker before it died: its checkpoint holds
      // the state it forked with.
      ASSERT_GT(restored->id, latest_complete);
      latest_complete = restored->id;
      states[latest_complete] = now;
    }
    SCOPED_TRACE("trial " + std::to_string(trial) + ", checkpoint " +
                 std::to_string(latest_complete));
    ExpectSameState(states.at(latest_complete), *restored->tables[0]);
  }
  std::cout << "kill test: a child's checkpoint takes " << absl::FormatDuration(calibration.ran)
            << "; " << killed_midway << " children killed (" << left_incomplete
            << " left an incomplete directory), " << finished << " finished\n";
  EXPECT_GE(killed_midway, 3);

  // The next checkpoint clears what the killed ones left.
  auto last = Checkpoint({t.get()}, root_, options_);
  ASSERT_TRUE(last.ok()) << last.status();
  auto listing = ListCheckpoints(root_, options_.fs);
  ASSERT_TRUE(listing.ok()) << listing.status();
  EXPECT_EQ(listing->size(), 2u);  // keep_last
  for (const auto& l : *listing) EXPECT_TRUE(l.complete) << l.path;
  auto restored = Restore(root_, kLatestCheckpoint, restore_);
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ(restored->id, last->id);
  ExpectSameState(StateOf(*t), *restored->tables[0]);
}

}  // namespace
}  // namespace flywheel::replay
