// `flywheel replay ...`: serve (a replay server from a TOML config), info
// (tables, rate limiter state and why callers are blocked) and checkpoint.
#include <signal.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flywheel/obs/http_server.h"
#include "flywheel/base/logging.h"
#include "flywheel/cli/commands.h"
#include "flywheel/cli/common.h"
#include "flywheel/cli/monitor.h"
#include "flywheel/replay/service/config.h"
#include "flywheel/replay/service/server.h"
#include "flywheel/replay/service/sharded_client.h"
#include "nlohmann/json.hpp"

namespace flywheel::cli {
namespace {

using replay::RemoteTableInfo;

struct ServeArgs {
  std::string config;
  int port = -1;
  std::string host;
  std::string checkpoint_dir;
  std::string checkpoint_interval;
  bool no_restore = false;
  bool no_final_checkpoint = false;
  std::string insert_log;  // empty: as configured
  std::string stats_interval = "0";
  bool example = false;
  int metrics_port = 0;  // 0: a free port; -1: no /metrics endpoint
};

std::string LimiterText(const replay::TableInfo& i) {
  return absl::StrCat("inserts ", i.limiter.inserts, ", samples ", i.limiter.samples, ", deletes ",
                      i.limiter.deletes);
}

// Blocks SIGINT/SIGTERM in every thread (the server's threads inherit the
// mask) so that the main thread can wait for them with sigtimedwait.
sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

int Serve(const ServeArgs& a) {
  if (a.example) {
    std::fwrite(replay::ExampleServerConfig().data(), 1, replay::ExampleServerConfig().size(), stdout);
    return 0;
  }
  if (a.config.empty()) return Fail(absl::InvalidArgumentError("--config is required (see --example-config)"));
  auto options = replay::LoadServerConfig(a.config);
  if (!options.ok()) return Fail(options.status());
  if (a.port >= 0 || !a.host.empty()) {
    const std::string& addr = options->address;
    const std::string host = !a.host.empty() ? a.host : addr.substr(0, addr.rfind(':'));
    const std::string port = a.port >= 0 ? std::to_string(a.port) : addr.substr(addr.rfind(':') + 1);
    options->address = absl::StrCat(host, ":", port);
  }
  if (!a.checkpoint_dir.empty()) options->checkpoint_dir = a.checkpoint_dir;
  if (!a.checkpoint_interval.empty()) {
    auto ms = ParseDurationMs(a.checkpoint_interval);
    if (!ms.ok()) return Fail(Annotate(ms.status(), "--checkpoint-interval"));
    options->checkpoint_interval = absl::Milliseconds(*ms);
  }
  if (a.no_restore) options->restore = false;
  if (!a.insert_log.empty()) {
    if (a.insert_log == "none") {
      options->insert_log = false;
    } else {
      options->insert_log = true;
      options->insert_log_sync = a.insert_log == "write" ? "none" : a.insert_log;
      if (a.insert_log != "write" && a.insert_log != "interval" && a.insert_log != "always") {
        return Fail(absl::InvalidArgumentError(
            absl::StrCat("--insert-log ", a.insert_log, ": expected none, write, interval or always")));
      }
    }
  }
  auto stats_ms = ParseDurationMs(a.stats_interval);
  if (!stats_ms.ok()) return Fail(Annotate(stats_ms.status(), "--stats-interval"));

  sigset_t stop = BlockStopSignals();
  const bool log_on = options->insert_log;
  const std::string log_sync = options->insert_log_sync;
  auto server = replay::Server::Start(*std::move(options));
  if (!server.ok()) return Fail(server.status());
  std::vector<std::string> names;
  for (const auto& t : (*server)->tables()) names.push_back(absl::StrCat(t->name(), " (", t->Info().size, " items)"));
  std::printf("flywheel replay: serving %s on %s\n", absl::StrJoin(names, ", ").c_str(),
              (*server)->address().c_str());
  if ((*server)->restored_checkpoint() >= 0) {
    std::printf("flywheel replay: restored checkpoint %lld\n",
                static_cast<long long>((*server)->restored_checkpoint()));
  }
  if (log_on) {
    const replay::ServerStats st = (*server)->stats();
    std::printf("flywheel replay: insert log on (sync %s); %lld items re-inserted from it, %lld bytes of torn tail left\n",
                log_sync.c_str(), static_cast<long long>(st.items_replayed),
                static_cast<long long>(st.log_torn_bytes));
  }
  // Prometheus /metrics and a dashboard of this process, on loopback (docs/observability.md).
  auto monitor = Monitor::Start("flywheel replay", a.metrics_port);
  if (!monitor.ok()) return Fail(Annotate(monitor.status(), "--metrics-port"));
  std::fflush(stdout);

  // Wait for SIGINT / SIGTERM, printing table sizes every --stats-interval.
  int sig = 0;
  while (sig <= 0) {
    timespec ts{};
    const int64_t wait_ms = *stats_ms > 0 ? *stats_ms : 3600 * 1000;
    ts.tv_sec = wait_ms / 1000;
    ts.tv_nsec = (wait_ms % 1000) * 1000000;
    sig = sigtimedwait(&stop, nullptr, &ts);
    if (sig <= 0 && *stats_ms > 0) {
      for (const auto& t : (*server)->tables()) {
        const replay::TableInfo i = t->Info();
        std::printf("flywheel replay: %s: %lld items, %s, blocked inserts %d, samples %d\n", i.name.c_str(),
                    static_cast<long long>(i.size), LimiterText(i).c_str(), i.blocked_inserts, i.blocked_samples);
      }
      std::fflush(stdout);
    }
  }
  std::printf("flywheel replay: %s, stopping\n", sig == SIGINT ? "interrupted" : "terminated");
  std::fflush(stdout);
  int rc = 0;
  // Stop taking calls first, so the final checkpoint holds everything acknowledged.
  (*server)->Stop();
  if (!a.no_final_checkpoint) {
    auto c = (*server)->Checkpoint();
    if (c.ok()) {
      std::printf("flywheel replay: final checkpoint %lld: %lld items in %s\n", static_cast<long long>(c->id),
                  static_cast<long long>(c->num_items), c->path.c_str());
    } else if (!absl::IsFailedPrecondition(c.status())) {  // no checkpoint_dir: nothing to do
      rc = Fail(Annotate(c.status(), "final checkpoint"));
    }
  }
  return rc;
}

nlohmann::json InfoJson(const RemoteTableInfo& t) {
  const replay::TableInfo& i = t.info;
  return {{"name", i.name},
          {"size", i.size},
          {"max_size", i.max_size},
          {"max_times_sampled", i.max_times_sampled},
          {"sampler", i.sampler},
          {"remover", i.remover},
          {"inserts", i.limiter.inserts},
          {"samples", i.limiter.samples},
          {"deletes", i.limiter.deletes},
          {"samples_per_insert", i.limiter_options.samples_per_insert},
          {"min_size_to_sample", i.limiter_options.min_size_to_sample},
          {"min_diff", i.limiter_options.min_diff},
          {"max_diff", i.limiter_options.max_diff},
          {"blocked_inserts", i.blocked_inserts},
          {"blocked_samples", i.blocked_samples},
          {"num_episodes_evicted", i.num_episodes_evicted},
          {"num_deleted", i.num_deleted},
          {"explain", t.explain}};
}

Result<std::unique_ptr<replay::ShardedClient>> Connect(const std::vector<std::string>& addresses) {
  return replay::ShardedClient::Create(addresses);
}

int Info(const std::vector<std::string>& addresses, bool json, double timeout_s) {
  auto client = Connect(addresses);
  if (!client.ok()) return Fail(client.status());
  auto info = (*client)->Info(absl::Seconds(timeout_s));
  if (!info.ok()) return Fail(info.status());
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (size_t s = 0; s < info->size(); ++s) {
      nlohmann::json tables = nlohmann::json::array();
      for (const auto& t : (*info)[s]) tables.push_back(InfoJson(t));
      out.push_back({{"address", addresses[s]}, {"tables", tables}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  for (size_t s = 0; s < info->size(); ++s) {
    std::printf("server %s\n", addresses[s].c_str());
    for (const auto& t : (*info)[s]) {
      // Explain() says it all: size, selectors, limiter counters and, per side,
      // whether it may proceed or which inequality blocks it.
      std::string explain = t.explain;
      for (size_t p = 0; (p = explain.find('\n', p)) != std::string::npos; p += 3) explain.replace(p, 1, "\n  ");
      std::printf("  %s\n", explain.c_str());
    }
  }
  return 0;
}

int CheckpointNow(const std::vector<std::string>& addresses) {
  auto client = Connect(addresses);
  if (!client.ok()) return Fail(client.status());
  auto r = (*client)->Checkpoint();
  if (!r.ok()) return Fail(r.status());
  for (size_t s = 0; s < r->size(); ++s) {
    const replay::RemoteCheckpoint& c = (*r)[s];
    std::printf("%s: checkpoint %lld: %lld items, %lld chunks (%lld bytes) in %s; longest pause %s, took %s\n",
                addresses[s].c_str(), static_cast<long long>(c.id), static_cast<long long>(c.num_items),
                static_cast<long long>(c.num_chunks), static_cast<long long>(c.chunk_bytes), c.path.c_str(),
                absl::FormatDuration(c.max_pause).c_str(), absl::FormatDuration(c.duration).c_str());
  }
  return 0;
}

}  // namespace

void AddReplayCommands(CLI::App& app, int* rc) {
  CLI::App* grp = app.add_subcommand("replay", "Run and inspect experience replay servers");
  grp->require_subcommand(1);

  {
    auto* cmd = grp->add_subcommand("serve",
                                    "Serve replay tables over gRPC on loopback until SIGINT/SIGTERM.\n"
                                    "Tables come from a TOML config (print one with --example-config).\n"
                                    "With a checkpoint directory the server resumes from its newest\n"
                                    "checkpoint and writes a final one when stopped.");
    auto a = std::make_shared<ServeArgs>();
    cmd->add_option("--config", a->config, "TOML file with [[table]] entries (docs/replay.md)");
    cmd->add_option("--port", a->port, "Port to listen on (0: a free one; overrides the config)");
    cmd->add_option("--host", a->host, "Loopback host: 127.0.0.1, [::1] or localhost (overrides the config)");
    cmd->add_option("--checkpoint-dir", a->checkpoint_dir, "Checkpoint directory (overrides the config)");
    cmd->add_option("--checkpoint-interval", a->checkpoint_interval,
                    "Write a checkpoint this often, e.g. 10m (overrides the config)");
    cmd->add_flag("--no-restore", a->no_restore, "Start empty even when the checkpoint directory has checkpoints");
    cmd->add_flag("--no-final-checkpoint", a->no_final_checkpoint, "Do not checkpoint when stopping");
    cmd->add_option("--insert-log", a->insert_log,
                    "Log inserts before acknowledging them so they survive kill -9: none (off), or the\n"
                    "sync policy write (no fdatasync), interval (every 100 ms) or always (per item)");
    cmd->add_option("--stats-interval", a->stats_interval, "Print table sizes this often, e.g. 30s (0: never)")
        ->capture_default_str();
    cmd->add_flag("--example-config", a->example, "Print an example configuration and exit");
    cmd->add_option("--metrics-port", a->metrics_port,
                    "Serve Prometheus /metrics and a dashboard (/) on 127.0.0.1 at this port (0: a free one, printed; -1: off)")
        ->capture_default_str();
    cmd->callback([=] { *rc = Serve(*a); });
  }
  {
    auto* cmd = grp->add_subcommand("info",
                                    "Show each table's size, rate limiter counters and, for blocked\n"
                                    "calls, which inequality blocks them and what would unblock them");
    auto addresses = std::make_shared<std::vector<std::string>>();
    auto json = std::make_shared<bool>(false);
    auto timeout = std::make_shared<double>(10);
    cmd->add_option("address", *addresses, "Server address(es), e.g. 127.0.0.1:9000")->required();
    cmd->add_flag("--json", *json, "Print JSON");
    cmd->add_option("--timeout", *timeout, "Seconds to wait for each server")->capture_default_str();
    cmd->callback([=] { *rc = Info(*addresses, *json, *timeout); });
  }
  {
    auto* cmd = grp->add_subcommand("checkpoint", "Ask server(s) to write a checkpoint now");
    auto addresses = std::make_shared<std::vector<std::string>>();
    cmd->add_option("address", *addresses, "Server address(es)")->required();
    cmd->callback([=] { *rc = CheckpointNow(*addresses); });
  }
}

}  // namespace flywheel::cli
