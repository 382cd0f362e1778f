#include "flywheel/cli/monitor.h"

#include <cstdio>

namespace flywheel::cli {

Result<std::unique_ptr<Monitor>> Monitor::Start(const std::string& who, int port) {
  std::unique_ptr<Monitor> m(new Monitor());
  if (port < 0) return m;
  FW_ASSIGN_OR_RETURN(m->server_, obs::HttpServer::Create("127.0.0.1", port));
  m->dashboard_ = std::make_unique<obs::Dashboard>(obs::DashboardOptions{});
  m->dashboard_->Install(*m->server_);
  FW_RETURN_IF_ERROR(m->server_->Start());
  m->dashboard_->Start();
  std::printf("%s: metrics on http://127.0.0.1:%d/metrics\n", who.c_str(), m->server_->port());
  std::printf("%s: dashboard on http://127.0.0.1:%d/\n", who.c_str(), m->server_->port());
  return m;
}

Monitor::~Monitor() {
  if (server_) server_->Stop();
  if (dashboard_) dashboard_->Stop();
}

}  // namespace flywheel::cli
