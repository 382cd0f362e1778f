// The raw gRPC peer of the service benchmarks (bench/echo.proto): a
// stream that does the least a transport can do with a payload, so a
// service's figures read as a fraction of it. Header-only; benchmarks only.
//
// Thread-safety: EchoService is thread-safe; SetPayloads before clients connect.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "echo.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace flywheel::bench {

class EchoService final : public echo::Echo::Service {
 public:
  // The payloads SEND replies carry (cycled). Set before clients connect.
  void SetPayloads(std::vector<std::string> p) {
    auto shared = std::make_shared<const std::vector<std::string>>(std::move(p));
    absl::MutexLock lock(&mu_);
    payloads_ = std::move(shared);
  }

  grpc::Status Stream(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<echo::EchoResponse, echo::EchoRequest>* stream) override {
    std::shared_ptr<const std::vector<std::string>> payloads;
    {
      absl::MutexLock lock(&mu_);
      payloads = payloads_;
    }
    echo::EchoRequest req;
    echo::EchoResponse resp;
    size_t next = 0;
    while (stream->Read(&req)) {
      switch (req.mode()) {
        case echo::EchoRequest::ECHO:
          resp.Clear();
          resp.mutable_payload()->swap(
              *req.mutable_payload());  // no copy: the least a server can do
          if (!stream->Write(resp)) return grpc::Status::OK;
          break;
        case echo::EchoRequest::ACK:
          resp.Clear();
          if (!stream->Write(resp)) return grpc::Status::OK;
          break;
        case echo::EchoRequest::SEND:
          if (payloads == nullptr || payloads->empty() || req.count() < 1) {
            return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                "SEND needs payloads and count >= 1");
          }
          for (int32_t i = 0; i < req.count(); ++i) {
            resp.set_payload(
                (*payloads)[next++ % payloads->size()]);  // a copy, as ChunkToProto makes
            resp.set_end_of_batch(i + 1 == req.count());
            if (!stream->Write(resp)) return grpc::Status::OK;
          }
          break;
        default:
          return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unknown mode");
      }
    }
    return grpc::Status::OK;
  }

 private:
  absl::Mutex mu_;
  std::shared_ptr<const std::vector<std::string>> payloads_ ABSL_GUARDED_BY(mu_);
};

class EchoServer {
 public:
  explicit EchoServer(int64_t max_message_bytes = int64_t{64} << 20) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.SetMaxReceiveMessageSize(static_cast<int>(max_message_bytes));
    builder.SetMaxSendMessageSize(static_cast<int>(max_message_bytes));
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port_ == 0) {
      std::fprintf(stderr, "bench: cannot start the echo server on 127.0.0.1\n");
      std::exit(1);
    }
  }
  ~EchoServer() {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    server_->Wait();
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  EchoService& service() { return service_; }

 private:
  EchoService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace flywheel::bench
