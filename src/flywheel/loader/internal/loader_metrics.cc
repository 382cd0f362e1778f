#include "flywheel/loader/internal/loader_metrics.h"

#include <algorithm>
#include <utility>

namespace flywheel::internal_loader {

LoaderMetrics::LoaderMetrics(const std::string& table_uri, std::function<loader::LoaderStats()> stats)
    : stats_(std::move(stats)) {
  const Labels labels{{"table", table_uri}};
  auto stage = [&](const char* name) {
    Labels with_stage = labels;
    with_stage.emplace_back("stage", name);
    return Metrics().GetFloatCounter("flywheel_loader_stage_seconds_total",
                                     "Seconds spent per loader stage: io, decode, transform, assemble (worker "
                                     "threads), consumer_wait (next() waiting for a batch: the trainer starving), "
                                     "idle (read-ahead full: the loader waiting for the trainer)",
                                     with_stage);
  };
  batches_ = Metrics().GetCounter("flywheel_loader_batches_total", "Batches the loader handed out", labels);
  rows_ = Metrics().GetCounter("flywheel_loader_rows_total", "Rows the loader handed out", labels);
  bytes_ = Metrics().GetCounter("flywheel_loader_bytes_total", "Bytes of column data the loader handed out", labels);
  skipped_ = Metrics().GetCounter("flywheel_loader_skipped_rows_total", "Rows left out by on_error=skip", labels);
  io_ = stage("io");
  decode_ = stage("decode");
  transform_ = stage("transform");
  assemble_ = stage("assemble");
  consumer_wait_ = stage("consumer_wait");
  idle_ = stage("idle");
  instances_ = Metrics().GetGauge("flywheel_loader_instances",
                                  "Loaders of the table alive in this process (the stage series sum over them)",
                                  labels);
  instances_->Add(1);
  collector_ = Metrics().AddCollector([this] { PublishStageTimes(); });
}

LoaderMetrics::~LoaderMetrics() {
  Metrics().RemoveCollector(collector_);
  PublishStageTimes();  // the last deltas stay in the process-wide series
  instances_->Add(-1);
}

void LoaderMetrics::OnBatch(int64_t rows, int64_t bytes, int64_t skipped) {
  batches_->Increment();
  rows_->Increment(rows);
  bytes_->Increment(bytes);
  if (skipped) skipped_->Increment(skipped);
}

void LoaderMetrics::PublishStageTimes() {
  const loader::LoaderStats now = stats_();
  absl::MutexLock lock(&mu_);
  auto add = [](FloatCounter* g, double to, double& from) {
    if (to > from) g->Add(to - from);
    from = std::max(from, to);
  };
  add(io_, now.io_seconds, published_.io_seconds);
  add(decode_, now.decode_seconds, published_.decode_seconds);
  add(transform_, now.transform_seconds, published_.transform_seconds);
  add(assemble_, now.assemble_seconds, published_.assemble_seconds);
  add(consumer_wait_, now.consumer_wait_seconds, published_.consumer_wait_seconds);
  add(idle_, now.idle_seconds, published_.idle_seconds);
}

}  // namespace flywheel::internal_loader
