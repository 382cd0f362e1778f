// A loader's process-wide metric series (base/metrics.h), labelled with its
// first table's uri: batches, rows, bytes and skipped rows as they are
// handed out, and the cumulative seconds per stage (io, decode, transform,
// assemble, consumer_wait, idle; docs/observability.md) refreshed from the
// loader's stats by a registry collector. Series are shared by the loaders
// of one table, which add to them; `flywheel_loader_instances` counts the
// live ones.
//
// Thread-safety: OnBatch and PublishStageTimes may be called from any
// thread. The stats callback runs on the registry's collecting thread until
// the destructor returns (it removes the collector first).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/base/metrics.h"
#include "flywheel/loader/loader.h"

namespace flywheel::internal_loader {

class LoaderMetrics {
 public:
  // Registers (or finds) the series of `table_uri` and counts this loader
  // in; `stats` gives the loader's stats for the stage times.
  LoaderMetrics(const std::string& table_uri, std::function<loader::LoaderStats()> stats);
  // Publishes the last stage times and counts this loader out.
  ~LoaderMetrics();
  LoaderMetrics(const LoaderMetrics&) = delete;
  LoaderMetrics& operator=(const LoaderMetrics&) = delete;

  // One batch handed to the consumer.
  void OnBatch(int64_t rows, int64_t bytes, int64_t skipped);
  // Adds the stage times accumulated since the last call to the series
  // (never less than before: a stage's series only grows).
  void PublishStageTimes();

 private:
  Counter* batches_;
  Counter* rows_;
  Counter* bytes_;
  Counter* skipped_;
  FloatCounter* io_;
  FloatCounter* decode_;
  FloatCounter* transform_;
  FloatCounter* assemble_;
  FloatCounter* consumer_wait_;
  FloatCounter* idle_;
  Gauge* instances_;
  const std::function<loader::LoaderStats()> stats_;
  int collector_ = -1;
  absl::Mutex mu_;
  loader::LoaderStats published_ ABSL_GUARDED_BY(mu_);  // stage times already added
};

}  // namespace flywheel::internal_loader
