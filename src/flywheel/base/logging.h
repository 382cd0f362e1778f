// Minimal leveled logging to stderr.
//
//   FW_LOG(INFO) << "committed version " << v;
//
// The threshold comes from FLYWHEEL_LOG_LEVEL (debug|info|warning|error,
// default warning) and can be changed with SetLogLevel(). With
// FLYWHEEL_LOG_FORMAT=json each line is a JSON object
// {"ts":..,"level":..,"file":..,"line":..,"msg":..}, plus "run_id" when a
// run id is set (FLYWHEEL_RUN_ID, or SetLogRunId; `flywheel run` sets it for
// itself and its children).
//
// Thread-safety: lines from different threads never interleave.
#pragma once

#include <sstream>
#include <string>

namespace flywheel {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// The run id JSON log lines carry ("" = none); initially FLYWHEEL_RUN_ID.
void SetLogRunId(const std::string& run_id);
std::string GetLogRunId();

namespace internal_logging {
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  const char* file_;
  int line_;
  std::ostringstream stream_;
};
}  // namespace internal_logging
}  // namespace flywheel

#define FW_LOG_LEVEL_DEBUG ::flywheel::LogLevel::kDebug
#define FW_LOG_LEVEL_INFO ::flywheel::LogLevel::kInfo
#define FW_LOG_LEVEL_WARNING ::flywheel::LogLevel::kWarning
#define FW_LOG_LEVEL_ERROR ::flywheel::LogLevel::kError

#define FW_LOG(level)                                                 \
  if (FW_LOG_LEVEL_##level < ::flywheel::GetLogLevel()) {             \
  } else                                                              \
    ::flywheel::internal_logging::LogMessage(FW_LOG_LEVEL_##level, __FILE__, __LINE__).stream()
