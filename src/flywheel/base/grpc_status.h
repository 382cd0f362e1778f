// The one mapping between grpc::Status and flywheel's Status (absl codes and
// gRPC codes are numerically equal), shared by every gRPC service and client
// (replay, weights). Header-only; it includes gRPC, so only service code
// includes it (base/ itself does not link gRPC).
#pragma once

#include <string>

#include "flywheel/base/status.h"
#include "grpcpp/support/status.h"

namespace flywheel::grpc_status {

inline Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

inline grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace flywheel::grpc_status
