#include <gtest/gtest.h>

#include <thread>

#include "flywheel/replay/service/client.h"
#include "flywheel/replay/service/server.h"
#include "flywheel/replay/service/service_test_util.h"
#include "grpcpp/grpcpp.h"
#include "replay.grpc.pb.h"

namespace flywheel::replay {
namespace {

using format::DataType;
using format::TypeId;
using testing_util::Actions;
using testing_util::AppendSteps;
using testing_util::MakeTable;
using testing_util::StartServer;

TEST(ReplayServiceTest, InsertThenSampleRoundTripsValues) {
  auto t = MakeTable("t");
  auto server = StartServer({t});
  Client client(server->address());
  auto w = client.NewWriter({.writer = {.chunk_length = 4}});
  ASSERT_TRUE(w.ok()) << w.status();
  AppendSteps(**w, 0, 10);
  auto key = (*w)->CreateItem("t", 2.5, {{"obs", 3}, {"action", 5}});
  ASSERT_TRUE(key.ok()) << key.status();
  ASSERT_TRUE((*w)->Flush().ok());
  EXPECT_EQ(t->Info().size, 1);

  auto s = client.Sample("t", 1, absl::Seconds(10));
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 1u);
  const SampledItem& got = (*s)[0];
  EXPECT_EQ(got.item->key, *key);
  EXPECT_EQ(got.priority, 2.5);
  EXPECT_EQ(got.probability, 1.0);
  EXPECT_EQ(got.table_size, 1);
  EXPECT_EQ(got.times_sampled, 1);
  ASSERT_EQ(got.item->columns.size(), 2u);
  EXPECT_EQ(got.item->columns[0].name, "obs");
  std::vector<float> obs(6);
  ASSERT_TRUE(got.item->columns[0].Decode(obs.data()).ok());
  EXPECT_EQ(obs, (std::vector<float>{7, -7, 8, -8, 9, -9}));
  EXPECT_EQ(Actions(got, 1), (std::vector<int32_t>{5, 6, 7, 8, 9}));
  EXPECT_TRUE((*w)->Close().ok());
}

TEST(ReplayServiceTest, ChunkIsSentOncePerStreamForTwoItems) {
  auto t = MakeTable("t");
  auto server = StartServer({t});
  Client client(server->address());
  auto w = *client.NewWriter({.writer = {.chunk_length = 8}});
  AppendSteps(*w, 0, 8);  // one chunk per column
  ASSERT_TRUE(w->CreateItem("t", 1, {{"action", 3}}).ok());
  ASSERT_TRUE(w->CreateItem("t", 1, {{"action", 2}}).ok());
  ASSERT_TRUE(w->Flush().ok());
  EXPECT_EQ(server->stats().chunks_received, 1);
  EXPECT_EQ(server->stats().items_inserted, 2);

  auto sampler = client.NewSampler();
  auto a = sampler->Sample("t", 1, absl::Seconds(10));
  auto b = sampler->Sample("t", 1, absl::Seconds(10));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(Actions((*a)[0]), (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(Actions((*b)[0]), (std::vector<int32_t>{6, 7}));
  EXPECT_EQ(server->stats().chunks_sent, 1);  // the second item reused the client's copy
  EXPECT_EQ((*a)[0].item->columns[0].chunks[0], (*b)[0].item->columns[0].chunks[0]);
  ASSERT_TRUE(w->Close().ok());
  EXPECT_EQ(server->stats().open_insert_streams, 0);
  EXPECT_EQ(server->stats().cached_insert_chunks, 0);
}

TEST(ReplayServiceTest, EndEpisodeReleasesTheEpisodesChunksOnTheServer) {
  auto t = MakeTable("t");
  auto server = StartServer({t});
  Client client(server->address());
  auto w = *client.NewWriter({.writer = {.chunk_length = 2}});
  AppendSteps(*w, 0, 4);
  ASSERT_TRUE(w->CreateItem("t", 1, {{"action", 4}}).ok());
  ASSERT_TRUE(w->Flush().ok());
  EXPECT_EQ(server->stats().cached_insert_chunks, 2);
  ASSERT_TRUE(w->EndEpisode().ok());
  AppendSteps(*w, 10, 1);
  ASSERT_TRUE(w->CreateItem("t", 1, {{"action", 1}}).ok());
  ASSERT_TRUE(w->Flush().ok());
  EXPECT_EQ(server->stats().cached_insert_chunks, 1);  // only the new episode's chunk
  auto s = client.Sample("t", 2, absl::Seconds(10));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(Actions((*s)[0]), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(Actions((*s)[1]), (std::vector<int32_t>{10}));
  ASSERT_TRUE(w->Close().ok());
}

TEST(ReplayServiceTest, QueueHandsEachItemToExactlyOneOfTwoClients) {
  auto t = MakeTable("q", RateLimiterOptions::Queue(100));
  auto server = StartServer({t});
  Client writer_client(server->address());
  auto w = *writer_client.NewWriter({.writer = {.chunk_length = 1}});
  for (int i = 0; i < 20; ++i) {
    AppendSteps(*w, i, 1);
    ASSERT_TRUE(w->CreateItem("q", 1, {{"action", 1}}).ok());
  }
  ASSERT_TRUE(w->Flush().ok());
  Client c1(server->address()), c2(server->address());
  std::vector<int32_t> seen;
  for (int i = 0; i < 10; ++i) {
    for (Client* c : {&c1, &c2}) {
      auto s = c->Sample("q", 1, absl::Seconds(10));
      ASSERT_TRUE(s.ok()) << s.status();
      seen.push_back(Actions((*s)[0])[0]);
    }
  }
  std::vector<int32_t> want(20);
  for (int i = 0; i < 20; ++i) want[i] = i;
  EXPECT_EQ(seen, want);  // FIFO order, each once
  auto empty = c1.Sample("q", 1, absl::Milliseconds(250));
  EXPECT_TRUE(absl::IsDeadlineExceeded(empty.status())) << empty.status();
  // The message names the caller's timeout, not the server's wait slices.
  EXPECT_NE(std::string(empty.status().message()).find("timed out after 250ms"), std::string::npos)
      << empty.status();
  // A batch that waits for an insert from another client.
  std::thread later([&] {
    AppendSteps(*w, 100, 2);
    ASSERT_TRUE(w->CreateItem("q", 1, {{"action", 1}}).ok());
    ASSERT_TRUE(w->CreateItem("q", 1, {{"action", 2}}).ok());
    ASSERT_TRUE(w->Flush().ok());
  });
  auto two = c2.Sample("q", 2, absl::Seconds(10));
  later.join();
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ(Actions((*two)[0]), (std::vector<int32_t>{101}));
  EXPECT_EQ(Actions((*two)[1]), (std::vector<int32_t>{100, 101}));
  ASSERT_TRUE(w->Close().ok());
}

TEST(ReplayServiceTest, ItemErrorsNameTheProblemAndTheStreamGoesOn) {
  Signature sig;
  sig.columns = {{"action", DataType::Scalar(TypeId::kInt64)}};
  auto t = MakeTable("typed", RateLimiterOptions::MinSize(1), sig);
  auto server = StartServer({t});
  Client client(server->address());
  auto w = *client.NewWriter({.writer = {.chunk_length = 2}});
  AppendSteps(*w, 0, 4);
  // Unknown table.
  ASSERT_TRUE(w->CreateItem("nope", 1, {{"action", 1}}).ok());  // reported asynchronously
  Status s = w->Flush();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_NE(s.message().find("nope"), std::string::npos) << s;
  // Signature mismatch: int32 steps for an int64 column.
  ASSERT_TRUE(w->CreateItem("typed", 1, {{"action", 1}}).ok());
  s = w->Flush();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("signature"), std::string::npos) << s;
  EXPECT_NE(s.message().find("action"), std::string::npos) << s;
  EXPECT_EQ(server->stats().item_errors, 2);
  EXPECT_EQ(t->Info().size, 0);

  // Sampling an unknown table.
  auto bad = client.Sample("nope", 1, absl::Seconds(1));
  EXPECT_TRUE(absl::IsNotFound(bad.status())) << bad.status();
  ASSERT_TRUE(w->Close().ok());

  // Another client is still served.
  Client other(server->address());
  auto info = other.Info();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->size(), 1u);
}

// Raw stream: an item naming a chunk never sent gets an error; the stream and
// a later good item on it still work.
TEST(ReplayServiceTest, MissingChunkReferenceIsAPerItemError) {
  auto t = MakeTable("t");
  auto server = StartServer({t});
  auto channel = grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials());
  auto stub = proto::ReplayService::NewStub(channel);
  grpc::ClientContext ctx;
  auto stream = stub->InsertStream(&ctx);

  proto::InsertStreamRequest req;
  proto::Item* item = req.add_items();
  item->set_table("t");
  item->set_key(7);
  proto::Column* col = item->add_columns();
  col->set_name("x");
  col->add_chunk_keys(1234);
  col->set_length(1);
  ASSERT_TRUE(stream->Write(req));
  proto::InsertStreamResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(resp.key(), 7u);
  EXPECT_EQ(resp.code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(resp.message().find("chunk 1234"), std::string::npos) << resp.message();

  // Now send the chunk and the same item: accepted.
  int32_t v = 5;
  auto chunk = Chunk::Make(1234, DataType::Scalar(TypeId::kInt32), 1, &v);
  ASSERT_TRUE(chunk.ok());
  proto::Chunk* pc = req.add_chunks();
  pc->set_key(1234);
  pc->set_step_type("int32");
  pc->set_num_steps(1);
  pc->set_codec(static_cast<uint32_t>((*chunk)->codec()));
  pc->set_compressed((*chunk)->compressed());
  ASSERT_TRUE(stream->Write(req));
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(resp.code(), 0) << resp.message();
  EXPECT_EQ(t->Info().size, 1);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

// Raw stream, coalesce_acks: one response for a message's inserted items; an
// error comes in order after the items inserted before it; an insert that
// has to wait first sends the acknowledgements gathered so far.
TEST(ReplayServiceTest, CoalescedAcksComeInItemOrderAndBeforeAnInsertWaits) {
  auto t = MakeTable("t", RateLimiterOptions::Queue(5));
  auto server = StartServer({t});
  auto channel = grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials());
  auto stub = proto::ReplayService::NewStub(channel);
  grpc::ClientContext ctx;
  auto stream = stub->InsertStream(&ctx);

  int32_t v = 5;
  auto chunk = Chunk::Make(1234, DataType::Scalar(TypeId::kInt32), 1, &v);
  ASSERT_TRUE(chunk.ok());
  proto::InsertStreamRequest req;
  req.set_coalesce_acks(true);
  proto::Chunk* pc = req.add_chunks();
  pc->set_key(1234);
  pc->set_step_type("int32");
  pc->set_num_steps(1);
  pc->set_codec(static_cast<uint32_t>((*chunk)->codec()));
  pc->set_compressed((*chunk)->compressed());
  auto add_item = [&](uint64_t key, const std::string& table) {
    proto::Item* item = req.add_items();
    item->set_table(table);
    item->set_key(key);
    proto::Column* col = item->add_columns();
    col->set_name("x");
    col->add_chunk_keys(1234);
    col->set_length(1);
  };
  add_item(1, "t");
  add_item(2, "t");
  add_item(3, "nope");  // an item error in the middle
  add_item(4, "t");
  ASSERT_TRUE(stream->Write(req));
  proto::InsertStreamResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(std::vector<uint64_t>(resp.inserted_keys().begin(), resp.inserted_keys().end()),
            (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(resp.code(), 0);
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_TRUE(resp.inserted_keys().empty());
  EXPECT_EQ(resp.key(), 3u);
  EXPECT_EQ(resp.code(), static_cast<int>(absl::StatusCode::kNotFound)) << resp.message();
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(std::vector<uint64_t>(resp.inserted_keys().begin(), resp.inserted_keys().end()),
            (std::vector<uint64_t>{4}));

  // The queue holds 5: item 7 waits, and 5 and 6 are acknowledged meanwhile.
  req.clear_chunks();
  req.clear_items();
  add_item(5, "t");
  add_item(6, "t");
  add_item(7, "t");
  ASSERT_TRUE(stream->Write(req));
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(std::vector<uint64_t>(resp.inserted_keys().begin(), resp.inserted_keys().end()),
            (std::vector<uint64_t>{5, 6}));
  EXPECT_EQ(t->Info().size, 5);
  ASSERT_TRUE(t->Sample(absl::Seconds(10)).ok());  // room for 7
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(std::vector<uint64_t>(resp.inserted_keys().begin(), resp.inserted_keys().end()),
            (std::vector<uint64_t>{7}));
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

// Many items in flight (the writer's sender puts those queued meanwhile in
// one message): a chunk released behind an item (max_history 1 drops the
// previous step's chunk at every item) must not leave the server's cache
// before the items of its message that use it are inserted.
TEST(ReplayServiceTest, WriterReleasesChunksOnlyAfterTheItemsThatUseThem) {
  auto t = MakeTable("t");
  auto server = StartServer({t});
  Client client(server->address());
  auto w = *client.NewWriter({.writer = {.chunk_length = 1, .max_history = 1}, .max_in_flight_items = 64});
  std::vector<ItemKey> keys;
  for (int i = 0; i < 500; ++i) {
    AppendSteps(*w, i, 1);
    auto k = w->CreateItem("t", 1, {{"action", 1}});
    ASSERT_TRUE(k.ok()) << k.status();
    keys.push_back(*k);
  }
  ASSERT_TRUE(w->Flush(absl::Seconds(30)).ok());
  EXPECT_EQ(server->stats().items_inserted, 500);
  EXPECT_EQ(server->stats().item_errors, 0);
  EXPECT_EQ(server->stats().chunks_received, 500);  // each action chunk once
  EXPECT_EQ(t->Info().size, 500);
  // Released chunks left the stream's cache (the last messages' may linger).
  EXPECT_LT(server->stats().cached_insert_chunks, 100);
  for (int i = 0; i < 500; ++i) {
    auto s = client.Sample("t", 1, absl::Seconds(10));
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_EQ((*s)[0].item->key, keys[i]);
    ASSERT_EQ(Actions((*s)[0]), (std::vector<int32_t>{i}));
  }
  ASSERT_TRUE(w->Close().ok());
  EXPECT_EQ(server->stats().cached_insert_chunks, 0);
}

TEST(ReplayServiceTest, ClientVanishingMidStreamFreesItsChunks) {
  auto t = MakeTable("t", RateLimiterOptions::Queue(1));
  auto server = StartServer({t});
  {
    Client client(server->address());
    auto w = *client.NewWriter({.writer = {.chunk_length = 1}});
    AppendSteps(*w, 0, 3);
    ASSERT_TRUE(w->CreateItem("t", 1, {{"action", 1}}).ok());
    ASSERT_TRUE(w->Flush().ok());
    // The queue is full: this insert blocks in the server.
    ASSERT_TRUE(w->CreateItem("t", 1, {{"action", 1}}).ok());
    absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (t->Info().blocked_inserts == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
    EXPECT_EQ(t->Info().blocked_inserts, 1);
    EXPECT_GT(server->stats().cached_insert_chunks, 0);
    // The writer goes away without Close(): the stream is cancelled.
  }
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (server->stats().open_insert_streams > 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(server->stats().open_insert_streams, 0);
  EXPECT_EQ(server->stats().cached_insert_chunks, 0);
  EXPECT_EQ(t->Info().blocked_inserts, 0);
  // Another client is served.
  Client other(server->address());
  auto s = other.Sample("t", 1, absl::Seconds(10));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(Actions((*s)[0]), (std::vector<int32_t>{2}));
  EXPECT_EQ(t->Info().size, 0);  // the cancelled insert never landed
}

TEST(ReplayServiceTest, InfoExplainMutateAndResetOverTheWire) {
  auto t = MakeTable("t", RateLimiterOptions::MinSize(3));
  auto server = StartServer({t, MakeTable("u")});
  Client client(server->address());
  auto w = *client.NewWriter({.writer = {.chunk_length = 1}});
  AppendSteps(*w, 0, 1);
  auto key = w->CreateItem("t", 1, {{"action", 1}});
  ASSERT_TRUE(key.ok());
  ASSERT_TRUE(w->Close().ok());
  auto info = client.Info();
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->size(), 2u);
  const RemoteTableInfo& ti = (*info)[0];
  EXPECT_EQ(ti.info.name, "t");
  EXPECT_EQ(ti.info.size, 1);
  EXPECT_EQ(ti.info.limiter.inserts, 1);
  EXPECT_EQ(ti.info.limiter_options.min_size_to_sample, 3);
  EXPECT_EQ(ti.explain, t->Explain());
  EXPECT_NE(ti.explain.find("min_size_to_sample"), std::string::npos) << ti.explain;

  auto missing = client.MutatePriorities("t", {{*key, 4.0}, {999, 1.0}}, {});
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_EQ(*missing, 1);
  EXPECT_TRUE(absl::IsNotFound(client.MutatePriorities("zz", {}, {}).status()));
  ASSERT_TRUE(client.Reset("t").ok());
  EXPECT_EQ(t->Info().size, 0);
  EXPECT_TRUE(absl::IsNotFound(client.Reset("zz")));
}

TEST(ReplayServiceTest, NonLoopbackAddressIsRefused) {
  ServerOptions o;
  o.address = "0.0.0.0:0";
  auto s = Server::Start(std::move(o));
  EXPECT_TRUE(absl::IsInvalidArgument(s.status())) << s.status();
}

TEST(ReplayServiceTest, OversizedMessageIsRejectedAndServerGoesOn) {
  auto t = MakeTable("t");
  ServerOptions o;
  o.tables = {t};
  o.max_message_bytes = 4096;
  auto server = *Server::Start(std::move(o));
  Client client(server->address());
  auto w = *client.NewWriter({.writer = {.chunk_length = 1000, .codec = format::Codec::kNone}});
  AppendSteps(*w, 0, 1000);  // 8000 bytes of obs, uncompressed
  ASSERT_TRUE(w->CreateItem("t", 1, {{"obs", 1000}}).ok());
  Status s = w->Flush();
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  Client other(server->address());
  EXPECT_TRUE(other.Info().ok());
}

// A server restarted on the same port (here: empty; in production from its
// checkpoint): the writer reopens its stream, resends what was not
// acknowledged with the chunks it names, and later items still find their
// chunks.
TEST(ReplayServiceTest, WriterReconnectsToARestartedServerAndResendsUnacknowledgedItems) {
  // Queue(2) with no sampler: the first 2 items are acknowledged, the rest
  // wait on the rate limiter, unacknowledged, when the server goes away.
  auto queue = MakeTable("t", RateLimiterOptions::Queue(2));
  auto first = StartServer({queue});
  const std::string address = first->address();
  Client client(address);
  auto w = client.NewWriter({.writer = {.chunk_length = 4}});
  ASSERT_TRUE(w.ok()) << w.status();
  AppendSteps(**w, 0, 6);
  std::vector<ItemKey> keys;
  for (int i = 0; i < 5; ++i) {
    auto k = (*w)->CreateItem("t", 1.0, {{"action", 2}});  // steps 4 and 5
    ASSERT_TRUE(k.ok()) << k.status();
    keys.push_back(*k);
  }
  const absl::Time until = absl::Now() + absl::Seconds(20);
  while (queue->Info().size < 2 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_EQ(queue->Info().size, 2);
  first->Stop();
  first.reset();

  auto fresh = MakeTable("t");  // MinSize(1): takes everything
  ServerOptions o;
  o.address = address;
  o.tables = {fresh};
  auto second = StartServer(std::move(o));
  // The 3 items the first server never acknowledged arrive at the second.
  ASSERT_TRUE((*w)->Flush(absl::Seconds(30)).ok());
  EXPECT_EQ((*w)->reconnects(), 1);
  EXPECT_EQ(fresh->Info().size, 3);
  // New items after the reconnect, naming steps whose chunks went to the
  // first server only, are complete on the second.
  AppendSteps(**w, 6, 3);
  auto k = (*w)->CreateItem("t", 2.0, {{"action", 5}, {"obs", 1}});
  ASSERT_TRUE(k.ok()) << k.status();
  ASSERT_TRUE((*w)->Flush(absl::Seconds(30)).ok());
  std::vector<int32_t> last;
  for (int i = 0; i < 4; ++i) {
    auto s = client.Sample("t", 1, absl::Seconds(10));
    ASSERT_TRUE(s.ok()) << s.status();
    if ((*s)[0].item->key == *k) last = Actions((*s)[0]);
    if (i < 3) {
      EXPECT_EQ((*s)[0].item->key, keys[2 + i]);
      EXPECT_EQ(Actions((*s)[0]), (std::vector<int32_t>{4, 5}));
    }
  }
  EXPECT_EQ(last, (std::vector<int32_t>{4, 5, 6, 7, 8}));
  ASSERT_TRUE((*w)->Close().ok());
}

TEST(ReplayServiceTest, WriterWithoutReconnectReportsTheBrokenStream) {
  auto t = MakeTable("t");
  auto server = StartServer({t});
  Client client(server->address());
  auto w = client.NewWriter({.writer = {.chunk_length = 1}, .reconnect_timeout = absl::ZeroDuration()});
  ASSERT_TRUE(w.ok());
  AppendSteps(**w, 0, 1);
  ASSERT_TRUE((*w)->CreateItem("t", 1.0, {{"action", 1}}).ok());
  ASSERT_TRUE((*w)->Flush(absl::Seconds(10)).ok());
  server->Stop();
  AppendSteps(**w, 1, 1);
  Status s = (*w)->CreateItem("t", 1.0, {{"action", 1}}).status();
  if (s.ok()) s = (*w)->Flush(absl::Seconds(10));
  EXPECT_TRUE(absl::IsUnavailable(s) || absl::IsCancelled(s)) << s;
}

}  // namespace
}  // namespace flywheel::replay
