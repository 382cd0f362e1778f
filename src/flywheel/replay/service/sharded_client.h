// replay::ShardedClient: one client over several replay servers that each
// serve the same tables (docs/replay.md "Sharding").
//
// Writes are spread round robin by episode: a ShardedWriter sends each
// episode to one server and the next episode to the next server, so the
// items of an episode, which share its chunks, never cost chunk bytes on two
// servers. Writers start on different servers (the client's n-th writer
// starts on server n mod S).
//
// Samples are spread over the servers in proportion to the size of the table
// on each: a batch of n is split with systematic sampling (each server's
// share is within one item of n * size_s / total, and its expectation is
// exact), the requests go to all chosen servers at once, and each item's
// `probability` is multiplied by the chance that its server was the one
// asked, so importance weights stay right for the union of the tables. Sizes
// come from Info() at most every `size_refresh` and from the table_size of
// every sampled item.
//
// A ShardedClient with one address behaves like a Client.
//
// Thread-safety: ShardedClient methods are thread-safe. A ShardedWriter or
// ShardedSampler is used by one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flywheel/base/rng.h"
#include "flywheel/base/status.h"
#include "flywheel/replay/service/client.h"

namespace flywheel::replay {

struct ShardedClientOptions {
  ClientOptions client;
  // How stale the per-server table sizes used to spread samples may get.
  absl::Duration size_refresh = absl::Milliseconds(200);
  // Seed of the sample spreading (systematic-sampling offsets).
  uint64_t seed = 0;
};

class ShardedWriter {
 public:
  ~ShardedWriter();

  // As RemoteWriter, on the current episode's server.
  Status Append(const std::vector<StepValue>& step);
  Result<ItemKey> CreateItem(const std::string& table, double priority,
                             const std::vector<std::pair<std::string, int64_t>>& trajectory,
                             absl::Duration timeout = absl::InfiniteDuration());
  // Ends the episode on its server and moves to the next server.
  Status EndEpisode();
  // Flushes every server's stream; returns the first error with the other
  // servers' errors appended to its message.
  Status Flush(absl::Duration timeout = absl::InfiniteDuration());
  Status Close();

  int current_shard() const { return current_; }
  int num_shards() const { return static_cast<int>(writers_.size()); }
  int64_t episode_steps() const { return writers_[current_]->episode_steps(); }
  // One server's writer, for callers that flush or close server by server
  // (the Python binding flushes in slices so Ctrl-C can interrupt it).
  // Appends and items go through this class, which owns the rotation.
  RemoteWriter& shard(int i) { return *writers_[static_cast<size_t>(i)]; }

 private:
  friend class ShardedClient;
  ShardedWriter(std::vector<std::unique_ptr<RemoteWriter>> writers, int first);
  static Status Combined(const std::vector<Status>& all);

  std::vector<std::unique_ptr<RemoteWriter>> writers_;
  int current_;
};

class ShardedClient;

class ShardedSampler {
 public:
  ~ShardedSampler();

  // As RemoteSampler::Sample over the union of the servers' tables. Without
  // `flexible`, every server asked must deliver its share; an error from
  // one is returned, and the items other servers already sent are counted as
  // sampled there (as a failed batch of several RemoteSampler calls would).
  // With `flexible`, servers that time out or have nothing are skipped and
  // whatever the others sent is returned; the call fails only when every
  // server asked failed (with the first error).
  Result<std::vector<SampledItem>> Sample(const std::string& table, int64_t n,
                                          absl::Duration timeout = absl::InfiniteDuration(),
                                          bool flexible = false);

 private:
  friend class ShardedClient;
  ShardedSampler(ShardedClient* client, std::vector<std::unique_ptr<RemoteSampler>> samplers);

  ShardedClient* client_;
  std::vector<std::unique_ptr<RemoteSampler>> samplers_;
};

class ShardedClient {
 public:
  // InvalidArgument for an empty list or an address given twice.
  static Result<std::unique_ptr<ShardedClient>> Create(std::vector<std::string> addresses,
                                                      ShardedClientOptions options = {});
  ~ShardedClient();

  int num_shards() const { return static_cast<int>(clients_.size()); }
  const std::string& address(int shard) const { return addresses_[shard]; }
  Client& shard(int i) { return *clients_[i]; }

  Result<std::unique_ptr<ShardedWriter>> NewWriter(RemoteWriterOptions options = {});
  std::unique_ptr<ShardedSampler> NewSampler(int64_t chunk_cache_capacity = 0);

  // Samples on a sampler this client keeps (one call at a time).
  Result<std::vector<SampledItem>> Sample(const std::string& table, int64_t n,
                                          absl::Duration timeout = absl::InfiniteDuration(),
                                          bool flexible = false);
  // Sent to every server (an item lives on one); returns how many of the
  // keys no server had.
  Result<int64_t> MutatePriorities(const std::string& table,
                                   const std::vector<std::pair<ItemKey, double>>& updates,
                                   const std::vector<ItemKey>& deletes);
  // Each server's tables, in address order.
  Result<std::vector<std::vector<RemoteTableInfo>>> Info(absl::Duration timeout = absl::Seconds(30));
  // The tables summed over servers (size, limiter counters, blocked calls;
  // options from the first server), with each server's Explain() joined.
  Result<std::vector<RemoteTableInfo>> MergedInfo(absl::Duration timeout = absl::Seconds(30));
  // On every server; the first error wins (every server is still asked).
  Status Reset(const std::string& table);
  Status Close(const std::string& table);
  Result<std::vector<RemoteCheckpoint>> Checkpoint();

 private:
  friend class ShardedSampler;
  ShardedClient(std::vector<std::string> addresses, ShardedClientOptions options);
  // How many of `n` samples of `table` each server gets (refreshing sizes
  // when stale), and the chance that each server is asked for an item.
  std::vector<int64_t> Spread(const std::string& table, int64_t n, std::vector<double>* share);
  void NoteSize(const std::string& table, int shard, int64_t size);
  // Calls `call` on every server; the first error wins, naming its server.
  Status Broadcast(const std::function<Status(Client&)>& call);

  std::vector<std::string> addresses_;
  ShardedClientOptions options_;
  std::vector<std::unique_ptr<Client>> clients_;

  absl::Mutex mu_;
  int next_writer_ ABSL_GUARDED_BY(mu_) = 0;
  SplitMix64 rng_ ABSL_GUARDED_BY(mu_);
  struct Sizes {
    std::vector<int64_t> size;
    absl::Time refreshed = absl::InfinitePast();
  };
  std::map<std::string, Sizes> sizes_ ABSL_GUARDED_BY(mu_);

  absl::Mutex sample_mu_;
  std::unique_ptr<ShardedSampler> sampler_ ABSL_GUARDED_BY(sample_mu_);
};

}  // namespace flywheel::replay
