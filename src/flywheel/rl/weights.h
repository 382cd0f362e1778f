// Versioned policy weights: named tensors a learner publishes and actors
// fetch when a newer version exists (docs/rl.md, "Weights").
//
//   rl::WeightStore store;
//   auto v = store.Publish("policy", {{"l0.weight", *DataType::Parse("float32[64,4]"), bytes}, ...});
//   auto w = store.Get("policy", /*newer_than=*/have, absl::Seconds(1));  // waits for a newer one
//
// Versions of a model start at 1 and only grow. A published Weights is
// immutable and shared (never copied) by every reader.
//
// Thread-safety: WeightStore is thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flywheel/base/status.h"
#include "flywheel/format/types.h"

namespace flywheel::rl {

// One named tensor: a fixed-width type (scalar or tensor, e.g.
// "float32[64,4]") and its bytes, row-major.
struct Tensor {
  std::string name;
  format::DataType type;
  std::string data;

  // InvalidArgument naming the tensor when the type is not fixed-width or the
  // byte count is not type.fixed_width().
  Status Validate() const;
};

struct Weights {
  std::string model;
  int64_t version = 0;
  int64_t publish_time_ms = 0;  // wall clock at Publish
  std::vector<Tensor> tensors;

  // The tensor called `name`, or nullptr.
  const Tensor* Find(const std::string& name) const;
};
using WeightsRef = std::shared_ptr<const Weights>;

class WeightStore {
 public:
  // Publishes `tensors` as the next version of `model` (version 0: the
  // current one + 1; otherwise it must exceed the current one) and wakes
  // readers waiting for it. Returns the version. InvalidArgument for an
  // empty model name, a bad tensor or two tensors with one name;
  // FailedPrecondition for a version that does not grow; Cancelled after Close.
  Result<int64_t> Publish(const std::string& model, std::vector<Tensor> tensors, int64_t version = 0);

  // The latest version of `model` if it is newer than `newer_than`,
  // otherwise waits up to `timeout` for one. DeadlineExceeded when none
  // came (naming both versions); NotFound when the model was never published
  // and `timeout` is zero; Cancelled after Close or when `*cancelled` is set
  // (see Cancel).
  Result<WeightsRef> Get(const std::string& model, int64_t newer_than = 0,
                         absl::Duration timeout = absl::ZeroDuration(), const bool* cancelled = nullptr);

  // Exactly `version` of `model` while the store still holds it (the
  // latest and the one before, so a chunked fetch of a version can resume
  // after the next is published); NotFound naming what it has otherwise.
  Result<WeightsRef> GetExact(const std::string& model, int64_t version) const;

  // Removes and returns the version before the latest of `model` when no
  // reader holds it, so that its buffers can receive the next version's
  // bytes; nullptr otherwise. (A fetch resuming that version then begins
  // again at the latest.)
  std::shared_ptr<Weights> TakeUnusedPrevious(const std::string& model);

  // Current version of `model` (0: never published).
  int64_t Version(const std::string& model) const;
  std::vector<std::string> Models() const;

  // Sets `*flag` under the lock and wakes the Get calls that passed it.
  void Cancel(bool* flag);
  // Wakes every waiter with Cancelled; later Publish and Get fail too.
  void Close();

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, WeightsRef> models_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, WeightsRef> previous_ ABSL_GUARDED_BY(mu_);  // the version before models_'s
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace flywheel::rl
