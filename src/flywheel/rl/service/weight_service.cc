#include "flywheel/rl/service/weight_service.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "flywheel/base/grpc_status.h"
#include "grpcpp/grpcpp.h"
#include "weights.grpc.pb.h"

namespace flywheel::rl {
namespace {

// A Fetch waits in slices this long, checking whether its client went away.
constexpr absl::Duration kWaitSlice = absl::Milliseconds(100);
// Longest wait one Fetch may ask for.
constexpr int64_t kMaxWaitMs = 60 * 1000;

using grpc_status::FromGrpc;
using grpc_status::ToGrpc;

void ToProto(const Tensor& t, proto::Tensor* out) {
  out->set_name(t.name);
  out->set_type(t.type.ToString());
  out->set_data(t.data);
}

// Copies the bytes of a const message (the server's request); moves them
// out of a mutable one (the client's response).
Result<Tensor> FromProto(const proto::Tensor& p, std::string data) {
  Tensor t;
  t.name = p.name();
  FW_ASSIGN_OR_RETURN_CTX(t.type, format::DataType::Parse(p.type()), "tensor '", p.name(), "'");
  t.data = std::move(data);
  FW_RETURN_IF_ERROR(t.Validate());
  return t;
}

// Chunk sizes the server sends and accepts.
constexpr int64_t kMinChunk = int64_t{4} << 10;
constexpr int64_t kMaxChunk = int64_t{16} << 20;
// Largest version a manifest may describe (checked before any byte arrives).
constexpr int64_t kMaxTotalBytes = int64_t{1} << 40;
// Largest reservation ahead of the bytes received for one tensor.
constexpr int64_t kReserveCap = int64_t{256} << 20;
// Uploads a server stages for resumption at once; the least recently
// touched is dropped past this.
constexpr size_t kMaxStagedUploads = 8;

// The manifest of `tensors` as a version of `model`: names, types and byte
// counts in order, and their total.
void ToManifest(const std::string& model, int64_t version, int64_t publish_time_ms, const std::vector<Tensor>& tensors,
                proto::Manifest* m) {
  m->set_model(model);
  m->set_version(version);
  m->set_publish_time_ms(publish_time_ms);
  int64_t total = 0;
  for (const Tensor& t : tensors) {
    proto::TensorInfo* ti = m->add_tensors();
    ti->set_name(t.name);
    ti->set_type(t.type.ToString());
    ti->set_bytes(static_cast<int64_t>(t.data.size()));
    total += static_cast<int64_t>(t.data.size());
  }
  m->set_total_bytes(total);
}

// The tensors a manifest describes, without data, after checking it
// against itself (types, byte counts, names, the total): nothing is
// allocated on its word.
Result<std::vector<Tensor>> TensorsOf(const proto::Manifest& m) {
  if (m.model().empty()) return absl::InvalidArgumentError("manifest: empty model name");
  std::vector<Tensor> out;
  std::set<std::string> names;
  int64_t total = 0;
  for (int i = 0; i < m.tensors_size(); ++i) {
    const proto::TensorInfo& ti = m.tensors(i);
    Tensor t;
    t.name = ti.name();
    if (t.name.empty()) return absl::InvalidArgumentError(absl::StrCat("manifest: tensor ", i, " has an empty name"));
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("manifest: tensor '", t.name, "' given twice"));
    }
    FW_ASSIGN_OR_RETURN_CTX(t.type, format::DataType::Parse(ti.type()), "manifest: tensor '", t.name, "'");
    if (!t.type.is_fixed_width()) {
      return absl::InvalidArgumentError(absl::StrCat("manifest: tensor '", t.name, "': type ", ti.type(), " is not fixed-width"));
    }
    if (ti.bytes() < 0 || static_cast<uint64_t>(ti.bytes()) != t.type.fixed_width()) {
      return absl::InvalidArgumentError(absl::StrCat("manifest: tensor '", t.name, "' claims ", ti.bytes(), " bytes, but ",
                                                     ti.type(), " needs ", t.type.fixed_width()));
    }
    total += ti.bytes();
    if (total > kMaxTotalBytes) {
      return absl::InvalidArgumentError(absl::StrCat("manifest: more than ", kMaxTotalBytes, " bytes of tensors"));
    }
    out.push_back(std::move(t));
  }
  if (total != m.total_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest: total_bytes ", m.total_bytes(), " but its tensors hold ", total));
  }
  return out;
}

// Appends `data`, which starts at byte `*filled` of the concatenation of
// `tensors`' bytes, to the tensors it belongs to; advances `*filled`.
// OutOfRange past the end.
Status Fill(std::vector<Tensor>* tensors, int64_t* filled, std::string_view data) {
  int64_t skip = *filled;
  for (Tensor& t : *tensors) {
    const int64_t want = static_cast<int64_t>(t.type.fixed_width());
    if (skip >= want) {
      skip -= want;
      continue;
    }
    const int64_t take = std::min<int64_t>(want - skip, static_cast<int64_t>(data.size()));
    // Room for the whole tensor once its first bytes arrive (at most
    // kReserveCap ahead of what was received: a manifest's word alone
    // allocates nothing), so appends do not copy it again and again.
    if (t.data.capacity() < static_cast<size_t>(want)) {
      t.data.reserve(static_cast<size_t>(std::min<int64_t>(want, static_cast<int64_t>(t.data.size()) + kReserveCap)));
    }
    t.data.append(data.data(), static_cast<size_t>(take));
    data.remove_prefix(static_cast<size_t>(take));
    *filled += take;
    skip = 0;
    if (data.empty()) return absl::OkStatus();
  }
  if (!data.empty()) return absl::OutOfRangeError("chunk runs past the manifest's total_bytes");
  return absl::OkStatus();
}

// Gives `tensors` (empty, from a manifest) the buffers of `old`'s tensors
// when they have the same count (their bytes are dropped, their capacity
// kept: no fresh pages to fault in for the next version).
void Recycle(Weights* old, std::vector<Tensor>* tensors) {
  if (old == nullptr || old->tensors.size() != tensors->size()) return;
  for (size_t i = 0; i < tensors->size(); ++i) {
    (*tensors)[i].data = std::move(old->tensors[i].data);
    (*tensors)[i].data.clear();
  }
}

// Copies up to `n` bytes of the concatenation of `tensors`' data, from
// `offset`, into `out`.
void Gather(const std::vector<Tensor>& tensors, int64_t offset, int64_t n, std::string* out) {
  out->clear();
  for (const Tensor& t : tensors) {
    const int64_t size = static_cast<int64_t>(t.data.size());
    if (offset >= size) {
      offset -= size;
      continue;
    }
    const int64_t take = std::min(size - offset, n - static_cast<int64_t>(out->size()));
    out->append(t.data.data() + offset, static_cast<size_t>(take));
    offset = 0;
    if (static_cast<int64_t>(out->size()) == n) return;
  }
}

// Errors after which a chunked transfer resumes: the connection went, the
// server was busy with the same upload, or it asked for a resume.
bool Resumable(const grpc::Status& s) {
  switch (s.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::UNKNOWN:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return true;
    default:
      return false;
  }
}

std::string NewUploadId() {
  std::random_device rd;
  const uint64_t a = (uint64_t{rd()} << 32) ^ rd(), b = (uint64_t{rd()} << 32) ^ rd();
  return absl::StrCat(absl::Hex(a, absl::kZeroPad16), absl::Hex(b, absl::kZeroPad16));
}

}  // namespace

class WeightService::Impl final : public proto::WeightStoreService::Service {
 public:
  explicit Impl(WeightStore* store) : store_(store) {}

  grpc::Status Publish(grpc::ServerContext*, const proto::PublishRequest* req, proto::PublishResponse* resp) override {
    std::vector<Tensor> tensors;
    for (const auto& pt : req->tensors()) {
      auto t = FromProto(pt, pt.data());
      if (!t.ok()) return ToGrpc(Annotate(t.status(), absl::StrCat("publish '", req->model(), "'")));
      tensors.push_back(*std::move(t));
    }
    auto v = store_->Publish(req->model(), std::move(tensors), req->version());
    if (!v.ok()) return ToGrpc(v.status());
    resp->set_version(*v);
    return grpc::Status::OK;
  }

  grpc::Status Fetch(grpc::ServerContext* ctx, const proto::FetchRequest* req, proto::FetchResponse* resp) override {
    Result<WeightsRef> w = absl::UnknownError("unset");
    if (!WaitNewer(ctx, req->model(), req->newer_than(), req->wait_ms(), &w)) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "fetch: client went away");
    }
    resp->set_version(store_->Version(req->model()));
    if (!w.ok()) {
      if (absl::IsDeadlineExceeded(w.status()) || absl::IsNotFound(w.status())) {
        resp->set_not_modified(true);
        return grpc::Status::OK;
      }
      return ToGrpc(w.status());
    }
    resp->set_version((*w)->version);
    resp->set_publish_time_ms((*w)->publish_time_ms);
    for (const Tensor& t : (*w)->tensors) ToProto(t, resp->add_tensors());
    return grpc::Status::OK;
  }

  grpc::Status FetchChunked(grpc::ServerContext* ctx, const proto::FetchChunkedRequest* req,
                            grpc::ServerWriter<proto::FetchChunk>* writer) override {
    Result<WeightsRef> w = absl::UnknownError("unset");
    if (req->version() > 0) {
      w = store_->GetExact(req->model(), req->version());  // a resume: that version or NotFound
      if (!w.ok()) return ToGrpc(w.status());
    } else {
      if (!WaitNewer(ctx, req->model(), req->newer_than(), req->wait_ms(), &w)) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "fetch: client went away");
      }
      if (!w.ok()) {
        if (absl::IsDeadlineExceeded(w.status()) || absl::IsNotFound(w.status())) {
          proto::FetchChunk none;
          none.set_not_modified(true);
          writer->Write(none);
          return grpc::Status::OK;
        }
        return ToGrpc(w.status());
      }
    }
    const Weights& weights = **w;
    proto::FetchChunk msg;
    ToManifest(weights.model, weights.version, weights.publish_time_ms, weights.tensors, msg.mutable_manifest());
    const int64_t total = msg.manifest().total_bytes();
    if (req->offset() < 0 || req->offset() > total) {
      return grpc::Status(grpc::StatusCode::OUT_OF_RANGE,
                          absl::StrCat("fetch '", req->model(), "': offset ", req->offset(), " outside 0..", total));
    }
    const int64_t chunk = std::clamp<int64_t>(req->chunk_bytes() == 0 ? int64_t{1} << 20 : req->chunk_bytes(), kMinChunk, kMaxChunk);
    int64_t offset = req->offset();
    do {  // the manifest rides with the first chunk; an empty version sends it alone
      if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "fetch: client went away");
      const int64_t n = std::min(chunk, total - offset);
      msg.set_offset(offset);
      Gather(weights.tensors, offset, n, msg.mutable_data());
      if (!writer->Write(msg)) return grpc::Status(grpc::StatusCode::CANCELLED, "fetch: client went away");
      msg.clear_manifest();
      offset += n;
    } while (offset < total);
    return grpc::Status::OK;
  }

  grpc::Status PublishChunked(grpc::ServerContext*, grpc::ServerReader<proto::PublishChunk>* reader,
                              proto::PublishResponse* resp) override {
    proto::PublishChunk msg;
    if (!reader->Read(&msg)) return grpc::Status(grpc::StatusCode::ABORTED, "publish: the stream ended before its first message");
    if (msg.upload_id().empty() || !msg.has_manifest()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "publish: the first message needs upload_id and manifest");
    }
    const std::string id = msg.upload_id();
    Upload* up = nullptr;
    {
      absl::MutexLock lock(&mu_);
      auto it = uploads_.find(id);
      if (it == uploads_.end()) {
        auto tensors = TensorsOf(msg.manifest());
        if (!tensors.ok()) return ToGrpc(Annotate(tensors.status(), absl::StrCat("publish '", msg.manifest().model(), "'")));
        EvictLocked();
        // The version before the latest, when unread, lends its buffers.
        Recycle(store_->TakeUnusedPrevious(msg.manifest().model()).get(), &*tensors);
        it = uploads_.emplace(id, std::make_unique<Upload>()).first;
        it->second->manifest = msg.manifest();
        it->second->tensors = *std::move(tensors);
      } else if (it->second->manifest.SerializeAsString() != msg.manifest().SerializeAsString()) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            absl::StrCat("publish: upload ", id, " resumed with a different manifest"));
      }
      up = it->second.get();
      if (up->active) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, absl::StrCat("publish: upload ", id, " is still receiving on another stream"));
      }
      if (msg.offset() != up->received) {
        return grpc::Status(grpc::StatusCode::ABORTED, absl::StrCat("publish: upload ", id, " continues at byte ",
                                                                    up->received, ", not ", msg.offset()));
      }
      up->active = true;
      up->touched = absl::Now();
    }
    // Only this stream touches *up while active; the map holds it.
    const int64_t total = up->manifest.total_bytes();
    Status bad;
    for (;;) {
      if (msg.offset() != up->received) {
        bad = absl::InvalidArgumentError(absl::StrCat("publish: chunk at byte ", msg.offset(), ", expected ", up->received));
        break;
      }
      bad = Fill(&up->tensors, &up->received, msg.data());
      if (!bad.ok() || !reader->Read(&msg)) break;
    }
    std::unique_ptr<Upload> done;
    {
      absl::MutexLock lock(&mu_);
      up->active = false;
      up->touched = absl::Now();
      if (!bad.ok()) {
        const Status s = Annotate(bad, absl::StrCat("publish '", up->manifest.model(), "' (upload ", id, ")"));
        uploads_.erase(id);
        return ToGrpc(s);
      }
      if (up->received < total) {
        return grpc::Status(grpc::StatusCode::ABORTED, absl::StrCat("publish: upload ", id, " ended at byte ",
                                                                    up->received, " of ", total, "; resume there"));
      }
      auto it = uploads_.find(id);
      done = std::move(it->second);
      uploads_.erase(it);
    }
    auto v = store_->Publish(done->manifest.model(), std::move(done->tensors), done->manifest.version());
    if (!v.ok()) return ToGrpc(v.status());
    resp->set_version(*v);
    return grpc::Status::OK;
  }

  grpc::Status UploadStatus(grpc::ServerContext*, const proto::UploadStatusRequest* req,
                            proto::UploadStatusResponse* resp) override {
    absl::MutexLock lock(&mu_);
    auto it = uploads_.find(req->upload_id());
    if (it == uploads_.end() || it->second->active) {
      resp->set_known(it != uploads_.end());
      if (it != uploads_.end()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "upload still receiving on another stream");
      return grpc::Status::OK;
    }
    resp->set_known(true);
    resp->set_received_bytes(it->second->received);
    return grpc::Status::OK;
  }

  grpc::Status List(grpc::ServerContext*, const proto::ListRequest*, proto::ListResponse* resp) override {
    for (const std::string& m : store_->Models()) {
      resp->add_models(m);
      resp->add_versions(store_->Version(m));
    }
    return grpc::Status::OK;
  }

 private:
  // The latest version of `model` newer than `newer_than` into `*w`, waiting
  // up to `wait_ms` (at most kMaxWaitMs) in slices of kWaitSlice; false when
  // the client went away meanwhile. Fetch and FetchChunked share it.
  bool WaitNewer(grpc::ServerContext* ctx, const std::string& model, int64_t newer_than, int64_t wait_ms,
                 Result<WeightsRef>* w) {
    const absl::Time deadline = absl::Now() + absl::Milliseconds(std::clamp<int64_t>(wait_ms, 0, kMaxWaitMs));
    for (bool first = true;; first = false) {
      if (!first && ctx->IsCancelled()) return false;
      const absl::Duration left = std::max(absl::ZeroDuration(), deadline - absl::Now());
      *w = store_->Get(model, newer_than, std::min(left, kWaitSlice));
      if (w->ok() || !absl::IsDeadlineExceeded(w->status()) || absl::Now() >= deadline) return true;
    }
  }

  struct Upload {
    proto::Manifest manifest;
    std::vector<Tensor> tensors;  // filled in manifest order
    int64_t received = 0;
    bool active = false;          // a stream is writing it
    absl::Time touched;
  };

  // Drops the least recently touched idle upload while too many are staged.
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (uploads_.size() >= kMaxStagedUploads) {
      auto oldest = uploads_.end();
      for (auto it = uploads_.begin(); it != uploads_.end(); ++it) {
        if (!it->second->active && (oldest == uploads_.end() || it->second->touched < oldest->second->touched)) oldest = it;
      }
      if (oldest == uploads_.end()) return;
      uploads_.erase(oldest);
    }
  }

  WeightStore* store_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Upload>> uploads_ ABSL_GUARDED_BY(mu_);
};

WeightService::WeightService(std::shared_ptr<WeightStore> store)
    : store_(std::move(store)), impl_(std::make_unique<Impl>(store_.get())) {}
WeightService::~WeightService() = default;
grpc::Service* WeightService::grpc_service() { return impl_.get(); }

WeightClient::WeightClient(const std::string& address, int64_t max_message_bytes)
    : max_message_bytes_(max_message_bytes) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(max_message_bytes));
  args.SetMaxSendMessageSize(static_cast<int>(max_message_bytes));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  channel_ = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

WeightClient::~WeightClient() = default;

Result<int64_t> WeightClient::Publish(const std::string& model, const std::vector<Tensor>& tensors, int64_t version) {
  int64_t total = 0;
  for (const Tensor& t : tensors) total += static_cast<int64_t>(t.data.size());
  if (total > max_message_bytes_ / 2) return PublishChunked(model, tensors, version);  // chunks fit the limit
  proto::PublishRequest req;
  req.set_model(model);
  req.set_version(version);
  for (const Tensor& t : tensors) {
    FW_RETURN_IF_ERROR_CTX(t.Validate(), "publish '", model, "'");
    ToProto(t, req.add_tensors());
  }
  proto::PublishResponse resp;
  grpc::ClientContext ctx;
  FW_RETURN_IF_ERROR(FromGrpc(proto::WeightStoreService::NewStub(channel_)->Publish(&ctx, req, &resp)));
  return resp.version();
}

Result<WeightsRef> WeightClient::Fetch(const std::string& model, int64_t newer_than, absl::Duration wait) {
  proto::FetchRequest req;
  req.set_model(model);
  req.set_newer_than(newer_than);
  req.set_wait_ms(std::clamp<int64_t>(absl::ToInt64Milliseconds(wait), 0, kMaxWaitMs));
  proto::FetchResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + wait + absl::Seconds(30)));
  FW_RETURN_IF_ERROR(FromGrpc(proto::WeightStoreService::NewStub(channel_)->Fetch(&ctx, req, &resp)));
  if (resp.not_modified()) return WeightsRef();
  auto w = std::make_shared<Weights>();
  w->model = model;
  w->version = resp.version();
  w->publish_time_ms = resp.publish_time_ms();
  for (auto& pt : *resp.mutable_tensors()) {
    FW_ASSIGN_OR_RETURN_CTX(Tensor t, FromProto(pt, std::move(*pt.mutable_data())), "fetch '", model, "': server sent a bad tensor");
    w->tensors.push_back(std::move(t));
  }
  return WeightsRef(std::move(w));
}

namespace {

// Sleeps before resume `n` (1, 2, ...): first_backoff doubling, at most 2 s.
void Backoff(const ChunkedOptions& o, int n) {
  absl::Duration d = o.first_backoff;
  for (int i = 1; i < n && d < absl::Seconds(2); ++i) d *= 2;
  absl::SleepFor(std::min(d, absl::Seconds(2)));
}

Status Exhausted(const grpc::Status& last, const ChunkedOptions& o, const std::string& what) {
  return Annotate(FromGrpc(last), absl::StrCat(what, ": gave up after ", o.max_resumes, " resumes"));
}

}  // namespace

Result<int64_t> WeightClient::PublishChunked(const std::string& model, const std::vector<Tensor>& tensors,
                                             int64_t version, const ChunkedOptions& options, TransferStats* stats) {
  const absl::Time start = absl::Now();
  TransferStats local;
  TransferStats& st = stats != nullptr ? *stats : local;
  st = TransferStats();
  for (const Tensor& t : tensors) FW_RETURN_IF_ERROR_CTX(t.Validate(), "publish '", model, "'");
  proto::PublishChunk msg;
  msg.set_upload_id(NewUploadId());
  ToManifest(model, version, 0, tensors, msg.mutable_manifest());
  FW_RETURN_IF_ERROR(TensorsOf(msg.manifest()).status());  // e.g. two tensors with one name
  const int64_t total = msg.manifest().total_bytes();
  st.bytes = total;
  const int64_t chunk = std::clamp<int64_t>(std::min(options.chunk_bytes, max_message_bytes_ / 2), kMinChunk, kMaxChunk);
  auto stub = proto::WeightStoreService::NewStub(channel_);
  int64_t offset = 0;
  grpc::Status last;
  for (int attempt = 0;; ++attempt) {
    if (attempt > 0) {
      if (attempt > options.max_resumes) return Exhausted(last, options, absl::StrCat("publish '", model, "'"));
      ++st.resumes;
      Backoff(options, attempt);
      proto::UploadStatusRequest sreq;
      sreq.set_upload_id(msg.upload_id());
      proto::UploadStatusResponse sresp;
      grpc::ClientContext sctx;
      sctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
      last = stub->UploadStatus(&sctx, sreq, &sresp);
      if (!last.ok()) {
        if (Resumable(last)) continue;
        return FromGrpc(last);
      }
      offset = sresp.known() ? sresp.received_bytes() : 0;
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + options.timeout));
    proto::PublishResponse resp;
    auto writer = stub->PublishChunked(&ctx, &resp);
    bool wrote = true;
    do {
      const int64_t n = std::min(chunk, total - offset);
      msg.set_offset(offset);
      Gather(tensors, offset, n, msg.mutable_data());
      if (!writer->Write(msg)) {
        wrote = false;
        break;
      }
      st.wire_bytes += n;
      ++st.chunks;
      offset += n;
    } while (offset < total);
    if (wrote) writer->WritesDone();
    last = writer->Finish();
    if (last.ok()) {
      st.seconds = absl::ToDoubleSeconds(absl::Now() - start);
      return resp.version();
    }
    if (!Resumable(last)) return FromGrpc(last);
  }
}

Result<WeightsRef> WeightClient::FetchChunked(const std::string& model, int64_t newer_than, absl::Duration wait,
                                              const ChunkedOptions& options, TransferStats* stats, WeightsRef recycle) {
  const absl::Time start = absl::Now();
  TransferStats local;
  TransferStats& st = stats != nullptr ? *stats : local;
  st = TransferStats();
  auto stub = proto::WeightStoreService::NewStub(channel_);
  proto::FetchChunkedRequest req;
  req.set_model(model);
  req.set_newer_than(newer_than);
  req.set_wait_ms(std::clamp<int64_t>(absl::ToInt64Milliseconds(wait), 0, kMaxWaitMs));
  req.set_chunk_bytes(std::min(options.chunk_bytes, max_message_bytes_ / 2));  // the server's chunks fit our limit
  std::shared_ptr<Weights> w;
  int64_t filled = 0, total = 0;
  grpc::Status last;
  for (int attempt = 0;; ++attempt) {
    if (attempt > 0) {
      if (attempt > options.max_resumes) return Exhausted(last, options, absl::StrCat("fetch '", model, "'"));
      Backoff(options, attempt);
    }
    if (w != nullptr) {  // resume the version begun, from the byte reached
      req.set_version(w->version);
      req.set_offset(filled);
      if (attempt > 0) ++st.resumes;
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + wait + options.timeout));
    auto reader = stub->FetchChunked(&ctx, req);
    proto::FetchChunk msg;
    Status bad;
    bool not_modified = false;
    while (reader->Read(&msg)) {
      if (msg.not_modified()) {
        not_modified = true;
        continue;
      }
      if (msg.has_manifest()) {
        if (w == nullptr) {
          FW_ASSIGN_OR_RETURN_CTX(auto tensors, TensorsOf(msg.manifest()), "fetch '", model, "': server sent a bad manifest");
          if (recycle != nullptr && recycle.use_count() == 1) Recycle(const_cast<Weights*>(recycle.get()), &tensors);
          recycle.reset();
          w = std::make_shared<Weights>();
          w->model = model;
          w->version = msg.manifest().version();
          w->publish_time_ms = msg.manifest().publish_time_ms();
          w->tensors = std::move(tensors);
          total = msg.manifest().total_bytes();
        } else if (msg.manifest().version() != w->version || msg.manifest().total_bytes() != total) {
          bad = absl::DataLossError(absl::StrCat("fetch '", model, "': a resumed stream sent version ",
                                                 msg.manifest().version(), ", not ", w->version));
          break;
        }
      }
      if (w == nullptr || msg.offset() != filled) {
        bad = absl::DataLossError(absl::StrCat("fetch '", model, "': chunk at byte ", msg.offset(), ", expected ", filled));
        break;
      }
      bad = Fill(&w->tensors, &filled, msg.data());
      if (!bad.ok()) break;
      st.wire_bytes += static_cast<int64_t>(msg.data().size());
      ++st.chunks;
    }
    if (!bad.ok()) {
      ctx.TryCancel();
      reader->Finish();
      return bad;
    }
    last = reader->Finish();
    if (last.ok()) {
      if (not_modified) {
        st.seconds = absl::ToDoubleSeconds(absl::Now() - start);
        return WeightsRef();
      }
      if (w == nullptr || filled != total) {
        return absl::DataLossError(absl::StrCat("fetch '", model, "': the stream ended at byte ", filled, " of ", total));
      }
      st.bytes = total;
      st.seconds = absl::ToDoubleSeconds(absl::Now() - start);
      return WeightsRef(std::move(w));
    }
    if (last.error_code() == grpc::StatusCode::NOT_FOUND && w != nullptr) {
      // The version begun is gone (two newer ones were published): begin
      // again at the latest.
      w.reset();
      filled = total = 0;
      req.set_version(0);
      req.set_offset(0);
      ++st.restarts;
      continue;
    }
    if (!Resumable(last)) return FromGrpc(last);
  }
}

Result<std::vector<std::pair<std::string, int64_t>>> WeightClient::List() {
  proto::ListResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  FW_RETURN_IF_ERROR(FromGrpc(proto::WeightStoreService::NewStub(channel_)->List(&ctx, proto::ListRequest(), &resp)));
  std::vector<std::pair<std::string, int64_t>> out;
  for (int i = 0; i < resp.models_size() && i < resp.versions_size(); ++i) out.emplace_back(resp.models(i), resp.versions(i));
  return out;
}

}  // namespace flywheel::rl
