// replay::Client: talks to a replay::Server over gRPC (proto/replay.proto,
// docs/protocol/replay.md).
//
// RemoteWriter has TrajectoryWriter's calls (Append / CreateItem /
// EndEpisode) and sends chunks and items on one insert stream, each chunk
// once per stream, with at most `max_in_flight_items` items not yet
// acknowledged. CreateItem queues the item; the writer's sender thread
// writes what is queued, several items per message, the chunk bytes going
// to gRPC without a copy, and the server acknowledges a message's items in
// one response (docs/protocol/replay.md#acknowledgements). RemoteSampler samples on one sample stream and keeps the
// chunks it was sent, so items sharing chunks cost their bytes once.
//
// Thread-safety: Client methods are thread-safe (Sample calls share one
// stream and run one at a time). A RemoteWriter or RemoteSampler is used by
// one thread at a time.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flywheel/base/status.h"
#include "flywheel/replay/table.h"
#include "flywheel/replay/writer.h"

namespace grpc {
class ByteBuffer;
class Channel;
class ClientContext;
template <class W, class R>
class ClientReaderWriter;
}  // namespace grpc

namespace flywheel::replay {
namespace proto {
class InsertStreamRequest;
class InsertStreamResponse;
class SampleStreamRequest;
class SampleStreamResponse;
}  // namespace proto

struct ClientOptions {
  // Largest message sent or accepted, bytes (> 0). Default 64 MiB, as the server.
  int64_t max_message_bytes = int64_t{64} << 20;
  // gRPC's reconnect backoff for the channel (after a server went away):
  // first and longest wait between connection attempts.
  absl::Duration min_reconnect_backoff = absl::Milliseconds(100);
  absl::Duration max_reconnect_backoff = absl::Seconds(2);
};

struct RemoteWriterOptions {
  ReplayWriterOptions writer;  // chunking, as TrajectoryWriter
  // Items sent but not yet acknowledged before CreateItem waits (>= 1). Default 64.
  int64_t max_in_flight_items = 64;
  // When the insert stream breaks (the server went away or restarted), keep
  // trying to open a new one for this long, then resend every item not yet
  // acknowledged with the chunks it names. 0: fail instead. Default 30 s.
  absl::Duration reconnect_timeout = absl::Seconds(30);

  Status Validate() const;
};

// A checkpoint the server wrote (the Checkpoint call).
struct RemoteCheckpoint {
  int64_t id = 0;
  std::string path;  // on the server's machine
  absl::Duration max_pause;
  int64_t num_items = 0;
  int64_t num_chunks = 0;
  int64_t chunk_bytes = 0;
  absl::Duration duration;
};

// Server-side state of one table.
struct RemoteTableInfo {
  TableInfo info;
  std::string explain;  // ReplayTable::Explain() on the server
};

// Reconnects: if the stream breaks (UNAVAILABLE or CANCELLED: the server
// went away, stopped or restarted), the next CreateItem or Flush opens a new
// stream (retrying with backoff for up to `reconnect_timeout`) and resends
// every unacknowledged item with the chunks it names, so no item is lost to
// a restart. An item the old server did insert is refused by the new stream
// with ALREADY_EXISTS when it is the same server still, which the writer
// counts as acknowledged; a restarted server (e.g. from a checkpoint) takes
// it again.
class RemoteWriter {
 public:
  ~RemoteWriter();  // cancels the stream if Close() was not called

  // As TrajectoryWriter::Append.
  Status Append(const std::vector<StepValue>& step);
  // Queues an item for the sender (which sends it with the chunks the server
  // lacks) and returns its key without waiting for the server, unless
  // `max_in_flight_items` are unacknowledged (then waits up to `timeout`
  // for one ack). `timeout` also
  // bounds the server's wait on the table's rate limiter. A server-side
  // error for an earlier item is returned by the next CreateItem or Flush.
  Result<ItemKey> CreateItem(const std::string& table, double priority,
                             const std::vector<std::pair<std::string, int64_t>>& trajectory,
                             absl::Duration timeout = absl::InfiniteDuration());
  // As TrajectoryWriter::EndEpisode; the server may drop the episode's chunks.
  Status EndEpisode();
  // Waits until every item sent is acknowledged (reconnecting as above);
  // returns the first item error since the last Flush (then clears it),
  // DeadlineExceeded, or the stream's error.
  Status Flush(absl::Duration timeout = absl::InfiniteDuration());
  // Flushes and ends the stream. Idempotent.
  Status Close();

  int64_t episode_steps() const { return steps_.episode_steps(); }
  // Streams reopened after a break.
  int64_t reconnects() const { return reconnects_; }

 private:
  friend class Client;
  // An item not yet acknowledged, kept whole for a resend.
  struct Pending {
    ItemKey key = 0;
    std::string table;
    double priority = 0;
    std::vector<TrajectoryColumn> columns;  // hold the chunks alive
    int64_t timeout_ms = 0;
  };
  struct Unacked {
    std::shared_ptr<const Pending> item;
    bool resent = false;  // sent again after a reconnect
  };
  // The sender's queue, in CreateItem / EndEpisode order: an item to send
  // (or none), then chunk keys the server may drop once the items queued
  // before them are on the wire.
  struct Outgoing {
    std::shared_ptr<const Pending> item;
    std::vector<ChunkKey> release;
  };
  RemoteWriter(std::shared_ptr<grpc::Channel> channel, RemoteWriterOptions options);
  // Opens a stream and starts its ack reader (not the sender).
  void OpenStream();
  void StartSender();
  // Stops the sender (REQUIRES: no Write in progress can block forever: the
  // outbox is empty or the stream was cancelled or broke).
  void StopSender();
  // Stops the sender, joins the reader and returns the stream's final status
  // (annotated).
  Status EndStream();
  // After a break: reopens the stream and resends every unacknowledged item
  // from this thread, retrying until `deadline`; the break's status when it
  // is not one to retry.
  Status Reconnect(const Status& broken, absl::Time deadline);
  // Takes the next message's worth of entries from the front of `queue`
  // (items with one timeout, up to kMaxMessageItems / kMaxMessageBytes)
  // and writes it with the chunks the server lacks. Called by the sender,
  // or by Reconnect while there is no sender.
  bool SendSome(std::deque<Outgoing>& queue);
  void SendLoop();
  void ReadAcks();
  void Acknowledge(ItemKey key, int32_t code, const std::string& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status TakeError() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::shared_ptr<grpc::Channel> channel_;
  RemoteWriterOptions options_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  // The request side is written as pre-encoded bytes (InsertRequestEncoder).
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, proto::InsertStreamResponse>> stream_;
  std::thread reader_;
  std::thread sender_;
  bool closed_ = false;
  Status close_status_;
  int64_t reconnects_ = 0;

  StepBuffer steps_;  // the caller's thread only
  // The sender's (or Reconnect's, when there is no sender):
  absl::flat_hash_set<ChunkKey> sent_;  // chunks the server holds for us
  std::vector<ChunkKey> release_;       // to release with the next message

  absl::Mutex mu_;
  std::deque<Unacked> pending_ ABSL_GUARDED_BY(mu_);
  std::deque<Outgoing> outbox_ ABSL_GUARDED_BY(mu_);
  bool stop_sender_ ABSL_GUARDED_BY(mu_) = false;
  Status item_error_ ABSL_GUARDED_BY(mu_);
  // The stream broke or ended (the reader saw its end, or a Write failed).
  bool stream_done_ ABSL_GUARDED_BY(mu_) = false;
};

class RemoteSampler {
 public:
  ~RemoteSampler();

  // Samples `n` items from `table` (as ReplayTable::SampleBatch): waits up to
  // `timeout` (for each item unless `flexible`); with `flexible`, returns
  // what is available once the first item is.
  Result<std::vector<SampledItem>> Sample(const std::string& table, int64_t n,
                                          absl::Duration timeout = absl::InfiniteDuration(),
                                          bool flexible = false);
  int64_t cached_chunks() const { return static_cast<int64_t>(cache_.size()); }

 private:
  friend class Client;
  friend class ShardedSampler;
  RemoteSampler(std::shared_ptr<grpc::Channel> channel, int64_t chunk_cache_capacity);
  Status Broken();
  // Sample() in two halves, so one caller can have requests out on several
  // streams at once: Send the request, then Receive the batch.
  Status Send(const std::string& table, int64_t n, absl::Duration timeout, bool flexible);
  Result<std::vector<SampledItem>> Receive();

  int64_t capacity_;
  bool first_ = true;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<proto::SampleStreamRequest, proto::SampleStreamResponse>> stream_;
  Status broken_;
  absl::flat_hash_map<ChunkKey, ChunkRef> cache_;
  std::deque<ChunkKey> order_;
};

class Client {
 public:
  // `address` as Server::address(), e.g. "127.0.0.1:40123". Connects lazily.
  explicit Client(const std::string& address, ClientOptions options = {});
  ~Client();

  Result<std::unique_ptr<RemoteWriter>> NewWriter(RemoteWriterOptions options = {});
  // 0 = the default chunk-cache capacity (256 chunks).
  std::unique_ptr<RemoteSampler> NewSampler(int64_t chunk_cache_capacity = 0);

  // Samples on a stream this client keeps (opened on first use).
  Result<std::vector<SampledItem>> Sample(const std::string& table, int64_t n,
                                          absl::Duration timeout = absl::InfiniteDuration(),
                                          bool flexible = false);
  // Returns how many keys were not found.
  Result<int64_t> MutatePriorities(const std::string& table,
                                   const std::vector<std::pair<ItemKey, double>>& updates,
                                   const std::vector<ItemKey>& deletes);
  Result<std::vector<RemoteTableInfo>> Info(absl::Duration timeout = absl::Seconds(30));
  Status Reset(const std::string& table);
  Status Close(const std::string& table);
  // Asks the server to write a checkpoint now; FailedPrecondition when it
  // has no checkpoint directory.
  Result<RemoteCheckpoint> Checkpoint();

 private:
  std::shared_ptr<grpc::Channel> channel_;
  absl::Mutex sample_mu_;
  std::unique_ptr<RemoteSampler> sampler_ ABSL_GUARDED_BY(sample_mu_);
};

}  // namespace flywheel::replay
