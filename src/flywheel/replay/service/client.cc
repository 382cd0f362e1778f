#include "flywheel/replay/service/client.h"

#include <sys/random.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "flywheel/base/rng.h"
#include "flywheel/replay/service/wire.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/sync_stream.h"
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

}  // namespace

Status RemoteWriterOptions::Validate() const {
  FW_RETURN_IF_ERROR(writer.Validate());
  if (max_in_flight_items < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_in_flight_items ", max_in_flight_items, " must be >= 1"));
  }
  if (reconnect_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reconnect_timeout ", absl::FormatDuration(reconnect_timeout), " must be >= 0"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- RemoteWriter

namespace {

// A broken insert stream worth reopening: the server went away, stopped or
// restarted (or ended the stream without an error we did not ask for).
bool Retryable(const Status& s) {
  return s.ok() || absl::IsUnavailable(s) || absl::IsCancelled(s);
}

}  // namespace

// A message of the insert stream holds at most this many items and, past
// its first item, this many bytes of new chunks: enough to amortize the
// per-message costs, small enough that several messages are in flight
// within the default window of 64 items.
constexpr int64_t kMaxMessageItems = 16;
constexpr size_t kMaxMessageBytes = size_t{1} << 20;

RemoteWriter::RemoteWriter(std::shared_ptr<grpc::Channel> channel, RemoteWriterOptions options)
    : channel_(std::move(channel)), options_(options), steps_(options.writer) {
  OpenStream();
  StartSender();
}

RemoteWriter::~RemoteWriter() {
  if (stream_ != nullptr) {
    ctx_->TryCancel();
    EndStream().IgnoreError();
  }
}

void RemoteWriter::OpenStream() {
  // The stub's InsertStream with bytes on the request side, so chunks go out
  // without a copy (InsertRequestEncoder); responses are parsed as usual.
  static const grpc::internal::RpcMethod kMethod("/flywheel.replay.proto.ReplayService/InsertStream",
                                                 grpc::internal::RpcMethod::BIDI_STREAMING);
  ctx_ = std::make_unique<grpc::ClientContext>();
  stream_.reset(grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, proto::InsertStreamResponse>::Create(
      channel_.get(), kMethod, ctx_.get()));
  {
    absl::MutexLock lock(&mu_);
    stream_done_ = false;
  }
  reader_ = std::thread([this] { ReadAcks(); });
}

void RemoteWriter::StartSender() {
  {
    absl::MutexLock lock(&mu_);
    stop_sender_ = false;
  }
  sender_ = std::thread([this] { SendLoop(); });
}

void RemoteWriter::StopSender() {
  if (!sender_.joinable()) return;
  {
    absl::MutexLock lock(&mu_);
    stop_sender_ = true;
  }
  sender_.join();
}

void RemoteWriter::Acknowledge(ItemKey key, int32_t code, const std::string& message) {
  // Acks come in the order items were sent on this stream.
  auto it = pending_.begin();
  while (it != pending_.end() && it->item->key != key) ++it;
  bool resent = false;
  if (it != pending_.end()) {
    resent = it->resent;
    pending_.erase(it);
  }
  const bool duplicate_of_resend = resent && code == static_cast<int32_t>(absl::StatusCode::kAlreadyExists);
  if (code != 0 && !duplicate_of_resend && item_error_.ok()) item_error_ = FromWire(code, message);
}

void RemoteWriter::ReadAcks() {
  proto::InsertStreamResponse resp;
  while (stream_->Read(&resp)) {
    absl::MutexLock lock(&mu_);
    // docs/protocol/replay.md#acknowledgements
    for (ItemKey k : resp.inserted_keys()) Acknowledge(k, 0, std::string());
    if (resp.inserted_keys().empty() || resp.code() != 0) Acknowledge(resp.key(), resp.code(), resp.message());
  }
  absl::MutexLock lock(&mu_);
  stream_done_ = true;
}

void RemoteWriter::SendLoop() {
  std::deque<Outgoing> batch;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !outbox_.empty() || stop_sender_; };
      mu_.Await(absl::Condition(&ready));
      if (stop_sender_) return;
      // Everything queued so far (SendSome takes what fits in one message
      // and leaves the rest for the next round).
      batch.swap(outbox_);
    }
    while (!batch.empty()) {
      if (!SendSome(batch)) {
        absl::MutexLock lock(&mu_);
        stream_done_ = true;
        return;
      }
    }
  }
}

Status RemoteWriter::EndStream() {
  if (stream_ == nullptr) return absl::OkStatus();
  StopSender();
  if (reader_.joinable()) reader_.join();
  Status s = FromGrpc(stream_->Finish());
  stream_.reset();
  ctx_.reset();
  return s.ok() ? s : Annotate(s, "replay insert stream");
}

Status RemoteWriter::TakeError() {
  Status s = std::move(item_error_);
  item_error_ = absl::OkStatus();
  return s;
}

bool RemoteWriter::SendSome(std::deque<Outgoing>& queue) {
  // docs/protocol/replay.md#insertstream: chunks the server lacks, then the
  // items. The server drops released chunks before it inserts the message's
  // items, so a release queued behind an item of this message waits for the
  // next message (it may name that item's chunks); those queued before the
  // message's first item name chunks of earlier messages only.
  proto::InsertStreamRequest rest;
  internal_service::InsertRequestEncoder enc;
  std::vector<ChunkKey> release_later;
  int64_t items = 0;
  while (!queue.empty()) {
    Outgoing& o = queue.front();
    // o.release names chunks of the items queued before o.item.
    std::vector<ChunkKey>& release = items == 0 ? release_ : release_later;
    if (o.item != nullptr) {
      const Pending& p = *o.item;
      if (items > 0 && (items >= kMaxMessageItems || enc.bytes() >= kMaxMessageBytes ||
                        p.timeout_ms != rest.timeout_ms())) {
        break;
      }
      for (const TrajectoryColumn& tc : p.columns) {
        for (const auto& chunk : tc.chunks) {
          if (sent_.insert(chunk->key()).second) enc.AddChunk(chunk);
        }
      }
      internal_service::ItemToProto(p.table, p.key, p.priority, p.columns, rest.add_items());
      rest.set_timeout_ms(p.timeout_ms);
      items++;
    }
    for (ChunkKey k : o.release) {
      if (sent_.erase(k)) release.push_back(k);
    }
    queue.pop_front();
  }
  for (ChunkKey k : release_) rest.add_release_chunk_keys(k);
  release_ = std::move(release_later);
  rest.set_coalesce_acks(true);
  enc.AddRest(rest);
  return stream_->Write(enc.Finish());
}

Status RemoteWriter::Reconnect(const Status& broken, absl::Time deadline) {
  if (!Retryable(broken) || options_.reconnect_timeout <= absl::ZeroDuration()) {
    return broken.ok() ? Status(absl::UnavailableError("the replay insert stream ended")) : broken;
  }
  deadline = std::min(deadline, absl::Now() + options_.reconnect_timeout);
  Status last = broken;
  absl::Duration backoff = absl::Milliseconds(50);
  while (true) {
    // The new stream starts with an empty chunk cache on the server.
    sent_.clear();
    release_.clear();
    OpenStream();
    std::deque<Outgoing> resend;
    {
      absl::MutexLock lock(&mu_);
      // Every unacknowledged item, whether the old stream got to send it or
      // not; releases queued for the old stream do not apply to this one.
      outbox_.clear();
      for (Unacked& u : pending_) {
        u.resent = true;
        resend.push_back({u.item, {}});
      }
    }
    const size_t n = resend.size();
    bool ok = true;
    while (ok && !resend.empty()) ok = SendSome(resend);
    if (ok) {
      StartSender();
      reconnects_++;
      return absl::OkStatus();
    }
    last = EndStream();
    if (!Retryable(last)) return last;
    if (absl::Now() + backoff > deadline) {
      return absl::UnavailableError(absl::StrCat("replay insert stream broke and could not be reopened by the deadline (",
                                                 n, " items unacknowledged); last error: ",
                                                 last.ok() ? "stream ended" : std::string(last.message())));
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
}

Status RemoteWriter::Append(const std::vector<StepValue>& step) { return steps_.Append(step); }

Result<ItemKey> RemoteWriter::CreateItem(const std::string& table, double priority,
                                         const std::vector<std::pair<std::string, int64_t>>& trajectory,
                                         absl::Duration timeout) {
  if (closed_) return absl::FailedPreconditionError("create_item: the writer is closed");
  if (trajectory.empty()) return absl::InvalidArgumentError("create_item: empty trajectory");
  const absl::Time deadline = timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
  bool done = false;
  {
    // Room in the run-ahead window first, so a failure leaves no trace.
    absl::MutexLock lock(&mu_);
    FW_RETURN_IF_ERROR(TakeError());
    auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return static_cast<int64_t>(pending_.size()) < options_.max_in_flight_items || stream_done_;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&room), deadline)) {
      return absl::DeadlineExceededError(absl::StrCat("create_item: ", pending_.size(),
                                                      " items still unacknowledged by the server after ",
                                                      absl::FormatDuration(timeout)));
    }
    FW_RETURN_IF_ERROR(TakeError());
    done = stream_done_;
  }
  if (done) FW_RETURN_IF_ERROR_CTX(Reconnect(EndStream(), deadline), "create_item");
  auto p = std::make_shared<Pending>();
  p->key = steps_.NextKey();
  p->table = table;
  p->priority = priority;
  p->timeout_ms = TimeoutToMs(timeout);
  FW_ASSIGN_OR_RETURN(p->columns, steps_.Slice(trajectory));
  const ItemKey key = p->key;
  // From here the item is the writer's to deliver: the sender writes it
  // (coalesced with whatever else is queued by then), a break resends it.
  absl::MutexLock lock(&mu_);
  pending_.push_back({p, false});
  outbox_.push_back({std::move(p), steps_.TakeDropped()});
  return key;
}

Status RemoteWriter::EndEpisode() {
  std::vector<ChunkKey> keys = steps_.EndEpisode();
  absl::MutexLock lock(&mu_);
  outbox_.push_back({nullptr, std::move(keys)});
  return absl::OkStatus();
}

Status RemoteWriter::Flush(absl::Duration timeout) {
  if (closed_) return close_status_.ok() ? Status(absl::FailedPreconditionError("flush: the writer is closed")) : close_status_;
  const absl::Time deadline = timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pending_.empty() || stream_done_; };
      if (!mu_.AwaitWithDeadline(absl::Condition(&done), deadline)) {
        return absl::DeadlineExceededError(absl::StrCat("flush: ", pending_.size(),
                                                        " items still unacknowledged after ",
                                                        absl::FormatDuration(timeout)));
      }
      FW_RETURN_IF_ERROR(TakeError());
      if (pending_.empty()) return absl::OkStatus();
    }
    // The stream broke with items unacknowledged: reopen and resend them.
    FW_RETURN_IF_ERROR_CTX(Reconnect(EndStream(), deadline), "flush");
  }
}

Status RemoteWriter::Close() {
  if (closed_) return close_status_;
  Status flushed = Flush();
  if (stream_ != nullptr) {
    // Nothing is left to send once every item is acknowledged (a release
    // still queued can go: the stream's end drops the server's cache).
    StopSender();
    stream_->WritesDone();
    Status s = EndStream();
    if (flushed.ok()) flushed = s;
  }
  closed_ = true;
  close_status_ = flushed;
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
  broken_ = s.ok() ? Status(absl::UnavailableError("replay sample stream ended")) : Annotate(s, "replay sample stream");
  return broken_;
}

Result<std::vector<SampledItem>> RemoteSampler::Sample(const std::string& table, int64_t n, absl::Duration timeout,
                                                       bool flexible) {
  FW_RETURN_IF_ERROR(Send(table, n, timeout, flexible));
  return Receive();
}

Status RemoteSampler::Send(const std::string& table, int64_t n, absl::Duration timeout, bool flexible) {
  if (!broken_.ok()) return broken_;
  proto::SampleStreamRequest req;
  req.set_table(table);
  req.set_num_samples(n);
  req.set_timeout_ms(TimeoutToMs(timeout));
  req.set_flexible(flexible);
  if (first_) req.set_chunk_cache_capacity(capacity_);
  first_ = false;
  if (!stream_->Write(req)) return Broken();
  return absl::OkStatus();
}

Result<std::vector<SampledItem>> RemoteSampler::Receive() {
  if (!broken_.ok()) return broken_;
  std::vector<SampledItem> out;
  Status error;
  proto::SampleStreamResponse resp;
  std::vector<ChunkRef> fresh;
  absl::flat_hash_map<ChunkKey, ChunkRef> in_message;
  while (true) {
    if (!stream_->Read(&resp)) return Broken();
    // Items resolve chunk keys against this message's chunks, then against
    // the cache as it was before the message: the server counted on exactly
    // that (docs/protocol/replay.md#chunk-cache).
    fresh.clear();
    in_message.clear();
    for (auto& pc : *resp.mutable_chunks()) {
      auto c = ChunkFromProto(&pc);
      if (!c.ok()) return Annotate(c.status(), "sample: server sent a bad chunk");
      in_message.insert_or_assign((*c)->key(), *c);
      fresh.push_back(*std::move(c));
    }
    auto add = [&](const proto::SampledItem& ps) -> Status {
      auto item = std::make_shared<Item>();
      item->key = ps.item().key();
      item->priority = ps.item().priority();
      for (const auto& pc : ps.item().columns()) {
        TrajectoryColumn col;
        col.name = pc.name();
        col.offset = pc.offset();
        col.length = pc.length();
        for (ChunkKey k : pc.chunk_keys()) {
          auto f = in_message.find(k);
          if (f != in_message.end()) {
            col.chunks.push_back(f->second);
            continue;
          }
          auto it = cache_.find(k);
          if (it == cache_.end()) {
            return absl::InternalError(absl::StrCat("sample: item ", item->key, " column '", pc.name(),
                                                    "' names chunk ", k, ", which the server never sent"));
          }
          col.chunks.push_back(it->second);
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
      return absl::OkStatus();
    };
    if (resp.has_item()) FW_RETURN_IF_ERROR(add(resp.item()));
    for (const auto& ps : resp.items()) FW_RETURN_IF_ERROR(add(ps));
    // Then the cache takes the message's chunks in order, evicting as the
    // server did.
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
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, static_cast<int>(absl::ToInt64Milliseconds(options.min_reconnect_backoff)));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, static_cast<int>(absl::ToInt64Milliseconds(options.min_reconnect_backoff)));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(absl::ToInt64Milliseconds(options.max_reconnect_backoff)));
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

Result<RemoteCheckpoint> Client::Checkpoint() {
  proto::CheckpointResponse resp;
  grpc::ClientContext ctx;
  FW_RETURN_IF_ERROR(
      FromGrpc(proto::ReplayService::NewStub(channel_)->Checkpoint(&ctx, proto::CheckpointRequest(), &resp)));
  RemoteCheckpoint c;
  c.id = resp.id();
  c.path = resp.path();
  c.max_pause = absl::Microseconds(resp.max_pause_us());
  c.num_items = resp.num_items();
  c.num_chunks = resp.num_chunks();
  c.chunk_bytes = resp.chunk_bytes();
  c.duration = absl::Microseconds(resp.duration_us());
  return c;
}

}  // namespace flywheel::replay
