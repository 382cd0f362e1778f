// A parser for the Prometheus text exposition format 0.0.4 (what /metrics
// serves): # HELP / # TYPE lines, samples `name{label="value",...} value
// [timestamp]` with escaped label values, +Inf/-Inf/NaN. Used by the tests to
// check real scrapes and by tools that read a running process's metrics.
// Errors name the line number and what was wrong.
//
// Thread-safety: value types and stateless functions.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flywheel/base/status.h"

namespace flywheel::obs {

struct PromSample {
  std::string name;                          // e.g. flywheel_loader_batches_total, x_bucket
  std::map<std::string, std::string> labels;
  double value = 0;
  std::optional<int64_t> timestamp_ms;
};

struct PromFamily {
  std::string name;
  std::string type;  // counter, gauge, histogram, summary, untyped
  std::string help;
};

struct PromScrape {
  std::map<std::string, PromFamily> families;
  std::vector<PromSample> samples;

  // The value of the sample with exactly `name` and `labels`, if present.
  std::optional<double> Find(const std::string& name, const std::map<std::string, std::string>& labels = {}) const;
};

// Parses a whole exposition. Besides syntax it checks what a scraper relies
// on: a family's TYPE comes before its samples and at most once, histogram
// buckets are cumulative and end with le="+Inf" equal to _count.
Result<PromScrape> ParsePrometheusText(std::string_view text);

}  // namespace flywheel::obs
