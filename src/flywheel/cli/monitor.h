// The loopback endpoint of a long-running `flywheel` process (replay serve,
// run): Prometheus /metrics and the dashboard of this process's own series
// at / (docs/observability.md).
#pragma once

#include <memory>
#include <string>

#include "flywheel/base/status.h"
#include "flywheel/obs/dashboard.h"
#include "flywheel/obs/http_server.h"

namespace flywheel::cli {

class Monitor {
 public:
  // Serves on 127.0.0.1:`port` (0: a free one) and prints
  // "<who>: metrics on http://127.0.0.1:P/metrics" and "<who>: dashboard on
  // http://127.0.0.1:P/". A negative port serves nothing.
  static Result<std::unique_ptr<Monitor>> Start(const std::string& who, int port);
  ~Monitor();

 private:
  Monitor() = default;
  std::unique_ptr<obs::Dashboard> dashboard_;  // outlives the server, whose handlers use it
  std::unique_ptr<obs::HttpServer> server_;
};

}  // namespace flywheel::cli
