// EnvPool's implementation; the contract and the hand-off scheme are in
// env_pool.h, the semantics in docs/envs.md. The parts live in internal/:
//   buffer_arena.h  the buffers' memory and layout (one allocation)
//   action_slots.h  per-env actions, Discrete ones narrowed
//   env_slot.h      one env with its time limit and autoreset
//   result_ring.h   positions, row counts and recycling of the ring buffers
//   env_queue.h     async: the queue of env ids threads claim in chunks
//   home_ranges.h   sync: the env ranges threads claim in chunks
//   doorbell.h      waiting for the hand-offs
// EnvPoolImpl below validates calls and ties the parts together.
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
// (ResultRing::Recycle, a release store) before the caller can send again; a
// thread waits for that (ResultRing::AwaitBuffer, acquire) before writing a
// buffer's rows, which turns the counting argument into happens-before and
// checks it.
#include "flywheel/envs/env_pool.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "flywheel/base/metrics.h"
#include "flywheel/envs/internal/action_slots.h"
#include "flywheel/envs/internal/buffer_arena.h"
#include "flywheel/envs/internal/cache_line.h"
#include "flywheel/envs/internal/doorbell.h"
#include "flywheel/envs/internal/env_queue.h"
#include "flywheel/envs/internal/env_slot.h"
#include "flywheel/envs/internal/home_ranges.h"
#include "flywheel/envs/internal/result_ring.h"
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

using internal_envs::ActionSlots;
using internal_envs::BufferArena;
using internal_envs::Doorbell;
using internal_envs::EnvQueue;
using internal_envs::EnvSlot;
using internal_envs::HomeRanges;
using internal_envs::kCacheLine;
using internal_envs::PaddedCount;
using internal_envs::ResultRing;
using internal_envs::RowAt;
using internal_envs::Unpublished;

class EnvPoolImpl final : public EnvPool {
 public:
  EnvPoolImpl(EnvPoolOptions options, std::vector<std::unique_ptr<Env>> envs,
              const std::vector<int64_t>& limits, const std::string& env_name)
      : steps_metric_(Metrics().GetCounter("flywheel_env_steps_total", "Environment steps sent to an EnvPool",
                                           {{"env", env_name}})),
        options_(std::move(options)),
        n_(options_.num_envs),
        b_(options_.resolved_batch_size()),
        k_(ResultRing::NumBuffers(n_, b_)),
        sync_(b_ == n_),
        same_step_(options_.autoreset_mode == AutoresetMode::kSameStep),
        obs_space_(envs[0]->observation_space()),
        action_space_(envs[0]->action_space()),
        state_size_(envs[0]->state_size()),
        obs_bytes_(obs_space_.row_bytes()),
        act_bytes_(action_space_.row_bytes()),
        slots_(n_),
        // K ring buffers of B rows, then the reset buffer of N rows, then
        // the per-env action slots.
        arena_(BufferArena::Shape{
            .ring_buffers = k_,
            .ring_rows = b_,
            .last_rows = n_,
            .obs_bytes = obs_bytes_,
            .final_obs = same_step_,
            .extra_bytes = static_cast<size_t>(n_) * ActionSlots::SlotBytes(action_space_)}),
        actions_(action_space_, arena_.extra()),
        results_(b_, k_),
        queue_(n_, b_, options_.num_threads),
        ranges_(n_, sync_ ? options_.num_threads : 0),
        unpublished_(sync_ ? options_.num_threads : 0),
        completed_(options_.num_threads + 1),
        in_flight_(n_, 0),
        seen_(n_, 0) {
    for (int i = 0; i < n_; ++i) {
      slots_[i].env = std::move(envs[i]);
      slots_[i].obs_bytes = obs_bytes_;
      slots_[i].max_steps = limits[i];
      slots_[i].env->Seed(options_.seed + static_cast<uint64_t>(i));
    }
    if (sync_) {
      for (int i = 0; i < k_; ++i) {
        for (int row = 0; row < b_; ++row) arena_.view(i).env_id[row] = row;
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
  BufferView buffer(int i) const override { return arena_.view(i); }
  std::shared_ptr<const void> memory() const override { return arena_.memory(); }
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
    // Send publishes these stores with its release (EnvQueue::Publish or
    // HomeRanges::Open).
    results_.Reset();
    for (auto& c : completed_) c.v.store(0, std::memory_order_relaxed);
    sent_ = 0;
    next_batch_ = 0;
    std::fill(in_flight_.begin(), in_flight_.end(), 0);
    in_flight_count_ = 0;
    const BufferView& v = arena_.view(k_);
    for (int i = 0; i < n_; ++i) {
      EnvSlot& slot = slots_[i];
      if (!seeds.empty())
        slot.env->Seed(seeds.size() == 1 ? seeds[0] + static_cast<uint64_t>(i) : seeds[i]);
      std::span<const double> state;
      if (!states.empty()) state = states.subspan(one_state ? 0 : i * s, s);
      Status st = slot.env->Reset(state, RowAt(v.obs, i, obs_bytes_));
      if (!st.ok()) return Fail(i, "reset", st);
      slot.elapsed = 0;
      slot.needs_reset = false;
      v.reward[i] = 0;
      v.terminated[i] = false;
      v.truncated[i] = false;
      v.env_id[i] = i;
      if (same_step_) {
        std::memset(RowAt(v.final_obs, i, obs_bytes_), 0, obs_bytes_);
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
        actions_.Store(e, rows + k * act_bytes_);
      }
      std::fill(in_flight_.begin(), in_flight_.end(), 1);
      ranges_.Open(next_batch_);
    } else {
      queue_.Push(count, [&](size_t k) {
        const int32_t e = all ? static_cast<int32_t>(k) : env_ids[k];
        actions_.Store(e, rows + k * act_bytes_);
        in_flight_[e] = 1;
        return e;
      });
      queue_.Publish();
    }
    in_flight_count_ += static_cast<int64_t>(count);
    sent_ += count;
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
    const int buf = results_.BufferOf(next_batch_);
    auto ready = [this, buf] {
      return results_.Full(buf) || failed_.load(std::memory_order_acquire);
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
    results_.Recycle(next_batch_);
    const BufferView& v = arena_.view(buf);
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

  // Sync mode: claims a chunk of envs (internal/home_ranges.h) and steps
  // them into their rows (row = env) of the batch in flight.
  bool TryRunSyncChunk(int thread) {
    Unpublished& mine = unpublished_[thread];
    HomeRanges::Chunk c;
    if (ranges_.Claim(thread, &c)) {
      const int buf = results_.BeginRows(&mine, c.batch);
      const BufferView& v = arena_.view(buf);
      for (int64_t e = c.begin; e < c.end; ++e)
        StepOne(static_cast<int32_t>(e), v, static_cast<int>(e));
      mine.Add(buf, c.end - c.begin);
      return true;
    }
    // Nothing left to claim: publish this thread's rows of the batch once
    // (one atomic add and one doorbell per thread and batch, not per chunk).
    const int64_t rows = results_.Flush(&mine);
    if (rows > 0) {
      Completed(thread, rows);
      out_bell_.Ring();
    }
    return false;
  }

  // Only thread `thread` writes its counter: no cache line changes hands.
  void Completed(int thread, int64_t c) {
    std::atomic<int64_t>& n = completed_[thread].v;
    n.store(n.load(std::memory_order_relaxed) + c, std::memory_order_release);
  }

  // Async mode: claims one chunk of the queue (internal/env_queue.h) and
  // steps it into the next positions of the ring (internal/result_ring.h);
  // false when nothing is queued. `completed`: the calling thread's counter.
  bool TryRunQueueChunk(std::atomic<int64_t>* completed) {
    int32_t ids[EnvQueue::kMaxChunk];
    const uint64_t c = queue_.TryClaim(ids);
    if (c == 0) return false;
    results_.WriteRows(c, [&](uint64_t k, int buf, int row) {
      StepOne(ids[k], arena_.view(buf), row);
    });
    // Only this thread writes its counter: no cache line changes hands.
    completed->store(completed->load(std::memory_order_relaxed) + static_cast<int64_t>(c),
                     std::memory_order_release);
    out_bell_.Ring();
    return true;
  }

  // Steps env e (internal/env_slot.h) and writes its result to row `row`.
  void StepOne(int32_t e, const BufferView& v, int row) {
    const Status st = slots_[e].Advance(actions_, e, v, row);
    if (!sync_) v.env_id[row] = e;  // sync: rows are env order, set once (constructor)
    if (!st.ok()) (void)Fail(e, "step", st);
  }

  void WorkerLoop(int thread) {
    if (sync_) {
      // Waits for a new batch (Send opens one), works until nothing is left
      // to claim, and waits again. The wait reads the ranges' generation
      // only: polling the other threads' range counters while they claim
      // from them would pull their cache lines away on every claim.
      uint64_t seen = 0;
      for (;;) {
        const uint64_t gen = ranges_.generation();
        if (gen != seen) {
          while (TryRunSyncChunk(thread)) {
          }
          seen = gen;
          continue;
        }
        in_bell_.Wait(
            [&] { return stop_.load(std::memory_order_acquire) || ranges_.generation() != seen; },
            options_.spin, absl::InfiniteFuture());
        if (stop_.load(std::memory_order_acquire)) return;
      }
    }
    auto has_work = [this] { return stop_.load(std::memory_order_acquire) || queue_.HasWork(); };
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

  std::vector<EnvSlot> slots_;
  const BufferArena arena_;  // every buffer, then the action slots
  ActionSlots actions_;      // in arena_.extra()

  // Everything above is written only by the constructor (the slots and the
  // arena's bytes are handed from thread to thread with the counters
  // below). Below, each cache line holds data written by one side only, so
  // a write on the hot path does not evict what the other threads read on
  // every env or chunk (the parts lay out their own members so).
  ResultRing results_;  // positions and row counts of arena_'s ring buffers
  EnvQueue queue_;      // async: env ids sent and not yet picked up
  HomeRanges ranges_;   // sync: the envs of the batch in flight
  // Sync mode: rows each stepping thread has written and not yet counted.
  std::vector<Unpublished> unpublished_;
  // Steps written since Reset, per stepping thread (0: the driver, i + 1:
  // worker i), each on its own line; Drain sums them.
  std::vector<PaddedCount> completed_;
  // Written rarely (stop, the first failure); read while waiting.
  alignas(kCacheLine) std::atomic<bool> stop_{false};
  std::atomic<bool> error_claimed_{false};
  std::atomic<bool> failed_{false};
  Status error_;  // written once, by the thread that claimed it, before failed_
  alignas(kCacheLine) Doorbell in_bell_;   // workers wait here for queued steps
  alignas(kCacheLine) Doorbell out_bell_;  // the driver waits here for results

  // Driver-only state (one calling thread at a time).
  alignas(kCacheLine) uint64_t sent_ = 0;
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
