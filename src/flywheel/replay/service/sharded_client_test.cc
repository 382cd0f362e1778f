// ShardedClient: episodes round robin over servers, samples spread by table
// size with probabilities for the union, broadcasts.
#include "flywheel/replay/service/sharded_client.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "flywheel/io/temp_dir.h"
#include "flywheel/replay/service/server.h"
#include "flywheel/replay/service/service_test_util.h"

namespace flywheel::replay {
namespace {

using testing_util::Actions;
using testing_util::AppendSteps;
using testing_util::MakeTable;
using testing_util::StartServer;

std::shared_ptr<ReplayTable> UniformTable(const std::string& name) {
  ReplayTableOptions o;
  o.name = name;
  o.sampler = NewUniformSelector(7);
  auto t = ReplayTable::Create(std::move(o));
  EXPECT_TRUE(t.ok()) << t.status();
  return std::shared_ptr<ReplayTable>(std::move(*t));
}

struct Cluster {
  std::vector<std::shared_ptr<ReplayTable>> tables;  // one per server, all named "t"
  std::vector<std::unique_ptr<Server>> servers;
  std::unique_ptr<ShardedClient> client;
};

Cluster MakeCluster(std::vector<std::shared_ptr<ReplayTable>> tables) {
  Cluster c;
  std::vector<std::string> addresses;
  for (auto& t : tables) {
    c.servers.push_back(StartServer({t}));
    addresses.push_back(c.servers.back()->address());
  }
  c.tables = std::move(tables);
  auto client = ShardedClient::Create(addresses);
  EXPECT_TRUE(client.ok()) << client.status();
  c.client = std::move(*client);
  return c;
}

// An episode of `steps` steps (actions first..first+steps-1) with one
// 1-step item per step.
template <typename W>
void WriteEpisode(W& w, int first, int steps) {
  for (int i = first; i < first + steps; ++i) {
    AppendSteps(w, i, 1);
    ASSERT_TRUE(w.CreateItem("t", 1.0, {{"action", 1}}).ok());
  }
  ASSERT_TRUE(w.EndEpisode().ok());
}

TEST(ShardedClientTest, CreateRejectsBadAddressLists) {
  EXPECT_TRUE(absl::IsInvalidArgument(ShardedClient::Create({}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ShardedClient::Create({""}).status()));
  auto dup = ShardedClient::Create({"127.0.0.1:1", "127.0.0.1:1"});
  EXPECT_TRUE(absl::IsInvalidArgument(dup.status()));
  EXPECT_NE(std::string(dup.status().message()).find("127.0.0.1:1"), std::string::npos);
}

TEST(ShardedClientTest, WriterSendsEpisodesRoundRobin) {
  Cluster c = MakeCluster({UniformTable("t"), UniformTable("t")});
  auto w = c.client->NewWriter({.writer = {.chunk_length = 2}});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->current_shard(), 0);
  WriteEpisode(**w, 0, 3);
  EXPECT_EQ((*w)->current_shard(), 1);
  WriteEpisode(**w, 100, 4);
  WriteEpisode(**w, 200, 5);
  ASSERT_TRUE((*w)->Flush().ok());
  EXPECT_EQ(c.tables[0]->Info().size, 3 + 5);
  EXPECT_EQ(c.tables[1]->Info().size, 4);
  // Chunks of an episode went to its server only (each item flushes its
  // step's action into a chunk of its own).
  EXPECT_EQ(c.servers[0]->stats().chunks_received, 3 + 5);
  EXPECT_EQ(c.servers[1]->stats().chunks_received, 4);
  ASSERT_TRUE((*w)->Close().ok());
  // The next writer starts on the next server.
  auto w2 = c.client->NewWriter();
  ASSERT_TRUE(w2.ok());
  EXPECT_EQ((*w2)->current_shard(), 1);
  ASSERT_TRUE((*w2)->Close().ok());
}

TEST(ShardedClientTest, SamplesSpreadInProportionToSizeWithUnionProbabilities) {
  Cluster c = MakeCluster({UniformTable("t"), UniformTable("t")});
  auto w = c.client->NewWriter({.writer = {.chunk_length = 1}});
  ASSERT_TRUE(w.ok());
  WriteEpisode(**w, 0, 30);     // server 0: actions 0..29
  WriteEpisode(**w, 1000, 10);  // server 1: actions 1000..1009
  ASSERT_TRUE((*w)->Close().ok());

  int from_big = 0, total = 0;
  for (int round = 0; round < 100; ++round) {
    auto s = c.client->Sample("t", 8, absl::Seconds(10));
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_EQ(s->size(), 8u);
    for (const SampledItem& item : *s) {
      const int32_t a = Actions(item)[0];
      from_big += a < 1000;
      total++;
      // Uniform over the union of 40 items.
      EXPECT_NEAR(item.probability, 1.0 / 40, 1e-12) << a;
    }
  }
  // Systematic sampling: each batch of 8 takes exactly 6 from the 30-item server.
  EXPECT_EQ(from_big, total * 3 / 4);
}

TEST(ShardedClientTest, EmptyServersAreSkippedAndFlexibleTakesWhatIsThere) {
  Cluster c = MakeCluster({UniformTable("t"), UniformTable("t"), UniformTable("t")});
  // Everything on the middle server.
  auto only = Client(c.servers[1]->address()).NewWriter({.writer = {.chunk_length = 1}});
  ASSERT_TRUE(only.ok());
  WriteEpisode(**only, 0, 5);
  ASSERT_TRUE((*only)->Close().ok());
  for (int i = 0; i < 20; ++i) {
    auto s = c.client->Sample("t", 3, absl::Seconds(10));
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_EQ(s->size(), 3u);
    for (const auto& item : *s) EXPECT_NEAR(item.probability, 1.0 / 5, 1e-12);
  }
  EXPECT_EQ(c.tables[0]->Info().limiter.samples, 0);
  EXPECT_EQ(c.tables[2]->Info().limiter.samples, 0);
}

TEST(ShardedClientTest, AllEmptyTimesOutAndFlexibleFailsOnlyWhenEveryServerFails) {
  Cluster c = MakeCluster({UniformTable("t"), UniformTable("t")});
  auto s = c.client->Sample("t", 2, absl::Milliseconds(100));
  EXPECT_TRUE(absl::IsDeadlineExceeded(s.status())) << s.status();
  auto f = c.client->Sample("t", 2, absl::Milliseconds(100), /*flexible=*/true);
  EXPECT_TRUE(absl::IsDeadlineExceeded(f.status())) << f.status();
  auto unknown = c.client->Sample("nope", 1, absl::Seconds(1));
  EXPECT_TRUE(absl::IsNotFound(unknown.status())) << unknown.status();
  EXPECT_NE(std::string(unknown.status().message()).find("'nope'"), std::string::npos);
}

TEST(ShardedClientTest, BroadcastsMutateInfoResetAndCheckpoint) {
  io::TempDir tmp("fw_sharded");
  std::vector<std::shared_ptr<ReplayTable>> tables = {MakeTable("t"), MakeTable("t")};
  Cluster c;
  std::vector<std::string> addresses;
  for (int i = 0; i < 2; ++i) {
    ServerOptions o;
    o.tables = {tables[i]};
    o.checkpoint_dir = tmp.Sub("ckpt" + std::to_string(i));
    c.servers.push_back(StartServer(std::move(o)));
    addresses.push_back(c.servers.back()->address());
  }
  c.tables = tables;
  c.client = *ShardedClient::Create(addresses);
  auto w = c.client->NewWriter({.writer = {.chunk_length = 1}});
  ASSERT_TRUE(w.ok());
  std::vector<ItemKey> keys;
  for (int e = 0; e < 2; ++e) {
    AppendSteps(**w, e, 1);
    auto k = (*w)->CreateItem("t", 1.0, {{"action", 1}});
    ASSERT_TRUE(k.ok());
    keys.push_back(*k);
    ASSERT_TRUE((*w)->EndEpisode().ok());
  }
  ASSERT_TRUE((*w)->Close().ok());

  auto missing = c.client->MutatePriorities("t", {{keys[0], 5.0}, {keys[1], 6.0}, {12345, 1.0}}, {});
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_EQ(*missing, 1);

  auto merged = c.client->MergedInfo();
  ASSERT_TRUE(merged.ok()) << merged.status();
  ASSERT_EQ(merged->size(), 1u);
  EXPECT_EQ((*merged)[0].info.size, 2);
  EXPECT_EQ((*merged)[0].info.limiter.inserts, 2);
  EXPECT_NE((*merged)[0].explain.find(addresses[1]), std::string::npos);

  auto ck = c.client->Checkpoint();
  ASSERT_TRUE(ck.ok()) << ck.status();
  ASSERT_EQ(ck->size(), 2u);
  EXPECT_EQ((*ck)[1].num_items, 1);

  ASSERT_TRUE(c.client->Reset("t").ok());
  EXPECT_EQ(tables[0]->Info().size, 0);
  EXPECT_EQ(tables[1]->Info().size, 0);
  auto bad = c.client->Reset("nope");
  EXPECT_TRUE(absl::IsNotFound(bad)) << bad;
  EXPECT_NE(std::string(bad.message()).find(addresses[0]), std::string::npos) << bad;
}

}  // namespace
}  // namespace flywheel::replay
