#include "flywheel/base/waits.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace flywheel::obs {
namespace {

struct Wait {
  const char* kind;
  std::string what;
  std::string why;
  int tid;
  std::chrono::steady_clock::time_point start;
};

struct Registry {
  absl::Mutex mu;
  std::map<int64_t, Wait> waits ABSL_GUARDED_BY(mu);  // by id: ids grow, so oldest first
  int64_t next_id ABSL_GUARDED_BY(mu) = 1;
};

Registry& Reg() {
  static Registry* r = new Registry();
  return *r;
}

std::atomic<int64_t> g_progress{0};
std::atomic<int64_t> g_waits{0};
int g_pipe[2] = {-1, -1};

void OnSignal(int) {
  const char c = 'd';
  if (g_pipe[1] >= 0) (void)!::write(g_pipe[1], &c, 1);
}

void WriteDump(const std::string& why) {
  std::string text = absl::StrCat(why, "\n", DumpWaits());
  (void)!::write(STDERR_FILENO, text.data(), text.size());
  if (const char* path = std::getenv("FLYWHEEL_HANG_DUMP"); path != nullptr && *path != '\0') {
    if (std::FILE* f = std::fopen(path, "a")) {
      std::fwrite(text.data(), 1, text.size(), f);
      std::fclose(f);
    }
  }
}

}  // namespace

BlockedWait::BlockedWait(const char* kind, std::string what, std::string why) {
  Registry& r = Reg();
  absl::MutexLock lock(&r.mu);
  id_ = r.next_id++;
  r.waits.emplace(id_, Wait{kind, std::move(what), std::move(why), static_cast<int>(::syscall(SYS_gettid)),
                            std::chrono::steady_clock::now()});
  g_waits.fetch_add(1, std::memory_order_relaxed);
}

BlockedWait::~BlockedWait() {
  Registry& r = Reg();
  absl::MutexLock lock(&r.mu);
  r.waits.erase(id_);
  g_waits.fetch_sub(1, std::memory_order_relaxed);
}

std::string DumpWaits() {
  Registry& r = Reg();
  absl::MutexLock lock(&r.mu);
  const auto now = std::chrono::steady_clock::now();
  std::string out = absl::StrCat("flywheel: ", r.waits.size(), " wait(s) in progress (pid ", ::getpid(),
                                 ", progress count ", g_progress.load(), ")\n");
  for (const auto& [id, w] : r.waits) {
    const double secs = std::chrono::duration<double>(now - w.start).count();
    char age[32];
    std::snprintf(age, sizeof(age), "%.1f s", secs);
    absl::StrAppend(&out, "[", w.kind, "] ", w.what, " (thread ", w.tid, ", waiting ", age, ")\n");
    // Indent the explanation under its wait.
    std::string why = w.why;
    size_t pos = 0;
    while (pos < why.size()) {
      size_t nl = why.find('\n', pos);
      if (nl == std::string::npos) nl = why.size();
      absl::StrAppend(&out, "    ", why.substr(pos, nl - pos), "\n");
      pos = nl + 1;
    }
  }
  return out;
}

int64_t WaitsInProgress() { return g_waits.load(std::memory_order_relaxed); }
void NoteProgress() { g_progress.fetch_add(1, std::memory_order_relaxed); }
int64_t ProgressCount() { return g_progress.load(std::memory_order_relaxed); }

void InstallHangDiagnostics(const HangDiagnosticsOptions& options) {
  static std::once_flag once;
  std::call_once(once, [options] {
    double watchdog = options.watchdog_seconds;
    if (watchdog < 0) {
      const char* env = std::getenv("FLYWHEEL_WATCHDOG_SECONDS");
      watchdog = env != nullptr ? std::atof(env) : 300;
    }
    if (::pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, nullptr);
    // A detached helper: it lives as long as the process.
    std::thread([watchdog] {
      // Never take a process's signals (a CLI waiting for SIGTERM with
      // sigtimedwait expects them to stay pending for its main thread).
      sigset_t all;
      sigfillset(&all);
      pthread_sigmask(SIG_BLOCK, &all, nullptr);
      int64_t last_progress = g_progress.load();
      auto last_change = std::chrono::steady_clock::now();
      bool reported = false;
      while (true) {
        pollfd p{g_pipe[0], POLLIN, 0};
        const int ready = ::poll(&p, 1, 500);
        if (ready > 0) {
          char buf[64];
          while (::read(g_pipe[0], buf, sizeof(buf)) > 0) {
          }
          WriteDump("flywheel: SIGUSR1: who waits on what");
        }
        const int64_t now_progress = g_progress.load();
        const auto now = std::chrono::steady_clock::now();
        if (now_progress != last_progress || g_waits.load() == 0) {
          last_progress = now_progress;
          last_change = now;
          reported = false;
        } else if (watchdog > 0 && !reported &&
                   std::chrono::duration<double>(now - last_change).count() >= watchdog) {
          reported = true;
          WriteDump(absl::StrCat("flywheel: watchdog: no progress for ", watchdog, " s while calls wait"));
        }
      }
    }).detach();
  });
}

}  // namespace flywheel::obs
