// replay::Server: serves replay::Table objects over gRPC (proto/replay.proto;
// the protocol is specified in docs/protocol/replay.md).
//
// The server listens on loopback only (127.0.0.1, [::1], localhost or a unix
// socket). Malformed requests get an error naming the table, item, chunk or
// field; only the stream that sent them is affected. Each insert stream keeps
// the chunks its client sent until the client releases them or the stream
// ends (a vanished client frees them).
//
// Checkpoints: with a checkpoint_dir the server writes checkpoints there
// (docs/replay.md "Checkpoints") on request (Checkpoint(), the Checkpoint
// RPC) and every checkpoint_interval, without blocking inserts or samples,
// and on Start serves the tables of the newest complete checkpoint found
// there: a restarted server resumes where its last checkpoint left off.
//
// Thread-safety: Start/Stop from one thread; stats() from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "flywheel/base/status.h"
#include "flywheel/replay/checkpoint.h"
#include "flywheel/replay/table.h"

namespace grpc {
class Service;
}

namespace flywheel::replay {

// Another gRPC service the replay server serves on its port, e.g. the
// weight store (rl::WeightService). The server keeps it alive while serving.
class ExtraService {
 public:
  virtual ~ExtraService() = default;
  virtual grpc::Service* grpc_service() = 0;
};

struct ServerOptions {
  // host:port to listen on; port 0 picks a free port (see Server::port()).
  // Loopback only: "127.0.0.1:P", "[::1]:P", "localhost:P" or "unix:PATH".
  // Default "127.0.0.1:0".
  std::string address = "127.0.0.1:0";
  // Tables served, looked up by name(); names must be unique. Shared with
  // the caller, who may keep using them in process.
  std::vector<std::shared_ptr<ReplayTable>> tables;
  // Largest message accepted or sent, bytes (> 0). Default 64 MiB.
  int64_t max_message_bytes = int64_t{64} << 20;

  // Checkpoint directory; empty: no checkpoints (the Checkpoint call fails
  // with FailedPrecondition).
  std::string checkpoint_dir;
  // On Start, restore the newest complete checkpoint in checkpoint_dir, if
  // there is one. A restored table replaces the configured table of the
  // same name (contents, rate limiter counters and the options it was
  // checkpointed with; a warning is logged when those differ from the
  // configuration); restored tables that are not configured are served
  // too; configured tables that the checkpoint lacks start empty.
  bool restore = true;
  // Seed of restored Uniform and Prioritized samplers.
  uint64_t restore_seed = 0;
  // Write a checkpoint this often (0: only when asked).
  absl::Duration checkpoint_interval = absl::ZeroDuration();
  // Complete checkpoints kept (>= 1; 0 keeps all).
  int checkpoint_keep_last = 3;

  // Write-ahead log of inserts (needs checkpoint_dir; insert_log.h): each
  // item is logged before it is acknowledged, so acknowledged items survive
  // kill -9 of the server; on Start the items logged after the restored
  // checkpoint are inserted again. Sync: "none" (write() only: survives a
  // killed process, not a power loss), "interval" (fdatasync every
  // insert_log_sync_interval) or "always" (fdatasync per item).
  bool insert_log = false;
  std::string insert_log_sync = "none";
  absl::Duration insert_log_sync_interval = absl::Milliseconds(100);

  // More services on the same port (non-null).
  std::vector<std::shared_ptr<ExtraService>> services;

  Status Validate() const;
};

// Counters for tests and metrics.
struct ServerStats {
  int64_t chunks_received = 0;        // chunk messages on insert streams
  int64_t chunk_bytes_received = 0;   // their compressed bytes
  int64_t items_inserted = 0;
  int64_t item_errors = 0;            // items answered with an error
  int64_t chunks_sent = 0;            // chunk messages on sample streams
  int64_t items_sent = 0;
  int64_t open_insert_streams = 0;
  int64_t open_sample_streams = 0;
  int64_t cached_insert_chunks = 0;   // chunks held by open insert streams' caches
  int64_t checkpoints = 0;            // written by this server
  int64_t checkpoint_failures = 0;
  int64_t items_logged = 0;           // appended to the insert log
  int64_t items_replayed = 0;         // re-inserted from the insert log on Start
  int64_t log_torn_bytes = 0;         // bytes of a torn log tail left on Start
};

class Server {
 public:
  // Validates the options, binds and starts serving.
  static Result<std::unique_ptr<Server>> Start(ServerOptions options);
  ~Server();  // Stop()

  // The bound TCP port (0 for a unix socket).
  int port() const;
  // "127.0.0.1:<port>" (or the unix address): what a Client connects to.
  std::string address() const;
  ServerStats stats() const;
  // The tables served (after any restore), in Info() order.
  std::vector<std::shared_ptr<ReplayTable>> tables() const;
  // The checkpoint id Start restored, or -1.
  int64_t restored_checkpoint() const;
  // Writes a checkpoint of every table now (see the file comment).
  // FailedPrecondition without a checkpoint_dir. Concurrent calls (and the
  // periodic checkpoint) run one at a time.
  Result<CheckpointResult> Checkpoint();
  // Stops accepting calls, cancels open streams (after a short grace period)
  // and waits for their handlers. Idempotent.
  void Stop();

  class Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flywheel::replay
