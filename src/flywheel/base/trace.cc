#include "flywheel/base/trace.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace flywheel::obs {
namespace internal_trace {

std::atomic<bool> g_enabled{false};

namespace {

struct Event {
  const char* category;
  const char* name;
  int64_t start_us;
  int64_t dur_us;
  std::string args;  // JSON object text or empty
};

// One per thread that ever recorded; owned by the registry so events
// survive the thread.
struct ThreadBuffer {
  absl::Mutex mu;  // taken by its own thread per span and by Flush: uncontended in practice
  std::vector<Event> events ABSL_GUARDED_BY(mu);
  int tid = 0;  // set before the buffer is shared
  std::string name ABSL_GUARDED_BY(mu);
};

struct Registry {
  absl::Mutex mu;
  std::vector<std::unique_ptr<ThreadBuffer>> buffers ABSL_GUARDED_BY(mu);
  std::string path ABSL_GUARDED_BY(mu);
  int64_t max_events = 0;
  std::atomic<int64_t> recorded{0};
  std::atomic<int64_t> dropped{0};
  int64_t origin_us = 0;
};

Registry& Reg() {
  static Registry* r = new Registry();  // never destroyed: threads may record during exit
  return *r;
}

ThreadBuffer& Mine() {
  thread_local ThreadBuffer* buf = [] {
    auto b = std::make_unique<ThreadBuffer>();
    b->tid = static_cast<int>(::syscall(SYS_gettid));
    Registry& r = Reg();
    absl::MutexLock lock(&r.mu);
    r.buffers.push_back(std::move(b));
    return r.buffers.back().get();
  }();
  return *buf;
}

Status WriteFile(bool stop) {
  Registry& r = Reg();
  absl::MutexLock lock(&r.mu);
  if (r.path.empty()) return absl::FailedPreconditionError("tracing was not started");
  if (stop) g_enabled.store(false, std::memory_order_relaxed);
  // Chrome trace event format: {"traceEvents": [...], "displayTimeUnit": "ms"}.
  nlohmann::json events = nlohmann::json::array();
  const int pid = static_cast<int>(::getpid());
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0},
                    {"args", {{"name", "flywheel"}}}});
  for (auto& b : r.buffers) {
    absl::MutexLock bl(&b->mu);
    if (!b->name.empty()) {
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", b->tid},
                        {"args", {{"name", b->name}}}});
    }
    for (const Event& e : b->events) {
      nlohmann::json j = {{"ph", "X"},        {"cat", e.category}, {"name", e.name}, {"pid", pid},
                          {"tid", b->tid},    {"ts", e.start_us - r.origin_us},     {"dur", e.dur_us}};
      if (!e.args.empty()) {
        nlohmann::json a = nlohmann::json::parse(e.args, nullptr, false);
        if (a.is_object()) j["args"] = std::move(a);
      }
      events.push_back(std::move(j));
    }
  }
  nlohmann::json doc = {{"traceEvents", std::move(events)},
                        {"displayTimeUnit", "ms"},
                        {"otherData", {{"producer", "flywheel"},
                                       {"dropped_events", r.dropped.load()},
                                       {"recorded_events", r.recorded.load()}}}};
  const std::string tmp = r.path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return absl::UnavailableError(absl::StrCat("trace: cannot write ", tmp));
  const std::string text = doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), r.path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("trace: cannot write ", r.path));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Record(const char* category, const char* name, int64_t start_us, int64_t end_us, const std::string* args) {
  Registry& r = Reg();
  if (r.recorded.load(std::memory_order_relaxed) >= r.max_events) {
    r.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  r.recorded.fetch_add(1, std::memory_order_relaxed);
  ThreadBuffer& b = Mine();
  absl::MutexLock lock(&b.mu);
  b.events.push_back(Event{category, name, start_us, end_us - start_us, args ? *args : std::string()});
}

void InitFromEnvironmentOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* path = std::getenv("FLYWHEEL_TRACE");
    if (path == nullptr || *path == '\0') return;
    if (StartTracing(path).ok()) {
      std::atexit([] { (void)StopTracing(); });
    }
  });
}

// Turns tracing on for processes started with FLYWHEEL_TRACE set.
[[maybe_unused]] const bool kEnvInit = (InitFromEnvironmentOnce(), true);

}  // namespace internal_trace

using namespace internal_trace;

Status StartTracing(const std::string& path, int64_t max_events) {
  if (path.empty()) return absl::InvalidArgumentError("trace: empty path");
  if (max_events < 1) return absl::InvalidArgumentError("trace: max_events must be >= 1");
  Registry& r = Reg();
  absl::MutexLock lock(&r.mu);
  for (auto& b : r.buffers) {
    absl::MutexLock bl(&b->mu);
    b->events.clear();
  }
  r.path = path;
  r.max_events = max_events;
  r.recorded = 0;
  r.dropped = 0;
  r.origin_us = NowUs();
  g_enabled.store(true, std::memory_order_relaxed);
  return absl::OkStatus();
}

Status StopTracing() { return WriteFile(/*stop=*/true); }
Status FlushTrace() { return WriteFile(/*stop=*/false); }
bool TracingEnabled() { return g_enabled.load(std::memory_order_relaxed); }
int64_t TraceEventsRecorded() { return Reg().recorded.load(); }
int64_t TraceEventsDropped() { return Reg().dropped.load(); }

void SetThreadName(const std::string& name) {
  ThreadBuffer& b = Mine();
  absl::MutexLock lock(&b.mu);
  b.name = name;
}

void Span::Begin(const char* category, const char* name) {
  category_ = category;
  name_ = name;
  start_us_ = NowUs();
}

void Span::End() {
  // A span that began while tracing was on is kept even if tracing stopped
  // meanwhile only when it is still on (a stopped trace is already written).
  if (g_enabled.load(std::memory_order_relaxed)) {
    Record(category_, name_, start_us_, NowUs(), args_.empty() ? nullptr : &args_);
  }
}

void Span::SetArgs(const std::string& json_object) {
  if (category_ != nullptr) args_ = json_object;
}

}  // namespace flywheel::obs
