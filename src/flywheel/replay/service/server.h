// replay::Server: serves replay::Table objects over gRPC (proto/replay.proto;
// the protocol is specified in docs/protocol/replay.md).
//
// The server listens on loopback only (127.0.0.1, [::1], localhost or a unix
// socket). Malformed requests get an error naming the table, item, chunk or
// field; only the stream that sent them is affected. Each insert stream keeps
// the chunks its client sent until the client releases them or the stream
// ends (a vanished client frees them).
//
// Thread-safety: Start/Stop from one thread; stats() from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/replay/table.h"

namespace flywheel::replay {

struct ServerOptions {
  // host:port to listen on; port 0 picks a free port (see Server::port()).
  // Loopback only: "127.0.0.1:P", "[::1]:P", "localhost:P" or "unix:PATH".
  // Default "127.0.0.1:0".
  std::string address = "127.0.0.1:0";
  // Tables served, looked up by name(); names must be unique. Shared with
  // the caller, who may keep using them in process.
  std::vector<std::shared_ptr<Table>> tables;
  // Largest message accepted or sent, bytes (> 0). Default 64 MiB.
  int64_t max_message_bytes = int64_t{64} << 20;

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
  // Stops accepting calls, cancels open streams (after a short grace period)
  // and waits for their handlers. Idempotent.
  void Stop();

  class Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flywheel::replay
