#include "flywheel/base/trace.h"
#include "flywheel/replay/service/server.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/base/logging.h"
#include "flywheel/replay/service/insert_log.h"
#include "flywheel/replay/service/wire.h"
#include "grpcpp/grpcpp.h"
#include "replay.grpc.pb.h"

namespace flywheel::replay {

using internal_service::ChunkFromProto;
using internal_service::ChunkToProto;
using internal_service::ToGrpc;

namespace {

// Blocking table calls wait in slices this long, checking in between whether
// the client went away or the server is stopping.
constexpr absl::Duration kWaitSlice = absl::Milliseconds(100);

// A sample response holds items until its chunks reach about this many bytes.
constexpr int64_t kSampleMessageBytes = int64_t{1} << 20;

bool IsLoopback(const std::string& address) {
  return absl::StartsWith(address, "127.") || absl::StartsWith(address, "[::1]:") ||
         absl::StartsWith(address, "localhost:") || absl::StartsWith(address, "unix:");
}

inline const absl::Status& StatusOf(const Status& s) { return s; }
template <typename T>
const absl::Status& StatusOf(const Result<T>& r) { return r.status(); }

// What differs between a configured table and the restored one that replaces
// it ("" when nothing does).
std::string ConfigDifferences(const ReplayTable& configured, const ReplayTable& restored) {
  const TableInfo a = configured.Info();
  const TableInfo b = restored.Info();
  std::vector<std::string> diffs;
  auto add = [&](const char* what, const auto& x, const auto& y) {
    if (!(x == y)) diffs.push_back(absl::StrCat(what, " ", x, " (configured) vs ", y, " (checkpoint)"));
  };
  add("sampler", a.sampler, b.sampler);
  add("remover", a.remover, b.remover);
  add("max_size", a.max_size, b.max_size);
  add("max_times_sampled", a.max_times_sampled, b.max_times_sampled);
  add("samples_per_insert", a.limiter_options.samples_per_insert, b.limiter_options.samples_per_insert);
  add("min_size_to_sample", a.limiter_options.min_size_to_sample, b.limiter_options.min_size_to_sample);
  add("min_diff", a.limiter_options.min_diff, b.limiter_options.min_diff);
  add("max_diff", a.limiter_options.max_diff, b.limiter_options.max_diff);
  auto sig = [](const ReplayTable& t) -> std::string {
    if (!t.signature()) return "none";
    auto j = SignatureToJson(*t.signature());
    return j.ok() ? *j : std::string(j.status().message());
  };
  add("signature", sig(configured), sig(restored));
  return absl::StrJoin(diffs, "; ");
}

absl::Duration TimeoutFromMs(int64_t ms) { return ms > 0 ? absl::Milliseconds(ms) : absl::InfiniteDuration(); }

// Rewrites "timed out after <slice>" in a table's DeadlineExceeded message
// to the caller's whole timeout.
Status WithTimeout(const Status& s, absl::Duration timeout) {
  std::string msg(s.message());
  constexpr std::string_view kAfter = "timed out after ";
  const size_t at = msg.find(kAfter);
  if (at == std::string::npos) return s;
  const size_t from = at + kAfter.size();
  const size_t to = msg.find_first_of(" :\n", from);
  msg.replace(from, (to == std::string::npos ? msg.size() : to) - from, absl::FormatDuration(timeout));
  return absl::DeadlineExceededError(msg);
}

// Runs `call(slice)` until it returns something other than DeadlineExceeded,
// the overall `timeout` passes, or the RPC is cancelled. With `before_wait`,
// tries `call(0)` first and, if it would have to wait, runs `before_wait()`
// once before waiting (false: the client is gone; Cancelled).
template <typename T, typename F>
T WaitInSlices(grpc::ServerContext* ctx, absl::Duration timeout, F call,
               const std::function<bool()>& before_wait = nullptr) {
  const absl::Time deadline = timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
  if (before_wait) {
    T r = call(absl::ZeroDuration());
    if (r.ok() || !absl::IsDeadlineExceeded(StatusOf(r))) return r;
    if (!before_wait()) return T(absl::CancelledError("the client went away"));
  }
  for (bool first = true;; first = false) {
    // Checked between slices only: IsCancelled takes a lock, and a call that
    // needs no wait should not pay for it.
    if (!first && ctx->IsCancelled()) {
      return T(absl::CancelledError("the call was cancelled (client gone or server stopping)"));
    }
    const absl::Duration left = deadline - absl::Now();
    T r = call(std::max(absl::ZeroDuration(), std::min(left, kWaitSlice)));
    if (!r.ok() && absl::IsDeadlineExceeded(StatusOf(r))) {
      if (absl::Now() < deadline) continue;
      // The table names the last slice; the caller wants its own timeout.
      return T(WithTimeout(StatusOf(r), timeout));
    }
    return r;
  }
}

}  // namespace

Status ServerOptions::Validate() const {
  if (!IsLoopback(address)) {
    return absl::InvalidArgumentError(
        absl::StrCat("server address '", address,
                     "' is not loopback; use 127.0.0.1:PORT, [::1]:PORT, localhost:PORT or unix:PATH"));
  }
  if (max_message_bytes <= 0 || max_message_bytes > (int64_t{1} << 31) - 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes ", max_message_bytes, " must be in [1, 2^31-1]"));
  }
  if (insert_log && checkpoint_dir.empty()) {
    return absl::InvalidArgumentError("insert_log needs a checkpoint_dir (the log lives in CHECKPOINT_DIR/inserts)");
  }
  if (insert_log) {
    FW_RETURN_IF_ERROR(ParseInsertLogSync(insert_log_sync).status());
    if (insert_log_sync == "interval" && insert_log_sync_interval <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError("insert_log_sync_interval must be positive");
    }
  }
  if (checkpoint_keep_last < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint_keep_last ", checkpoint_keep_last, " must be >= 0"));
  }
  if (checkpoint_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint_interval ",
                                                   absl::FormatDuration(checkpoint_interval),
                                                   " must be >= 0"));
  }
  if (checkpoint_interval > absl::ZeroDuration() && checkpoint_dir.empty()) {
    return absl::InvalidArgumentError("checkpoint_interval is set but checkpoint_dir is empty");
  }
  for (const auto& extra : services) {
    if (extra == nullptr || extra->grpc_service() == nullptr) return absl::InvalidArgumentError("services: null service");
  }
  absl::flat_hash_set<std::string> names;
  for (const auto& t : tables) {
    if (t == nullptr) return absl::InvalidArgumentError("tables: null table");
    if (!names.insert(t->name()).second) {
      return absl::InvalidArgumentError(absl::StrCat("tables: name '", t->name(), "' appears twice"));
    }
  }
  return absl::OkStatus();
}

class Server::Impl final : public proto::ReplayService::Service {
 public:
  explicit Impl(ServerOptions options) : options_(std::move(options)) {}

  // The tables to serve: the configured ones, replaced or joined by those of
  // the newest checkpoint when restoring.
  Status PrepareTables() {
    served_ = options_.tables;
    if (!options_.checkpoint_dir.empty() && options_.restore) {
      RestoreOptions ro;
      ro.seed = options_.restore_seed;
      auto r = Restore(options_.checkpoint_dir, kLatestCheckpoint, ro);
      if (!r.ok() && !absl::IsNotFound(r.status())) {
        return Annotate(r.status(), absl::StrCat("replay server: restoring the latest checkpoint in ",
                                                 options_.checkpoint_dir));
      }
      if (r.ok()) {
        restored_id_ = r->id;
        for (auto& t : r->tables) {
          std::shared_ptr<ReplayTable> table(std::move(t));
          auto it = std::find_if(served_.begin(), served_.end(),
                                 [&](const auto& c) { return c->name() == table->name(); });
          if (it == served_.end()) {
            FW_LOG(WARNING) << "replay server: table '" << table->name() << "' of checkpoint " << r->id
                            << " is not configured; serving it as checkpointed";
            served_.push_back(std::move(table));
            continue;
          }
          const std::string diff = ConfigDifferences(**it, *table);
          if (!diff.empty()) {
            FW_LOG(WARNING) << "replay server: table '" << table->name() << "' keeps the options of checkpoint "
                            << r->id << ", not the configuration's: " << diff;
          }
          *it = std::move(table);
        }
        FW_LOG(INFO) << "replay server: restored checkpoint " << r->id << " from " << options_.checkpoint_dir;
      }
    }
    for (const auto& t : served_) tables_[t->name()] = t;
    if (options_.insert_log) FW_RETURN_IF_ERROR(OpenInsertLog());
    return absl::OkStatus();
  }

  // Re-inserts the items logged after the restored checkpoint, then opens
  // the log for this run's inserts.
  Status OpenInsertLog() {
    const std::string dir = options_.checkpoint_dir + "/inserts";
    FW_ASSIGN_OR_RETURN(const InsertLogSync sync, ParseInsertLogSync(options_.insert_log_sync));
    int64_t present = 0, failed = 0, unknown = 0;
    if (options_.restore) {
      auto replayed = InsertLog::Replay(dir, restored_id_, [&](const std::string& name, Item item) -> Status {
        auto it = tables_.find(name);
        if (it == tables_.end()) {
          ++unknown;
          return absl::OkStatus();
        }
        Status s = it->second->Insert(item, absl::ZeroDuration());
        // The rate limiter would make it wait (nobody samples yet): the item
        // was acknowledged once, so it goes in as a restored item does.
        if (absl::IsDeadlineExceeded(s)) s = it->second->RestoreItem(std::move(item));
        if (absl::IsAlreadyExists(s)) {
          ++present;
        } else if (!s.ok()) {
          ++failed;
          FW_LOG(WARNING) << "replay server: insert log item not restored: " << s;
        } else {
          items_replayed_++;
        }
        return absl::OkStatus();
      });
      if (!replayed.ok()) return Annotate(replayed.status(), "replay server: reading the insert log");
      log_torn_bytes_ = replayed->torn_bytes;
      if (replayed->items > 0 || replayed->torn_bytes > 0) {
        FW_LOG(INFO) << "replay server: insert log " << dir << ": " << items_replayed_.load() << " of "
                     << replayed->items << " logged items re-inserted after checkpoint " << restored_id_ << " ("
                     << present << " already held, " << failed << " failed, " << unknown
                     << " for unknown tables; " << replayed->torn_bytes << " bytes of torn tail left)";
      }
    }
    FW_ASSIGN_OR_RETURN(insert_log_, InsertLog::Open(dir, sync, options_.insert_log_sync_interval));
    return absl::OkStatus();
  }

  Status Start() {
    FW_RETURN_IF_ERROR(PrepareTables());
    grpc::ServerBuilder builder;
    builder.AddListeningPort(options_.address, grpc::InsecureServerCredentials(), &port_);
    builder.SetMaxReceiveMessageSize(static_cast<int>(options_.max_message_bytes));
    builder.SetMaxSendMessageSize(static_cast<int>(options_.max_message_bytes));
    builder.RegisterService(this);
    for (const auto& extra : options_.services) builder.RegisterService(extra->grpc_service());
    server_ = builder.BuildAndStart();
    if (server_ == nullptr) {
      return absl::UnavailableError(absl::StrCat("replay server: cannot listen on '", options_.address, "'"));
    }
    if (absl::StartsWith(options_.address, "unix:")) {
      port_ = 0;
      address_ = options_.address;
    } else {
      address_ = absl::StrCat(options_.address.substr(0, options_.address.rfind(':')), ":", port_);
    }
    if (options_.checkpoint_interval > absl::ZeroDuration()) {
      periodic_ = std::thread([this] { PeriodicCheckpoints(); });
    }
    return absl::OkStatus();
  }

  void Stop() {
    {
      absl::MutexLock l(&stop_mu_);
      stopping_ = true;
    }
    if (periodic_.joinable()) periodic_.join();
    if (server_ == nullptr) return;
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    server_->Wait();
    server_.reset();
  }

  int port() const { return port_; }
  const std::string& address() const { return address_; }

  ServerStats stats() const {
    ServerStats s;
    s.chunks_received = chunks_received_.load();
    s.chunk_bytes_received = chunk_bytes_received_.load();
    s.items_inserted = items_inserted_.load();
    s.item_errors = item_errors_.load();
    s.chunks_sent = chunks_sent_.load();
    s.items_sent = items_sent_.load();
    s.open_insert_streams = open_insert_streams_.load();
    s.open_sample_streams = open_sample_streams_.load();
    s.cached_insert_chunks = cached_insert_chunks_.load();
    s.checkpoints = checkpoints_.load();
    s.checkpoint_failures = checkpoint_failures_.load();
    s.items_logged = insert_log_ != nullptr ? insert_log_->items_appended() : 0;
    s.items_replayed = items_replayed_.load();
    s.log_torn_bytes = log_torn_bytes_;
    return s;
  }

  const std::vector<std::shared_ptr<ReplayTable>>& served() const { return served_; }
  int64_t restored_id() const { return restored_id_; }

  Result<CheckpointResult> WriteCheckpoint() {
    if (options_.checkpoint_dir.empty()) {
      return absl::FailedPreconditionError("this replay server has no checkpoint directory (checkpoint_dir)");
    }
    absl::MutexLock l(&checkpoint_mu_);
    std::vector<ReplayTable*> tables;
    for (const auto& t : served_) tables.push_back(t.get());
    CheckpointOptions co;
    co.keep_last = options_.checkpoint_keep_last;
    // Every item logged before the rotation is in the tables before the
    // snapshot is taken, so the checkpoint covers the closed segments.
    int64_t covered = -1;
    if (insert_log_ != nullptr) {
      FW_ASSIGN_OR_RETURN(covered, insert_log_->Rotate());
    }
    auto r = ::flywheel::replay::Checkpoint(tables, options_.checkpoint_dir, co);
    if (r.ok()) {
      checkpoints_++;
      if (insert_log_ != nullptr) {
        if (Status s = insert_log_->Covered(r->id, covered); !s.ok()) {
          FW_LOG(WARNING) << "replay server: insert log: " << s;
        }
      }
    } else {
      checkpoint_failures_++;
    }
    return r;
  }

  // ---- InsertStream: docs/protocol/replay.md#insertstream ----
  grpc::Status InsertStream(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<proto::InsertStreamResponse, proto::InsertStreamRequest>* stream) override {
    open_insert_streams_++;
    absl::flat_hash_map<ChunkKey, ChunkRef> cache;
    // Runs when the handler returns, whichever way: the stream's chunks go.
    struct Cleanup {
      Impl* self;
      absl::flat_hash_map<ChunkKey, ChunkRef>* cache;
      ~Cleanup() {
        self->cached_insert_chunks_ -= static_cast<int64_t>(cache->size());
        self->open_insert_streams_--;
      }
    } cleanup{this, &cache};

    proto::InsertStreamRequest req;
    proto::InsertStreamResponse resp;
    // Acknowledgements (docs/protocol/replay.md#acknowledgements): one
    // response per item, or with `coalesce_acks` the inserted keys gathered
    // in `acks` and written before an insert waits, before an error and at
    // the end of the message.
    proto::InsertStreamResponse acks;
    const std::function<bool()> kNoHook;
    const std::function<bool()> flush_acks = [&]() -> bool {
      if (acks.inserted_keys().empty()) return true;
      const bool ok = stream->Write(acks);
      acks.Clear();
      return ok;
    };
    while (stream->Read(&req)) {
      FW_TRACE_SPAN("replay", "insert_request");
      for (auto& pc : *req.mutable_chunks()) {
        const int64_t bytes = static_cast<int64_t>(pc.compressed().size());
        auto chunk = ChunkFromProto(&pc);
        if (!chunk.ok()) return ToGrpc(Annotate(chunk.status(), "insert stream"));
        chunks_received_++;
        chunk_bytes_received_ += bytes;
        auto [it, inserted] = cache.insert_or_assign((*chunk)->key(), *std::move(chunk));
        if (inserted) cached_insert_chunks_++;
      }
      // Releases name chunks of earlier items only (the writer never releases a
      // chunk a later item uses), so apply them before acknowledging this
      // message's items: a client that saw the ack sees the release too.
      for (ChunkKey k : req.release_chunk_keys()) cached_insert_chunks_ -= static_cast<int64_t>(cache.erase(k));
      const absl::Duration timeout = TimeoutFromMs(req.timeout_ms());
      const bool coalesce = req.coalesce_acks();
      for (const auto& pi : req.items()) {
        const Status s = InsertOne(ctx, cache, pi, timeout, acks.inserted_keys().empty() ? kNoHook : flush_acks);
        if (s.ok()) {
          items_inserted_++;
        } else {
          item_errors_++;
        }
        if (coalesce && s.ok()) {
          acks.add_inserted_keys(pi.key());
          continue;
        }
        if (!flush_acks()) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
        resp.Clear();
        resp.set_key(pi.key());
        resp.set_code(static_cast<int32_t>(s.code()));
        resp.set_message(std::string(s.message()));
        if (!stream->Write(resp)) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
      }
      if (!flush_acks()) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
    }
    return grpc::Status::OK;
  }

  // ---- SampleStream: docs/protocol/replay.md#samplestream ----
  grpc::Status SampleStream(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<proto::SampleStreamResponse, proto::SampleStreamRequest>* stream) override {
    open_sample_streams_++;
    struct Cleanup {
      std::atomic<int64_t>* n;
      ~Cleanup() { (*n)--; }
    } cleanup{&open_sample_streams_};
    // Chunks the client holds: the last `capacity` first-sent chunks, FIFO.
    absl::flat_hash_set<ChunkKey> sent;
    std::deque<ChunkKey> order;
    int64_t capacity = -1;
    // One response message for the stream's life: cleared, it keeps its
    // chunk and item objects and their buffers, so copying a chunk's bytes
    // in reuses memory instead of allocating (and faulting in) fresh pages.
    proto::SampleStreamResponse resp;

    proto::SampleStreamRequest req;
    while (stream->Read(&req)) {
      FW_TRACE_SPAN("replay", "sample_request");
      if (capacity < 0) {
        capacity = req.chunk_cache_capacity() > 0 ? req.chunk_cache_capacity()
                                                  : internal_service::kDefaultSampleChunkCache;
      }
      // Sends a batch's items with the chunks the client lacks, several items
      // per message (docs/protocol/replay.md#samplestream).
      auto send = [&](const std::vector<SampledItem>& batch) -> bool {
        resp.Clear();
        int64_t bytes = 0;
        for (size_t i = 0; i < batch.size(); ++i) {
          const SampledItem& s = batch[i];
          int64_t fresh = 0;
          for (const auto& col : s.item->columns) {
            for (const auto& c : col.chunks) {
              if (sent.contains(c->key())) continue;
              ChunkToProto(*c, resp.add_chunks());
              bytes += static_cast<int64_t>(c->compressed().size());
              fresh++;
              // The client applies the same insertions and evictions in the
              // same order (protocol: chunk cache).
              sent.insert(c->key());
              order.push_back(c->key());
              while (static_cast<int64_t>(order.size()) > capacity) {
                sent.erase(order.front());
                order.pop_front();
              }
            }
          }
          proto::SampledItem* out = resp.add_items();
          internal_service::ItemToProto(req.table(), s.item->key, s.item->priority, s.item->columns, out->mutable_item());
          out->set_priority(s.priority);
          out->set_probability(s.probability);
          out->set_table_size(s.table_size);
          out->set_times_sampled(s.times_sampled);
          bytes += 64;
          chunks_sent_ += fresh;
          items_sent_++;
          const bool last = i + 1 == batch.size();
          if (last || bytes >= kSampleMessageBytes) {
            resp.set_end_of_batch(last);
            if (!stream->Write(resp)) return false;
            resp.Clear();
            bytes = 0;
          }
        }
        return true;
      };
      auto fail = [&](const Status& s) -> bool {
        proto::SampleStreamResponse resp;
        resp.set_end_of_batch(true);
        resp.set_code(static_cast<int32_t>(s.code()));
        resp.set_message(std::string(s.message()));
        return stream->Write(resp);
      };

      auto t = tables_.find(req.table());
      if (t == tables_.end()) {
        if (!fail(absl::NotFoundError(absl::StrCat("sample: no table '", req.table(), "'")))) break;
        continue;
      }
      ReplayTable* table = t->second.get();
      const int64_t n = req.num_samples();
      if (n < 1) {
        if (!fail(absl::InvalidArgumentError(absl::StrCat("sample: num_samples ", n, " must be >= 1")))) break;
        continue;
      }
      const absl::Duration timeout = TimeoutFromMs(req.timeout_ms());
      // Flexible: what may proceed once the first item can. Otherwise all or
      // nothing (ReplayTable::SampleBatch): a batch that times out took no items,
      // however many slices it waited through.
      auto batch = WaitInSlices<Result<std::vector<SampledItem>>>(
          ctx, timeout, [&](absl::Duration slice) { return table->SampleBatch(n, req.flexible(), slice); });
      const bool ok = batch.ok() ? send(*batch) : fail(batch.status());
      if (!ok) break;
    }
    return grpc::Status::OK;
  }

  grpc::Status MutatePriorities(grpc::ServerContext*, const proto::MutatePrioritiesRequest* req,
                                proto::MutatePrioritiesResponse* resp) override {
    auto t = tables_.find(req->table());
    if (t == tables_.end()) return ToGrpc(absl::NotFoundError(absl::StrCat("mutate_priorities: no table '", req->table(), "'")));
    if (req->update_keys_size() != req->update_priorities_size()) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrCat("mutate_priorities: ", req->update_keys_size(),
                                                            " update_keys but ", req->update_priorities_size(),
                                                            " update_priorities")));
    }
    std::vector<std::pair<ItemKey, double>> updates;
    for (int i = 0; i < req->update_keys_size(); ++i) updates.emplace_back(req->update_keys(i), req->update_priorities(i));
    std::vector<ItemKey> deletes(req->delete_keys().begin(), req->delete_keys().end());
    auto missing = t->second->MutatePriorities(updates, deletes);
    if (!missing.ok()) return ToGrpc(missing.status());
    resp->set_missing(*missing);
    return grpc::Status::OK;
  }

  grpc::Status Info(grpc::ServerContext*, const proto::InfoRequest*, proto::InfoResponse* resp) override {
    for (const auto& t : served_) internal_service::TableInfoToProto(t->Info(), t->Explain(), resp->add_tables());
    return grpc::Status::OK;
  }

  grpc::Status Reset(grpc::ServerContext*, const proto::ResetRequest* req, proto::ResetResponse*) override {
    auto t = tables_.find(req->table());
    if (t == tables_.end()) return ToGrpc(absl::NotFoundError(absl::StrCat("reset: no table '", req->table(), "'")));
    t->second->Reset();
    return grpc::Status::OK;
  }

  grpc::Status Close(grpc::ServerContext*, const proto::CloseRequest* req, proto::CloseResponse*) override {
    auto t = tables_.find(req->table());
    if (t == tables_.end()) return ToGrpc(absl::NotFoundError(absl::StrCat("close: no table '", req->table(), "'")));
    t->second->Close();
    return grpc::Status::OK;
  }

  grpc::Status Checkpoint(grpc::ServerContext*, const proto::CheckpointRequest*,
                          proto::CheckpointResponse* resp) override {
    auto r = WriteCheckpoint();
    if (!r.ok()) return ToGrpc(r.status());
    resp->set_id(r->id);
    resp->set_path(r->path);
    resp->set_max_pause_us(absl::ToInt64Microseconds(r->max_pause));
    resp->set_num_items(r->num_items);
    resp->set_num_chunks(r->num_chunks);
    resp->set_chunk_bytes(static_cast<int64_t>(r->chunk_bytes));
    resp->set_duration_us(absl::ToInt64Microseconds(r->duration));
    return grpc::Status::OK;
  }

 private:
  void PeriodicCheckpoints() {
    absl::MutexLock l(&stop_mu_);
    while (!stop_mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.checkpoint_interval)) {
      stop_mu_.Unlock();
      auto r = WriteCheckpoint();
      if (r.ok()) {
        FW_LOG(INFO) << "replay server: checkpoint " << r->id << " (" << r->num_items << " items, longest pause "
                     << absl::FormatDuration(r->max_pause) << ", " << absl::FormatDuration(r->duration) << ")";
      } else {
        FW_LOG(ERROR) << "replay server: periodic checkpoint failed: " << r.status();
      }
      stop_mu_.Lock();
    }
  }

  // `before_wait`: see WaitInSlices.
  Status InsertOne(grpc::ServerContext* ctx, const absl::flat_hash_map<ChunkKey, ChunkRef>& cache,
                   const proto::Item& pi, absl::Duration timeout, const std::function<bool()>& before_wait) {
    auto t = tables_.find(pi.table());
    if (t == tables_.end()) {
      return absl::NotFoundError(absl::StrCat("insert item ", pi.key(), ": no table '", pi.table(), "'"));
    }
    Item item;
    item.key = pi.key();
    item.priority = pi.priority();
    if (pi.columns().empty()) return absl::InvalidArgumentError(absl::StrCat("insert item ", pi.key(), ": no columns"));
    for (const auto& pc : pi.columns()) {
      TrajectoryColumn col;
      col.name = pc.name();
      col.offset = pc.offset();
      col.length = pc.length();
      if (pc.chunk_keys().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("insert item ", pi.key(), " column '", pc.name(), "': no chunk_keys"));
      }
      for (ChunkKey k : pc.chunk_keys()) {
        auto it = cache.find(k);
        if (it == cache.end()) {
          return absl::InvalidArgumentError(absl::StrCat("insert item ", pi.key(), " column '", pc.name(),
                                                         "': chunk ", k, " was not sent on this stream (or was released)"));
        }
        col.chunks.push_back(it->second);
      }
      FW_RETURN_IF_ERROR_CTX(col.Validate(), "insert item ", pi.key(), " column '", pc.name(), "'");
      item.columns.push_back(std::move(col));
    }
    ReplayTable* table = t->second.get();
    FW_RETURN_IF_ERROR(WaitInSlices<Status>(
        ctx, timeout, [&](absl::Duration slice) { return table->Insert(item, slice); }, before_wait));
    // Logged before it is acknowledged (the caller acks on OK).
    if (insert_log_ != nullptr) {
      FW_RETURN_IF_ERROR_CTX(insert_log_->Append(pi.table(), item), "insert item ", pi.key(),
                             " was inserted but not logged");
    }
    return absl::OkStatus();
  }

  ServerOptions options_;
  std::vector<std::shared_ptr<ReplayTable>> served_;  // in Info() order
  int64_t restored_id_ = -1;
  std::unique_ptr<InsertLog> insert_log_;
  std::atomic<int64_t> items_replayed_{0};
  int64_t log_torn_bytes_ = 0;
  absl::flat_hash_map<std::string, std::shared_ptr<ReplayTable>> tables_;
  absl::Mutex checkpoint_mu_;  // one checkpoint at a time
  std::atomic<int64_t> checkpoints_{0}, checkpoint_failures_{0};
  absl::Mutex stop_mu_;
  bool stopping_ ABSL_GUARDED_BY(stop_mu_) = false;
  std::thread periodic_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string address_;

  std::atomic<int64_t> chunks_received_{0}, chunk_bytes_received_{0}, items_inserted_{0}, item_errors_{0};
  std::atomic<int64_t> chunks_sent_{0}, items_sent_{0};
  std::atomic<int64_t> open_insert_streams_{0}, open_sample_streams_{0}, cached_insert_chunks_{0};
};

Result<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  FW_RETURN_IF_ERROR_CTX(options.Validate(), "replay server options");
  auto impl = std::make_unique<Impl>(std::move(options));
  FW_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() { Stop(); }
int Server::port() const { return impl_->port(); }
std::string Server::address() const { return impl_->address(); }
ServerStats Server::stats() const { return impl_->stats(); }
void Server::Stop() { impl_->Stop(); }
std::vector<std::shared_ptr<ReplayTable>> Server::tables() const { return impl_->served(); }
int64_t Server::restored_checkpoint() const { return impl_->restored_id(); }
Result<CheckpointResult> Server::Checkpoint() { return impl_->WriteCheckpoint(); }

}  // namespace flywheel::replay
