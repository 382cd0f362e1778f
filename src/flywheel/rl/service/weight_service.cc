#include "flywheel/rl/service/weight_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "flywheel/replay/service/grpc_status.h"
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
    const absl::Time deadline = absl::Now() + absl::Milliseconds(std::clamp<int64_t>(req->wait_ms(), 0, kMaxWaitMs));
    Result<WeightsRef> w = absl::UnknownError("unset");
    for (bool first = true;; first = false) {
      if (!first && ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "fetch: client went away");
      const absl::Duration left = std::max(absl::ZeroDuration(), deadline - absl::Now());
      w = store_->Get(req->model(), req->newer_than(), std::min(left, kWaitSlice));
      if (w.ok() || !absl::IsDeadlineExceeded(w.status()) || absl::Now() >= deadline) break;
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

  grpc::Status List(grpc::ServerContext*, const proto::ListRequest*, proto::ListResponse* resp) override {
    for (const std::string& m : store_->Models()) {
      resp->add_models(m);
      resp->add_versions(store_->Version(m));
    }
    return grpc::Status::OK;
  }

 private:
  WeightStore* store_;
};

WeightService::WeightService(std::shared_ptr<WeightStore> store)
    : store_(std::move(store)), impl_(std::make_unique<Impl>(store_.get())) {}
WeightService::~WeightService() = default;
grpc::Service* WeightService::grpc_service() { return impl_.get(); }

WeightClient::WeightClient(const std::string& address, int64_t max_message_bytes) {
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
