// The one mapping between grpc::Status and flywheel's Status (absl codes and
// gRPC codes are numerically equal). For the gRPC services and clients.
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
