// The replay server's checkpoints: the Checkpoint call, periodic
// checkpoints, and a (re)started server serving its latest checkpoint.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "flywheel/io/temp_dir.h"
#include "flywheel/replay/checkpoint.h"
#include "flywheel/replay/service/client.h"
#include "flywheel/replay/service/server.h"
#include "flywheel/replay/service/service_test_util.h"

namespace flywheel::replay {
namespace {

using testing_util::Actions;
using testing_util::AppendSteps;
using testing_util::MakeTable;
using testing_util::StartServer;

ServerOptions CheckpointingServer(const std::string& dir, std::vector<std::shared_ptr<ReplayTable>> tables) {
  ServerOptions o;
  o.tables = std::move(tables);
  o.checkpoint_dir = dir;
  return o;
}

// Inserts n items; item i (1-based) holds the actions [i-1, i] and has
// priority 1 + i.
void InsertPairs(Client& client, const std::string& table, int n) {
  auto w = client.NewWriter({.writer = {.chunk_length = 2}});
  ASSERT_TRUE(w.ok()) << w.status();
  for (int i = 0; i <= n; ++i) {
    AppendSteps(**w, i, 1);
    if (i >= 1) {
      ASSERT_TRUE((*w)->CreateItem(table, 1.0 + i, {{"action", 2}}).ok());
    }
  }
  ASSERT_TRUE((*w)->Close().ok());
}

TEST(ServerCheckpointTest, CheckpointCallWithoutDirectoryIsFailedPrecondition) {
  auto server = StartServer({MakeTable("t")});
  Client client(server->address());
  auto c = client.Checkpoint();
  EXPECT_TRUE(absl::IsFailedPrecondition(c.status())) << c.status();
  EXPECT_NE(std::string(c.status().message()).find("checkpoint_dir"), std::string::npos) << c.status();
  EXPECT_EQ(server->restored_checkpoint(), -1);
}

TEST(ServerCheckpointTest, OptionsAreValidated) {
  ServerOptions o;
  o.checkpoint_interval = absl::Seconds(1);
  auto s = Server::Start(o);
  EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << s.status();
  EXPECT_NE(std::string(s.status().message()).find("checkpoint_dir"), std::string::npos) << s.status();
  o.checkpoint_dir = "/tmp/x";
  o.checkpoint_interval = absl::Seconds(-1);
  EXPECT_TRUE(absl::IsInvalidArgument(Server::Start(o).status()));
  o.checkpoint_interval = absl::ZeroDuration();
  o.checkpoint_keep_last = -2;
  EXPECT_TRUE(absl::IsInvalidArgument(Server::Start(o).status()));
}

TEST(ServerCheckpointTest, RestartedServerServesItsLatestCheckpoint) {
  io::TempDir tmp("fw_server_ckpt");
  const std::string dir = tmp.Sub("ckpt");
  RateLimiterState limiter_before;
  {
    auto server = StartServer(CheckpointingServer(dir, {MakeTable("t")}));
    EXPECT_EQ(server->restored_checkpoint(), -1);  // nothing there yet
    Client client(server->address());
    InsertPairs(client, "t", 6);
    auto first = client.Sample("t", 1, absl::Seconds(10));  // takes (and, max_times_sampled 1, deletes) item 1
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(Actions((*first)[0]), (std::vector<int32_t>{0, 1}));
    auto c = client.Checkpoint();
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->id, 1);
    EXPECT_EQ(c->num_items, 5);
    EXPECT_EQ(c->path, dir + "/00000000000000000001");
    EXPECT_GE(c->max_pause, absl::ZeroDuration());
    EXPECT_EQ(server->stats().checkpoints, 1);
    limiter_before = server->tables()[0]->Info().limiter;
    // Changes after the checkpoint are not in it.
    ASSERT_TRUE(client.Sample("t", 1, absl::Seconds(10)).ok());
  }
  // A new server with the same (empty) configuration picks up checkpoint 1.
  auto configured = MakeTable("t");
  auto server = StartServer(CheckpointingServer(dir, {configured}));
  EXPECT_EQ(server->restored_checkpoint(), 1);
  ASSERT_EQ(server->tables().size(), 1u);
  EXPECT_NE(server->tables()[0], configured);
  EXPECT_EQ(configured->Info().size, 0);
  const TableInfo info = server->tables()[0]->Info();
  EXPECT_EQ(info.size, 5);
  EXPECT_EQ(info.limiter.inserts, limiter_before.inserts);
  EXPECT_EQ(info.limiter.samples, limiter_before.samples);
  EXPECT_EQ(info.limiter.deletes, limiter_before.deletes);
  Client client(server->address());
  for (int i = 1; i < 6; ++i) {
    auto s = client.Sample("t", 1, absl::Seconds(10));
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(Actions((*s)[0]), (std::vector<int32_t>{i, i + 1}));
    EXPECT_EQ((*s)[0].priority, 1.0 + i + 1);
  }
  // New checkpoints continue the numbering.
  auto c = client.Checkpoint();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->id, 2);
}

TEST(ServerCheckpointTest, RestoreKeepsCheckpointOptionsAndServesUnconfiguredTables) {
  io::TempDir tmp("fw_server_ckpt");
  const std::string dir = tmp.Sub("ckpt");
  {
    auto server = StartServer(CheckpointingServer(dir, {MakeTable("a"), MakeTable("b")}));
    Client client(server->address());
    InsertPairs(client, "a", 3);
    InsertPairs(client, "b", 2);
    ASSERT_TRUE(client.Checkpoint().ok());
  }
  ReplayTableOptions bigger;
  bigger.name = "a";
  bigger.max_size = 7;  // differs from the checkpoint's: the checkpoint wins (and a warning is logged)
  auto a = std::shared_ptr<ReplayTable>(*ReplayTable::Create(std::move(bigger)));
  auto server = StartServer(CheckpointingServer(dir, {a, MakeTable("c")}));
  ASSERT_EQ(server->tables().size(), 3u);
  EXPECT_EQ(server->tables()[0]->name(), "a");
  EXPECT_EQ(server->tables()[0]->Info().size, 3);
  EXPECT_EQ(server->tables()[0]->Info().max_size, 1000000);
  EXPECT_EQ(server->tables()[1]->name(), "c");
  EXPECT_EQ(server->tables()[1]->Info().size, 0);
  EXPECT_EQ(server->tables()[2]->name(), "b");
  EXPECT_EQ(server->tables()[2]->Info().size, 2);
  Client client(server->address());
  auto info = client.Info();
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->size(), 3u);
  EXPECT_EQ((*info)[2].info.name, "b");
  auto s = client.Sample("b", 2, absl::Seconds(10));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(Actions((*s)[1]), (std::vector<int32_t>{1, 2}));
}

TEST(ServerCheckpointTest, RestoreOffStartsEmptyAndIncompleteCheckpointsAreSkipped) {
  io::TempDir tmp("fw_server_ckpt");
  const std::string dir = tmp.Sub("ckpt");
  {
    auto server = StartServer(CheckpointingServer(dir, {MakeTable("t")}));
    Client client(server->address());
    InsertPairs(client, "t", 4);
    ASSERT_TRUE(client.Checkpoint().ok());
  }
  // A checkpoint that died before its marker (as after kill -9) is ignored.
  std::filesystem::create_directories(dir + "/00000000000000000002/items");
  std::ofstream(dir + "/00000000000000000002/items/junk") << "partial";
  {
    auto server = StartServer(CheckpointingServer(dir, {MakeTable("t")}));
    EXPECT_EQ(server->restored_checkpoint(), 1);
    EXPECT_EQ(server->tables()[0]->Info().size, 4);
  }
  ServerOptions o = CheckpointingServer(dir, {MakeTable("t")});
  o.restore = false;
  auto server = StartServer(std::move(o));
  EXPECT_EQ(server->restored_checkpoint(), -1);
  EXPECT_EQ(server->tables()[0]->Info().size, 0);
}

TEST(ServerCheckpointTest, DamagedLatestCheckpointFailsStartNamingIt) {
  io::TempDir tmp("fw_server_ckpt");
  const std::string dir = tmp.Sub("ckpt");
  {
    auto server = StartServer(CheckpointingServer(dir, {MakeTable("t")}));
    Client client(server->address());
    InsertPairs(client, "t", 2);
    ASSERT_TRUE(client.Checkpoint().ok());
  }
  std::ofstream(dir + "/00000000000000000001/CHECKPOINT", std::ios::trunc) << "{not json";
  auto s = Server::Start(CheckpointingServer(dir, {MakeTable("t")}));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find(dir), std::string::npos) << s.status();
}

TEST(ServerCheckpointTest, PeriodicCheckpointsKeepTheLastN) {
  io::TempDir tmp("fw_server_ckpt");
  const std::string dir = tmp.Sub("ckpt");
  ServerOptions o = CheckpointingServer(dir, {MakeTable("t")});
  o.checkpoint_interval = absl::Milliseconds(30);
  o.checkpoint_keep_last = 2;
  auto server = StartServer(std::move(o));
  Client client(server->address());
  InsertPairs(client, "t", 3);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (server->stats().checkpoints < 4 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_GE(server->stats().checkpoints, 4);
  server->Stop();  // waits for a checkpoint in progress
  EXPECT_EQ(server->stats().checkpoint_failures, 0);
  auto listing = ListCheckpoints(dir);
  ASSERT_TRUE(listing.ok()) << listing.status();
  ASSERT_EQ(listing->size(), 2u);
  EXPECT_TRUE((*listing)[0].complete && (*listing)[1].complete);
  EXPECT_GE((*listing)[1].id, 4);
  auto restored = Restore(dir);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->tables[0]->Info().size, 3);
}

}  // namespace
}  // namespace flywheel::replay

namespace flywheel::replay {
namespace {

// Items inserted before and after the newest checkpoint; the server then
// goes away without a final checkpoint (what kill -9 leaves: the log's
// write()s are in the kernel).
void InsertAroundACheckpoint(const std::string& dir, bool log, const std::string& sync = "none") {
  ServerOptions o = CheckpointingServer(dir, {MakeTable("t")});
  o.insert_log = log;
  o.insert_log_sync = sync;
  auto server = StartServer(std::move(o));
  Client client(server->address());
  InsertPairs(client, "t", 4);  // items with actions [0,1] .. [3,4]
  ASSERT_TRUE(client.Checkpoint().ok());
  auto w = client.NewWriter({.writer = {.chunk_length = 2}});
  ASSERT_TRUE(w.ok()) << w.status();
  AppendSteps(**w, 100, 1);
  for (int i = 101; i <= 106; ++i) {
    AppendSteps(**w, i, 1);
    ASSERT_TRUE((*w)->CreateItem("t", 1.0, {{"action", 2}}).ok());
  }
  ASSERT_TRUE((*w)->Close().ok());  // Close waits for every acknowledgement
  EXPECT_EQ(server->stats().items_logged, log ? 10 : 0);  // the 4 before the checkpoint too
}

std::vector<std::vector<int32_t>> DrainActions(Server& server, int n) {
  Client client(server.address());
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    auto s = client.Sample("t", 1, absl::Seconds(10));
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) break;
    out.push_back(Actions((*s)[0]));
  }
  return out;
}

// Without the log, items acknowledged after the last checkpoint are lost
// when the server dies (docs/replay.md, "Durability").
TEST(ServerInsertLogTest, WithoutTheLogItemsAfterTheCheckpointAreLost) {
  io::TempDir tmp("fw_server_wal");
  const std::string dir = tmp.Sub("ckpt");
  InsertAroundACheckpoint(dir, /*log=*/false);
  auto server = StartServer(CheckpointingServer(dir, {MakeTable("t")}));
  EXPECT_EQ(server->tables()[0]->Info().size, 4);
}

TEST(ServerInsertLogTest, AcknowledgedItemsSurviveTheServerGoingAwayWithEverySyncPolicy) {
  for (const char* sync : {"none", "interval", "always"}) {
    SCOPED_TRACE(sync);
    io::TempDir tmp("fw_server_wal");
    const std::string dir = tmp.Sub("ckpt");
    InsertAroundACheckpoint(dir, /*log=*/true, sync);
    ServerOptions o = CheckpointingServer(dir, {MakeTable("t")});
    o.insert_log = true;
    auto server = StartServer(std::move(o));
    EXPECT_EQ(server->restored_checkpoint(), 1);
    EXPECT_EQ(server->stats().items_replayed, 6);
    EXPECT_EQ(server->tables()[0]->Info().size, 10);
    std::vector<std::vector<int32_t>> want;
    for (int i = 0; i < 4; ++i) want.push_back({i, i + 1});
    for (int i = 100; i < 106; ++i) want.push_back({i, i + 1});
    EXPECT_EQ(DrainActions(*server, 10), want);
    // A checkpoint now covers the replayed items: the log segments before it
    // go, and a third start replays nothing.
    Client client(server->address());
    ASSERT_TRUE(client.Checkpoint().ok());
    server.reset();
    ServerOptions again = CheckpointingServer(dir, {MakeTable("t")});
    again.insert_log = true;
    auto third = StartServer(std::move(again));
    EXPECT_EQ(third->stats().items_replayed, 0);
    EXPECT_EQ(third->tables()[0]->Info().size, 0);  // all ten were sampled (and removed) before checkpoint 2
  }
}

TEST(ServerInsertLogTest, TornTailIsLeftAndEverythingBeforeItIsReplayed) {
  io::TempDir tmp("fw_server_wal");
  const std::string dir = tmp.Sub("ckpt");
  InsertAroundACheckpoint(dir, /*log=*/true);
  // Cut the newest segment in the middle of its last record, as a crash
  // during a write() leaves it.
  std::string newest;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/inserts")) {
    const std::string p = e.path().string();
    if (p.find("segment-") != std::string::npos && std::filesystem::file_size(p) > 8 && p > newest) newest = p;
  }
  ASSERT_FALSE(newest.empty());
  std::filesystem::resize_file(newest, std::filesystem::file_size(newest) - 5);
  ServerOptions o = CheckpointingServer(dir, {MakeTable("t")});
  o.insert_log = true;
  auto server = StartServer(std::move(o));
  EXPECT_EQ(server->stats().items_replayed, 5);
  EXPECT_GT(server->stats().log_torn_bytes, 0);
  EXPECT_EQ(server->tables()[0]->Info().size, 9);
}

TEST(ServerInsertLogTest, OptionsAreValidated) {
  ServerOptions o;
  o.insert_log = true;
  auto s = Server::Start(o);
  EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << s.status();
  EXPECT_NE(std::string(s.status().message()).find("checkpoint_dir"), std::string::npos) << s.status();
  o.checkpoint_dir = "/tmp/x";
  o.insert_log_sync = "sometimes";
  s = Server::Start(o);
  EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << s.status();
  EXPECT_NE(std::string(s.status().message()).find("always"), std::string::npos) << s.status();
}

}  // namespace
}  // namespace flywheel::replay
