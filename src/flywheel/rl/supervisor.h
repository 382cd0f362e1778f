// Child processes kept alive: the part of `flywheel run`'s launcher that
// starts the learner and the actors, notices when one exits, restarts it
// after a backoff and stops them all (docs/rl.md, "`flywheel run`").
//
//   rl::Supervisor sup;
//   int learner = sup.Add("learner", [](int restarts) { return argv; }, "run/learner.log");
//   FW_RETURN_IF_ERROR(sup.Start(learner));
//   for (const rl::Supervisor::Exit& e : sup.Reap()) {     // never blocks
//     if (!e.clean()) sup.ScheduleRestart(e.id);            // 1, 2, 4 ... 30 s
//   }
//   sup.RestartDue(on_error);                                // starts those whose time came
//   sup.StopAll();                                           // SIGTERM, then SIGKILL after the grace
//
// Policy (which exit ends the run, how many restarts are too many) stays
// with the caller; this class holds the mechanism. Children inherit no
// blocked signals; their stdout and stderr are appended to their log.
//
// Thread-safety: not thread-safe; one thread drives it. Reap() reaps only
// this supervisor's children (waitpid on each pid), so other children of
// the process are left alone.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "flywheel/base/status.h"

namespace flywheel::rl {

class Supervisor {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    std::chrono::milliseconds backoff_base{1000};  // before the first restart; doubles per restart
    std::chrono::milliseconds backoff_max{30000};
    std::chrono::seconds reset_after{60};          // a child that ran this long restarts after backoff_base
    std::chrono::milliseconds stop_grace{15000};   // SIGTERM to SIGKILL in StopAll()
  };
  // argv of a child's next start, given the restarts so far.
  using ArgvFn = std::function<std::vector<std::string>(int restarts)>;

  struct Exit {
    int id;
    int status;  // as waitpid reports it
    bool clean() const;
  };

  Supervisor() : Supervisor(Options{}) {}
  explicit Supervisor(Options o) : o_(o) {}
  ~Supervisor();  // StopAll()
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Registers a child (not started); returns its id (0, 1, ...).
  int Add(std::string name, ArgvFn argv, std::string log);
  // Starts child `id` (fork + exec; output appended to its log).
  Status Start(int id);
  // The children that exited since the last call, without blocking. An
  // exited child has pid -1 until it is started again.
  std::vector<Exit> Reap();
  // Schedules child `id`'s restart after Backoff() and counts it; returns the wait.
  std::chrono::milliseconds ScheduleRestart(int id);
  // Child `id` is done: never restarted.
  void MarkFinished(int id);
  // Starts the children whose scheduled restart is due; a failed start is
  // reported to `on_error` and tried again 5 s later. Returns how many started.
  int RestartDue(const std::function<void(int id, const Status&)>& on_error = nullptr);
  // SIGTERM to every running child, SIGKILL to those still there after
  // stop_grace; every child is then finished.
  void StopAll();

  // The wait before restart number `restarts + 1` of a child that ran `ran`.
  static std::chrono::milliseconds Backoff(const Options& o, int restarts, Clock::duration ran);

  size_t size() const { return children_.size(); }
  pid_t pid(int id) const { return children_[id].pid; }
  int restarts(int id) const { return children_[id].restarts; }
  bool finished(int id) const { return children_[id].finished; }
  bool restart_scheduled(int id) const { return children_[id].restart_at.has_value(); }
  const std::string& name(int id) const { return children_[id].name; }
  const std::string& log(int id) const { return children_[id].log; }

 private:
  struct Child {
    std::string name;
    ArgvFn argv;
    std::string log;
    pid_t pid = -1;
    int restarts = 0;
    Clock::time_point started;
    std::optional<Clock::time_point> restart_at;
    bool finished = false;
  };
  const Options o_;
  std::vector<Child> children_;
};

// "exit code 3" or "signal 9 (Killed)": a waitpid status in words.
std::string ExitText(int status);
// The last `lines` lines of a file, each indented by four spaces.
std::string TailLines(const std::string& path, int lines);

}  // namespace flywheel::rl
