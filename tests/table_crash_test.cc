// Crash safety of table commits (docs/format/table.md, "Commits"): a writer
// process is SIGKILLed at random instants while appending; after every kill
// the table must open at a version holding exactly the appends committed so
// far (never a partial or duplicated one), every retained version must read,
// and at the end vacuum must leave exactly the referenced files.
//
// The writer uses PosixOptions{.sync = false}. That does not weaken what is
// checked: SIGKILL ends the process, not the kernel, so every write() that
// returned is already in the page cache and visible to the parent; only a
// power loss or kernel crash could drop un-fsynced data, and this test
// simulates neither. What it does exercise is every instant at which the
// writer can die: mid data file, between data file and manifest, between the
// temp manifest and its link(), before unlinking the temp, before or during
// the `_latest` hint update.
//
// Seed: FLYWHEEL_CRASH_SEED=<n> in the environment replays one run.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "flywheel/format/column.h"
#include "flywheel/io/file_system.h"
#include "flywheel/table/table.h"
#include "temp_table_test.h"

namespace flywheel::table {
namespace {

using format::DataType;
using format::RecordBatch;
using format::Schema;
using format::TypeId;
using Clock = std::chrono::steady_clock;

constexpr int kKills = 100;                // >= 50 kills, each on a fresh child
constexpr int kMaxDelayUs = 30000;         // kill 0..30 ms after the fork
constexpr int kChildWaitMs = 20000;        // upper bound on any wait for a child

// Append k writes RowsOf(k) rows: id = k*1000 + j, k = k, tag = "<k>/<j>".
int64_t RowsOf(int64_t k) { return 1 + (k * 37) % 50; }  // 1..50, all of them

Schema TestSchema() { return *Schema::Parse("id:int64, k:int64, tag:string"); }

TableOptions Options() {
  TableOptions o;
  o.fs = io::PosixFileSystem(io::PosixOptions{.sync = false});
  o.shard.page_size = 1024;
  return o;
}

RecordBatch AppendBatch(int64_t k) {
  const int64_t n = RowsOf(k);
  std::vector<int64_t> ids(n), ks(n, k);
  std::vector<std::string> tags(n);
  for (int64_t j = 0; j < n; ++j) {
    ids[j] = k * 1000 + j;
    tags[j] = absl::StrCat(k, "/", j);
  }
  RecordBatch b;
  b.schema = TestSchema();
  b.num_rows = n;
  b.columns.push_back(format::MakeFixedColumn(DataType::Scalar(TypeId::kInt64), std::move(ids)));
  b.columns.push_back(format::MakeFixedColumn(DataType::Scalar(TypeId::kInt64), std::move(ks)));
  b.columns.push_back(format::MakeStringColumn(tags));
  return b;
}

int64_t RowsUpTo(int64_t n) {
  int64_t rows = 0;
  for (int64_t k = 1; k <= n; ++k) rows += RowsOf(k);
  return rows;
}

// OK iff `t` holds exactly appends 1..n, in order, each whole and once.
Status CheckHoldsAppends(const Table& t, int64_t n) {
  const std::string where = absl::StrCat("version ", t.version(), " (expected appends 1..", n, ")");
  if (t.num_rows() != RowsUpTo(n)) {
    return absl::InternalError(absl::StrCat(where, ": manifest has ", t.num_rows(), " rows, expected ",
                                            RowsUpTo(n)));
  }
  auto it = t.Scan(ScanOptions{{"id", "k", "tag"}, 0});
  if (!it.ok()) return Annotate(it.status(), where);
  int64_t k = 1, j = 0, rows = 0;
  while (true) {
    auto b = (*it)->Next();
    if (!b.ok()) return Annotate(b.status(), where);
    if (!b->has_value()) break;
    const format::RecordBatch& batch = **b;
    for (int64_t i = 0; i < batch.num_rows; ++i, ++rows) {
      if (k > n) return absl::InternalError(absl::StrCat(where, ": extra row at ", rows));
      const int64_t id = batch.columns[0].values.as<int64_t>()[i];
      const int64_t kk = batch.columns[1].values.as<int64_t>()[i];
      const std::string_view tag = batch.columns[2].GetBytes(i);
      if (id != k * 1000 + j || kk != k || tag != absl::StrCat(k, "/", j)) {
        return absl::InternalError(absl::StrCat(where, ": row ", rows, " is (", id, ", ", kk, ", ",
                                                AsAbsl(tag), "), expected (", k * 1000 + j, ", ", k,
                                                ", ", k, "/", j, ")"));
      }
      if (++j == RowsOf(k)) {
        ++k;
        j = 0;
      }
    }
  }
  if (k != n + 1 || j != 0) {
    return absl::InternalError(absl::StrCat(where, ": scan ended inside append ", k, " after ", rows, " rows"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- the writer

// One record per event, written with a single write() (< PIPE_BUF, so atomic:
// a killed child leaves whole records or none).
struct Ack {
  int64_t version;  // committed version, or -1 on error
  int64_t k;        // the append it holds
  char msg[240];    // the error, if any
};
static_assert(sizeof(Ack) <= PIPE_BUF);

void WriteAck(int fd, const Ack& a) {
  const ssize_t w = ::write(fd, &a, sizeof a);
  if (w != static_cast<ssize_t>(sizeof a)) _exit(4);  // the parent is gone
}

[[noreturn]] void FailChild(int fd, int64_t k, const Status& s) {
  Ack a{-1, k, {}};
  std::snprintf(a.msg, sizeof a.msg, "%s", s.ToString().c_str());
  WriteAck(fd, a);
  _exit(3);
}

// Runs in the forked child: appends k = latest version, k+1, ... (version v
// holds appends 1..v-1) until killed, acknowledging each commit.
[[noreturn]] void RunAppender(const std::string& uri, int fd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a dead test
  const auto give_up = Clock::now() + std::chrono::seconds(20);
  auto t = Table::Open(uri, {}, Options());
  if (!t.ok()) FailChild(fd, 0, t.status());
  while (Clock::now() < give_up) {
    const int64_t k = (*t)->version();
    Status s = (*t)->Append(AppendBatch(k));
    if (!s.ok()) FailChild(fd, k, s);
    WriteAck(fd, Ack{(*t)->version(), k, {}});
  }
  _exit(5);  // not killed within 20 s: the parent will flag the exit status
}

// Reads whole Acks from `fd` until `deadline` (or EOF when `until_eof`).
// Returns false on a read error or when EOF did not come by the deadline.
bool ReadAcks(int fd, Clock::time_point deadline, bool until_eof, std::string* buf,
              std::vector<Ack>* acks) {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left < 0) return !until_eof;
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    if (r == 0) continue;  // re-check the deadline
    char chunk[4096];
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;  // EOF: the child is gone
    buf->append(chunk, static_cast<size_t>(n));
    while (buf->size() >= sizeof(Ack)) {
      Ack a;
      std::memcpy(&a, buf->data(), sizeof a);
      buf->erase(0, sizeof a);
      acks->push_back(a);
    }
  }
}

// Waits for `pid` (through its pidfd) at most `ms`; SIGKILLs it on timeout.
// Returns the wait status, or -1 when it had to be killed for hanging.
int WaitChild(pid_t pid, int pidfd, int ms) {
  pollfd p{pidfd, POLLIN, 0};
  int r;
  do {
    r = ::poll(&p, 1, ms);
  } while (r < 0 && errno == EINTR);
  int status = 0;
  if (r <= 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    return -1;
  }
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return status;
}

// All regular files under `dir`, relative to it.
void ListTree(const std::string& dir, const std::string& rel, std::vector<std::string>* out) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    const std::string full = dir + "/" + name;
    if (::lstat(full.c_str(), &st) != 0) continue;
    const std::string r = rel.empty() ? name : rel + "/" + name;
    if (S_ISDIR(st.st_mode)) {
      ListTree(full, r, out);
    } else {
      out->push_back(r);
    }
  }
  ::closedir(d);
}

class TableCrashTest : public TempTableTest {};

TEST_F(TableCrashTest, KilledAppenderLeavesExactlyTheCommittedAppends) {
  uint64_t seed = std::random_device{}();
  if (const char* s = std::getenv("FLYWHEEL_CRASH_SEED")) seed = std::strtoull(s, nullptr, 10);
  std::printf("table crash test seed: %llu (replay with FLYWHEEL_CRASH_SEED=%llu)\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> delay_us(0, kMaxDelayUs);

  ASSERT_TRUE(Table::Create(uri_, TestSchema(), Options()).ok());
  int64_t n = 0;              // appends in the table as of the last check
  int64_t verified_upto = 1;  // versions 1..verified_upto were read and checked
  int kills_mid_run = 0, unacked_commits = 0, rounds_without_commit = 0;

  for (int round = 0; round < kKills; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    int fds[2];
    ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      RunAppender(uri_, fds[1]);
    }
    ::close(fds[1]);
    // If an ASSERT below stops the test early, the child must not outlive it.
    struct Reaper {
      pid_t pid;
      int fd;
      ~Reaper() {
        ::close(fd);
        if (pid > 0) {
          ::kill(pid, SIGKILL);
          ::waitpid(pid, nullptr, 0);
        }
      }
    } reaper{pid, fds[0]};
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    ASSERT_GE(pidfd, 0) << std::strerror(errno);

    // Collect acknowledgements until the random instant, then kill.
    std::string buf;
    std::vector<Ack> acks;
    const int delay = delay_us(rng);
    const bool read_ok = ReadAcks(fds[0], Clock::now() + std::chrono::microseconds(delay), false, &buf, &acks);
    ::kill(pid, SIGKILL);
    const bool drained = ReadAcks(fds[0], Clock::now() + std::chrono::milliseconds(kChildWaitMs), true, &buf, &acks);
    const int status = WaitChild(pid, pidfd, kChildWaitMs);
    reaper.pid = -1;  // reaped
    ::close(pidfd);
    ASSERT_TRUE(read_ok && drained) << "reading the child's pipe failed or never reached EOF";
    ASSERT_NE(status, -1) << "child did not exit within " << kChildWaitMs << " ms of SIGKILL";
    EXPECT_TRUE(buf.empty()) << "partial ack record";

    // The child must have died of our SIGKILL, with no error reported.
    for (const Ack& a : acks) {
      ASSERT_GE(a.version, 0) << "child failed at append " << a.k << ": " << a.msg;
    }
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "child exited on its own (status " << status << ")";

    // Acks are consecutive appends starting right after what the table held.
    int64_t last_acked = n;
    for (const Ack& a : acks) {
      ASSERT_EQ(a.k, last_acked + 1) << "acks out of sequence";
      ASSERT_EQ(a.version, a.k + 1) << "append " << a.k << " committed as version " << a.version;
      last_acked = a.k;
    }

    // Open succeeds and finds every committed append, whole and once. The
    // child may have died after publishing a manifest and before acking it.
    auto latest = Table::Open(uri_, {}, Options());
    ASSERT_TRUE(latest.ok()) << "delay " << delay << " us: " << latest.status();
    const int64_t now_n = (*latest)->version() - 1;
    ASSERT_TRUE(now_n == last_acked || now_n == last_acked + 1)
        << "latest version " << (*latest)->version() << " holds " << now_n << " appends; "
        << last_acked << " were acknowledged";
    Status content = CheckHoldsAppends(**latest, now_n);
    ASSERT_TRUE(content.ok()) << content;
    if (now_n == last_acked + 1) ++unacked_commits;
    if (now_n == n) ++rounds_without_commit;
    if (!acks.empty()) ++kills_mid_run;
    auto found = (*latest)->LatestVersion();
    ASSERT_TRUE(found.ok()) << found.status();
    EXPECT_EQ(*found, now_n + 1);

    // Every version committed since the last check opens and reads exactly
    // its prefix of appends. (Older ones were checked in earlier rounds and
    // all are checked again at the end.)
    for (int64_t v = verified_upto + 1; v <= now_n + 1; ++v) {
      auto h = (*latest)->Checkout(v);
      ASSERT_TRUE(h.ok()) << "version " << v << ": " << h.status();
      Status s = CheckHoldsAppends(**h, v - 1);
      ASSERT_TRUE(s.ok()) << s;
    }
    verified_upto = now_n + 1;
    n = now_n;

    // And all retained versions, old ones included, are still listed and
    // their manifests still decode to the right row counts.
    auto versions = (*latest)->Versions();
    ASSERT_TRUE(versions.ok()) << versions.status();
    ASSERT_EQ(static_cast<int64_t>(versions->size()), n + 1);
    for (int64_t v = 1; v <= n + 1; ++v) {
      ASSERT_EQ((*versions)[v - 1].version, v);
      ASSERT_EQ((*versions)[v - 1].num_rows, RowsUpTo(v - 1)) << "version " << v;
    }
  }
  const auto rounds_end = Clock::now();
  std::printf("%d kills: %lld appends committed, %d kills while appending, %d commits published "
              "but not acknowledged, %d rounds without a commit\n",
              kKills, static_cast<long long>(n), kills_mid_run, unacked_commits, rounds_without_commit);
  EXPECT_GT(n, 0) << "no child ever committed; the kills test nothing";

  // Every retained version is listed and opens on its own (no shared cache).
  auto t = Table::Open(uri_, {}, Options());
  ASSERT_TRUE(t.ok()) << t.status();
  auto versions = (*t)->Versions();
  ASSERT_TRUE(versions.ok()) << versions.status();
  ASSERT_EQ(static_cast<int64_t>(versions->size()), n + 1);
  std::set<std::string> referenced;
  int64_t rows = 0;
  for (int64_t v = 1; v <= n + 1; ++v) {
    const VersionInfo& info = (*versions)[v - 1];
    EXPECT_EQ(info.version, v);
    EXPECT_EQ(info.operation.type, v == 1 ? "create" : "append");
    if (v > 1) rows += RowsOf(v - 1);
    EXPECT_EQ(info.num_rows, rows);
    auto h = Table::Open(uri_, OpenOptions{.version = v}, Options());
    ASSERT_TRUE(h.ok()) << h.status();
    for (const Fragment& f : (*h)->manifest().fragments) {
      for (const DataFile& df : f.files) referenced.insert(df.path);
      if (!f.deletion.path.empty()) referenced.insert(f.deletion.path);
    }
    EXPECT_EQ((*h)->num_rows(), rows);
    if (v <= 2 || v == n + 1 || v % 16 == 0) {  // each was fully read in its round, too
      Status s = CheckHoldsAppends(**h, v - 1);
      ASSERT_TRUE(s.ok()) << s;
    }
  }

  // What the killed writers left behind: partial data files, temp files.
  std::vector<std::string> before;
  ListTree(uri_, "", &before);
  int temps_before = 0, orphans_before = 0;
  for (const std::string& f : before) {
    if (f.substr(f.rfind('/') + 1).rfind(".tmp.", 0) == 0) ++temps_before;
    else if (f.rfind("data/", 0) == 0 && !referenced.count(f)) ++orphans_before;
  }
  std::printf("before vacuum: %d temp files, %d unreferenced data files\n", temps_before, orphans_before);

  // Vacuum with no grace period removes everything the killed writers left.
  auto vac = (*t)->Vacuum(VacuumOptions{.grace_period_ms = 0});
  ASSERT_TRUE(vac.ok()) << vac.status();
  for (const std::string& d : vac->deleted) {
    EXPECT_EQ(referenced.count(d), 0u) << "vacuum deleted referenced file " << d;
  }
  std::vector<std::string> files;
  ListTree(uri_, "", &files);
  std::set<std::string> in_data_dirs;
  for (const std::string& f : files) {
    const std::string base = f.substr(f.rfind('/') + 1);
    EXPECT_NE(base.rfind(".tmp.", 0), 0u) << "temp file left after vacuum: " << f;
    if (f.rfind("data/", 0) == 0 || f.rfind("deletions/", 0) == 0) in_data_dirs.insert(f);
  }
  EXPECT_EQ(in_data_dirs, referenced) << "data/ and deletions/ must hold exactly the referenced files";
  std::printf("vacuum deleted %zu files (%llu bytes); final checks took %lld ms\n",
              vac->deleted.size(), static_cast<unsigned long long>(vac->bytes_freed),
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         Clock::now() - rounds_end).count()));

  // And the table still reads correctly, from a fresh handle.
  auto after = Table::Open(uri_, {}, Options());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ((*after)->version(), n + 1);
  Status s = CheckHoldsAppends(**after, n);
  EXPECT_TRUE(s.ok()) << s;
  auto first = Table::Open(uri_, OpenOptions{.version = 2}, Options());
  if (n >= 1) {
    ASSERT_TRUE(first.ok()) << first.status();
    Status s2 = CheckHoldsAppends(**first, 1);
    EXPECT_TRUE(s2.ok()) << s2;
  }
}

}  // namespace
}  // namespace flywheel::table
