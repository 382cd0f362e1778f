// The weight store over gRPC (proto/weights.proto, docs/rl.md "Weights").
//
// WeightService serves an rl::WeightStore; give it to a replay server
// (ServerOptions::services) to serve weights on the replay port, as
// `flywheel run` does. WeightClient publishes and fetches: Fetch returns the
// newer weights or nullptr when the caller's version is current, so an actor
// pays one small round trip per check and the tensor bytes only per version.
//
// Thread-safety: both classes are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "flywheel/base/status.h"
#include "flywheel/replay/service/server.h"
#include "flywheel/rl/weights.h"

namespace grpc {
class Channel;
}

namespace flywheel::rl {

class WeightService final : public replay::ExtraService {
 public:
  explicit WeightService(std::shared_ptr<WeightStore> store);
  ~WeightService() override;
  grpc::Service* grpc_service() override;
  const std::shared_ptr<WeightStore>& store() const { return store_; }

  class Impl;

 private:
  std::shared_ptr<WeightStore> store_;
  std::unique_ptr<Impl> impl_;
};

class WeightClient {
 public:
  // `address` as replay::Server::address(). Connects lazily.
  explicit WeightClient(const std::string& address, int64_t max_message_bytes = int64_t{64} << 20);
  ~WeightClient();

  Result<int64_t> Publish(const std::string& model, const std::vector<Tensor>& tensors, int64_t version = 0);
  // The weights of `model` if newer than `newer_than` (waiting up to `wait`,
  // at most 60 s, for them), else nullptr. A model never published is not
  // an error: nothing is newer yet (nullptr).
  Result<WeightsRef> Fetch(const std::string& model, int64_t newer_than, absl::Duration wait = absl::ZeroDuration());
  // (model, version) of every model on the server.
  Result<std::vector<std::pair<std::string, int64_t>>> List();

 private:
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace flywheel::rl
