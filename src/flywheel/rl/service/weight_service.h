// The weight store over gRPC (proto/weights.proto, docs/rl.md "Weights").
//
// WeightService serves an rl::WeightStore; give it to a replay server
// (ServerOptions::services) to serve weights on the replay port, as
// `flywheel run` does. WeightClient publishes and fetches: Fetch returns the
// newer weights or nullptr when the caller's version is current, so an actor
// pays one small round trip per check and the tensor bytes only per version.
//
// Weights past one gRPC message (a language model's) travel chunked:
// PublishChunked / FetchChunked stream the tensors' bytes in chunks and
// resume from the last byte received after a dropped connection (docs/rl.md,
// "Chunked transfer"). Publish switches to chunks on its own past half the
// message limit.
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

// How a chunked transfer went.
struct TransferStats {
  int64_t bytes = 0;     // tensor bytes moved (counted once, resumes excluded)
  int64_t wire_bytes = 0;  // tensor bytes sent or received, resent ones included
  double seconds = 0;    // from the call to the last byte
  int64_t chunks = 0;
  int64_t resumes = 0;   // streams re-opened from the byte reached
  int64_t restarts = 0;  // fetches begun again at a newer version (the pinned one was dropped)
};

struct ChunkedOptions {
  int64_t chunk_bytes = int64_t{4} << 20;  // the server clamps to [4 KiB, 16 MiB]
  int max_resumes = 8;                     // per call; then the last error
  absl::Duration first_backoff = absl::Milliseconds(50);  // doubles per resume, at most 2 s
  absl::Duration timeout = absl::Minutes(10);             // per stream, besides `wait`
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
  // Publish as a stream of chunks: any size; after a dropped connection
  // the upload resumes at the byte the server holds (UploadStatus).
  Result<int64_t> PublishChunked(const std::string& model, const std::vector<Tensor>& tensors, int64_t version = 0,
                                 const ChunkedOptions& options = {}, TransferStats* stats = nullptr);
  // Fetch as a stream of chunks: any size; after a dropped connection the
  // same version resumes at the byte reached, or, when the server no longer
  // holds that version, the fetch begins again at the latest.
  // `recycle`: a version fetched before that the caller no longer uses; when
  // no one else holds it and its tensors have the new one's sizes, their
  // buffers receive the new bytes (no fresh pages to fault in).
  Result<WeightsRef> FetchChunked(const std::string& model, int64_t newer_than, absl::Duration wait = absl::ZeroDuration(),
                                  const ChunkedOptions& options = {}, TransferStats* stats = nullptr,
                                  WeightsRef recycle = nullptr);
  // (model, version) of every model on the server.
  Result<std::vector<std::pair<std::string, int64_t>>> List();

 private:
  std::shared_ptr<grpc::Channel> channel_;
  int64_t max_message_bytes_;
};

}  // namespace flywheel::rl
