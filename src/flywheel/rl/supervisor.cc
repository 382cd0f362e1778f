#include "flywheel/rl/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace flywheel::rl {

namespace {

// fork + exec with stdout and stderr appended to `log` and every signal
// unblocked in the child (the launcher blocks the ones it waits for).
Result<pid_t> Spawn(const std::vector<std::string>& argv, const std::string& log) {
  if (argv.empty()) return absl::InvalidArgumentError("supervisor: a child needs a command");
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open ", log, ": ", std::strerror(errno)));
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(e)));
  }
  if (pid == 0) {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_UNBLOCK, &all, nullptr);
    dup2(fd, 1);
    dup2(fd, 2);
    execvp(cargv[0], cargv.data());
    std::fprintf(stderr, "flywheel run: cannot start %s: %s\n", cargv[0], std::strerror(errno));
    _exit(127);
  }
  ::close(fd);
  return pid;
}

}  // namespace

bool Supervisor::Exit::clean() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

Supervisor::~Supervisor() { StopAll(); }

int Supervisor::Add(std::string name, ArgvFn argv, std::string log) {
  Child c;
  c.name = std::move(name);
  c.argv = std::move(argv);
  c.log = std::move(log);
  children_.push_back(std::move(c));
  return static_cast<int>(children_.size()) - 1;
}

Status Supervisor::Start(int id) {
  Child& c = children_[id];
  FW_ASSIGN_OR_RETURN(c.pid, Spawn(c.argv(c.restarts), c.log));
  c.started = Clock::now();
  c.restart_at.reset();
  c.finished = false;
  return Status();
}

std::vector<Supervisor::Exit> Supervisor::Reap() {
  std::vector<Exit> out;
  for (size_t i = 0; i < children_.size(); ++i) {
    Child& c = children_[i];
    if (c.pid <= 0) continue;
    int status = 0;
    const pid_t r = waitpid(c.pid, &status, WNOHANG);
    if (r == c.pid) {
      c.pid = -1;
      out.push_back({static_cast<int>(i), status});
    } else if (r < 0 && errno == ECHILD) {
      c.pid = -1;  // reaped elsewhere: its status is lost
      out.push_back({static_cast<int>(i), 0});
    }
  }
  return out;
}

std::chrono::milliseconds Supervisor::Backoff(const Options& o, int restarts, Clock::duration ran) {
  if (ran >= o.reset_after) return o.backoff_base;
  const int n = std::clamp(restarts, 0, 20);
  const auto wait = o.backoff_base * (int64_t{1} << n);
  return std::min<std::chrono::milliseconds>(wait, o.backoff_max);
}

std::chrono::milliseconds Supervisor::ScheduleRestart(int id) {
  Child& c = children_[id];
  const auto wait = Backoff(o_, c.restarts, Clock::now() - c.started);
  ++c.restarts;
  c.restart_at = Clock::now() + wait;
  return wait;
}

void Supervisor::MarkFinished(int id) {
  children_[id].finished = true;
  children_[id].restart_at.reset();
}

int Supervisor::RestartDue(const std::function<void(int, const Status&)>& on_error) {
  int started = 0;
  for (size_t i = 0; i < children_.size(); ++i) {
    Child& c = children_[i];
    if (c.pid > 0 || c.finished || !c.restart_at || Clock::now() < *c.restart_at) continue;
    if (Status s = Start(static_cast<int>(i)); !s.ok()) {
      if (on_error) on_error(static_cast<int>(i), s);
      c.restart_at = Clock::now() + std::chrono::seconds(5);
    } else {
      ++started;
    }
  }
  return started;
}

void Supervisor::StopAll() {
  for (Child& c : children_) {
    if (c.pid > 0) kill(c.pid, SIGTERM);
  }
  const Clock::time_point deadline = Clock::now() + o_.stop_grace;
  for (Child& c : children_) {
    while (c.pid > 0) {
      int status = 0;
      const pid_t r = waitpid(c.pid, &status, WNOHANG);
      if (r == c.pid || r < 0) {
        c.pid = -1;
      } else if (Clock::now() >= deadline) {
        kill(c.pid, SIGKILL);
        waitpid(c.pid, &status, 0);
        c.pid = -1;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    c.finished = true;
    c.restart_at.reset();
  }
}

std::string ExitText(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  return "unknown status";
}

std::string TailLines(const std::string& path, int lines) {
  std::ifstream f(path);
  std::vector<std::string> all;
  for (std::string l; std::getline(f, l);) all.push_back(l);
  std::string out;
  const size_t n = static_cast<size_t>(std::max(lines, 0));
  for (size_t i = all.size() > n ? all.size() - n : 0; i < all.size(); ++i) absl::StrAppend(&out, "    ", all[i], "\n");
  return out;
}

}  // namespace flywheel::rl
