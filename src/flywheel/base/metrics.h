// The process-wide metrics registry every flywheel subsystem registers into.
//
// Metrics are Prometheus-shaped: a family has a name, help text and a type;
// each distinct label set of a family is one series. Looking a series up takes
// a lock (do it once, keep the pointer); updating it is a single relaxed atomic
// operation, so series are cheap enough for hot paths.
//
//   static Counter* commits = Metrics().GetCounter(
//       "flywheel_table_commits_total", "Table commits", {{"op", "append"}});
//   commits->Increment();
//
// Thread-safety: all methods are thread-safe. Series pointers stay valid for
// the registry's lifetime (the global registry is never destroyed).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace flywheel {

namespace internal_metrics {
extern std::atomic<bool> enabled;
}  // namespace internal_metrics

// Metrics are on unless FLYWHEEL_METRICS=0 (read at start) or
// SetMetricsEnabled(false): then updates do nothing (series keep their
// values). The benchmark bench/metrics_bench.cc measures what they cost.
inline bool MetricsEnabled() { return internal_metrics::enabled.load(std::memory_order_relaxed); }
void SetMetricsEnabled(bool on);

using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void Increment(int64_t n = 1) {
    if (MetricsEnabled()) value_.fetch_add(n, std::memory_order_relaxed);
  }
  int64_t Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

class Gauge {
 public:
  void Set(double v) {
    if (MetricsEnabled()) value_.store(v, std::memory_order_relaxed);
  }
  void Add(double d);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A counter of a real quantity (e.g. seconds spent): only ever added to.
// Exposed as a Prometheus counter.
class FloatCounter {
 public:
  void Add(double d);  // d >= 0
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Cumulative histogram with fixed upper bounds (Prometheus `le` buckets).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  // Counts per bucket (non-cumulative), the last one is +Inf.
  std::vector<int64_t> BucketCounts() const;
  const std::vector<double>& bounds() const { return bounds_; }
  int64_t Count() const { return count_.load(std::memory_order_relaxed); }
  double Sum() const { return sum_.load(std::memory_order_relaxed); }

  // Default bounds for latencies in seconds: 10us .. 100s, powers of ~2.5.
  static std::vector<double> LatencyBounds();

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<int64_t>[]> buckets_;
  std::atomic<int64_t> count_{0};
  std::atomic<double> sum_{0};
};

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Returns the series of family `name` with `labels`, creating it on first
  // use. A name must keep one type: asking for a counter named like an
  // existing gauge is a programmer error (CHECK-fails).
  Counter* GetCounter(const std::string& name, const std::string& help, const Labels& labels = {});
  FloatCounter* GetFloatCounter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge* GetGauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram* GetHistogram(const std::string& name, const std::string& help,
                          const Labels& labels = {},
                          std::vector<double> bounds = Histogram::LatencyBounds());

  // Prometheus text exposition format 0.0.4 of every series. Runs the
  // collectors first.
  std::string ExpositionText() const;

  // A collector refreshes series that are cheaper to compute on demand than
  // to update on every event (e.g. the loader's stage times, summed from its
  // own statistics). It runs before each exposition, outside the registry's
  // locks, so it may look series up (two scrapes may run it at once).
  // RemoveCollector returns after any run of it in progress has finished;
  // a collector must not remove itself.
  int AddCollector(std::function<void()> collect);
  void RemoveCollector(int id);
  void RunCollectors() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Family {
    Type type;
    std::string help;
    std::map<Labels, std::unique_ptr<Counter>> counters;
    std::map<Labels, std::unique_ptr<FloatCounter>> float_counters;
    std::map<Labels, std::unique_ptr<Gauge>> gauges;
    std::map<Labels, std::unique_ptr<Histogram>> histograms;
  };
  Family& FamilyFor(const std::string& name, const std::string& help, Type type)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, Family> families_ ABSL_GUARDED_BY(mu_);
  // Collectors run outside this lock (a scrape does not hold up adding or
  // removing others); `running` counts the runs in progress, which
  // RemoveCollector waits out.
  struct Collector {
    std::function<void()> collect;
    int running = 0;
  };
  mutable absl::Mutex collectors_mu_;
  int next_collector_ ABSL_GUARDED_BY(collectors_mu_) = 0;
  std::map<int, std::shared_ptr<Collector>> collectors_ ABSL_GUARDED_BY(collectors_mu_);
};

// The process-wide registry.
MetricsRegistry& Metrics();

// A label value as the Prometheus text format writes it (\\, \", \n escaped);
// shared by the exposition and by tools that print series.
std::string PrometheusEscapeLabelValue(std::string_view v);

}  // namespace flywheel
