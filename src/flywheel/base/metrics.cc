#include "flywheel/base/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace flywheel {
namespace {

void AtomicAdd(std::atomic<double>& a, double d) {
  double cur = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(cur, cur + d, std::memory_order_relaxed)) {
  }
}

std::string FormatDouble(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[64];
  for (int prec = 6; prec <= 17; ++prec) {  // shortest text that reads back exactly
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}


std::string EscapeHelp(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string LabelText(const Labels& labels, const char* extra_key = nullptr,
                      const std::string& extra_value = "") {
  if (labels.empty() && extra_key == nullptr) return "";
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out += ",";
    first = false;
    out += k + "=\"" + PrometheusEscapeLabelValue(v) + "\"";
  }
  if (extra_key != nullptr) {
    if (!first) out += ",";
    out += std::string(extra_key) + "=\"" + PrometheusEscapeLabelValue(extra_value) + "\"";
  }
  return out + "}";
}

}  // namespace

namespace internal_metrics {
namespace {
bool EnabledFromEnvironment() {
  const char* v = std::getenv("FLYWHEEL_METRICS");
  return v == nullptr || (std::string_view(v) != "0" && std::string_view(v) != "off" && std::string_view(v) != "false");
}
}  // namespace
// Constant-initialized (on before any static initializer of another file
// can update a metric); FLYWHEEL_METRICS is applied at start-up.
constinit std::atomic<bool> enabled{true};
namespace {
[[maybe_unused]] const bool kFromEnvironment = [] {
  if (!EnabledFromEnvironment()) enabled.store(false, std::memory_order_relaxed);
  return true;
}();
}  // namespace
}  // namespace internal_metrics

void SetMetricsEnabled(bool on) { internal_metrics::enabled.store(on, std::memory_order_relaxed); }

void Gauge::Add(double d) {
  if (MetricsEnabled()) AtomicAdd(value_, d);
}

void FloatCounter::Add(double d) {
  if (MetricsEnabled() && d > 0) AtomicAdd(value_, d);
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      buckets_(new std::atomic<int64_t>[bounds_.size() + 1]) {
  std::sort(bounds_.begin(), bounds_.end());
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::Observe(double v) {
  if (!MetricsEnabled()) return;
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, v);
}

std::vector<int64_t> Histogram::BucketCounts() const {
  std::vector<int64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) out[i] = buckets_[i].load(std::memory_order_relaxed);
  return out;
}

std::vector<double> Histogram::LatencyBounds() {
  std::vector<double> b;
  for (double v = 1e-5; v <= 100.0; v *= 2.5) b.push_back(v);
  return b;
}

MetricsRegistry::Family& MetricsRegistry::FamilyFor(const std::string& name,
                                                    const std::string& help, Type type) {
  auto it = families_.find(name);
  if (it == families_.end()) {
    it = families_.emplace(name, Family{type, help, {}, {}, {}, {}}).first;
  }
  if (it->second.type != type) {
    std::fprintf(stderr, "flywheel: metric %s registered with two types\n", name.c_str());
    std::abort();
  }
  return it->second;
}

Counter* MetricsRegistry::GetCounter(const std::string& name, const std::string& help,
                                     const Labels& labels) {
  absl::MutexLock lock(&mu_);
  auto& slot = FamilyFor(name, help, Type::kCounter).counters[labels];
  if (!slot) slot = std::make_unique<Counter>();
  return slot.get();
}

FloatCounter* MetricsRegistry::GetFloatCounter(const std::string& name, const std::string& help,
                                               const Labels& labels) {
  absl::MutexLock lock(&mu_);
  auto& slot = FamilyFor(name, help, Type::kCounter).float_counters[labels];
  if (!slot) slot = std::make_unique<FloatCounter>();
  return slot.get();
}

Gauge* MetricsRegistry::GetGauge(const std::string& name, const std::string& help,
                                 const Labels& labels) {
  absl::MutexLock lock(&mu_);
  auto& slot = FamilyFor(name, help, Type::kGauge).gauges[labels];
  if (!slot) slot = std::make_unique<Gauge>();
  return slot.get();
}

Histogram* MetricsRegistry::GetHistogram(const std::string& name, const std::string& help,
                                         const Labels& labels, std::vector<double> bounds) {
  absl::MutexLock lock(&mu_);
  auto& slot = FamilyFor(name, help, Type::kHistogram).histograms[labels];
  if (!slot) slot = std::make_unique<Histogram>(std::move(bounds));
  return slot.get();
}

int MetricsRegistry::AddCollector(std::function<void()> collect) {
  absl::MutexLock lock(&collectors_mu_);
  const int id = next_collector_++;
  collectors_.emplace(id, std::make_shared<Collector>(Collector{std::move(collect), 0}));
  return id;
}

void MetricsRegistry::RemoveCollector(int id) {
  absl::MutexLock lock(&collectors_mu_);
  auto it = collectors_.find(id);
  if (it == collectors_.end()) return;
  std::shared_ptr<Collector> c = std::move(it->second);
  collectors_.erase(it);
  // Its runs in progress finish before the caller frees what they use.
  collectors_mu_.Await(absl::Condition(
      +[](Collector* c) { return c->running == 0; }, c.get()));
}

void MetricsRegistry::RunCollectors() const {
  std::vector<std::shared_ptr<Collector>> run;
  {
    absl::MutexLock lock(&collectors_mu_);
    for (const auto& [id, c] : collectors_) {
      c->running++;
      run.push_back(c);
    }
  }
  for (const auto& c : run) {
    c->collect();
    absl::MutexLock lock(&collectors_mu_);
    c->running--;
  }
}

std::string MetricsRegistry::ExpositionText() const {
  RunCollectors();
  absl::MutexLock lock(&mu_);
  std::string out;
  for (const auto& [name, fam] : families_) {
    const char* type = fam.type == Type::kCounter ? "counter"
                       : fam.type == Type::kGauge ? "gauge"
                                                  : "histogram";
    out += "# HELP " + name + " " + EscapeHelp(fam.help) + "\n";
    out += "# TYPE " + name + " " + type + "\n";
    for (const auto& [labels, c] : fam.counters) {
      out += name + LabelText(labels) + " " + std::to_string(c->Value()) + "\n";
    }
    for (const auto& [labels, c] : fam.float_counters) {
      out += name + LabelText(labels) + " " + FormatDouble(c->Value()) + "\n";
    }
    for (const auto& [labels, g] : fam.gauges) {
      out += name + LabelText(labels) + " " + FormatDouble(g->Value()) + "\n";
    }
    for (const auto& [labels, h] : fam.histograms) {
      const auto counts = h->BucketCounts();
      int64_t cum = 0;
      for (size_t i = 0; i < counts.size(); ++i) {
        cum += counts[i];
        const std::string le =
            i < h->bounds().size() ? FormatDouble(h->bounds()[i]) : std::string("+Inf");
        out += name + "_bucket" + LabelText(labels, "le", le) + " " + std::to_string(cum) + "\n";
      }
      out += name + "_sum" + LabelText(labels) + " " + FormatDouble(h->Sum()) + "\n";
      out += name + "_count" + LabelText(labels) + " " + std::to_string(cum) + "\n";
    }
  }
  return out;
}

MetricsRegistry& Metrics() {
  static MetricsRegistry* registry = new MetricsRegistry();
  return *registry;
}

std::string PrometheusEscapeLabelValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

}  // namespace flywheel
