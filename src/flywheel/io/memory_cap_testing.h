// Tests: runs a function in a child process whose address space is capped,
// so a reader that allocates on a header's word dies (or fails) there instead
// of passing by luck on a machine with memory to spare (the hostile-input
// issue's crafted-input suite).
#pragma once

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>

namespace flywheel::io {

// Runs `fn` in a forked child limited to `cap_mb` MiB of address space and
// returns what it returned, or "killed by signal N" / "exited N" when it did
// not return. Sanitizer builds reserve terabytes of address space up front,
// so there the cap is skipped (the function still runs in the child).
inline std::string UnderMemoryCap(int cap_mb, const std::function<std::string()>& fn) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    ::close(fds[0]);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    const rlim_t bytes = static_cast<rlim_t>(cap_mb) << 20;
    rlimit lim{bytes, bytes};
    ::setrlimit(RLIMIT_AS, &lim);
#endif
    const std::string out = fn();
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0) return "exited " + std::to_string(WEXITSTATUS(status));
  return out;
}

}  // namespace flywheel::io
