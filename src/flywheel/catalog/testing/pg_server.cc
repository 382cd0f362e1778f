#include <atomic>
#include "flywheel/catalog/testing/pg_server.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "flywheel/catalog/sql.h"

namespace flywheel::catalog::testing {

namespace {

namespace fs = std::filesystem;

// initdb and pg_ctl (which waits itself, -t 60) get this long before they
// are killed.
constexpr auto kCommandTimeout = std::chrono::seconds(120);
// How much of a log or command output an error quotes.
constexpr size_t kTailBytes = 4000;

std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

std::string ReadTail(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() > kTailBytes) text = "..." + text.substr(text.size() - kTailBytes);
  return text;
}

// The PostgreSQL bin directory: $FLYWHEEL_PG_BIN, else the highest
// /usr/lib/postgresql/<major>/bin that has initdb.
Result<std::string> FindBinDir() {
  if (const char* env = std::getenv("FLYWHEEL_PG_BIN"); env != nullptr && env[0] != '\0') {
    if (access((std::string(env) + "/initdb").c_str(), X_OK) != 0) {
      return absl::NotFoundError(
          absl::StrCat("FLYWHEEL_PG_BIN=", env, " has no executable initdb"));
    }
    return std::string(env);
  }
  const fs::path root = "/usr/lib/postgresql";
  std::error_code ec;
  long best_version = -1;
  std::string best;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    char* end = nullptr;
    const long version = std::strtol(name.c_str(), &end, 10);
    if (end == name.c_str() || access((entry.path() / "bin" / "initdb").c_str(), X_OK) != 0) {
      continue;
    }
    if (version > best_version) {
      best_version = version;
      best = (entry.path() / "bin").string();
    }
  }
  if (best.empty()) {
    return absl::NotFoundError(
        "no PostgreSQL server binaries: no /usr/lib/postgresql/<version>/bin/initdb "
        "(install the postgresql package) and FLYWHEEL_PG_BIN is not set");
  }
  return best;
}

// Runs `argv` (argv[0] a path) in `cwd` as `user` ("" = this process's user),
// its stdout and stderr going to `output_path`. Returns the exit status.
Result<int> Run(const std::vector<std::string>& argv, const std::string& user,
                const std::string& cwd, const std::string& output_path) {
  uid_t uid = 0;
  gid_t gid = 0;
  if (!user.empty()) {
    const passwd* pw = getpwnam(user.c_str());
    if (pw == nullptr) return absl::NotFoundError(absl::StrCat("no user account ", user));
    uid = pw->pw_uid;
    gid = pw->pw_gid;
  }
  const int out = open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    return absl::InternalError(absl::StrCat("creating ", output_path, ": ", ErrnoText(errno)));
  }
  // Everything the child needs is prepared here: after fork it may only make
  // async-signal-safe calls.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(out);
    return absl::InternalError(absl::StrCat("fork: ", ErrnoText(err)));
  }
  if (pid == 0) {
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) _exit(126);
    if (!user.empty() && (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0)) {
      _exit(126);
    }
    if (chdir(cwd.c_str()) != 0) _exit(126);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out);
  const auto deadline = std::chrono::steady_clock::now() + kCommandTimeout;
  for (;;) {
    int wstatus = 0;
    const pid_t r = waitpid(pid, &wstatus, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
      return 128 + WTERMSIG(wstatus);
    }
    if (r < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("waitpid: ", ErrnoText(errno)));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &wstatus, 0);
      return absl::DeadlineExceededError(absl::StrCat(
          absl::StrJoin(argv, " "), " did not finish in ", kCommandTimeout.count(), " s"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Runs a step of the server's life; a failure names it and quotes its
// output and, if given, the tail of the server log.
Status RunStep(const std::vector<std::string>& argv, const std::string& user,
               const std::string& dir, const std::string& log_path = "") {
  const std::string output_path = dir + "/command.out";
  Result<int> rc = Run(argv, user, dir, output_path);
  const std::string step = fs::path(argv[0]).filename().string();
  if (rc.ok() && *rc == 0) return absl::OkStatus();
  std::string message = rc.ok() ? absl::StrCat(step, " exited with status ", *rc)
                                : absl::StrCat(step, ": ", rc.status().message());
  absl::StrAppend(&message, "\ncommand: ", absl::StrJoin(argv, " "), "\noutput:\n",
                  ReadTail(output_path));
  if (!log_path.empty()) absl::StrAppend(&message, "\nserver log:\n", ReadTail(log_path));
  return absl::InternalError(message);
}

// The watchdog of each running server, by directory: the write end of the
// pipe it waits on and its pid. (PgServer's header has no room for them.)
struct Watchdog {
  int fd;
  pid_t pid;
};
std::mutex watchdogs_mu;
std::map<std::string, Watchdog>& Watchdogs() {
  static auto* const watchdogs = new std::map<std::string, Watchdog>;
  return *watchdogs;
}

// Forks a process that removes the server if this process ends without
// running ~PgServer (a crash, a kill, exit() with the server leaked): it
// waits for EOF on a pipe only this process holds the write end of, then
// stops the server and deletes `dir`. ~PgServer, having done that itself,
// writes a byte instead, and the watchdog exits without touching anything.
// The watchdog sits in its own process group with interrupts ignored, so a
// Ctrl-C or a test runner's kill of the group cannot stop it first.
Status StartWatchdog(const std::string& bin, const std::string& user, const std::string& dir) {
  uid_t uid = 0;
  gid_t gid = 0;
  if (!user.empty()) {
    const passwd* pw = getpwnam(user.c_str());
    if (pw == nullptr) return absl::NotFoundError(absl::StrCat("no user account ", user));
    uid = pw->pw_uid;
    gid = pw->pw_gid;
  }
  // Everything the child needs is prepared here (see Run).
  const std::string pid_file = dir + "/data/postmaster.pid";
  const std::vector<std::string> stop_argv = {
      bin + "/pg_ctl", "stop", "-w", "-t", "60", "-m", "immediate", "-D", dir + "/data"};
  const std::vector<std::string> rm_argv = {"/bin/rm", "-rf", "--", dir};
  std::vector<char*> stop_args, rm_args;
  for (const std::string& a : stop_argv) stop_args.push_back(const_cast<char*>(a.c_str()));
  stop_args.push_back(nullptr);
  for (const std::string& a : rm_argv) rm_args.push_back(const_cast<char*>(a.c_str()));
  rm_args.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", ErrnoText(errno)));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("fork: ", ErrnoText(err)));
  }
  if (pid == 0) {
    setpgid(0, 0);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) sigaction(sig, &ignore, nullptr);
    // The pipe becomes stdin; nothing else of the parent's stays open (its
    // stdout may be a test runner's pipe, waiting for EOF).
    const int devnull = open("/dev/null", O_RDWR);
    if (dup2(fds[0], 0) < 0 || devnull < 0 || dup2(devnull, 1) < 0 || dup2(devnull, 2) < 0) {
      _exit(1);
    }
    close_range(3, ~0U, 0);
    char byte;
    ssize_t n;
    while ((n = read(0, &byte, 1)) < 0 && errno == EINTR) {
    }
    if (n == 1) _exit(0);  // ~PgServer cleaned up.
    if (access(pid_file.c_str(), F_OK) == 0) {
      const pid_t stop = fork();
      if (stop == 0) {
        if (!user.empty() && (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0)) {
          _exit(126);
        }
        if (chdir("/") != 0) _exit(126);
        execv(stop_args[0], stop_args.data());
        _exit(127);
      }
      if (stop > 0) waitpid(stop, nullptr, 0);
    }
    const pid_t rm = fork();
    if (rm == 0) {
      execv(rm_args[0], rm_args.data());
      _exit(127);
    }
    if (rm > 0) waitpid(rm, nullptr, 0);
    _exit(0);
  }
  close(fds[0]);
  std::lock_guard<std::mutex> lock(watchdogs_mu);
  Watchdogs()[dir] = Watchdog{fds[1], pid};
  return absl::OkStatus();
}

// Tells the watchdog of `dir` that the server is gone and reaps it.
void StopWatchdog(const std::string& dir) {
  Watchdog w;
  {
    std::lock_guard<std::mutex> lock(watchdogs_mu);
    auto it = Watchdogs().find(dir);
    if (it == Watchdogs().end()) return;
    w = it->second;
    Watchdogs().erase(it);
  }
  const char done = 1;
  while (write(w.fd, &done, 1) < 0 && errno == EINTR) {
  }
  close(w.fd);
  while (waitpid(w.pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

bool ValidDatabaseName(const std::string& db) {
  return !db.empty() && db.size() <= 63 && std::all_of(db.begin(), db.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

}  // namespace

Result<std::unique_ptr<PgServer>> PgServer::Start() {
  std::unique_ptr<PgServer> server(new PgServer());
  FW_ASSIGN_OR_RETURN(server->bin_, FindBinDir());

  char dir_template[] = "/tmp/flywheel-pg-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    return absl::InternalError(
        absl::StrCat("creating a directory like /tmp/flywheel-pg-XXXXXX: ", ErrnoText(errno)));
  }
  // From here on the destructor removes the directory.
  server->dir_ = dir_template;
  const std::string& dir = server->dir_;

  // PostgreSQL will not run as root; hand the directory to the account the
  // Debian package creates and run the server as it.
  if (geteuid() == 0) {
    const passwd* pw = getpwnam("postgres");
    if (pw == nullptr) {
      return absl::FailedPreconditionError(
          "running as root, and there is no `postgres` account to run the server as");
    }
    if (chown(dir.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
      return absl::InternalError(absl::StrCat("chown ", dir, " to postgres: ", ErrnoText(errno)));
    }
    server->user_ = "postgres";
  }
  FW_RETURN_IF_ERROR_CTX(StartWatchdog(server->bin_, server->user_, dir),
                         "starting a test PostgreSQL server in ", dir);

  const std::string data = dir + "/data";
  const std::string log = dir + "/log";
  // --locale=C: no dependence on the locales installed, and text sorts by
  // bytes as in SQLite.
  FW_RETURN_IF_ERROR_CTX(RunStep({server->bin_ + "/initdb", "-D", data, "-A", "trust", "-U",
                                  "postgres", "--no-sync", "-E", "UTF8", "--locale=C"},
                                 server->user_, dir),
                         "starting a test PostgreSQL server in ", dir);
  // The socket lives in our own directory, so the standard port cannot
  // collide with another server; listen_addresses='' turns TCP off.
  const std::string options = absl::StrCat("-c listen_addresses='' -k ", dir, " -p ", server->port_,
                                           " -c fsync=off -c max_connections=50");
  FW_RETURN_IF_ERROR_CTX(RunStep({server->bin_ + "/pg_ctl", "-w", "-t", "60", "-D", data, "-l", log,
                                  "-o", options, "start"},
                                 server->user_, dir, log),
                         "starting a test PostgreSQL server in ", dir);
  return server;
}

PgServer::~PgServer() {
  if (dir_.empty()) return;
  const std::string data = dir_ + "/data";
  if (access((data + "/postmaster.pid").c_str(), F_OK) == 0) {
    // An immediate stop: nothing in a throwaway cluster needs a checkpoint.
    (void)RunStep({bin_ + "/pg_ctl", "stop", "-w", "-t", "60", "-m", "immediate", "-D", data},
                  user_, dir_);
  }
  std::error_code ec;
  fs::remove_all(dir_, ec);
  StopWatchdog(dir_);
}

Result<std::string> PgServer::CreateDatabase(const std::string& db) {
  if (!ValidDatabaseName(db)) {
    return absl::InvalidArgumentError(
        absl::StrCat("database name \"", db, "\" is not 1 to 63 of [a-z0-9_]"));
  }
  const std::string prefix = absl::StrCat("host=", dir_, " port=", port_, " dbname=");
  const std::string suffix = " user=postgres";
  FW_ASSIGN_OR_RETURN(std::unique_ptr<SqlDb> admin, OpenPostgres(prefix + "postgres" + suffix));
  FW_ASSIGN_OR_RETURN(SqlRows existing,
                      admin->Query("SELECT 1 FROM pg_database WHERE datname = ?", {db}));
  if (existing.empty()) {
    // CREATE DATABASE takes no parameters; the name was checked above.
    FW_RETURN_IF_ERROR_CTX(admin->ExecScript(absl::StrCat("CREATE DATABASE \"", db, "\"")),
                           "creating database ", db);
  }
  return prefix + db + suffix;
}

PgServer* SharedPgServer(std::string* error) {
  static std::string failure;
  static std::unique_ptr<PgServer> server = []() -> std::unique_ptr<PgServer> {
    auto s = PgServer::Start();
    if (!s.ok()) {
      failure = std::string(s.status().message());
      return nullptr;
    }
    return std::move(*s);
  }();
  if (error != nullptr) *error = failure;
  return server.get();
}

Result<std::string> CatalogSpecForTest(const std::string& backend, const std::string& dir,
                                       const std::string& db_prefix) {
  if (backend == "sqlite") return dir + "/root";
  if (backend != "postgresql") return absl::InvalidArgumentError("backend must be sqlite or postgresql: " + backend);
  std::string error;
  PgServer* server = SharedPgServer(&error);
  if (server == nullptr) return absl::UnavailableError("could not start PostgreSQL: " + error);
  static std::atomic<int> counter{0};
  FW_ASSIGN_OR_RETURN(std::string conn,
                      server->CreateDatabase(db_prefix + "_" + std::to_string(::getpid()) + "_" +
                                             std::to_string(counter++)));
  return "pg:" + conn;
}

std::string MakeTempDir(const std::string& tag) {
  std::string tmpl = (std::filesystem::temp_directory_path() / ("flywheel-" + tag + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) return std::string();
  return tmpl;
}

}  // namespace flywheel::catalog::testing
