// EnvPool's implementation; the contract and the hand-off scheme are in
// env_pool.h, the semantics in docs/envs.md.
//
// Positions. Every result row has a position p in an endless sequence; its
// batch is p / B and it lives in buffer (p / B) % K, row p % B, with
// B = batch_size and K = num_buffers() = ceil(N / B) + 2. Async threads take
// positions in the order they pick envs up (one fetch_add per chunk); sync
// mode has one batch in flight and puts env e at batch * B + e (env order).
//
// Why K buffers suffice. An env has at most one position that is not yet
// received (Send refuses an env still in flight), so positions below
// (last received batch + 1) * B + N are all that can be written. Batch
// q + K starts at (q + K) * B >= (q + 2) * B + N, so buffer q % K is written
// again only after batch q + 2 was received: the previous batch stays
// intact while the caller holds the current one. Recv of batch r clears the
// row count of batch r - 2's buffer and then frees it for batch r - 2 + K
// (free_for_, a release store) before the caller can send again; a thread
// reads free_for_ (acquire) before writing a buffer's rows, which turns the
// counting argument into happens-before and checks it.
#include "flywheel/envs/env_pool.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "flywheel/base/metrics.h"
#include "flywheel/envs/internal/doorbell.h"
#include "flywheel/envs/registry.h"

namespace flywheel::envs {

Result<AutoresetMode> ParseAutoresetMode(std::string_view name) {
  if (name == "next_step") return AutoresetMode::kNextStep;
  if (name == "same_step") return AutoresetMode::kSameStep;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown autoreset_mode '", AsAbsl(name), "' (known: next_step, same_step)"));
}

std::string_view AutoresetModeName(AutoresetMode mode) {
  return mode == AutoresetMode::kNextStep ? "next_step" : "same_step";
}

Status EnvPoolOptions::Validate() const {
  if (num_envs < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_envs must be >= 1, got ", num_envs));
  }
  if (batch_size < 0 || batch_size > num_envs) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size must be in [1, num_envs = ", num_envs,
                     "] (or 0 for num_envs), got ", batch_size));
  }
  if (num_threads < 1 || num_threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_threads must be in [1, 1024], got ", num_threads));
  }
  if (!max_episode_steps.empty() && max_episode_steps.size() != 1 &&
      max_episode_steps.size() != static_cast<size_t>(num_envs)) {
    return absl::InvalidArgumentError(absl::StrCat("max_episode_steps has ",
                                                   max_episode_steps.size(),
                                                   " values; need 1 or num_envs = ", num_envs));
  }
  for (size_t i = 0; i < max_episode_steps.size(); ++i) {
    if (max_episode_steps[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "max_episode_steps[", i, "] must be >= 0 (0 = no limit), got ", max_episode_steps[i]));
    }
  }
  if (spin < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("spin must be >= 0, got ", absl::FormatDuration(spin)));
  }
  return absl::OkStatus();
}

namespace {

using internal_envs::Doorbell;

constexpr size_t kAlign = 64;
size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct alignas(kAlign) PaddedCount {
  std::atomic<int64_t> v{0};
};

// Per-env state. Touched by one thread at a time: the driver while the env
// is idle, the thread that claimed it while it is in flight (hand-off
// through Send's release store and the claim's acquire). One cache line each, so threads
// stepping neighbouring envs do not share lines.
struct alignas(kAlign) Slot {
  std::unique_ptr<Env> env;
  int64_t max_steps = 0;
  int64_t elapsed = 0;
  bool needs_reset = false;  // kNextStep: the last step ended the episode
};

// One allocation for every buffer, so one shared_ptr owns them all.
class Arena {
 public:
  explicit Arena(size_t bytes) : bytes_(std::max<size_t>(bytes, kAlign)) {
    data_ = static_cast<std::byte*>(::operator new(bytes_, std::align_val_t(kAlign)));
    std::memset(data_, 0, bytes_);
  }
  ~Arena() { ::operator delete(data_, std::align_val_t(kAlign)); }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  std::byte* at(size_t offset) const { return data_ + offset; }

 private:
  size_t bytes_;
  std::byte* data_;
};

class EnvPoolImpl final : public EnvPool {
 public:
  EnvPoolImpl(EnvPoolOptions options, std::vector<std::unique_ptr<Env>> envs,
              const std::vector<int64_t>& limits, const std::string& env_name)
      : steps_metric_(Metrics().GetCounter("flywheel_env_steps_total", "Environment steps sent to an EnvPool",
                                           {{"env", env_name}})),
        options_(std::move(options)),
        n_(options_.num_envs),
        b_(options_.resolved_batch_size()),
        k_((n_ + b_ - 1) / b_ + 2),
        sync_(b_ == n_),
        same_step_(options_.autoreset_mode == AutoresetMode::kSameStep),
        obs_space_(envs[0]->observation_space()),
        action_space_(envs[0]->action_space()),
        state_size_(envs[0]->state_size()),
        obs_bytes_(obs_space_.row_bytes()),
        act_bytes_(action_space_.row_bytes()),
        slot_bytes_(SlotBytes(action_space_)),
        slots_(n_),
        queue_(n_),
        filled_(k_),
        free_for_(k_),
        ranges_(sync_ ? options_.num_threads : 0),
        unpublished_(sync_ ? options_.num_threads : 0),
        completed_(options_.num_threads + 1),
        in_flight_(n_, 0),
        seen_(n_, 0) {
    for (int i = 0; i < n_; ++i) {
      slots_[i].env = std::move(envs[i]);
      slots_[i].max_steps = limits[i];
      slots_[i].env->Seed(options_.seed + static_cast<uint64_t>(i));
    }
    for (int i = 0; i < k_; ++i) free_for_[i].v.store(i, std::memory_order_relaxed);
    if (sync_) {
      for (int t = 0; t < options_.num_threads; ++t) {
        Range& r = ranges_[t];
        r.begin = static_cast<int64_t>(n_) * t / options_.num_threads;
        r.end = static_cast<int64_t>(n_) * (t + 1) / options_.num_threads;
        r.chunk = std::max<int64_t>(1, std::min<int64_t>((r.end - r.begin + 3) / 4, kMaxChunk));
        r.next.store(r.end, std::memory_order_relaxed);
      }
    }
    // Layout: K ring buffers of B rows, then the reset buffer of N rows,
    // then the per-env action slots.
    size_t offset = 0;
    views_.resize(k_ + 1);
    for (int i = 0; i <= k_; ++i) {
      const int rows = i < k_ ? b_ : n_;
      Layout l;
      l.rows = rows;
      l.obs = offset, offset += AlignUp(rows * obs_bytes_);
      l.reward = offset, offset += AlignUp(rows * sizeof(double));
      l.terminated = offset, offset += AlignUp(rows);
      l.truncated = offset, offset += AlignUp(rows);
      l.env_id = offset, offset += AlignUp(rows * sizeof(int32_t));
      if (same_step_) {
        l.final_obs = offset, offset += AlignUp(rows * obs_bytes_);
        l.has_final = offset, offset += AlignUp(rows);
      }
      layouts_.push_back(l);
    }
    const size_t actions_offset = offset;
    offset += AlignUp(static_cast<size_t>(n_) * slot_bytes_);
    arena_ = std::make_shared<Arena>(offset);
    for (int i = 0; i <= k_; ++i) {
      const Layout& l = layouts_[i];
      BufferView& v = views_[i];
      v.rows = l.rows;
      v.obs = arena_->at(l.obs);
      v.reward = reinterpret_cast<double*>(arena_->at(l.reward));
      v.terminated = reinterpret_cast<bool*>(arena_->at(l.terminated));
      v.truncated = reinterpret_cast<bool*>(arena_->at(l.truncated));
      v.env_id = reinterpret_cast<int32_t*>(arena_->at(l.env_id));
      if (same_step_) {
        v.final_obs = arena_->at(l.final_obs);
        v.has_final_obs = reinterpret_cast<bool*>(arena_->at(l.has_final));
      }
    }
    actions_ = arena_->at(actions_offset);
    if (sync_) {
      for (int i = 0; i < k_; ++i) {
        for (int row = 0; row < b_; ++row) views_[i].env_id[row] = row;
      }
    }
    const int workers = sync_ ? options_.num_threads - 1 : options_.num_threads;
    threads_.reserve(workers);
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this, i] { WorkerLoop(i + 1); });
  }

  ~EnvPoolImpl() override { Close(); }

  const Space& observation_space() const override { return obs_space_; }
  const Space& action_space() const override { return action_space_; }
  int num_envs() const override { return n_; }
  int batch_size() const override { return b_; }
  int num_threads() const override { return options_.num_threads; }
  AutoresetMode autoreset_mode() const override { return options_.autoreset_mode; }
  int64_t max_episode_steps(int i) const override { return slots_[i].max_steps; }
  int state_size() const override { return state_size_; }
  int num_buffers() const override { return k_; }
  BufferView buffer(int i) const override { return views_[i]; }
  std::shared_ptr<const void> memory() const override { return arena_; }
  int64_t pending() const override { return static_cast<int64_t>(sent_ - next_batch_ * b_); }

  Result<Batch> Reset(std::span<const uint64_t> seeds, std::span<const double> states) override {
    FW_RETURN_IF_ERROR(CheckUsable("reset", /*needs_reset=*/false));
    if (!seeds.empty() && seeds.size() != 1 && seeds.size() != static_cast<size_t>(n_)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reset: ", seeds.size(), " seeds; need 1 (env i gets seed + i) or num_envs = ", n_));
    }
    const auto s = static_cast<size_t>(state_size_);
    const bool one_state = states.size() == s;
    if (!states.empty() && !one_state && states.size() != s * n_) {
      return absl::InvalidArgumentError(
          absl::StrCat("reset: state has ", states.size(), " values; need ", s,
                       " (one state for every env) or ", s * n_, " (num_envs x ", s, ")"));
    }
    FW_RETURN_IF_ERROR(Drain());
    // Nothing is in flight and no thread touches the counters now; the next
    // Send publishes these stores with its release of tail_.
    write_pos_.store(0, std::memory_order_relaxed);
    for (auto& c : completed_) c.v.store(0, std::memory_order_relaxed);
    for (int i = 0; i < k_; ++i) {
      filled_[i].v.store(0, std::memory_order_relaxed);
      free_for_[i].v.store(i, std::memory_order_release);
    }
    sent_ = 0;
    next_batch_ = 0;
    std::fill(in_flight_.begin(), in_flight_.end(), 0);
    in_flight_count_ = 0;
    const BufferView& v = views_[k_];
    for (int i = 0; i < n_; ++i) {
      Slot& slot = slots_[i];
      if (!seeds.empty())
        slot.env->Seed(seeds.size() == 1 ? seeds[0] + static_cast<uint64_t>(i) : seeds[i]);
      std::span<const double> state;
      if (!states.empty()) state = states.subspan(one_state ? 0 : i * s, s);
      Status st = slot.env->Reset(state, ObsRow(v, i));
      if (!st.ok()) return Fail(i, "reset", st);
      slot.elapsed = 0;
      slot.needs_reset = false;
      v.reward[i] = 0;
      v.terminated[i] = false;
      v.truncated[i] = false;
      v.env_id[i] = i;
      if (same_step_) {
        std::memset(FinalRow(v, i), 0, obs_bytes_);
        v.has_final_obs[i] = false;
      }
    }
    was_reset_ = true;
    return Batch{k_, v};
  }

  Status Send(const void* actions, std::span<const int32_t> env_ids) override {
    FW_RETURN_IF_ERROR(CheckUsable("send", /*needs_reset=*/true));
    const bool all = env_ids.empty();
    const size_t count = all ? static_cast<size_t>(n_) : env_ids.size();
    if (sync_ && count != static_cast<size_t>(n_)) {
      return absl::InvalidArgumentError(
          absl::StrCat("send: in sync mode (batch_size == num_envs == ", n_,
                       ") every step is for all envs; got ", count, " env ids"));
    }
    // Validate everything before changing anything.
    const auto* rows = static_cast<const std::byte*>(actions);
    if (all) {
      if (in_flight_count_ > 0) {
        const auto e = std::find(in_flight_.begin(), in_flight_.end(), 1) - in_flight_.begin();
        return StillStepping(static_cast<int>(e));
      }
    } else {
      if (++stamp_ == 0) {  // wrapped: forget old stamps
        std::fill(seen_.begin(), seen_.end(), 0);
        stamp_ = 1;
      }
      for (size_t k = 0; k < count; ++k) {
        const int32_t e = env_ids[k];
        if (e < 0 || e >= n_) {
          return absl::InvalidArgumentError(
              absl::StrCat("send: env_ids[", k, "] = ", e, " is out of range [0, ", n_, ")"));
        }
        if (seen_[e] == stamp_) {
          return absl::InvalidArgumentError(
              absl::StrCat("send: env ", e, " appears twice in env_ids"));
        }
        seen_[e] = stamp_;
        if (in_flight_[e]) return StillStepping(e);
      }
    }
    if (action_space_.is_discrete()) {
      const auto* a =
          reinterpret_cast<const int64_t*>(rows);  // the binding passes aligned int64 rows
      const uint64_t n = static_cast<uint64_t>(action_space_.n);
      for (size_t k = 0; k < count; ++k) {
        if (static_cast<uint64_t>(a[k] - action_space_.start) >= n) {
          return absl::InvalidArgumentError(absl::StrCat("send: action ", a[k], " for env ",
                                                         all ? static_cast<int32_t>(k) : env_ids[k],
                                                         " is outside ", action_space_.ToString()));
        }
      }
    }
    steps_metric_->Increment(static_cast<int64_t>(count));
    if (sync_) {
      // Every env, handed out by home ranges (TryRunSyncChunk): no queue.
      for (size_t k = 0; k < count; ++k) {
        const int32_t e = all ? static_cast<int32_t>(k) : env_ids[k];
        StoreAction(e, rows + k * act_bytes_);
      }
      std::fill(in_flight_.begin(), in_flight_.end(), 1);
      out_batch_ = next_batch_;
      for (auto& r : ranges_) r.next.store(r.begin, std::memory_order_release);
    } else {
      size_t slot = static_cast<size_t>(tail_local_ % static_cast<uint64_t>(n_));
      for (size_t k = 0; k < count; ++k) {
        const int32_t e = env_ids.empty() ? static_cast<int32_t>(k) : env_ids[k];
        StoreAction(e, rows + k * act_bytes_);
        in_flight_[e] = 1;
        queue_[slot].store(e, std::memory_order_relaxed);
        if (++slot == static_cast<size_t>(n_)) slot = 0;
      }
    }
    in_flight_count_ += static_cast<int64_t>(count);
    sent_ += count;
    tail_local_ += count;
    tail_.store(tail_local_, std::memory_order_release);
    in_bell_.Ring();
    return absl::OkStatus();
  }

  Result<Batch> Recv(absl::Duration timeout) override {
    FW_RETURN_IF_ERROR(CheckUsable("recv", /*needs_reset=*/true));
    if (pending() < b_) {
      return absl::FailedPreconditionError(
          absl::StrCat("recv: ", pending(), " steps are pending, fewer than batch_size = ", b_,
                       ", so this recv would never return; send() actions first"));
    }
    const int buf = static_cast<int>(next_batch_ % k_);
    auto ready = [this, buf] {
      return filled_[buf].v.load(std::memory_order_acquire) >= b_ ||
             failed_.load(std::memory_order_acquire);
    };
    const absl::Time deadline =
        timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
    if (sync_) {
      // The caller is one of the stepping threads: work until nothing is
      // left to claim, then wait for the workers' last chunks.
      while (!ready() && TryRunChunk(0)) {
      }
    }
    if (!out_bell_.Wait(ready, options_.spin, deadline)) {
      return absl::DeadlineExceededError(absl::StrCat("recv: no complete batch after ",
                                                      absl::FormatDuration(timeout), " (",
                                                      pending(), " steps pending)"));
    }
    if (failed_.load(std::memory_order_acquire)) return StoredError("recv");
    if (next_batch_ >= 2) {
      const int old = static_cast<int>((next_batch_ - 2) % k_);
      filled_[old].v.store(0, std::memory_order_relaxed);
      free_for_[old].v.store(static_cast<int64_t>(next_batch_ - 2 + k_), std::memory_order_release);
    }
    const BufferView& v = views_[buf];
    if (sync_) {
      std::fill(in_flight_.begin(), in_flight_.end(), 0);
    } else {
      for (int row = 0; row < b_; ++row) in_flight_[v.env_id[row]] = 0;
    }
    in_flight_count_ -= b_;
    ++next_batch_;
    return Batch{buf, v};
  }

  Result<Batch> Step(const void* actions, std::span<const int32_t> env_ids) override {
    FW_RETURN_IF_ERROR(Send(actions, env_ids));
    return Recv(absl::InfiniteDuration());
  }

  void Close() override {
    if (closed_) return;
    closed_ = true;
    stop_.store(true, std::memory_order_release);
    in_bell_.Ring();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  Counter* const steps_metric_;

  struct Layout {
    int rows = 0;
    size_t obs = 0, reward = 0, terminated = 0, truncated = 0, env_id = 0, final_obs = 0,
           has_final = 0;
  };

  // Actions are kept per env in actions_: Box rows as given (float32);
  // Discrete values in the narrowest integer type their range fits
  // (slot_bytes_: 1, 2, 4 or 8), so a batch of CartPole actions moves 1 byte
  // per env to the stepping threads, not 8. REQUIRES: in range (Send checks).
  void StoreAction(int32_t e, const std::byte* row) {
    std::byte* dst = actions_ + static_cast<size_t>(e) * slot_bytes_;
    if (!action_space_.is_discrete()) {
      std::memcpy(dst, row, act_bytes_);
      return;
    }
    int64_t v = 0;
    std::memcpy(&v, row, sizeof(v));
    switch (slot_bytes_) {
      case 1: {
        const auto x = static_cast<int8_t>(v);
        std::memcpy(dst, &x, 1);
        break;
      }
      case 2: {
        const auto x = static_cast<int16_t>(v);
        std::memcpy(dst, &x, 2);
        break;
      }
      case 4: {
        const auto x = static_cast<int32_t>(v);
        std::memcpy(dst, &x, 4);
        break;
      }
      default:
        std::memcpy(dst, &v, 8);
    }
  }
  const void* LoadAction(int32_t e, int64_t* discrete) const {
    const std::byte* src = actions_ + static_cast<size_t>(e) * slot_bytes_;
    if (!action_space_.is_discrete()) return src;
    switch (slot_bytes_) {
      case 1: {
        int8_t x = 0;
        std::memcpy(&x, src, 1);
        *discrete = x;
        break;
      }
      case 2: {
        int16_t x = 0;
        std::memcpy(&x, src, 2);
        *discrete = x;
        break;
      }
      case 4: {
        int32_t x = 0;
        std::memcpy(&x, src, 4);
        *discrete = x;
        break;
      }
      default:
        std::memcpy(discrete, src, 8);
    }
    return discrete;
  }

  static size_t SlotBytes(const Space& s) {
    if (!s.is_discrete()) return s.row_bytes();
    const int64_t lo = s.start, hi = s.start + s.n - 1;
    if (lo >= INT8_MIN && hi <= INT8_MAX) return 1;
    if (lo >= INT16_MIN && hi <= INT16_MAX) return 2;
    if (lo >= INT32_MIN && hi <= INT32_MAX) return 4;
    return 8;
  }

  void* ObsRow(const BufferView& v, int row) const {
    return static_cast<std::byte*>(v.obs) + static_cast<size_t>(row) * obs_bytes_;
  }
  void* FinalRow(const BufferView& v, int row) const {
    return static_cast<std::byte*>(v.final_obs) + static_cast<size_t>(row) * obs_bytes_;
  }

  Status CheckUsable(const char* what, bool needs_reset) {
    if (closed_) return absl::FailedPreconditionError(absl::StrCat(what, ": the pool is closed"));
    if (failed_.load(std::memory_order_acquire)) return StoredError(what);
    if (needs_reset && !was_reset_) {
      return absl::FailedPreconditionError(absl::StrCat(what, ": call reset() first"));
    }
    return absl::OkStatus();
  }

  static Status StillStepping(int env) {
    return absl::FailedPreconditionError(
        absl::StrCat("send: env ", env,
                     " is still stepping; recv() its result before sending it another action"));
  }

  // REQUIRES: failed_ was seen true (acquire).
  Status StoredError(const char* what) const {
    return Status(error_.code(), absl::StrCat(what, ": the pool failed: ", error_.message()));
  }

  // Records the first failure: its thread writes error_ and then sets failed_
  // (release), so readers that see failed_ see error_.
  Status Fail(int env, const char* what, const Status& s) {
    Status annotated = Annotate(s, absl::StrCat("env ", env, ": ", what));
    bool first = false;
    if (error_claimed_.compare_exchange_strong(first, true, std::memory_order_acq_rel)) {
      error_ = annotated;
      failed_.store(true, std::memory_order_release);
    }
    return annotated;
  }

  // Waits until every step sent has been written (helping with queued ones).
  Status Drain() {
    while (TryRunChunk(0)) {
    }
    auto done = [this] {
      uint64_t written = 0;
      for (const auto& c : completed_)
        written += static_cast<uint64_t>(c.v.load(std::memory_order_acquire));
      return written >= sent_;
    };
    out_bell_.Wait(done, options_.spin, absl::InfiniteFuture());
    if (failed_.load(std::memory_order_acquire)) return StoredError("reset");
    return absl::OkStatus();
  }

  // Claims and runs one chunk for stepping thread `thread` (0: the driver,
  // i: worker i - 1 ... in sync mode; any index in async mode); false when
  // nothing is left to claim.
  bool TryRunChunk(int thread) {
    return sync_ ? TryRunSyncChunk(thread) : TryRunQueueChunk(&completed_[thread].v);
  }

  // Sync mode: thread t steps its home range of envs [tN/T, (t+1)N/T) in
  // chunks, then helps with ranges that are far behind. Home ranges keep an env on
  // the same core batch after batch (its state and rows stay in that core's
  // cache; with a shared queue the first chunk went to whichever thread won
  // the race, and the envs' cache lines moved with it); a claim is one
  // fetch_add on a counter that only stealers share.
  bool TryRunSyncChunk(int thread) {
    const int num = static_cast<int>(ranges_.size());
    Unpublished& mine = unpublished_[thread];
    for (int i = 0, t = thread; i < num; ++i, t = t + 1 == num ? 0 : t + 1) {
      Range& r = ranges_[t];
      const int64_t next = r.next.load(std::memory_order_relaxed);
      // Another thread's range only when its owner has not started (it is
      // late: descheduled, or asleep) or is at least two chunks behind: a
      // stolen env's state moves to this core and back, which costs more
      // than a small imbalance.
      if (next >= r.end || (i > 0 && next > r.begin && r.end - next < 2 * r.chunk)) continue;
      // acq_rel: reads from Send's reset (release) or a later claim of this
      // batch, so this thread sees the batch's actions and out_batch_.
      const int64_t begin = r.next.fetch_add(r.chunk, std::memory_order_acq_rel);
      if (begin >= r.end) continue;
      const int64_t end = std::min(begin + r.chunk, r.end);
      const uint64_t batch = out_batch_;
      const int buf = static_cast<int>(batch % k_);
      if (mine.rows == 0) AwaitBuffer(buf, batch);
      const BufferView& v = views_[buf];
      for (int64_t e = begin; e < end; ++e)
        StepOne(static_cast<int32_t>(e), v, static_cast<int>(e));
      mine.buf = buf;
      mine.rows += end - begin;
      return true;
    }
    // Nothing left to claim: publish this thread's rows of the batch once
    // (one atomic add and one doorbell per thread and batch, not per chunk).
    if (mine.rows > 0) {
      filled_[mine.buf].v.fetch_add(mine.rows, std::memory_order_release);
      Completed(thread, mine.rows);
      mine.rows = 0;
      out_bell_.Ring();
    }
    return false;
  }

  // Only thread `thread` writes its counter: no cache line changes hands.
  void Completed(int thread, int64_t c) {
    std::atomic<int64_t>& n = completed_[thread].v;
    n.store(n.load(std::memory_order_relaxed) + c, std::memory_order_release);
  }

  // Async mode: claims and runs one chunk of the queue; false when nothing
  // is queued. `completed`: the calling thread's counter.
  //
  // The chunk's env ids are read before the CAS that claims them: once a
  // position is claimed, the driver may reuse its queue slot (the env of a
  // later position can be received and sent again while this thread is
  // descheduled), but while a position is unclaimed at most N - 1 positions
  // follow it, so its slot still holds it. A successful CAS proves the
  // positions were unclaimed throughout the reads.
  bool TryRunQueueChunk(std::atomic<int64_t>* completed) {
    int32_t ids[kMaxChunk];
    uint64_t h = head_.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t t = tail_.load(std::memory_order_acquire);
      if (h >= t) return false;
      // Guided scheduling: a share of what is queued, so threads that join
      // late still find work and the last chunks are small.
      uint64_t c = (t - h + share_ - 1) / share_;
      c = std::min(std::clamp<uint64_t>(c, min_chunk_, max_chunk_), t - h);
      size_t slot = static_cast<size_t>(h % static_cast<uint64_t>(n_));
      for (uint64_t k = 0; k < c; ++k) {
        ids[k] = queue_[slot].load(std::memory_order_relaxed);
        if (++slot == static_cast<size_t>(n_)) slot = 0;
      }
      if (head_.compare_exchange_weak(h, h + c, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        RunChunk(ids, c, completed);
        return true;
      }
    }
  }

  // Async mode: steps envs ids[0, c) into the positions [pos, pos + c),
  // which fall in at most two buffers (c <= B).
  void RunChunk(const int32_t* ids, uint64_t c, std::atomic<int64_t>* completed) {
    const uint64_t pos = write_pos_.fetch_add(c, std::memory_order_relaxed);
    uint64_t batch = pos / b_;
    uint64_t row = pos % b_;
    int buf = static_cast<int>(batch % k_);
    AwaitBuffer(buf, batch);
    int bufs[2] = {buf, -1};
    int64_t counts[2] = {0, 0};
    int j = 0;
    for (uint64_t k = 0; k < c; ++k, ++row) {
      if (row == static_cast<uint64_t>(b_)) {  // into the next batch
        row = 0;
        buf = static_cast<int>(++batch % k_);
        AwaitBuffer(buf, batch);
        bufs[j = 1] = buf;
      }
      StepOne(ids[k], views_[buf], static_cast<int>(row));
      ++counts[j];
    }
    for (int i = 0; i < 2; ++i) {
      if (bufs[i] >= 0) filled_[bufs[i]].v.fetch_add(counts[i], std::memory_order_release);
    }
    // Only this thread writes its counter: no cache line changes hands.
    completed->store(completed->load(std::memory_order_relaxed) + static_cast<int64_t>(c),
                     std::memory_order_release);
    out_bell_.Ring();
  }

  // Returns once buffer `buf` may take rows of `batch`: at once unless the
  // counting argument in the file comment is wrong. The acquire makes the
  // driver's reads of the buffer's previous batch happen before our writes.
  void AwaitBuffer(int buf, uint64_t batch) {
    for (unsigned i = 1;
         free_for_[buf].v.load(std::memory_order_acquire) < static_cast<int64_t>(batch); ++i) {
      internal_envs::CpuRelax();
      if (i % 64 == 0) std::this_thread::yield();
    }
  }

  void StepOne(int32_t e, const BufferView& v, int row) {
    Slot& slot = slots_[e];
    void* obs = ObsRow(v, row);
    double reward = 0;
    bool terminated = false, truncated = false, final = false;
    Status st;
    if (slot.needs_reset) {
      st = slot.env->Reset({}, obs);
      slot.elapsed = 0;
      slot.needs_reset = false;
    } else {
      StepResult r;
      int64_t discrete = 0;
      const void* action = LoadAction(e, &discrete);
      st = slot.env->Step(action, obs, &r);
      ++slot.elapsed;
      reward = r.reward;
      terminated = r.terminated;
      truncated = slot.max_steps > 0 && slot.elapsed >= slot.max_steps;
      if (st.ok() && (terminated || truncated)) {
        if (same_step_) {
          std::memcpy(FinalRow(v, row), obs, obs_bytes_);
          final = true;
          st = slot.env->Reset({}, obs);
          slot.elapsed = 0;
        } else {
          slot.needs_reset = true;
        }
      }
    }
    if (same_step_) {
      if (!final) std::memset(FinalRow(v, row), 0, obs_bytes_);
      v.has_final_obs[row] = final;
    }
    v.reward[row] = reward;
    v.terminated[row] = terminated;
    v.truncated[row] = truncated;
    if (!sync_) v.env_id[row] = e;  // sync: rows are env order, set once (constructor)
    if (!st.ok()) (void)Fail(e, "step", st);
  }

  void WorkerLoop(int thread) {
    if (sync_) {
      // Waits for a new batch (Send bumps tail_), works until nothing is left
      // to claim, and waits again. The wait reads tail_ only: polling the
      // other threads' range counters while they claim from them would pull
      // their cache lines away on every claim.
      uint64_t seen = 0;
      for (;;) {
        const uint64_t gen = tail_.load(std::memory_order_acquire);
        if (gen != seen) {
          while (TryRunSyncChunk(thread)) {
          }
          seen = gen;
          continue;
        }
        in_bell_.Wait(
            [&] {
              return stop_.load(std::memory_order_acquire) ||
                     tail_.load(std::memory_order_acquire) != seen;
            },
            options_.spin, absl::InfiniteFuture());
        if (stop_.load(std::memory_order_acquire)) return;
      }
    }
    auto has_work = [this] {
      return stop_.load(std::memory_order_acquire) ||
             tail_.load(std::memory_order_acquire) > head_.load(std::memory_order_acquire);
    };
    for (;;) {
      if (TryRunQueueChunk(&completed_[thread].v)) continue;
      in_bell_.Wait(has_work, options_.spin, absl::InfiniteFuture());
      if (stop_.load(std::memory_order_acquire)) return;
    }
  }

  const EnvPoolOptions options_;
  const int n_, b_, k_;
  const bool sync_, same_step_;
  const Space obs_space_, action_space_;
  const int state_size_;
  const size_t obs_bytes_, act_bytes_;
  const size_t slot_bytes_;  // bytes per env in actions_ (StoreAction)
  // Async chunk sizes (guided scheduling: a share of what is queued, between
  // a floor and a ceiling): at most B / (2T), so batches fill in about the
  // order envs finish, and at least B / (8T), so cheap envs do not pay a
  // claim each. Sync mode uses home ranges instead (TryRunSyncChunk).
  static constexpr uint64_t kMaxChunk = 256;
  const uint64_t nthreads_ = static_cast<uint64_t>(options_.num_threads);
  const uint64_t share_ = 2 * nthreads_;
  const uint64_t max_chunk_ =
      std::min<uint64_t>(kMaxChunk, std::max<uint64_t>(1, b_ / (2 * nthreads_)));
  const uint64_t min_chunk_ =
      std::min<uint64_t>(max_chunk_, std::max<uint64_t>(1, b_ / (8 * nthreads_)));

  std::vector<Slot> slots_;
  std::vector<Layout> layouts_;
  std::vector<BufferView> views_;
  std::shared_ptr<Arena> arena_;
  std::byte* actions_ = nullptr;  // n_ slots of slot_bytes_
  // The queue of env ids to step: positions [head_, tail_) are waiting;
  // entry p is queue_[p % n_] (at most n_ envs are ever in flight, so at
  // most n_ positions wait). Atomic because a claimer reads entries before
  // it knows they are its own (see TryRunChunk).
  std::vector<std::atomic<int32_t>> queue_;
  std::vector<PaddedCount> filled_;  // rows written per buffer
  // The batch each buffer may take rows of: batch i starts in buffer i; Recv
  // of batch r frees batch r - 2's buffer for batch r - 2 + K.
  std::vector<PaddedCount> free_for_;

  // Everything above is written only by the constructor. Below, each cache
  // line holds data written by one side only, so a write on the hot path
  // does not evict what the other threads read on every env or chunk.

  // Written by Send (the driver), read by claimers.
  alignas(kAlign) std::atomic<uint64_t> tail_{0};
  uint64_t out_batch_ = 0;  // sync: the batch in flight (published by tail_)
  // Written by claimers.
  alignas(kAlign) std::atomic<uint64_t> head_{0};
  alignas(kAlign) std::atomic<uint64_t> write_pos_{0};  // async: next result position
  // Sync mode: thread t's home range of envs [begin, end), handed out from
  // `next` in chunks of `chunk` (Send resets next to begin).
  struct alignas(kAlign) Range {
    std::atomic<int64_t> next{0};
    int64_t begin = 0, end = 0, chunk = 1;
  };
  std::vector<Range> ranges_;
  // Sync mode: rows a thread has written and not yet counted in filled_
  // (only that thread touches its entry).
  struct alignas(kAlign) Unpublished {
    int64_t rows = 0;
    int buf = 0;
  };
  std::vector<Unpublished> unpublished_;
  // Steps written since Reset, per stepping thread (0: the driver, i + 1:
  // worker i), each on its own line; Drain sums them.
  std::vector<PaddedCount> completed_;
  // Written rarely (stop, the first failure); read while waiting.
  alignas(kAlign) std::atomic<bool> stop_{false};
  std::atomic<bool> error_claimed_{false};
  std::atomic<bool> failed_{false};
  Status error_;                      // written once, by the thread that claimed it, before failed_
  alignas(kAlign) Doorbell in_bell_;  // workers wait here for queued steps
  alignas(kAlign) Doorbell out_bell_;  // the driver waits here for results

  // Driver-only state (one calling thread at a time).
  alignas(kAlign) uint64_t tail_local_ = 0;
  uint64_t sent_ = 0;
  uint64_t next_batch_ = 0;
  std::vector<uint8_t> in_flight_;
  int64_t in_flight_count_ = 0;  // sum of in_flight_
  std::vector<uint32_t> seen_;
  uint32_t stamp_ = 0;
  bool was_reset_ = false;
  bool closed_ = false;
  std::vector<std::thread> threads_;
};

std::vector<int64_t> ResolveLimits(const EnvPoolOptions& o, int64_t registered) {
  std::vector<int64_t> limits(o.num_envs, registered);
  if (o.max_episode_steps.size() == 1)
    std::fill(limits.begin(), limits.end(), o.max_episode_steps[0]);
  if (o.max_episode_steps.size() == static_cast<size_t>(o.num_envs)) limits = o.max_episode_steps;
  return limits;
}

bool SameSpace(const Space& a, const Space& b) {
  return a.kind == b.kind && a.shape == b.shape && a.dtype == b.dtype && a.low == b.low &&
         a.high == b.high && a.n == b.n && a.start == b.start;
}

Result<std::unique_ptr<EnvPool>> Build(const EnvFactory& factory, EnvPoolOptions options,
                                       int64_t registered_limit, const std::string& env_name) {
  FW_RETURN_IF_ERROR(options.Validate());
  std::vector<std::unique_ptr<Env>> envs;
  envs.reserve(options.num_envs);
  for (int i = 0; i < options.num_envs; ++i) {
    FW_ASSIGN_OR_RETURN_CTX(auto env, factory(i), "env ", i);
    if (env == nullptr)
      return absl::InvalidArgumentError(absl::StrCat("env ", i, ": the factory returned null"));
    FW_RETURN_IF_ERROR_CTX(env->observation_space().Validate(), "env ", i, ": observation space");
    FW_RETURN_IF_ERROR_CTX(env->action_space().Validate(), "env ", i, ": action space");
    if (env->action_space().is_box() && env->action_space().dtype != DType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "env ", i, ": Box action spaces must be float32, got ", env->action_space().ToString()));
    }
    if (i > 0 && (!SameSpace(env->observation_space(), envs[0]->observation_space()) ||
                  !SameSpace(env->action_space(), envs[0]->action_space()) ||
                  env->state_size() != envs[0]->state_size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "env ", i, " has spaces ", env->observation_space().ToString(), " / ",
          env->action_space().ToString(), ", env 0 has ", envs[0]->observation_space().ToString(),
          " / ", envs[0]->action_space().ToString(),
          ": every env of a pool must have the same spaces"));
    }
    envs.push_back(std::move(env));
  }
  const auto limits = ResolveLimits(options, registered_limit);
  return std::unique_ptr<EnvPool>(new EnvPoolImpl(std::move(options), std::move(envs), limits, env_name));
}

}  // namespace

Result<std::unique_ptr<EnvPool>> EnvPool::Make(std::string_view env_id, EnvPoolOptions options,
                                               const std::vector<EnvKwargs>& kwargs) {
  FW_ASSIGN_OR_RETURN(const EnvSpec* spec, FindEnv(env_id));
  if (kwargs.size() > 1 && kwargs.size() != static_cast<size_t>(options.num_envs)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kwargs.size(), " sets of env arguments; need 0, 1 or num_envs = ", options.num_envs));
  }
  static const EnvKwargs kNone;
  auto factory = [&](int i) -> Result<std::unique_ptr<Env>> {
    return spec->make(kwargs.empty() ? kNone : kwargs.size() == 1 ? kwargs[0] : kwargs[i]);
  };
  return Build(factory, std::move(options), spec->max_episode_steps, std::string(env_id));
}

Result<std::unique_ptr<EnvPool>> EnvPool::Create(const EnvFactory& factory,
                                                 EnvPoolOptions options) {
  return Build(factory, std::move(options), 0, "custom");
}

}  // namespace flywheel::envs
