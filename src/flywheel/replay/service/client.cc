#include "flywheel/replay/service/client.h"

#include <sys/random.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "flywheel/base/rng.h"
#include "flywheel/replay/service/wire.h"
#include "grpcpp/grpcpp.h"
#include "replay.grpc.pb.h"

namespace flywheel::replay {

using internal_service::ChunkFromProto;
using internal_service::ChunkToProto;
using internal_service::FromGrpc;
using internal_service::FromWire;

namespace {

int64_t TimeoutToMs(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return 0;
  return std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout));
}

uint64_t RandomSeed() {
  uint64_t seed = 0;
  if (getrandom(&seed, sizeof seed, 0) != static_cast<ssize_t>(sizeof seed)) {
    seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  return seed;
}

}  // namespace

Status RemoteWriterOptions::Validate() const {
  FW_RETURN_IF_ERROR(writer.Validate());
  if (max_in_flight_items < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_in_flight_items ", max_in_flight_items, " must be >= 1"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- RemoteWriter

RemoteWriter::RemoteWriter(std::shared_ptr<grpc::Channel> channel, RemoteWriterOptions options)
    : options_(options), ctx_(std::make_unique<grpc::ClientContext>()), key_base_(RandomSeed()) {
  auto stub = proto::ReplayService::NewStub(channel);
  stream_ = stub->InsertStream(ctx_.get());
  reader_ = std::thread([this] { ReadAcks(); });
}

RemoteWriter::~RemoteWriter() {
  if (!finished_) {
    ctx_->TryCancel();
    Finish().IgnoreError();
  }
}

void RemoteWriter::ReadAcks() {
  proto::InsertStreamResponse resp;
  while (stream_->Read(&resp)) {
    absl::MutexLock lock(&mu_);
    in_flight_--;
    if (resp.code() != 0 && item_error_.ok()) item_error_ = FromWire(resp.code(), resp.message());
  }
  absl::MutexLock lock(&mu_);
  stream_done_ = true;
}

// Joins the reader and collects the stream's final status.
Status RemoteWriter::Finish() {
  if (finished_) return final_status_;
  finished_ = true;
  if (reader_.joinable()) reader_.join();
  final_status_ = FromGrpc(stream_->Finish());
  if (!final_status_.ok()) final_status_ = Annotate(final_status_, "replay insert stream");
  return final_status_;
}

Status RemoteWriter::TakeError() {
  Status s = std::move(item_error_);
  item_error_ = absl::OkStatus();
  return s;
}

ChunkKey RemoteWriter::NextKey() { return Mix64(key_base_ ^ Mix64(++key_counter_)); }

Status RemoteWriter::Append(const std::vector<StepValue>& step) {
  FW_RETURN_IF_ERROR(options_.Validate());
  for (const auto& v : step) {
    if (!v.type.is_fixed_width() || v.data == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("append: column '", v.column, "' needs a fixed-width value, got ",
                                                     v.type.ToString()));
    }
    auto [it, inserted] = columns_.try_emplace(v.column);
    ColumnState& c = it->second;
    if (inserted || (c.chunks.empty() && c.pending_steps == 0)) {
      c.type = v.type;
    } else if (!(c.type == v.type)) {
      return absl::InvalidArgumentError(absl::StrCat("append: column '", v.column, "' holds ", c.type.ToString(),
                                                     ", got a value of ", v.type.ToString()));
    }
    if (c.total_steps != episode_steps_) {
      return absl::InvalidArgumentError(absl::StrCat("append: column '", v.column, "' skipped steps (has ",
                                                     c.total_steps, " of ", episode_steps_,
                                                     "); give every column a value at every step"));
    }
  }
  for (const auto& v : step) {
    ColumnState& c = columns_[v.column];
    c.pending.append(static_cast<const char*>(v.data), v.type.fixed_width());
    c.pending_steps++;
    c.total_steps++;
    if (c.pending_steps >= options_.writer.chunk_length) FW_RETURN_IF_ERROR(FlushColumn(v.column, c));
  }
  episode_steps_++;
  return absl::OkStatus();
}

Status RemoteWriter::FlushColumn(const std::string& name, ColumnState& c) {
  if (c.pending_steps == 0) return absl::OkStatus();
  FW_ASSIGN_OR_RETURN_CTX(ChunkRef chunk,
                          Chunk::Make(NextKey(), c.type, c.pending_steps, c.pending.data(), options_.writer.codec),
                          "column '", name, "'");
  c.chunks.push_back(std::move(chunk));
  c.pending.clear();
  c.pending_steps = 0;
  while (c.chunks.size() > 1 &&
         c.total_steps - (c.first_step + c.chunks.front()->num_steps()) >= options_.writer.max_history) {
    c.first_step += c.chunks.front()->num_steps();
    if (sent_.erase(c.chunks.front()->key())) release_.push_back(c.chunks.front()->key());
    c.chunks.pop_front();
  }
  return absl::OkStatus();
}

Result<ItemKey> RemoteWriter::CreateItem(const std::string& table, double priority,
                                         const std::vector<std::pair<std::string, int64_t>>& trajectory,
                                         absl::Duration timeout) {
  if (finished_) return absl::FailedPreconditionError("create_item: the writer is closed");
  if (trajectory.empty()) return absl::InvalidArgumentError("create_item: empty trajectory");
  {
    // Room in the run-ahead window first, so a failure leaves no trace.
    absl::MutexLock lock(&mu_);
    FW_RETURN_IF_ERROR(TakeError());
    auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return in_flight_ < options_.max_in_flight_items || stream_done_;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&room), timeout)) {
      return absl::DeadlineExceededError(absl::StrCat("create_item: ", in_flight_,
                                                      " items still unacknowledged by the server after ",
                                                      absl::FormatDuration(timeout)));
    }
    FW_RETURN_IF_ERROR(TakeError());
  }
  bool done;
  {
    absl::MutexLock lock(&mu_);
    done = stream_done_;
  }
  if (done) {
    Status s = Finish();
    return s.ok() ? absl::UnavailableError("create_item: the insert stream ended") : s;
  }
  proto::InsertStreamRequest req;
  std::vector<const Chunk*> to_send;
  proto::Item* item = req.add_items();
  item->set_table(table);
  item->set_key(NextKey());
  item->set_priority(priority);
  for (const auto& [name, num_steps] : trajectory) {
    auto it = columns_.find(name);
    if (it == columns_.end()) {
      return absl::NotFoundError(absl::StrCat("create_item: no column '", name, "' has been appended"));
    }
    ColumnState& c = it->second;
    if (num_steps < 1 || num_steps > c.total_steps) {
      return absl::InvalidArgumentError(absl::StrCat("create_item: column '", name, "' has ", c.total_steps,
                                                     " steps this episode; cannot take the last ", num_steps));
    }
    FW_RETURN_IF_ERROR(FlushColumn(name, c));
    const int64_t start = c.total_steps - num_steps;
    if (start < c.first_step) {
      return absl::OutOfRangeError(absl::StrCat("create_item: column '", name, "' step ", start,
                                                " was already dropped (max_history ", options_.writer.max_history,
                                                ")"));
    }
    proto::Column* col = item->add_columns();
    col->set_name(name);
    int64_t chunk_start = c.first_step;
    bool first = true;
    for (const auto& chunk : c.chunks) {
      const int64_t chunk_end = chunk_start + chunk->num_steps();
      if (chunk_end > start) {
        if (first) col->set_offset(start - chunk_start);
        first = false;
        col->add_chunk_keys(chunk->key());
        if (!sent_.contains(chunk->key())) to_send.push_back(chunk.get());
      }
      chunk_start = chunk_end;
    }
    col->set_length(num_steps);
  }
  req.set_timeout_ms(TimeoutToMs(timeout));
  for (ChunkKey k : release_) req.add_release_chunk_keys(k);
  release_.clear();
  // Commit: from here on the server is told about these chunks.
  for (const Chunk* c : to_send) {
    if (sent_.insert(c->key()).second) ChunkToProto(*c, req.add_chunks());
  }
  const ItemKey key = item->key();
  {
    absl::MutexLock lock(&mu_);
    in_flight_++;
  }
  if (!stream_->Write(req)) {
    {
      absl::MutexLock lock(&mu_);
      in_flight_--;
    }
    Status s = Finish();
    return s.ok() ? absl::UnavailableError("create_item: the insert stream ended") : s;
  }
  return key;
}

Status RemoteWriter::EndEpisode() {
  for (const auto& [name, c] : columns_) {
    for (const auto& chunk : c.chunks) {
      if (sent_.erase(chunk->key())) release_.push_back(chunk->key());
    }
  }
  columns_.clear();
  episode_steps_ = 0;
  return absl::OkStatus();
}

Status RemoteWriter::Flush(absl::Duration timeout) {
  if (finished_) return final_status_.ok() ? absl::FailedPreconditionError("flush: the writer is closed") : final_status_;
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0 || stream_done_; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&done), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat("flush: ", in_flight_, " items still unacknowledged after ",
                                                    absl::FormatDuration(timeout)));
  }
  FW_RETURN_IF_ERROR(TakeError());
  if (stream_done_ && in_flight_ > 0) {
    mu_.Unlock();
    Status s = Finish();
    mu_.Lock();
    return s.ok() ? absl::UnavailableError("flush: the insert stream ended with items unacknowledged") : s;
  }
  return absl::OkStatus();
}

Status RemoteWriter::Close() {
  if (finished_) return final_status_;
  Status flushed = Flush();
  if (!finished_) {
    stream_->WritesDone();
    Status s = Finish();
    if (flushed.ok()) flushed = s;
  }
  return flushed;
}

// --------------------------------------------------------------- RemoteSampler

RemoteSampler::RemoteSampler(std::shared_ptr<grpc::Channel> channel, int64_t chunk_cache_capacity)
    : capacity_(chunk_cache_capacity > 0 ? chunk_cache_capacity : internal_service::kDefaultSampleChunkCache),
      ctx_(std::make_unique<grpc::ClientContext>()) {
  auto stub = proto::ReplayService::NewStub(channel);
  stream_ = stub->SampleStream(ctx_.get());
}

RemoteSampler::~RemoteSampler() {
  if (broken_.ok()) {
    stream_->WritesDone();
    ctx_->TryCancel();
    stream_->Finish().ok();
  }
}

Status RemoteSampler::Broken() {
  Status s = FromGrpc(stream_->Finish());
  broken_ = s.ok() ? absl::UnavailableError("replay sample stream ended") : Annotate(s, "replay sample stream");
  return broken_;
}

Result<std::vector<SampledItem>> RemoteSampler::Sample(const std::string& table, int64_t n, absl::Duration timeout,
                                                       bool flexible) {
  if (!broken_.ok()) return broken_;
  proto::SampleStreamRequest req;
  req.set_table(table);
  req.set_num_samples(n);
  req.set_timeout_ms(TimeoutToMs(timeout));
  req.set_flexible(flexible);
  if (first_) req.set_chunk_cache_capacity(capacity_);
  first_ = false;
  if (!stream_->Write(req)) return Broken();

  std::vector<SampledItem> out;
  Status error;
  proto::SampleStreamResponse resp;
  while (true) {
    if (!stream_->Read(&resp)) return Broken();
    // Chunks first, in message order: the cache evicts in the order the
    // server added them (docs/protocol/replay.md#chunk-cache).
    std::vector<ChunkRef> fresh;
    for (auto& pc : *resp.mutable_chunks()) {
      auto c = ChunkFromProto(&pc);
      if (!c.ok()) return Annotate(c.status(), "sample: server sent a bad chunk");
      fresh.push_back(*std::move(c));
    }
    if (resp.has_item()) {
      const proto::SampledItem& ps = resp.item();
      auto item = std::make_shared<Item>();
      item->key = ps.item().key();
      item->priority = ps.item().priority();
      for (const auto& pc : ps.item().columns()) {
        TrajectoryColumn col;
        col.name = pc.name();
        col.offset = pc.offset();
        col.length = pc.length();
        for (ChunkKey k : pc.chunk_keys()) {
          ChunkRef ref;
          for (const auto& f : fresh) {
            if (f->key() == k) ref = f;
          }
          if (ref == nullptr) {
            auto it = cache_.find(k);
            if (it == cache_.end()) {
              return absl::InternalError(absl::StrCat("sample: item ", item->key, " column '", pc.name(),
                                                      "' names chunk ", k, ", which the server never sent"));
            }
            ref = it->second;
          }
          col.chunks.push_back(std::move(ref));
        }
        item->columns.push_back(std::move(col));
      }
      SampledItem s;
      s.priority = ps.priority();
      s.probability = ps.probability();
      s.table_size = ps.table_size();
      s.times_sampled = ps.times_sampled();
      item->times_sampled = ps.times_sampled() - 1;
      s.item = std::move(item);
      out.push_back(std::move(s));
    }
    for (auto& f : fresh) {
      const ChunkKey k = f->key();
      if (cache_.insert_or_assign(k, std::move(f)).second) order_.push_back(k);
      while (static_cast<int64_t>(order_.size()) > capacity_) {
        cache_.erase(order_.front());
        order_.pop_front();
      }
    }
    if (resp.code() != 0) error = FromWire(resp.code(), resp.message());
    if (resp.end_of_batch()) break;
  }
  if (!error.ok()) return error;
  return out;
}

// ---------------------------------------------------------------------- Client

Client::Client(const std::string& address, ClientOptions options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  args.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  channel_ = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

Client::~Client() = default;

Result<std::unique_ptr<RemoteWriter>> Client::NewWriter(RemoteWriterOptions options) {
  FW_RETURN_IF_ERROR_CTX(options.Validate(), "remote writer options");
  return std::unique_ptr<RemoteWriter>(new RemoteWriter(channel_, options));
}

std::unique_ptr<RemoteSampler> Client::NewSampler(int64_t chunk_cache_capacity) {
  return std::unique_ptr<RemoteSampler>(new RemoteSampler(channel_, chunk_cache_capacity));
}

Result<std::vector<SampledItem>> Client::Sample(const std::string& table, int64_t n, absl::Duration timeout,
                                                bool flexible) {
  absl::MutexLock lock(&sample_mu_);
  if (sampler_ == nullptr) sampler_ = NewSampler();
  auto r = sampler_->Sample(table, n, timeout, flexible);
  // A broken stream is replaced on the next call.
  if (!r.ok() && (absl::IsUnavailable(r.status()) || absl::IsInternal(r.status()))) sampler_.reset();
  return r;
}

Result<int64_t> Client::MutatePriorities(const std::string& table,
                                         const std::vector<std::pair<ItemKey, double>>& updates,
                                         const std::vector<ItemKey>& deletes) {
  proto::MutatePrioritiesRequest req;
  req.set_table(table);
  for (const auto& [k, p] : updates) {
    req.add_update_keys(k);
    req.add_update_priorities(p);
  }
  for (ItemKey k : deletes) req.add_delete_keys(k);
  proto::MutatePrioritiesResponse resp;
  grpc::ClientContext ctx;
  FW_RETURN_IF_ERROR(FromGrpc(proto::ReplayService::NewStub(channel_)->MutatePriorities(&ctx, req, &resp)));
  return resp.missing();
}

Result<std::vector<RemoteTableInfo>> Client::Info(absl::Duration timeout) {
  grpc::ClientContext ctx;
  if (timeout != absl::InfiniteDuration()) ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  proto::InfoResponse resp;
  FW_RETURN_IF_ERROR(FromGrpc(proto::ReplayService::NewStub(channel_)->Info(&ctx, proto::InfoRequest(), &resp)));
  std::vector<RemoteTableInfo> out;
  for (const auto& t : resp.tables()) out.push_back({internal_service::TableInfoFromProto(t), t.explain()});
  return out;
}

Status Client::Reset(const std::string& table) {
  proto::ResetRequest req;
  req.set_table(table);
  proto::ResetResponse resp;
  grpc::ClientContext ctx;
  return FromGrpc(proto::ReplayService::NewStub(channel_)->Reset(&ctx, req, &resp));
}

Status Client::Close(const std::string& table) {
  proto::CloseRequest req;
  req.set_table(table);
  proto::CloseResponse resp;
  grpc::ClientContext ctx;
  return FromGrpc(proto::ReplayService::NewStub(channel_)->Close(&ctx, req, &resp));
}

}  // namespace flywheel::replay
