#include "flywheel/rl/weights.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace flywheel::rl {

Status Tensor::Validate() const {
  if (name.empty()) return absl::InvalidArgumentError("tensor with an empty name");
  if (!type.is_fixed_width()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': type ", type.ToString(), " is not fixed-width (scalar or tensor)"));
  }
  if (data.size() != type.fixed_width()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': ", data.size(), " bytes, but ",
                                                   type.ToString(), " needs ", type.fixed_width()));
  }
  return absl::OkStatus();
}

const Tensor* Weights::Find(const std::string& name) const {
  for (const Tensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Result<int64_t> WeightStore::Publish(const std::string& model, std::vector<Tensor> tensors, int64_t version) {
  if (model.empty()) return absl::InvalidArgumentError("publish: empty model name");
  std::set<std::string> names;
  for (const Tensor& t : tensors) {
    FW_RETURN_IF_ERROR_CTX(t.Validate(), "publish '", model, "'");
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("publish '", model, "': tensor '", t.name, "' given twice"));
    }
  }
  auto w = std::make_shared<Weights>();
  w->model = model;
  w->tensors = std::move(tensors);
  w->publish_time_ms = absl::ToUnixMillis(absl::Now());
  absl::MutexLock lock(&mu_);
  if (closed_) return absl::CancelledError("publish: the weight store is closed");
  auto it = models_.find(model);
  const int64_t current = it == models_.end() ? 0 : it->second->version;
  if (version == 0) version = current + 1;
  if (version <= current) {
    return absl::FailedPreconditionError(absl::StrCat("publish '", model, "': version ", version,
                                                      " does not exceed the current version ", current));
  }
  w->version = version;
  if (it != models_.end()) previous_[model] = std::move(it->second);
  models_[model] = std::move(w);
  return version;
}

Result<WeightsRef> WeightStore::Get(const std::string& model, int64_t newer_than, absl::Duration timeout,
                                    const bool* cancelled) {
  absl::MutexLock lock(&mu_);
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (closed_ || (cancelled != nullptr && *cancelled)) return true;
    auto it = models_.find(model);
    return it != models_.end() && it->second->version > newer_than;
  };
  const bool ok = mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  if (closed_) return absl::CancelledError("get: the weight store is closed");
  if (cancelled != nullptr && *cancelled) return absl::CancelledError("get: cancelled");
  if (!ok) {
    auto it = models_.find(model);
    if (it == models_.end() && timeout == absl::ZeroDuration()) {
      return absl::NotFoundError(absl::StrCat("get: no model '", model, "' was published"));
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "get '", model, "': no version newer than ", newer_than, " within ", absl::FormatDuration(timeout),
        " (current version ", it == models_.end() ? 0 : it->second->version, ")"));
  }
  return models_.at(model);
}

Result<WeightsRef> WeightStore::GetExact(const std::string& model, int64_t version) const {
  absl::MutexLock lock(&mu_);
  for (const auto* m : {&models_, &previous_}) {
    auto it = m->find(model);
    if (it != m->end() && it->second->version == version) return it->second;
  }
  auto it = models_.find(model);
  return absl::NotFoundError(absl::StrCat("model '", model, "' version ", version, " is no longer held (current ",
                                          it == models_.end() ? 0 : it->second->version, ")"));
}

std::shared_ptr<Weights> WeightStore::TakeUnusedPrevious(const std::string& model) {
  absl::MutexLock lock(&mu_);
  auto it = previous_.find(model);
  // Readers copy a WeightsRef under mu_, so the count is exact here.
  if (it == previous_.end() || it->second.use_count() != 1) return nullptr;
  auto out = std::const_pointer_cast<Weights>(std::move(it->second));
  previous_.erase(it);
  return out;
}

int64_t WeightStore::Version(const std::string& model) const {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(model);
  return it == models_.end() ? 0 : it->second->version;
}

std::vector<std::string> WeightStore::Models() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [name, w] : models_) out.push_back(name);
  return out;
}

void WeightStore::Cancel(bool* flag) {
  absl::MutexLock lock(&mu_);
  *flag = true;
}

void WeightStore::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

}  // namespace flywheel::rl
