// Implements docs/replay.md#rate-limiter.
#include "flywheel/replay/rate_limiter.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace flywheel::replay {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Counts at or above 2^53 are not exact in a double; Explain() stops counting.
constexpr double kMaxExactCount = 9007199254740992.0;
// Validate()'s exact deadlock check looks for spi = k / 2^j with j <= 20.
constexpr double kMaxLatticeDenominator = 1 << 20;

// The two rules. CanInsert/CanSample, Explain() and Validate() all go through
// these so they cannot drift apart. The operations are Reverb's, in Reverb's
// order (int64 counters converted to double, then multiplied by spi), so the
// results are bit-identical to reverb/cc/rate_limiter.cc.
double InsertDiff(const RateLimiterOptions& o, int64_t inserts_after, int64_t samples) {
  return static_cast<double>(inserts_after) * o.samples_per_insert - static_cast<double>(samples);
}

bool InsertAllowed(const RateLimiterOptions& o, const RateLimiterState& s, int64_t n) {
  // Until the table reaches min_size_to_sample inserts are free.
  if (s.inserts + n - s.deletes <= o.min_size_to_sample) return true;
  return InsertDiff(o, s.inserts + n, s.samples) <= o.max_diff;
}

double SampleDiff(const RateLimiterOptions& o, const RateLimiterState& s, int64_t n) {
  return static_cast<double>(s.inserts) * o.samples_per_insert - static_cast<double>(s.samples) -
         static_cast<double>(n);
}

bool SampleAllowed(const RateLimiterOptions& o, const RateLimiterState& s, int64_t n) {
  if (s.inserts - s.deletes < o.min_size_to_sample) return false;
  return SampleDiff(o, s, n) >= o.min_diff;
}

// Numbers in messages: the "no bound" defaults by name, the rest with 15
// significant digits, so integers print as integers and 0.1 as 0.1.
std::string Num(double v) {
  if (v == std::numeric_limits<double>::max()) return "DBL_MAX";
  if (v == std::numeric_limits<double>::lowest()) return "-DBL_MAX";
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.15g", v);
  return buf;
}

std::string Count(int64_t n, const char* noun) {
  return absl::StrCat(n, " more ", noun, n == 1 ? "" : "s");
}

// The smallest n >= 1 for which `ok(n)` holds; `ok` is monotone (false up to
// some n, true from there on) and `estimate` is the answer in real
// arithmetic. Floating-point rounding can move the true answer by a step or
// two, so the estimate is corrected against `ok` itself, which is the rule
// the limiter applies. nullopt when the answer is too large to count.
template <typename Ok>
std::optional<int64_t> SmallestCount(double estimate, Ok ok) {
  if (!(estimate < kMaxExactCount)) return std::nullopt;  // also NaN
  int64_t n = estimate < 1 ? 1 : static_cast<int64_t>(std::ceil(estimate));
  for (int i = 0; i < 64 && n > 1 && ok(n - 1); ++i) --n;
  for (int i = 0; i < 64 && !ok(n); ++i) ++n;
  if (!ok(n) || (n > 1 && ok(n - 1))) return std::nullopt;
  return n;
}

std::string Needs(std::optional<int64_t> n, double estimate, const char* noun) {
  if (n) return absl::StrCat("needs ", Count(*n, noun));
  if (std::isfinite(estimate)) {
    return absl::StrCat("needs about ", Num(std::ceil(estimate)), " more ", noun, "s");
  }
  return absl::StrCat("no number of ", noun, "s can unblock it");
}

std::string Callers(int n) { return absl::StrCat(n, n == 1 ? " caller" : " callers", " waiting"); }

std::string ExplainInsert(const RateLimiterOptions& o, const RateLimiterState& s) {
  const int64_t size_after = s.inserts + 1 - s.deletes;
  if (size_after <= o.min_size_to_sample) {
    return absl::StrCat("insert: may proceed: inserts+1 - deletes = ", size_after,
                        " <= min_size_to_sample = ", o.min_size_to_sample);
  }
  const double diff = InsertDiff(o, s.inserts + 1, s.samples);
  const std::string rule = absl::StrCat("(inserts+1)*spi - samples = ", Num(diff));
  if (diff <= o.max_diff) {
    return absl::StrCat("insert: may proceed: ", rule, " <= max_diff = ", Num(o.max_diff));
  }
  // Samples lower the difference; deletes bring the table back under
  // min_size_to_sample, where inserts are free.
  const double estimate = diff - o.max_diff;
  const auto samples = SmallestCount(estimate, [&](int64_t n) {
    return InsertDiff(o, s.inserts + 1, s.samples + n) <= o.max_diff;
  });
  const int64_t deletes = size_after - o.min_size_to_sample;
  return absl::StrCat("insert: blocked: ", rule, " > max_diff = ", Num(o.max_diff), "; ",
                      Needs(samples, estimate, "sample"), " (or ", Count(deletes, "delete"), ")");
}

std::string ExplainSample(const RateLimiterOptions& o, const RateLimiterState& s) {
  const int64_t size = s.inserts - s.deletes;
  const bool size_ok = size >= o.min_size_to_sample;
  const double diff = SampleDiff(o, s, 1);
  const bool diff_ok = diff >= o.min_diff;
  const std::string size_rule = absl::StrCat("inserts - deletes = ", size, size_ok ? " >= " : " < ",
                                             "min_size_to_sample = ", o.min_size_to_sample);
  const std::string diff_rule =
      absl::StrCat("inserts*spi - samples - 1 = ", Num(diff), diff_ok ? " >= " : " < ",
                   "min_diff = ", Num(o.min_diff));
  if (size_ok && diff_ok) {
    return absl::StrCat("sample: may proceed: ", size_rule, " and ", diff_rule);
  }
  std::string why = size_ok ? diff_rule : size_rule;
  if (!size_ok && !diff_ok) why = absl::StrCat(size_rule, " and ", diff_rule);
  // Only inserts help a sample (deletes and samples make it worse); both
  // conditions improve with inserts, so the answer is the larger need.
  double estimate = static_cast<double>(o.min_size_to_sample - size);
  if (!diff_ok) {
    estimate = std::max(estimate,
                        (o.min_diff + static_cast<double>(s.samples) + 1) / o.samples_per_insert -
                            static_cast<double>(s.inserts));
  }
  const auto inserts = SmallestCount(estimate, [&](int64_t n) {
    return SampleAllowed(o, RateLimiterState{s.inserts + n, s.deletes, s.samples}, 1);
  });
  return absl::StrCat("sample: blocked: ", why, "; ", Needs(inserts, estimate, "insert"));
}

// A value of d = inserts*spi - samples at which, with the table at
// min_size_to_sample items, both sides are blocked; nullopt if there is none.
//
// Why this is the whole story: below min_size_to_sample inserts are free, so
// a deadlock needs size >= min_size_to_sample, where an insert needs
// d + spi <= max_diff and a sample needs d - 1 >= min_diff. Samples lower d
// by 1 and stop at the first d < min_diff + 1, so both block iff that
// stopping point s has s + spi > max_diff. Every stopping point is
// reachable: inserts and deletes below min_size_to_sample raise d by spi
// freely, then sampling brings it down. d lives on (1/q)Z when spi = p/q
// (q a power of two, p odd, or q = 1), and the stopping points are all its
// members in [min_diff, min_diff + 1); the worst is the largest one.
struct Deadlock {
  double d;           // the stopping point
  double needed_max;  // max_diff at or above this removes the deadlock
  bool approximate;   // spi is not a short dyadic fraction: d is a limit
};

std::optional<Deadlock> FindDeadlock(const RateLimiterOptions& o) {
  const double spi = o.samples_per_insert;
  // Covers the unbounded defaults too: DBL_MAX - (-DBL_MAX) is +inf.
  if (o.max_diff - o.min_diff >= 1 + spi) return std::nullopt;
  for (double q = 1; q <= kMaxLatticeDenominator; q *= 2) {
    if (spi * q != std::floor(spi * q)) continue;
    const double d =
        (std::ceil((o.min_diff + 1) * q) - 1) / q;  // largest lattice point < min_diff + 1
    if (d + spi <= o.max_diff) return std::nullopt;
    return Deadlock{d, d + spi, false};
  }
  // Dense enough to treat as continuous: d gets arbitrarily close to
  // min_diff + 1, and we already know min_diff + 1 + spi > max_diff.
  return Deadlock{o.min_diff + 1, o.min_diff + 1 + spi, true};
}

}  // namespace

RateLimiterOptions RateLimiterOptions::MinSize(int64_t n) {
  RateLimiterOptions o;
  o.samples_per_insert = 1.0;
  o.min_size_to_sample = n;
  o.min_diff = std::numeric_limits<double>::lowest();
  o.max_diff = std::numeric_limits<double>::max();
  return o;
}

RateLimiterOptions RateLimiterOptions::SampleToInsertRatio(double spi, int64_t min_size,
                                                           double error_buffer) {
  // Reverb's single-number error_buffer: centred on min_size * spi, so the
  // error counts only what happens after the table first fills.
  const double offset = spi * static_cast<double>(min_size);
  RateLimiterOptions o;
  o.samples_per_insert = spi;
  o.min_size_to_sample = min_size;
  o.min_diff = offset - error_buffer;
  o.max_diff = offset + error_buffer;
  return o;
}

RateLimiterOptions RateLimiterOptions::Queue(int64_t n) {
  RateLimiterOptions o;
  o.samples_per_insert = 1.0;
  o.min_size_to_sample = 1;
  o.min_diff = 0.0;
  o.max_diff = static_cast<double>(n);
  return o;
}

RateLimiterOptions RateLimiterOptions::Stack(int64_t n) { return Queue(n); }

Status RateLimiterOptions::Validate() const {
  if (!(samples_per_insert > 0) || !std::isfinite(samples_per_insert)) {
    return absl::InvalidArgumentError(
        absl::StrCat("samples_per_insert must be finite and > 0, got ", Num(samples_per_insert)));
  }
  if (min_size_to_sample < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_size_to_sample must be >= 1, got ", min_size_to_sample));
  }
  if (std::isnan(min_diff)) return absl::InvalidArgumentError("min_diff must be a number, got nan");
  if (std::isnan(max_diff)) return absl::InvalidArgumentError("max_diff must be a number, got nan");
  if (min_diff == kInf) {
    return absl::InvalidArgumentError(
        "min_diff must be < inf, got inf (samples could never proceed)");
  }
  if (max_diff == -kInf) {
    return absl::InvalidArgumentError(
        "max_diff must be > -inf, got -inf (inserts could never take the table past "
        "min_size_to_sample)");
  }
  if (min_diff > max_diff) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_diff (", Num(min_diff), ") must be <= max_diff (", Num(max_diff), ")"));
  }
  if (const auto dl = FindDeadlock(*this)) {
    // "->": spi is not a short binary fraction, d only approaches the limit.
    const char* eq = dl->approximate ? " -> " : " = ";
    return absl::InvalidArgumentError(absl::StrCat(
        "samples_per_insert = ", Num(samples_per_insert), ", min_diff = ", Num(min_diff),
        ", max_diff = ", Num(max_diff), " can deadlock: with min_size_to_sample (",
        min_size_to_sample, ") or more items in the table, once inserts*spi - samples", eq,
        Num(dl->d), " an insert is blocked ((inserts+1)*spi - samples", eq,
        Num(dl->d + samples_per_insert),
        " > max_diff) and so is a sample (inserts*spi - samples - 1", eq, Num(dl->d - 1),
        " < min_diff); max_diff must be at least ", Num(dl->needed_max),
        " (Reverb's SampleToInsertRatio asks for error_buffer >= max(1, samples_per_insert))"));
  }
  return absl::OkStatus();
}

RateLimiter::RateLimiter(RateLimiterOptions options) : options_(std::move(options)) {}

void RateLimiter::set_state(const RateLimiterState& s) {
  state_ = s;
  cv_.SignalAll();
}

bool RateLimiter::CanInsert(int64_t num_inserts) const {
  assert(num_inserts >= 1);
  return InsertAllowed(options_, state_, num_inserts);
}

bool RateLimiter::CanSample(int64_t num_samples) const {
  assert(num_samples >= 1);
  return SampleAllowed(options_, state_, num_samples);
}

Status RateLimiter::AwaitCanInsert(absl::Mutex* mu, absl::Duration timeout, const bool* cancelled) {
  return Await(/*insert=*/true, mu, timeout, cancelled);
}

Status RateLimiter::AwaitCanSample(absl::Mutex* mu, absl::Duration timeout, const bool* cancelled) {
  return Await(/*insert=*/false, mu, timeout, cancelled);
}

Status RateLimiter::Await(bool insert, absl::Mutex* mu, absl::Duration timeout,
                          const bool* cancelled) {
  mu->AssertHeld();
  const char* side = insert ? "insert" : "sample";
  // absl::Now() + InfiniteDuration() is InfiniteFuture(): no deadline.
  const absl::Time deadline = absl::Now() + timeout;
  int& blocked = insert ? blocked_inserts_ : blocked_samples_;
  bool counted = false;
  Status result;
  for (;;) {
    if (cancelled_) {
      result = absl::CancelledError(
          absl::StrCat("rate limiter: ", side, " cancelled: the rate limiter was cancelled"));
      break;
    }
    if (cancelled != nullptr && *cancelled) {
      result =
          absl::CancelledError(absl::StrCat("rate limiter: ", side, " cancelled by the caller"));
      break;
    }
    if (insert ? CanInsert() : CanSample()) break;
    if (absl::Now() >= deadline) {
      result = absl::DeadlineExceededError(absl::StrCat("rate limiter: ", side, " timed out after ",
                                                        absl::FormatDuration(timeout), ":\n",
                                                        Explain()));
      break;
    }
    if (!counted) {
      ++blocked;
      counted = true;
    }
    // Returns on SignalAll, timeout or spuriously; the loop re-checks all.
    cv_.WaitWithDeadline(mu, deadline);
  }
  if (counted) --blocked;
  return result;
}

// Every change can help one side, so each wakes all waiters; they re-check
// under the mutex and the ones still blocked wait again. Waiters are few (one
// per blocked client stream), so a herd is cheap; a missed wake-up is not.
void RateLimiter::Insert() {
  ++state_.inserts;
  cv_.SignalAll();
}

void RateLimiter::Delete() {
  ++state_.deletes;
  cv_.SignalAll();
}

void RateLimiter::Sample() {
  ++state_.samples;
  cv_.SignalAll();
}

void RateLimiter::Reset() {
  state_ = RateLimiterState{};
  cv_.SignalAll();
}

void RateLimiter::Cancel() {
  cancelled_ = true;
  cv_.SignalAll();
}

void RateLimiter::WakeAll() { cv_.SignalAll(); }

std::string RateLimiter::Explain() const {
  const RateLimiterOptions& o = options_;
  const RateLimiterState& s = state_;
  std::string out = absl::StrCat(
      "rate limiter: inserts=", s.inserts, " deletes=", s.deletes, " samples=", s.samples,
      " (size ", s.inserts - s.deletes, "); samples_per_insert=", Num(o.samples_per_insert),
      " min_size_to_sample=", o.min_size_to_sample, " min_diff=", Num(o.min_diff),
      " max_diff=", Num(o.max_diff), cancelled_ ? "; cancelled" : "", "\n", ExplainInsert(o, s),
      "; ", Callers(blocked_inserts_), "\n", ExplainSample(o, s), "; ", Callers(blocked_samples_));
  if (!CanInsert() && !CanSample()) {
    absl::StrAppend(&out, "\nboth sides are blocked: only a delete (or Reset) can make progress");
  }
  return out;
}

}  // namespace flywheel::replay
