// The replay rate limiter: decides when inserts and samples may proceed so a
// table keeps the sample-to-insert ratio an algorithm asks for. The rules are
// Reverb's (reverb/cc/rate_limiter.cc, CanInsert/CanSample), so existing
// configs mean the same; docs/replay.md#rate-limiter specifies them:
//
//   sample may proceed  iff  inserts - deletes >= min_size_to_sample
//                       and  inserts * spi - samples - 1 >= min_diff
//   insert may proceed  iff  inserts + 1 - deletes <= min_size_to_sample
//                        or  (inserts + 1) * spi - samples <= max_diff
//
// Blocking waits take a timeout and a cancellation flag and return
// DeadlineExceeded / Cancelled; Explain() says which side is blocked, by which
// inequality, with the current numbers and what would unblock it.
//
// Thread-safety: the limiter has no lock of its own. Every method except the
// constructor, the presets and Validate() must be called with the owning
// table's mutex (`mu`, the one passed to the Await calls) held; the waits
// release it while blocked (absl::CondVar). The members are not annotated
// ABSL_GUARDED_BY because that mutex lives in the table.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flywheel/base/status.h"

namespace flywheel::replay {

struct RateLimiterOptions {
  // Samples each insert pays for. Finite, > 0.
  double samples_per_insert = 1.0;
  // Samples block until the table holds this many items; below it inserts
  // never block. >= 1.
  int64_t min_size_to_sample = 1;
  // Samples block when inserts*spi - samples - 1 would fall below min_diff.
  // Default: no bound (-DBL_MAX, as Reverb's MinSize). Not NaN, < +inf.
  double min_diff = std::numeric_limits<double>::lowest();
  // Inserts block when (inserts+1)*spi - samples would exceed max_diff.
  // Default: no bound (DBL_MAX). Not NaN, > -inf, >= min_diff.
  double max_diff = std::numeric_limits<double>::max();

  // Sampling starts once `n` items are in the table; never blocks inserts.
  // (spi 1, min_diff -DBL_MAX, max_diff DBL_MAX.) The default options are
  // MinSize(1).
  static RateLimiterOptions MinSize(int64_t n);
  // Keeps samples/inserts near `spi` once `min_size` items were inserted,
  // with `error_buffer` slack each way around min_size * spi:
  // min_diff = min_size*spi - error_buffer, max_diff = min_size*spi +
  // error_buffer. Validate() rejects buffers so small that both sides can
  // block at once (see there).
  static RateLimiterOptions SampleToInsertRatio(double spi, int64_t min_size, double error_buffer);
  // FIFO queue / LIFO stack of capacity n: each item sampled once; inserts
  // block when n items are unread, samples block when none are. Pair with
  // Fifo/Lifo selectors and max_times_sampled = 1. (spi 1,
  // min_size_to_sample 1, min_diff 0, max_diff n.)
  static RateLimiterOptions Queue(int64_t n);
  static RateLimiterOptions Stack(int64_t n);

  // InvalidArgument naming the field and value when a field is out of range,
  // or when the limits can deadlock: a reachable state in which inserts and
  // samples are both blocked, so only a delete could ever make progress.
  // That check is exact when spi is a dyadic fraction (k / 2^j, j <= 20:
  // 0.25, 1, 4, ...) and otherwise conservative (requires max_diff - min_diff
  // >= 1 + spi). Every SampleToInsertRatio Reverb accepts (error_buffer >=
  // max(1, spi)) with a finite spi > 0 passes; Queue(0) / Stack(0) do not.
  Status Validate() const;
};

struct RateLimiterState {
  int64_t inserts = 0;
  int64_t deletes = 0;
  int64_t samples = 0;
};

class RateLimiter {
 public:
  // The options should have passed Validate() (ReplayTable::Create checks); with
  // invalid ones the limiter still behaves by the formulas above.
  explicit RateLimiter(RateLimiterOptions options);

  const RateLimiterOptions& options() const { return options_; }
  RateLimiterState state() const { return state_; }
  // Restores counters (checkpoints); wakes waiters.
  void set_state(const RateLimiterState& s);

  // Whether `num` more inserts (samples) may proceed now. REQUIRES: num >= 1.
  bool CanInsert(int64_t num_inserts = 1) const;
  bool CanSample(int64_t num_samples = 1) const;

  // Wait until an insert (sample) may proceed (OK), `timeout` elapses
  // (DeadlineExceeded; the message holds Explain()), or the wait is cancelled
  // (Cancelled): by Cancel(), now or earlier, or by `*cancelled` being true
  // when checked. The flag is read with `mu` held, on entry and on every
  // wake-up; whoever sets it must hold `mu` and then call WakeAll().
  // Cancellation wins over "may proceed". absl::InfiniteDuration() waits
  // without a deadline; a zero or negative timeout only checks.
  // On OK the caller must record the operation (Insert() / Sample()) before
  // releasing `mu`, so no other caller takes the same slot; the wait itself
  // changes no counter.
  // REQUIRES: mu held; it is released while waiting and held on return.
  // The owner's lock is passed in (as Reverb's rate limiter does), so the
  // thread-safety analysis checks every caller holds it.
  Status AwaitCanInsert(absl::Mutex* mu, absl::Duration timeout, const bool* cancelled = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  Status AwaitCanSample(absl::Mutex* mu, absl::Duration timeout, const bool* cancelled = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Record completed operations and wake waiters whose condition changed.
  void Insert();
  void Delete();
  void Sample();
  void Reset();  // counters to zero, wakes everyone; does not undo Cancel()
  // Cancels the limiter for good (the table is closing): wakes all waiters,
  // and every current and later Await returns Cancelled.
  void Cancel();
  // Wakes all waiters so they re-check their `cancelled` flags (and their
  // conditions); waiters whose flag is unset go back to waiting.
  void WakeAll();

  // How many calls are blocked on each side right now.
  int blocked_inserts() const { return blocked_inserts_; }
  int blocked_samples() const { return blocked_samples_; }

  // Plain-words explanation of the current state, three or four lines: the
  // counters and options; then for each side whether it may proceed, the
  // inequality that decides it with the numbers, what would unblock it and
  // how many callers wait, e.g.
  //   sample: blocked: inserts - deletes = 3 < min_size_to_sample = 10;
  //   needs 7 more inserts; 1 caller waiting
  // The "needs N more" counts are exact: the fewest operations after which
  // the same rule lets the call through.
  std::string Explain() const;

 private:
  Status Await(bool insert, absl::Mutex* mu, absl::Duration timeout, const bool* cancelled)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  RateLimiterOptions options_;
  RateLimiterState state_;
  int blocked_inserts_ = 0;
  int blocked_samples_ = 0;
  bool cancelled_ = false;
  absl::CondVar cv_;
};

}  // namespace flywheel::replay
