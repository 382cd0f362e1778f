#include "flywheel/replay/table.h"

#include <algorithm>
#include <optional>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "flywheel/base/logging.h"
#include "flywheel/base/metrics.h"
#include "flywheel/base/waits.h"

namespace flywheel::replay {
namespace {

}  // namespace

struct ReplayTable::TableMetrics {
  Counter* inserts;
  Counter* samples;
  Gauge* size;
  Histogram* blocked_insert;
  Histogram* blocked_sample;
  Gauge* max_size;
  Gauge* blocked_inserts;  // callers waiting now (a collector refreshes them at each scrape)
  Gauge* blocked_samples;
  FloatCounter* blocked_seconds[2];  // inserts, samples: live (waits in progress included)
  double published[2] = {0, 0};      // already added to blocked_seconds
  int collector = -1;
};

namespace {

ReplayTable::TableMetrics MetricsFor(const std::string& table) {
  const Labels l = {{"table", table}};
  return ReplayTable::TableMetrics{
      Metrics().GetCounter("flywheel_replay_inserts_total", "Items inserted", l),
      Metrics().GetCounter("flywheel_replay_samples_total", "Items sampled", l),
      Metrics().GetGauge("flywheel_replay_size", "Items in the table", l),
      Metrics().GetHistogram("flywheel_replay_insert_blocked_seconds", "Time inserts waited for the rate limiter", l),
      Metrics().GetHistogram("flywheel_replay_sample_blocked_seconds", "Time samples waited for the rate limiter", l),
      Metrics().GetGauge("flywheel_replay_max_size", "Capacity of the table in items", l),
      Metrics().GetGauge("flywheel_replay_blocked_callers", "Inserts or samples waiting for the rate limiter now",
                         {{"table", table}, {"op", "insert"}}),
      Metrics().GetGauge("flywheel_replay_blocked_callers", "Inserts or samples waiting for the rate limiter now",
                         {{"table", table}, {"op", "sample"}}),
      {Metrics().GetFloatCounter("flywheel_replay_blocked_seconds_total",
                                 "Seconds inserts or samples spent blocked by the rate limiter, waits in progress, "
                                 "timed out or cancelled included",
                                 {{"table", table}, {"op", "insert"}}),
       Metrics().GetFloatCounter("flywheel_replay_blocked_seconds_total",
                                 "Seconds inserts or samples spent blocked by the rate limiter, waits in progress, "
                                 "timed out or cancelled included",
                                 {{"table", table}, {"op", "sample"}})},
  };
}

}  // namespace

Status ReplayTableOptions::Validate() const {
  if (name.empty()) return absl::InvalidArgumentError("replay table needs a name");
  if (max_size < 1) return absl::InvalidArgumentError(absl::StrCat("table '", name, "': max_size must be >= 1"));
  if (max_times_sampled < 0) {
    return absl::InvalidArgumentError(absl::StrCat("table '", name, "': max_times_sampled must be >= 0"));
  }
  FW_RETURN_IF_ERROR_CTX(rate_limiter.Validate(), "table '", name, "' rate limiter");
  if (signature) {
    for (const auto& [col, type] : signature->columns) {
      if (!type.is_fixed_width()) {
        return absl::InvalidArgumentError(absl::StrCat("table '", name, "' signature: column '", col,
                                                       "' must be a fixed-width type per step"));
      }
    }
  }
  return absl::OkStatus();
}

Result<std::unique_ptr<ReplayTable>> ReplayTable::Create(ReplayTableOptions options) {
  FW_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<ReplayTable> t(new ReplayTable());
  t->name_ = options.name;
  t->max_size_ = options.max_size;
  t->max_times_sampled_ = options.max_times_sampled;
  t->signature_ = std::move(options.signature);
  t->watchdog_ = options.watchdog;
  t->metrics_ = std::make_unique<TableMetrics>(MetricsFor(t->name_));
  t->metrics_->max_size->Set(static_cast<double>(t->max_size_));
  {
    absl::MutexLock lock(&t->mu_);
    t->sampler_ = options.sampler ? std::move(options.sampler) : NewUniformSelector();
    t->remover_ = options.remover ? std::move(options.remover) : NewFifoSelector();
    t->limiter_ = std::make_unique<RateLimiter>(options.rate_limiter);
  }
  // Registered after the table is complete and outside its lock (the
  // registry runs collectors under its own lock, which then takes ours).
  t->metrics_->collector = Metrics().AddCollector([raw = t.get()] { raw->PublishBlocked(); });
  return t;
}

void ReplayTable::PublishBlocked() {
  const TableInfo info = Info();
  metrics_->blocked_inserts->Set(static_cast<double>(info.blocked_inserts));
  metrics_->blocked_samples->Set(static_cast<double>(info.blocked_samples));
  absl::MutexLock lock(&mu_);
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  for (int op = 0; op < 2; ++op) {
    const double total = BlockedSecondsLocked(op, now);
    if (total > metrics_->published[op]) {
      metrics_->blocked_seconds[op]->Add(total - metrics_->published[op]);
      metrics_->published[op] = total;
    }
  }
}

double ReplayTable::BlockedSecondsLocked(int op, double now) const {
  return blocked_done_[op] + blocked_now_[op] * now - blocked_start_sum_[op];
}

ReplayTable::~ReplayTable() {
  Metrics().RemoveCollector(metrics_->collector);
  PublishBlocked();
  // Nobody waits on a table that is gone (the series outlive it).
  metrics_->blocked_inserts->Set(0);
  metrics_->blocked_samples->Set(0);
  Close();
}

void ReplayTable::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  limiter_->Cancel();
}

void ReplayTable::Cancel(bool* flag) {
  absl::MutexLock lock(&mu_);
  *flag = true;
  limiter_->WakeAll();
}

Status ReplayTable::AwaitLocked(bool insert, absl::Duration timeout, const bool* cancelled) {
  // Hang diagnosis (SIGUSR1, the watchdog) lists this call while it blocks,
  // with the limiter's explanation from when it started waiting.
  std::optional<obs::BlockedWait> blocked;
  // Counts this wait's time in the blocked-seconds series, live and on
  // every way out (mu_ is held at each return).
  struct BlockedTime {
    ReplayTable* t;
    int op;
    double start = -1;
    ~BlockedTime() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      if (start < 0) return;
      t->blocked_now_[op]--;
      t->blocked_start_sum_[op] -= start;
      t->blocked_done_[op] += std::max(0.0, absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()) - start);
    }
  } blocked_time{this, insert ? 0 : 1};
  if (!closed_ && !(insert ? limiter_->CanInsert() : limiter_->CanSample())) {
    blocked.emplace("replay", absl::StrCat(insert ? "insert into" : "sample from", " table '", name_, "'"),
                    limiter_->Explain());
    blocked_time.start = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
    blocked_now_[blocked_time.op]++;
    blocked_start_sum_[blocked_time.op] += blocked_time.start;
  }
  const absl::Time start = absl::Now();
  const absl::Time deadline = timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : start + timeout;
  absl::Time next_warning = watchdog_ > absl::ZeroDuration() ? start + watchdog_ : absl::InfiniteFuture();
  while (true) {
    if (closed_) return absl::CancelledError(absl::StrCat("table '", name_, "' was closed"));
    // Wait until the deadline or the next watchdog report, whichever is first;
    // Close() cancels the limiter, which wakes every waiter.
    const absl::Time until = std::min(deadline, next_warning);
    const absl::Duration slice = until == absl::InfiniteFuture() ? absl::InfiniteDuration()
                                                                 : std::max(until - absl::Now(), absl::ZeroDuration());
    Status s = insert ? limiter_->AwaitCanInsert(&mu_, slice, cancelled)
                      : limiter_->AwaitCanSample(&mu_, slice, cancelled);
    if (s.ok()) {
      obs::NoteProgress();
      return s;
    }
    if (closed_) return absl::CancelledError(absl::StrCat("table '", name_, "' was closed"));
    if (!absl::IsDeadlineExceeded(s)) {
      return Annotate(s, absl::StrCat(insert ? "insert into" : "sample from", " table '", name_, "'"));
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return Annotate(s, absl::StrCat(insert ? "insert into" : "sample from", " table '", name_, "' timed out after ",
                                      absl::FormatDuration(timeout)));
    }
    FW_LOG(WARNING) << (insert ? "insert into" : "sample from") << " table '" << name_ << "' blocked for "
                    << absl::FormatDuration(now - start) << ":\n" << limiter_->Explain();
    next_warning = now + watchdog_;
  }
}

Status ReplayTable::Insert(Item item, absl::Duration timeout, const bool* cancelled) {
  if (item.columns.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("insert into table '", name_, "': item ", item.key, " has no columns"));
  }
  if (!(item.priority >= 0) || item.priority == HUGE_VAL) {
    return absl::InvalidArgumentError(absl::StrCat("insert into table '", name_, "': item ", item.key,
                                                   " has priority ", item.priority, "; priorities must be finite and >= 0"));
  }
  for (const auto& col : item.columns) {
    FW_RETURN_IF_ERROR_CTX(col.Validate(), "insert into table '", name_, "': item ", item.key);
  }
  for (size_t i = 0; i < item.columns.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (item.columns[i].name == item.columns[j].name) {
        return absl::InvalidArgumentError(absl::StrCat("insert into table '", name_, "': item ", item.key,
                                                       " has column '", item.columns[i].name, "' twice"));
      }
    }
  }
  if (signature_) {
    for (const auto& col : item.columns) {
      auto it = std::find_if(signature_->columns.begin(), signature_->columns.end(),
                             [&](const auto& s) { return s.first == col.name; });
      if (it == signature_->columns.end()) {
        return absl::InvalidArgumentError(absl::StrCat("insert into table '", name_, "': column '", col.name,
                                                       "' is not in the table signature"));
      }
      if (!(it->second == col.step_type())) {
        return absl::InvalidArgumentError(absl::StrCat("insert into table '", name_, "': column '", col.name,
                                                       "' holds ", col.step_type().ToString(), ", the signature says ",
                                                       it->second.ToString()));
      }
    }
    for (const auto& sig_column : signature_->columns) {
      const std::string& sig_name = sig_column.first;
      const bool present = std::any_of(item.columns.begin(), item.columns.end(),
                                       [&](const TrajectoryColumn& c) { return c.name == sig_name; });
      if (!present) {
        return absl::InvalidArgumentError(absl::StrCat("insert into table '", name_, "': item ", item.key,
                                                       " lacks column '", sig_name, "' of the signature"));
      }
    }
    if (item.columns.size() != signature_->columns.size()) {
      return absl::InvalidArgumentError(absl::StrCat("insert into table '", name_, "': item has ", item.columns.size(),
                                                     " columns, the signature has ", signature_->columns.size()));
    }
  }
  const absl::Time start = absl::Now();
  absl::MutexLock lock(&mu_);
  if (items_.contains(item.key)) {
    return absl::AlreadyExistsError(absl::StrCat("table '", name_, "' already holds item ", item.key));
  }
  FW_RETURN_IF_ERROR(AwaitLocked(/*insert=*/true, timeout, cancelled));
  if (items_.contains(item.key)) {
    return absl::AlreadyExistsError(absl::StrCat("table '", name_, "' already holds item ", item.key));
  }
  if (static_cast<int64_t>(items_.size()) >= max_size_) {
    FW_ASSIGN_OR_RETURN(KeyWithProbability victim, remover_->Sample());
    FW_RETURN_IF_ERROR(DeleteLocked(victim.key));
    evicted_++;
  }
  FW_RETURN_IF_ERROR(AddLocked(std::move(item)));
  limiter_->Insert();
  metrics_->inserts->Increment();
  metrics_->size->Set(static_cast<double>(items_.size()));
  metrics_->blocked_insert->Observe(absl::ToDoubleSeconds(absl::Now() - start));
  return absl::OkStatus();
}

Status ReplayTable::AddLocked(Item item) {
  const ItemKey key = item.key;
  FW_RETURN_IF_ERROR(sampler_->Insert(key, item.priority));
  Status rs = remover_->Insert(key, item.priority);
  if (!rs.ok()) {
    (void)sampler_->Delete(key);
    return rs;
  }
  Entry e{next_seq_++, item.priority, item.times_sampled, std::make_shared<const Item>(std::move(item))};
  items_.emplace(key, std::move(e));
  return absl::OkStatus();
}

Status ReplayTable::RestoreItem(Item item) {
  for (const auto& col : item.columns) {
    FW_RETURN_IF_ERROR_CTX(col.Validate(), "restoring item ", item.key, " into table '", name_, "'");
  }
  absl::MutexLock lock(&mu_);
  if (items_.contains(item.key)) {
    return absl::AlreadyExistsError(absl::StrCat("table '", name_, "' already holds item ", item.key));
  }
  if (static_cast<int64_t>(items_.size()) >= max_size_) {
    return absl::ResourceExhaustedError(absl::StrCat("restoring into table '", name_, "': it is full (",
                                                     max_size_, " items)"));
  }
  return AddLocked(std::move(item));
}

void ReplayTable::SetRateLimiterState(const RateLimiterState& state) {
  absl::MutexLock lock(&mu_);
  limiter_->set_state(state);
}

Status ReplayTable::DeleteLocked(ItemKey key) {
  auto it = items_.find(key);
  if (it == items_.end()) return absl::NotFoundError(absl::StrCat("table '", name_, "' has no item ", key));
  FW_RETURN_IF_ERROR(sampler_->Delete(key));
  FW_RETURN_IF_ERROR(remover_->Delete(key));
  items_.erase(it);
  limiter_->Delete();
  deleted_++;
  return absl::OkStatus();
}

Result<SampledItem> ReplayTable::SampleLocked() {
  FW_ASSIGN_OR_RETURN(KeyWithProbability pick, sampler_->Sample());
  auto it = items_.find(pick.key);
  if (it == items_.end()) {
    return absl::InternalError(absl::StrCat("table '", name_, "': sampler returned unknown key ", pick.key));
  }
  Entry& e = it->second;
  e.times_sampled++;
  SampledItem out;
  out.item = e.item;
  out.priority = e.priority;
  out.probability = pick.probability;
  out.table_size = static_cast<int64_t>(items_.size());
  out.times_sampled = e.times_sampled;
  limiter_->Sample();
  if (max_times_sampled_ > 0 && e.times_sampled >= max_times_sampled_) {
    FW_RETURN_IF_ERROR(DeleteLocked(pick.key));
  }
  return out;
}

Result<SampledItem> ReplayTable::Sample(absl::Duration timeout, const bool* cancelled) {
  FW_ASSIGN_OR_RETURN(auto batch, SampleBatch(1, false, timeout, cancelled));
  return std::move(batch.front());
}

Result<std::vector<SampledItem>> ReplayTable::SampleBatch(int64_t n, bool flexible, absl::Duration timeout,
                                                    const bool* cancelled) {
  if (n < 1) return absl::InvalidArgumentError("sample batch size must be >= 1");
  const absl::Time start = absl::Now();
  const absl::Time deadline = timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : start + timeout;
  std::vector<SampledItem> out;
  absl::MutexLock lock(&mu_);
  if (!flexible && n > 1) {
    // All or nothing: wait until the limiter allows all n samples before
    // taking any, so a timeout never consumes items (regression: a timed-out
    // batch once counted, and with max_times_sampled deleted, what it took).
    const absl::Duration left = deadline == absl::InfiniteFuture() ? absl::InfiniteDuration() : deadline - absl::Now();
    FW_RETURN_IF_ERROR(AwaitLocked(/*insert=*/false, std::max(left, absl::ZeroDuration()), cancelled));
    auto ready = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closed_ || limiter_->CanSample(n); };
    waiting_batches_++;  // counted as a blocked sample in Info()
    const bool ok = mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
    waiting_batches_--;
    if (!ok) {
      return absl::DeadlineExceededError(absl::StrCat("sample of ", n, " items from table '", name_,
                                                      "' timed out after ", absl::FormatDuration(timeout),
                                                      " (none taken):\n", limiter_->Explain()));
    }
    if (closed_) return absl::CancelledError(absl::StrCat("table '", name_, "' was closed"));
  }
  while (static_cast<int64_t>(out.size()) < n) {
    if (out.empty() || !flexible) {
      const absl::Duration left = deadline == absl::InfiniteFuture() ? absl::InfiniteDuration() : deadline - absl::Now();
      FW_RETURN_IF_ERROR(AwaitLocked(/*insert=*/false, std::max(left, absl::ZeroDuration()), cancelled));
    } else if (!limiter_->CanSample()) {
      break;
    }
    FW_ASSIGN_OR_RETURN(SampledItem s, SampleLocked());
    out.push_back(std::move(s));
  }
  metrics_->samples->Increment(static_cast<int64_t>(out.size()));
  metrics_->size->Set(static_cast<double>(items_.size()));
  metrics_->blocked_sample->Observe(absl::ToDoubleSeconds(absl::Now() - start));
  return out;
}

Result<int64_t> ReplayTable::MutatePriorities(const std::vector<std::pair<ItemKey, double>>& updates,
                                        const std::vector<ItemKey>& deletes) {
  for (const auto& [key, p] : updates) {
    if (!(p >= 0) || p == HUGE_VAL) {
      return absl::InvalidArgumentError(absl::StrCat("table '", name_, "': priority ", p, " for item ", key,
                                                     " must be finite and >= 0"));
    }
  }
  absl::MutexLock lock(&mu_);
  int64_t missing = 0;
  for (const auto& [key, p] : updates) {
    auto it = items_.find(key);
    if (it == items_.end()) {
      missing++;
      continue;
    }
    it->second.priority = p;
    FW_RETURN_IF_ERROR(sampler_->Update(key, p));
    FW_RETURN_IF_ERROR(remover_->Update(key, p));
  }
  for (ItemKey key : deletes) {
    if (!items_.contains(key)) {
      missing++;
      continue;
    }
    FW_RETURN_IF_ERROR(DeleteLocked(key));
  }
  return missing;
}

void ReplayTable::Reset() {
  absl::MutexLock lock(&mu_);
  items_.clear();
  sampler_->Clear();
  remover_->Clear();
  limiter_->Reset();
}

TableInfo ReplayTable::Info() const {
  absl::MutexLock lock(&mu_);
  return InfoLocked();
}

TableInfo ReplayTable::InfoLocked() const {
  TableInfo info;
  info.name = name_;
  info.size = static_cast<int64_t>(items_.size());
  info.max_size = max_size_;
  info.max_times_sampled = max_times_sampled_;
  info.limiter = limiter_->state();
  info.limiter_options = limiter_->options();
  info.blocked_inserts = limiter_->blocked_inserts();
  info.blocked_samples = limiter_->blocked_samples() + waiting_batches_;
  info.sampler = sampler_->Describe();
  info.remover = remover_->Describe();
  info.num_episodes_evicted = evicted_;
  info.num_deleted = deleted_;
  return info;
}

std::string ReplayTable::Explain() const {
  absl::MutexLock lock(&mu_);
  return absl::StrCat("table '", name_, "': ", items_.size(), " of ", max_size_, " items, sampler ",
                      sampler_->Describe(), ", remover ", remover_->Describe(),
                      max_times_sampled_ > 0 ? absl::StrCat(", items deleted after ", max_times_sampled_, " samples")
                                             : std::string(),
                      "\n", limiter_->Explain());
}

ReplayTable::Snapshot ReplayTable::TakeSnapshot() const {
  Snapshot snap;
  // Allocate (and page-fault) the snapshot vector before taking the lock for
  // the copy: at 1M items the faults cost more than the copy itself.
  size_t expected;
  {
    absl::MutexLock lock(&mu_);
    expected = items_.size();
  }
  snap.items.resize(expected + expected / 8 + 16);
  absl::Time start;
  {
    absl::MutexLock lock(&mu_);
    start = absl::Now();  // time the lock is held, not the wait for it
    if (snap.items.size() < items_.size()) snap.items.resize(items_.size());
    size_t i = 0;
    for (const auto& [key, e] : items_) {
      snap.items[i++] = SnapshotItem{key, e.seq, e.priority, e.times_sampled, e.item};
    }
    snap.items.resize(i);
    snap.info = InfoLocked();
  }
  snap.lock_held = absl::Now() - start;
  std::sort(snap.items.begin(), snap.items.end(),
            [](const SnapshotItem& a, const SnapshotItem& b) { return a.insert_seq < b.insert_seq; });
  return snap;
}

std::vector<std::shared_ptr<const Item>> ReplayTable::Items() const {
  const Snapshot snap = TakeSnapshot();
  std::vector<std::shared_ptr<const Item>> out;
  out.reserve(snap.items.size());
  for (const auto& s : snap.items) {
    auto copy = std::make_shared<Item>(*s.item);
    copy->priority = s.priority;
    copy->times_sampled = s.times_sampled;
    out.push_back(std::move(copy));
  }
  return out;
}

}  // namespace flywheel::replay
