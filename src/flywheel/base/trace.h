// Tracing: spans written as Chrome trace JSON (chrome://tracing, Perfetto).
// Off by default; when off a span costs one relaxed atomic load. When on,
// each thread appends complete events to its own buffer (no lock per span);
// Flush/Stop merge them into one JSON file.
//
//   FW_TRACE_SPAN("loader", "batch");      // until the end of the scope
//
// Enable with obs::StartTracing(path) or FLYWHEEL_TRACE=path (started on
// first use, written at exit). Format: docs/observability.md, "Traces".
//
// Thread-safety: everything here is thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "flywheel/base/status.h"

namespace flywheel::obs {

namespace internal_trace {
extern std::atomic<bool> g_enabled;
int64_t NowUs();
void Record(const char* category, const char* name, int64_t start_us, int64_t end_us, const std::string* args_json);
void InitFromEnvironmentOnce();
}  // namespace internal_trace

// Starts collecting spans (dropping any not yet written) to be written to
// `path` by StopTracing/FlushTrace. At most `max_events` are kept (further
// spans are counted as dropped). InvalidArgument for an empty path.
Status StartTracing(const std::string& path, int64_t max_events = 4'000'000);
// Writes everything collected so far to the path and stops collecting.
Status StopTracing();
// Writes what was collected so far, keeps collecting.
Status FlushTrace();
bool TracingEnabled();
// Spans recorded / dropped since StartTracing.
int64_t TraceEventsRecorded();
int64_t TraceEventsDropped();

// Names this thread in the trace ("loader-worker-1").
void SetThreadName(const std::string& name);

// A span from construction to destruction. `category` and `name` must be
// string literals (or otherwise outlive the trace).
class Span {
 public:
  Span(const char* category, const char* name) {
    if (internal_trace::g_enabled.load(std::memory_order_relaxed)) Begin(category, name);
  }
  ~Span() {
    if (category_ != nullptr) End();
  }
  // Attaches {"key": value} args (JSON text of an object) when tracing.
  void SetArgs(const std::string& json_object);
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  void Begin(const char* category, const char* name);
  void End();
  const char* category_ = nullptr;
  const char* name_ = nullptr;
  int64_t start_us_ = 0;
  std::string args_;
};

}  // namespace flywheel::obs

#define FW_TRACE_CONCAT_INNER_(a, b) a##b
#define FW_TRACE_CONCAT_(a, b) FW_TRACE_CONCAT_INNER_(a, b)
#define FW_TRACE_SPAN(category, name) ::flywheel::obs::Span FW_TRACE_CONCAT_(fw_span_, __LINE__)(category, name)
