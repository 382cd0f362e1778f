// `flywheel run CONFIG.toml`: the RL launcher and supervisor (docs/rl.md,
// "flywheel run").
//
// Roles:
//   all    (default) the replay + weight server in this process, the learner
//          (python3 -m flywheel.rl.learner) and [actor] count actor
//          processes (this binary, --role actor), supervised: a dead actor
//          is restarted with backoff, a dead learner resumes from its last
//          checkpoint; progress is printed; Ctrl-C stops everything.
//   head   the server and the learner only (actors run elsewhere).
//   actor  one C++ actor (rl/actor.h) for --address.
// Under mpirun (OMPI_COMM_WORLD_RANK / PMI_RANK / PMIX_RANK set, more than
// one rank) rank 0 is the head and rank r > 0 is actor r - 1, reaching the
// head at [run] host:port (a fixed port is required).
//
// Run directory: config.toml (a copy), metrics.jsonl (the learner's, one
// line per update), learner.log and actor-<i>.log (each process's output),
// actors/actor-<i>.json (actor counters), checkpoints/, pids.json (the
// supervised processes, for tools and tests), result.json (the learner's
// stop reason) and summary.json (the launcher's summary).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "flywheel/base/logging.h"
#include "flywheel/base/toml.h"
#include "flywheel/base/metrics.h"
#include "flywheel/obs/http_server.h"
#include "flywheel/cli/commands.h"
#include "flywheel/cli/common.h"
#include "flywheel/cli/monitor.h"
#include "flywheel/replay/selectors/interface.h"
#include "flywheel/replay/service/server.h"
#include "flywheel/rl/actor.h"
#include "flywheel/rl/run_config.h"
#include "flywheel/rl/service/weight_service.h"
#include "flywheel/rl/supervisor.h"
#include "nlohmann/json.hpp"

namespace flywheel::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct RunArgs {
  std::string config;
  std::string run_dir;
  std::string role;
  std::string address;
  int actor_id = 0;
  int restart = 0;
  int actors = -1;
  int port = -1;
  int metrics_port = 0;  // 0: a free port; -1: no /metrics endpoint
  bool deterministic = false;
  bool fresh = false;
  std::string python;
};

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// The MPI rank and world size when started by mpirun (Open MPI, MPICH/PMI,
// PMIx), else nullopt.
std::optional<std::pair<int, int>> MpiRank() {
  const char* pairs[][2] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                            {"PMIX_RANK", "PMIX_SIZE"},
                            {"PMI_RANK", "PMI_SIZE"}};
  for (const auto& p : pairs) {
    const char* r = std::getenv(p[0]);
    const char* n = std::getenv(p[1]);
    if (r != nullptr && n != nullptr) return std::make_pair(std::atoi(r), std::atoi(n));
  }
  return std::nullopt;
}

std::string SelfExe() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "flywheel" : p.string();
}

// Makes the flywheel Python package importable by the learner: FLYWHEEL_PYTHONPATH,
// else the build tree's python/ next to this binary, prepended to PYTHONPATH.
void SetPythonPath() {
  std::string dir;
  if (const char* env = std::getenv("FLYWHEEL_PYTHONPATH"); env != nullptr) {
    dir = env;
  } else {
    fs::path exe = fs::path(SelfExe()).parent_path();  // <build>/src/flywheel/cli
    for (fs::path c : {exe / "../../../python", exe / "../python", exe / "../lib/flywheel/python"}) {
      std::error_code ec;
      if (fs::exists(c / "flywheel" / "__init__.py", ec)) {
        dir = fs::weakly_canonical(c, ec).string();
        break;
      }
    }
  }
  if (dir.empty()) return;
  const char* old = std::getenv("PYTHONPATH");
  const std::string value = old != nullptr && *old != '\0' ? absl::StrCat(dir, ":", old) : dir;
  setenv("PYTHONPATH", value.c_str(), 1);
}

sigset_t BlockSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

// The last line of a file (up to 64 KiB back), or "".
std::string LastLine(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return "";
  const std::streamoff size = f.tellg();
  const std::streamoff back = std::min<std::streamoff>(size, 65536);
  std::string tail(static_cast<size_t>(back), '\0');
  f.seekg(size - back);
  f.read(tail.data(), back);
  while (!tail.empty() && tail.back() == '\n') tail.pop_back();
  const size_t nl = tail.rfind('\n');
  return nl == std::string::npos ? tail : tail.substr(nl + 1);
}

Status WriteAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot rename ", tmp, ": ", ec.message()));
  return Status();
}

std::string Human(double v) {
  if (v >= 1e6) return absl::StrFormat("%.2fM", v / 1e6);
  if (v >= 1e4) return absl::StrFormat("%.1fk", v / 1e3);
  return absl::StrFormat("%.0f", v);
}

// ------------------------------------------------------------------ actor

std::atomic<bool> g_stop{false};
extern "C" void OnStopSignal(int) { g_stop.store(true); }

nlohmann::json StatsJson(const rl::ActorStats& s) {
  return {{"env_steps", s.env_steps},       {"unrolls", s.unrolls},
          {"episodes", s.episodes},         {"last_return", s.last_return},
          {"policy_version", s.policy_version}, {"weight_updates", s.weight_updates},
          {"step_s", s.step_s},             {"act_s", s.act_s},
          {"write_s", s.write_s},           {"wait_weights_s", s.wait_weights_s},
          {"elapsed_s", s.elapsed_s}};
}

uint64_t Mix(uint64_t a, uint64_t b) {
  SplitMix64 r(a * 0x9e3779b97f4a7c15ULL ^ b);
  return r.Next();
}

int RunActorRole(const rl::RunConfig& c, const RunArgs& a, const std::string& run_dir) {
  signal(SIGINT, OnStopSignal);
  signal(SIGTERM, OnStopSignal);
  rl::ActorOptions o;
  o.address = a.address;
  o.table = c.table;
  o.model = rl::kPolicyModel;
  o.env_id = c.env_id;
  o.num_envs = c.num_envs;
  o.num_threads = a.deterministic ? 1 : c.num_threads;
  o.max_episode_steps = c.max_episode_steps;
  // Distinct envs per actor, and per restart (a restarted actor should not
  // replay the episodes it already sent).
  const uint64_t slot = static_cast<uint64_t>(a.actor_id) + static_cast<uint64_t>(a.restart) * 1000003ULL;
  o.env_seed = c.seed * 0x100000001b3ULL + slot * static_cast<uint64_t>(c.num_envs);
  o.policy_seed = Mix(c.seed, slot + 1);
  o.unroll_length = c.unroll_length;
  o.activation = c.activation;
  o.on_policy = a.deterministic || c.on_policy;
  const std::string stats_dir = run_dir.empty() ? "" : absl::StrCat(run_dir, "/actors");
  if (!stats_dir.empty()) fs::create_directories(stats_dir);
  const std::string stats_path = absl::StrCat(stats_dir, "/actor-", a.actor_id, ".json");
  std::printf("actor %d: %s x%d, unrolls of %lld steps into '%s' at %s (%s)\n", a.actor_id, c.env_id.c_str(),
              c.num_envs, static_cast<long long>(c.unroll_length), c.table.c_str(), a.address.c_str(),
              o.on_policy ? "on-policy" : "async");
  std::fflush(stdout);
  Status s = rl::RunActor(o, g_stop, [&](const rl::ActorStats& st) {
    if (stats_dir.empty()) return;
    nlohmann::json j = StatsJson(st);
    j["actor"] = a.actor_id;
    j["restart"] = a.restart;
    j["pid"] = static_cast<int64_t>(getpid());
    WriteAtomically(stats_path, j.dump()).IgnoreError();
  });
  if (!s.ok()) return Fail(s);
  std::printf("actor %d: stopped\n", a.actor_id);
  return 0;
}

// ------------------------------------------------------------------- head

// The launcher of a classic-control run: the replay and weight server, the
// learner and the local actors as child processes (rl::Supervisor restarts
// them), progress, metrics and the summary.
class RunLauncher {
 public:
  RunLauncher(rl::RunConfig c, RunArgs a, std::string run_dir, int local_actors)
      : c_(std::move(c)), a_(std::move(a)), run_dir_(std::move(run_dir)), local_actors_(local_actors) {}

  int Run() {
    sigset_t sigs = BlockSignals();
    start_ = Clock::now();
    // One run id in every JSON log line of the supervisor and its children
    // (FLYWHEEL_LOG_FORMAT=json); kept when the caller set one.
    if (GetLogRunId().empty()) {
      const std::string id = absl::StrCat(c_.name, "-", absl::ToUnixSeconds(absl::Now()), "-", ::getpid());
      ::setenv("FLYWHEEL_RUN_ID", id.c_str(), 1);
      SetLogRunId(id);
    }
    if (Status s = StartServer(); !s.ok()) return Fail(s);
    std::printf("flywheel run: %s: %s, %s, %d actor%s x %d envs, server %s, run dir %s\n", c_.name.c_str(),
                c_.env_id.c_str(), c_.algorithm.c_str(), c_.actors, c_.actors == 1 ? "" : "s", c_.num_envs,
                server_->address().c_str(), run_dir_.c_str());
    {
      // Prometheus /metrics and a dashboard of the supervisor (replay server, run progress), on loopback.
      auto m = Monitor::Start("flywheel run", a_.metrics_port);
      if (!m.ok()) return Fail(Annotate(m.status(), "--metrics-port"));
      metrics_ = std::move(*m);
    }
    std::fflush(stdout);
    learner_ = procs_.Add("learner", [this](int) { return Argv(-1, 0); }, run_dir_ + "/learner.log");
    for (int i = 0; i < local_actors_; ++i) {
      actors_.push_back(procs_.Add(absl::StrCat("actor ", i), [this, i](int restarts) { return Argv(i, restarts); },
                                   absl::StrCat(run_dir_, "/actor-", i, ".log")));
    }
    for (size_t id = 0; id < procs_.size(); ++id) {
      if (Status s = procs_.Start(static_cast<int>(id)); !s.ok()) {
        StopAll();
        return Fail(s);
      }
    }
    WritePids();
    Clock::time_point next_progress = Clock::now() + std::chrono::milliseconds(c_.progress_interval_ms);
    Clock::time_point next_publish = Clock::now();
    int rc = -1;
    while (rc < 0) {
      timespec ts{0, 100 * 1000 * 1000};
      const int sig = sigtimedwait(&sigs, nullptr, &ts);
      if (sig == SIGINT || sig == SIGTERM) {
        std::printf("flywheel run: %s; stopping the learner (it checkpoints) and the actors\n",
                    sig == SIGINT ? "interrupted" : "terminated");
        std::fflush(stdout);
        StopAll();
        PrintProgress();
        std::printf("flywheel run: stopped after %.1f s; resume with the same command\n", Seconds(start_));
        return 130;
      }
      rc = Reap();
      if (rc >= 0) break;
      if (procs_.RestartDue([this](int id, const Status& s) {
            std::printf("flywheel run: restarting %s: %s\n", procs_.name(id).c_str(), std::string(s.message()).c_str());
          }) > 0) {
        WritePids();
      }
      if (Clock::now() >= next_publish) {
        PublishMetrics();
        next_publish = Clock::now() + std::chrono::seconds(1);
      }
      if (Clock::now() >= next_progress) {
        PrintProgress();
        next_progress = Clock::now() + std::chrono::milliseconds(c_.progress_interval_ms);
      }
    }
    return rc;
  }

 private:
  Status StartServer() {
    replay::ReplayTableOptions t;
    t.name = c_.table;
    t.sampler = replay::NewFifoSelector();
    t.remover = replay::NewFifoSelector();
    t.max_size = c_.resolved_queue_size();
    t.max_times_sampled = 1;
    t.rate_limiter = replay::RateLimiterOptions::Queue(t.max_size);
    t.watchdog = absl::ZeroDuration();  // waiting on a slow learner or actor is normal here
    FW_ASSIGN_OR_RETURN(std::unique_ptr<replay::ReplayTable> table, replay::ReplayTable::Create(std::move(t)));
    table_ = std::shared_ptr<replay::ReplayTable>(std::move(table));
    replay::ServerOptions o;
    o.address = absl::StrCat(c_.host, ":", a_.port >= 0 ? a_.port : c_.port);
    o.tables.push_back(table_);
    o.services.push_back(std::make_shared<rl::WeightService>(std::make_shared<rl::WeightStore>()));
    FW_ASSIGN_OR_RETURN_CTX(server_, replay::Server::Start(std::move(o)), "flywheel run: replay server");
    return Status();
  }

  // The learner's command (actor < 0) or actor `actor`'s.
  std::vector<std::string> Argv(int actor, int restarts) const {
    if (actor < 0) {
      std::vector<std::string> v = {python_, "-m", "flywheel.rl.learner", a_.config, "--address",
                                    server_->address(), "--run-dir", run_dir_};
      if (a_.deterministic) v.push_back("--deterministic");
      return v;
    }
    std::vector<std::string> v = {SelfExe(), "run", a_.config, "--role", "actor", "--address", server_->address(),
                                  "--actor-id", std::to_string(actor), "--restart",
                                  std::to_string(restarts), "--run-dir", run_dir_};
    if (a_.deterministic) v.push_back("--deterministic");
    return v;
  }

  void WritePids() {
    nlohmann::json j;
    j["launcher"] = static_cast<int64_t>(getpid());
    j["learner"] = static_cast<int64_t>(procs_.pid(learner_));
    j["learner_restarts"] = procs_.restarts(learner_);
    nlohmann::json actors = nlohmann::json::array();
    for (int id : actors_) actors.push_back({{"pid", procs_.pid(id)}, {"restarts", procs_.restarts(id)}});
    j["actors"] = actors;
    j["address"] = server_->address();
    WriteAtomically(run_dir_ + "/pids.json", j.dump()).IgnoreError();
  }

  // Handles exited children; returns the launcher's exit code once the run
  // is over, else -1.
  int Reap() {
    for (const rl::Supervisor::Exit& e : procs_.Reap()) {
      const int status = e.status;
      const bool learner = e.id == learner_;
      const std::string& log = procs_.log(e.id);
      if (learner) {
        if (e.clean()) return Finish();
        if (WIFEXITED(status) && WEXITSTATUS(status) == 2) {
          std::printf("flywheel run: the learner refused the configuration:\n%s", rl::TailLines(log, 5).c_str());
          StopAll();
          return 2;
        }
        if (procs_.restarts(learner_) >= kMaxLearnerRestarts) {
          std::printf("flywheel run: the learner died (%s) %d times; giving up. Last lines of %s:\n%s",
                      rl::ExitText(status).c_str(), procs_.restarts(learner_) + 1, log.c_str(),
                      rl::TailLines(log, 10).c_str());
          StopAll();
          return 1;
        }
      } else if (e.clean()) {
        procs_.MarkFinished(e.id);  // the table closed: the run is ending
        continue;
      }
      const auto wait = procs_.ScheduleRestart(e.id);
      std::printf("flywheel run: %s died (%s); %s in %.0f s (restart %d). Last lines of %s:\n%s",
                  procs_.name(e.id).c_str(), rl::ExitText(status).c_str(),
                  learner ? "resuming it from its last checkpoint" : "restarting it",
                  std::chrono::duration<double>(wait).count(), procs_.restarts(e.id), log.c_str(),
                  rl::TailLines(log, 3).c_str());
      std::fflush(stdout);
    }
    return -1;
  }

  // SIGTERM to every child, SIGKILL to those still there after 15 s; then the server stops.
  void StopAll() {
    procs_.StopAll();
    server_->Stop();
  }

  nlohmann::json LastMetrics() const {
    const std::string line = LastLine(run_dir_ + "/metrics.jsonl");
    if (line.empty()) return nlohmann::json::object();
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    return j.is_discarded() ? nlohmann::json::object() : j;
  }

  // Each actor's stats file (actors/<name>.json), by file name.
  std::map<std::string, nlohmann::json> ActorStats() const {
    std::map<std::string, nlohmann::json> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(run_dir_ + "/actors", ec)) {
      if (e.path().extension() != ".json") continue;
      std::ifstream f(e.path());
      auto j = nlohmann::json::parse(f, nullptr, false);
      if (!j.is_discarded() && j.is_object()) out[e.path().filename().string()] = std::move(j);
    }
    return out;
  }

  static constexpr const char* kActorKeys[] = {"env_steps", "episodes", "step_s", "act_s",
                                               "write_s",   "wait_weights_s", "elapsed_s"};

  // Sum of the actors' counters (their stats files).
  nlohmann::json ActorTotals() const {
    nlohmann::json total = nlohmann::json::object();
    for (const char* k : kActorKeys) total[k] = 0.0;
    for (const auto& [name, j] : ActorStats()) {
      for (const char* k : kActorKeys) {
        if (j.contains(k) && j[k].is_number()) total[k] = total[k].get<double>() + j[k].get<double>();
      }
    }
    return total;
  }

  // The run's progress as Prometheus series (the supervisor's /metrics; the
  // dashboard charts them): from the learner's metrics lines and the actors'
  // stats files, refreshed once a second by the supervisor loop. Totals are
  // counters fed with what changed since the last refresh: a restarted
  // actor starts its file from zero, so a value that went down counts whole.
  void PublishMetrics() {
    auto counter = [](const char* name, const char* help, const Labels& labels = {}) {
      return Metrics().GetFloatCounter(name, help, labels);
    };
    // A value below the last one: an actor restarted from zero (count it
    // whole), or the learner resumed from a checkpoint (count what follows).
    auto advance = [](FloatCounter* c, double now, double& last, bool restarts_from_zero = true) {
      c->Add(now >= last ? now - last : restarts_from_zero ? now : 0);
      last = now;
    };
    const nlohmann::json m = LastMetrics();
    auto num = [&](const nlohmann::json& j, const std::string& k) {
      return j.contains(k) && j[k].is_number() ? j[k].get<double>() : 0.0;
    };
    advance(counter("flywheel_run_env_steps_total", "Env steps the learner has trained on"), num(m, "env_steps"),
            published_.learner["env_steps"], false);
    advance(counter("flywheel_run_learner_updates_total", "Learner updates"), num(m, "update"),
            published_.learner["update"], false);
    if (m.contains("times") && m["times"].is_object()) {
      for (const char* stage : {"wait", "update", "publish", "checkpoint"}) {
        advance(counter("flywheel_run_learner_stage_seconds_total",
                        "Learner time per stage: wait (for replay data), update, publish (weights), checkpoint "
                        "(the pause)",
                        {{"stage", stage}}),
                num(m["times"], absl::StrCat(stage, "_s")), published_.learner[absl::StrCat("times.", stage)], false);
      }
    }
    for (const auto& [file, j] : ActorStats()) {
      auto& last = published_.actors[file];
      std::map<std::string, double> d;  // what this actor did since the last refresh
      for (const char* k : kActorKeys) {
        const double now = num(j, k);
        d[k] = now >= last[k] ? now - last[k] : now;  // a restarted actor's file starts from zero
        last[k] = now;
        published_.actor_sum[k] += d[k];
      }
      counter("flywheel_run_actor_env_steps_total", "Env steps taken by the run's actors")->Add(d["env_steps"]);
      counter("flywheel_run_episodes_total", "Episodes finished by the run's actors")->Add(d["episodes"]);
      for (const char* stage : {"step", "act", "write", "wait_weights"}) {
        counter("flywheel_run_actor_stage_seconds_total",
                "Time of the run's actors per stage: step (envs), act (inference), write (to replay), wait_weights",
                {{"stage", stage}})
            ->Add(d[absl::StrCat(stage, "_s")]);
      }
    }
    if (m.contains("mean_return_100") && m["mean_return_100"].is_number()) {
      Metrics()
          .GetGauge("flywheel_run_mean_return", "Mean return of the last 100 episodes")
          ->Set(m["mean_return_100"].get<double>());
    }
    if (m.contains("staleness") && m["staleness"].is_object() && m["staleness"].contains("lags") &&
        m["staleness"]["lags"].is_object()) {
      // Lag = learner version - the version the item was acted with, over
      // the items that arrived since the last refresh (the learner's
      // histogram covers the whole run).
      std::map<int64_t, double> now, window;
      for (auto& [k, v] : m["staleness"]["lags"].items()) {
        int64_t lag = 0;
        if (absl::SimpleAtoi(k, &lag) && v.is_number()) now[lag] = v.get<double>();
      }
      double total = 0;
      bool restarted = false;
      for (const auto& [lag, n] : now) {
        auto it = published_.lags.find(lag);
        restarted = restarted || (it != published_.lags.end() && it->second > n);
      }
      for (const auto& [lag, n] : now) {
        auto it = published_.lags.find(lag);
        const double d = restarted || it == published_.lags.end() ? n : n - it->second;
        if (d > 0) {
          window[lag] = d;
          total += d;
        }
      }
      published_.lags = std::move(now);
      if (total > 0) {
        double seen = 0;
        int64_t median = window.rbegin()->first;
        for (const auto& [lag, n] : window) {
          seen += n;
          if (seen >= total / 2) {
            median = lag;
            break;
          }
        }
        const char* help =
            "Policy lag (learner version - the version that acted) of the items the learner received in the last "
            "second, used or dropped: median and max";
        Metrics().GetGauge("flywheel_run_policy_lag", help, {{"stat", "median"}})->Set(static_cast<double>(median));
        Metrics()
            .GetGauge("flywheel_run_policy_lag", help, {{"stat", "max"}})
            ->Set(static_cast<double>(window.rbegin()->first));
      }
    }
    int up = 0, restarts = procs_.restarts(learner_);
    for (int id : actors_) {
      up += procs_.pid(id) > 0 ? 1 : 0;
      restarts += procs_.restarts(id);
    }
    Metrics().GetGauge("flywheel_run_actors_up", "Actor processes running")->Set(up);
    advance(counter("flywheel_run_restarts_total", "Actor and learner restarts by the supervisor"), restarts,
            published_.restarts);
  }

  void PrintProgress() {
    const nlohmann::json m = LastMetrics();
    const double t = Seconds(start_);
    const double steps = m.value("env_steps", 0.0);
    const double updates = m.value("update", 0.0);
    std::string ret = "-";
    if (m.contains("mean_return_100") && m["mean_return_100"].is_number()) {
      ret = absl::StrFormat("%.1f (%d ep)", m["mean_return_100"].get<double>(),
                            std::min<int64_t>(100, m.value("episodes", int64_t{0})));
    }
    std::string lag = "-";
    if (m.contains("staleness")) {
      const auto& st = m["staleness"];
      int64_t max_lag = 0;
      for (auto& [k, v] : st["lags"].items()) {
        (void)v;
        max_lag = std::max<int64_t>(max_lag, std::stoll(k));
      }
      lag = absl::StrFormat("max %d, dropped %d", max_lag, st.value("dropped", int64_t{0}));
    }
    int up = 0, restarts = procs_.restarts(learner_);
    for (int id : actors_) {
      up += procs_.pid(id) > 0 ? 1 : 0;
      restarts += procs_.restarts(id);
    }
    const replay::TableInfo info = table_->Info();
    std::printf(
        "[%6.1fs] env steps %s (%s/s)  updates %.0f (%.2f/s)  return %s  lag %s  replay %lld/%lld  actors %d/%zu "
        "up  restarts %d\n",
        t, Human(steps).c_str(), Human(steps / std::max(t, 1e-9)).c_str(), updates, updates / std::max(t, 1e-9),
        ret.c_str(), lag.c_str(), static_cast<long long>(info.size), static_cast<long long>(info.max_size), up,
        actors_.size(), restarts);
    std::fflush(stdout);
  }

  int Finish() {
    const double wall = Seconds(start_);
    // The learner closed the table: actors stop on their own.
    for (int i = 0; i < 50; ++i) {
      procs_.Reap();
      bool any = false;
      for (int id : actors_) any = any || procs_.pid(id) > 0;
      if (!any) break;
      usleep(100 * 1000);
    }
    StopAll();
    PrintProgress();
    std::ifstream rf(run_dir_ + "/result.json");
    nlohmann::json result = nlohmann::json::parse(rf, nullptr, false);
    if (result.is_discarded()) result = nlohmann::json::object();
    const nlohmann::json m = LastMetrics();
    // The actors' work, including actors that restarted (their files start over).
    PublishMetrics();
    nlohmann::json actors = ActorTotals();
    for (const auto& [k, v] : published_.actor_sum) actors[k] = std::max(actors.value(k, 0.0), v);
    nlohmann::json summary = {{"name", c_.name},
                              {"env", c_.env_id},
                              {"algorithm", c_.algorithm},
                              {"actors", c_.actors},
                              {"num_envs", c_.num_envs},
                              {"wall_s", wall},
                              {"result", result},
                              {"learner", m},
                              {"actor_totals", actors},
                              {"learner_restarts", procs_.restarts(learner_)}};
    int actor_restarts = 0;
    for (int id : actors_) actor_restarts += procs_.restarts(id);
    summary["actor_restarts"] = actor_restarts;
    WriteAtomically(run_dir_ + "/summary.json", summary.dump(2)).IgnoreError();
    const std::string reason = result.value("reason", std::string("finished"));
    std::printf("flywheel run: %s after %.1f s wall (%s env steps trained on, %.0f updates)\n", reason.c_str(), wall,
                Human(m.value("env_steps", 0.0)).c_str(), m.value("update", 0.0));
    if (m.contains("times")) {
      const auto& tm = m["times"];
      const double lw = std::max(1e-9, m.value("elapsed_s", wall));
      std::printf("flywheel run: learner time: %.0f%% waiting for data, %.0f%% updating, %.0f%% publishing\n",
                  100 * tm.value("wait_s", 0.0) / lw, 100 * tm.value("update_s", 0.0) / lw,
                  100 * tm.value("publish_s", 0.0) / lw);
    }
    const double ae = std::max(1e-9, actors.value("elapsed_s", 0.0));
    if (ae > 1e-6) {
      std::printf(
          "flywheel run: actor time: %.0f%% stepping envs, %.0f%% policy inference, %.0f%% writing to replay, %.0f%% "
          "waiting for weights\n",
          100 * actors.value("step_s", 0.0) / ae, 100 * actors.value("act_s", 0.0) / ae,
          100 * actors.value("write_s", 0.0) / ae, 100 * actors.value("wait_weights_s", 0.0) / ae);
    }
    std::printf("flywheel run: summary in %s/summary.json\n", run_dir_.c_str());
    std::fflush(stdout);
    return 0;
  }

  static constexpr int kMaxLearnerRestarts = 5;
  rl::RunConfig c_;
  RunArgs a_;
  std::string run_dir_;
  int local_actors_;
  std::string python_ = DefaultPython();
  std::shared_ptr<replay::ReplayTable> table_;
  std::unique_ptr<replay::Server> server_;
  std::unique_ptr<Monitor> metrics_;
  // What PublishMetrics has already added to the counters.
  struct Published {
    std::map<std::string, double> learner;
    std::map<std::string, std::map<std::string, double>> actors;  // by stats file
    std::map<int64_t, double> lags;
    double restarts = 0;
    std::map<std::string, double> actor_sum;  // every actor's work, restarts included
  } published_;
  rl::Supervisor procs_;
  int learner_ = -1;
  std::vector<int> actors_;
  Clock::time_point start_;

 public:
  void set_python(std::string p) { python_ = std::move(p); }
};

// Creates the run directory. A directory holding a finished run is refused
// (resuming it would stop at once) unless `fresh`, which deletes it first.
Status PrepareRunDir(const std::string& run_dir, const std::string& config_path, bool fresh) {
  std::error_code ec;
  if (fs::exists(run_dir, ec)) {
    const bool ours = fs::exists(fs::path(run_dir) / "config.toml", ec) || fs::is_empty(run_dir, ec);
    if (fresh) {
      if (!ours) {
        return absl::FailedPreconditionError(
            absl::StrCat("--fresh: ", run_dir, " is not a flywheel run directory (no config.toml); not deleting it"));
      }
      fs::remove_all(run_dir, ec);
      if (ec) return absl::InternalError(absl::StrCat("cannot delete ", run_dir, ": ", ec.message()));
    } else if (fs::exists(fs::path(run_dir) / "result.json", ec)) {
      return absl::AbortedError(
          absl::StrCat(run_dir, " holds a finished run (see its result.json); pass --fresh to start over or "
                                "--run-dir for a new one"));
    }
  }
  fs::create_directories(run_dir + "/checkpoints", ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create run dir ", run_dir, ": ", ec.message()));
  fs::create_directories(run_dir + "/actors", ec);
  // Counters of a previous launch are stale; the learner's checkpoints and
  // metrics carry over (a resumed run continues them).
  for (const auto& e : fs::directory_iterator(run_dir + "/actors", ec)) fs::remove(e.path(), ec);
  const fs::path copy = fs::path(run_dir) / "config.toml";
  if (!fs::equivalent(config_path, copy, ec)) fs::copy_file(config_path, copy, fs::copy_options::overwrite_existing, ec);
  return Status();
}

// Replaces this process with `python -m <module> args...` (the flywheel
// package importable); returns only on failure.
int ExecPython(const std::string& python_arg, const std::string& module, std::vector<std::string> args) {
  SetPythonPath();
  std::string python = python_arg;
  if (python.empty()) {
    const char* p = std::getenv("FLYWHEEL_PYTHON");
    python = p != nullptr && *p != '\0' ? p : DefaultPython();
  }
  // The job finds this binary (its dashboard is `flywheel serve`).
  std::error_code ec;
  if (fs::path self = fs::read_symlink("/proc/self/exe", ec); !ec) ::setenv("FLYWHEEL_EXE", self.c_str(), 0);
  std::vector<std::string> argv = {python, "-m", module};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& s : argv) cargv.push_back(s.data());
  cargv.push_back(nullptr);
  std::fflush(stdout);
  execvp(cargv[0], cargv.data());
  return Fail(absl::InternalError(absl::StrCat("cannot start ", python, ": ", std::strerror(errno))));
}

// A language-model run: the config names prompt tables in [data]. The job
// (python -m flywheel.rl.lm.job) checks its own config and supervises
// itself (docs/rl.md, "Language models: the job").
int RunLanguageModel(const RunArgs& a) {
  if (!a.role.empty() && a.role != "all") {
    return Fail(absl::InvalidArgumentError("--role: a language-model run ([data] in the config) runs on one machine"));
  }
  std::vector<std::string> args = {a.config};
  if (!a.run_dir.empty()) args.insert(args.end(), {"--run-dir", a.run_dir});
  if (a.deterministic) args.push_back("--deterministic");
  if (a.fresh) args.push_back("--fresh");
  return ExecPython(a.python, "flywheel.rl.lm.job", std::move(args));
}

int Run(RunArgs a) {
  if (auto root = toml::ParseFile(a.config); root.ok() && root->Find("data") != nullptr) {
    return RunLanguageModel(a);
  }
  auto config = rl::LoadRunConfig(a.config);
  if (!config.ok()) return Fail(config.status());
  rl::RunConfig c = *std::move(config);
  if (a.actors > 0) c.actors = a.actors;
  if (a.deterministic) {
    c.actors = 1;
    c.num_threads = 1;
    c.on_policy = true;
    c.batch_unrolls = 1;
  }
  std::string role = a.role;
  const auto mpi = MpiRank();
  if (role.empty() && mpi && mpi->second > 1) {
    role = mpi->first == 0 ? "head" : "actor";
    if (role == "actor") a.actor_id = mpi->first - 1;
    const int port = a.port >= 0 ? a.port : c.port;
    if (port == 0) {
      return Fail(absl::InvalidArgumentError(
          "under mpirun the head needs a fixed port: set [run] port or pass --port"));
    }
    if (c.actors != mpi->second - 1) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("[actor] count = ", c.actors, " but mpirun started ", mpi->second - 1,
                       " actor rank(s) (ranks 1..", mpi->second - 1, "); pass --actors ", mpi->second - 1)));
    }
    if (a.address.empty()) a.address = absl::StrCat(c.host, ":", port);
  }
  if (role.empty()) role = "all";
  const std::string run_dir = a.run_dir.empty() ? c.resolved_run_dir() : a.run_dir;
  if (role == "actor") {
    if (a.address.empty()) return Fail(absl::InvalidArgumentError("--role actor needs --address HOST:PORT"));
    return RunActorRole(c, a, run_dir);
  }
  if (role != "all" && role != "head") {
    return Fail(absl::InvalidArgumentError(absl::StrCat("--role ", role, ": expected all, head or actor")));
  }
  if (Status s = PrepareRunDir(run_dir, a.config, a.fresh); !s.ok()) return Fail(s);
  SetPythonPath();
  RunLauncher sup(c, a, run_dir, role == "all" ? c.actors : 0);
  if (!a.python.empty()) {
    sup.set_python(a.python);
  } else if (const char* p = std::getenv("FLYWHEEL_PYTHON"); p != nullptr && *p != '\0') {
    sup.set_python(p);
  }
  return sup.Run();
}

}  // namespace

void AddRunCommand(CLI::App& app, int* rc) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand(
      "run",
      "Train an RL agent: replay + weight server, learner and actors, supervised; or, for a config with a "
      "[data] section, RL on a language model (docs/rl.md)");
  cmd->add_option("config", a->config,
                  "Run configuration (TOML), e.g. examples/cartpole_ppo.toml or examples/arith_grpo.toml")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--run-dir", a->run_dir, "Run directory (default: [run] run_dir, else runs/<name>)");
  cmd->add_flag("--deterministic", a->deterministic,
                "Reproducible run: one actor, one env thread, lockstep weights, single-threaded deterministic learner");
  cmd->add_flag("--fresh", a->fresh, "Delete the run directory first (default: resume from its last checkpoint)");
  cmd->add_option("--actors", a->actors, "Override [actor] count")->check(CLI::Range(1, 4096));
  cmd->add_option("--port", a->port, "Override [run] port (the server's port; needed under mpirun)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--metrics-port", a->metrics_port,
                  "Serve Prometheus /metrics and a dashboard (/) on 127.0.0.1 at this port (0: a free one, printed; -1: off)")
      ->capture_default_str();
  cmd->add_option("--python", a->python, "Python interpreter for the learner (default $FLYWHEEL_PYTHON, else the python3 beside this executable, else the one flywheel was built for)");
  cmd->add_option("--role", a->role, "all (default), head (server + learner) or actor; set from the rank under mpirun");
  cmd->add_option("--address", a->address, "Server address for --role actor");
  cmd->add_option("--actor-id", a->actor_id, "Actor index for --role actor")->check(AtLeast(0));
  cmd->add_option("--restart", a->restart, "Restart count (set by the supervisor; varies the seeds)")
      ->check(AtLeast(0));
  cmd->callback([a, rc] { *rc = Run(*a); });
}

void AddTaskCommand(CLI::App& app, int* rc) {
  CLI::App* grp = app.add_subcommand("task", "Tasks with verifiable answers for RL on language models (docs/rl.md)");
  grp->require_subcommand(1);
  CLI::App* make = grp->add_subcommand("make", "Write a task's train and test tables");
  make->require_subcommand(1);
  CLI::App* arith = make->add_subcommand(
      "arith", "Multi-digit arithmetic: tables OUT/train and OUT/test (columns prompt, answer), disjoint problems");
  arith->allow_extras();
  arith->prefix_command();
  arith->set_help_flag();  // --help goes to the Python command, which knows the options
  arith->callback([arith, rc] {
    std::vector<std::string> rest = {"arith"};
    for (const std::string& s : arith->remaining()) rest.push_back(s);
    *rc = ExecPython("", "flywheel.rl.lm.tasks", rest);
  });
}

}  // namespace flywheel::cli
