#include "flywheel/base/logging.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace flywheel {
namespace {

LogLevel LevelFromEnv() {
  const char* v = std::getenv("FLYWHEEL_LOG_LEVEL");
  if (v == nullptr) return LogLevel::kWarning;
  if (!std::strcmp(v, "debug")) return LogLevel::kDebug;
  if (!std::strcmp(v, "info")) return LogLevel::kInfo;
  if (!std::strcmp(v, "error")) return LogLevel::kError;
  return LogLevel::kWarning;
}

std::atomic<int>& Level() {
  static std::atomic<int> level{static_cast<int>(LevelFromEnv())};
  return level;
}

bool JsonFormat() {
  static const bool json = [] {
    const char* v = std::getenv("FLYWHEEL_LOG_FORMAT");
    return v != nullptr && std::strcmp(v, "json") == 0;
  }();
  return json;
}

const char* LevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
  }
  return "?";
}

std::string JsonEscape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

}  // namespace

static std::mutex& RunIdMutex() {
  static std::mutex mu;
  return mu;
}

static std::string& RunId() {
  static std::string id = [] {
    const char* v = std::getenv("FLYWHEEL_RUN_ID");
    return std::string(v != nullptr ? v : "");
  }();
  return id;
}

void SetLogRunId(const std::string& run_id) {
  std::lock_guard<std::mutex> lock(RunIdMutex());
  RunId() = run_id;
}

std::string GetLogRunId() {
  std::lock_guard<std::mutex> lock(RunIdMutex());
  return RunId();
}

void SetLogLevel(LogLevel level) { Level().store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(Level().load(std::memory_order_relaxed)); }

namespace internal_logging {

LogMessage::LogMessage(LogLevel level, const char* file, int line)
    : level_(level), file_(file), line_(line) {
  const char* slash = std::strrchr(file_, '/');
  if (slash != nullptr) file_ = slash + 1;
}

LogMessage::~LogMessage() {
  static std::mutex mu;
  const double ts = std::chrono::duration<double>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  std::string line;
  if (JsonFormat()) {
    char head[128];
    std::snprintf(head, sizeof head, "{\"ts\":%.6f,\"level\":\"%s\",", ts, LevelName(level_));
    const std::string run_id = GetLogRunId();
    if (!run_id.empty()) line = "\"run_id\":\"" + JsonEscape(run_id) + "\",";
    line = std::string(head) + line + "\"file\":\"" + JsonEscape(file_) +
           "\",\"line\":" + std::to_string(line_) + ",\"msg\":\"" +
           JsonEscape(stream_.str()) + "\"}\n";
  } else {
    line = std::string("[flywheel ") + LevelName(level_) + " " + file_ + ":" +
           std::to_string(line_) + "] " + stream_.str() + "\n";
  }
  std::lock_guard<std::mutex> lock(mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace internal_logging
}  // namespace flywheel
