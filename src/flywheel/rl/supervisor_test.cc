#include "flywheel/rl/supervisor.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"

namespace flywheel::rl {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

std::string TempLog(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("flywheel_supervisor_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto p = dir / name;
  std::filesystem::remove(p);
  return p.string();
}

std::string Read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

Supervisor::ArgvFn Sh(const std::string& script) {
  return [script](int restarts) {
    return std::vector<std::string>{"/bin/sh", "-c", script, "sh", std::to_string(restarts)};
  };
}

// Reaps until `n` exits were seen (or 10 s passed).
std::vector<Supervisor::Exit> ReapN(Supervisor& s, size_t n) {
  std::vector<Supervisor::Exit> all;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (all.size() < n && Clock::now() < deadline) {
    for (const auto& e : s.Reap()) all.push_back(e);
    std::this_thread::sleep_for(milliseconds(5));
  }
  return all;
}

TEST(SupervisorTest, BackoffDoublesUpToTheCapAndResetsAfterALongRun) {
  Supervisor::Options o;
  const auto short_run = std::chrono::seconds(1);
  EXPECT_EQ(Supervisor::Backoff(o, 0, short_run), milliseconds(1000));
  EXPECT_EQ(Supervisor::Backoff(o, 1, short_run), milliseconds(2000));
  EXPECT_EQ(Supervisor::Backoff(o, 3, short_run), milliseconds(8000));
  EXPECT_EQ(Supervisor::Backoff(o, 4, short_run), milliseconds(16000));
  EXPECT_EQ(Supervisor::Backoff(o, 5, short_run), milliseconds(30000));
  EXPECT_EQ(Supervisor::Backoff(o, 50, short_run), milliseconds(30000));
  EXPECT_EQ(Supervisor::Backoff(o, 7, std::chrono::seconds(61)), milliseconds(1000));
}

TEST(SupervisorTest, ReapsExitsWithTheirStatusAndAppendsOutputToTheLog) {
  Supervisor s;
  const std::string log = TempLog("exit.log");
  const int id = s.Add("child", Sh("echo out; echo err >&2; exit 3"), log);
  ASSERT_TRUE(s.Start(id).ok());
  EXPECT_GT(s.pid(id), 0);
  auto exits = ReapN(s, 1);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].id, id);
  EXPECT_FALSE(exits[0].clean());
  EXPECT_EQ(ExitText(exits[0].status), "exit code 3");
  EXPECT_EQ(s.pid(id), -1);
  EXPECT_EQ(Read(log), "out\nerr\n");
  EXPECT_EQ(TailLines(log, 1), "    err\n");
  EXPECT_TRUE(s.Reap().empty());  // reported once
}

TEST(SupervisorTest, RestartsAfterTheBackoffWithTheRestartCount) {
  Supervisor::Options o;
  o.backoff_base = milliseconds(20);
  Supervisor s(o);
  const std::string log = TempLog("restart.log");
  // Prints its restart count; fails twice, then succeeds.
  const int id = s.Add("flaky", Sh("echo start $1; [ $1 -ge 2 ]"), log);
  ASSERT_TRUE(s.Start(id).ok());
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto exits = ReapN(s, 1);
    ASSERT_EQ(exits.size(), 1u);
    ASSERT_FALSE(exits[0].clean());
    EXPECT_EQ(s.ScheduleRestart(id), milliseconds(20 << attempt));
    EXPECT_TRUE(s.restart_scheduled(id));
    EXPECT_EQ(s.RestartDue(), 0);  // not yet
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (s.RestartDue() == 0 && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(2));
    EXPECT_GT(s.pid(id), 0);
  }
  auto exits = ReapN(s, 1);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_TRUE(exits[0].clean());
  EXPECT_EQ(s.restarts(id), 2);
  EXPECT_EQ(Read(log), "start 0\nstart 1\nstart 2\n");
}

TEST(SupervisorTest, AFinishedChildIsNotRestartedAndAFailedStartIsReported) {
  Supervisor::Options o;
  o.backoff_base = milliseconds(1);
  Supervisor s(o);
  const int id = s.Add("done", Sh("exit 0"), TempLog("done.log"));
  ASSERT_TRUE(s.Start(id).ok());
  ASSERT_EQ(ReapN(s, 1).size(), 1u);
  s.ScheduleRestart(id);
  s.MarkFinished(id);
  std::this_thread::sleep_for(milliseconds(5));
  EXPECT_EQ(s.RestartDue(), 0);
  EXPECT_EQ(s.pid(id), -1);

  const int bad = s.Add("no log", Sh("exit 0"), "/nonexistent-dir/x.log");
  Status st = s.Start(bad);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("cannot open /nonexistent-dir/x.log"), std::string::npos) << st;
  s.ScheduleRestart(bad);
  std::this_thread::sleep_for(milliseconds(5));
  int reported = -1;
  EXPECT_EQ(s.RestartDue([&](int i, const Status&) { reported = i; }), 0);
  EXPECT_EQ(reported, bad);
}

TEST(SupervisorTest, StopAllSendsSigtermThenSigkillAfterTheGrace) {
  Supervisor::Options o;
  o.stop_grace = milliseconds(300);
  Supervisor s(o);
  const std::string polite_log = TempLog("polite.log");
  const int polite = s.Add("polite", Sh("trap 'echo term; exit 0' TERM; while :; do sleep 0.05; done"), polite_log);
  const int stubborn = s.Add("stubborn", Sh("trap '' TERM; echo ready; while :; do sleep 0.05; done"),
                             TempLog("stubborn.log"));
  ASSERT_TRUE(s.Start(polite).ok());
  ASSERT_TRUE(s.Start(stubborn).ok());
  std::this_thread::sleep_for(milliseconds(200));  // both traps installed
  const auto t0 = Clock::now();
  s.StopAll();
  const auto took = Clock::now() - t0;
  EXPECT_EQ(s.pid(polite), -1);
  EXPECT_EQ(s.pid(stubborn), -1);
  EXPECT_TRUE(s.finished(polite) && s.finished(stubborn));
  EXPECT_GE(took, milliseconds(300));  // waited the grace for the stubborn one...
  EXPECT_LT(took, std::chrono::seconds(5));  // ...then killed it
  EXPECT_NE(Read(polite_log).find("term"), std::string::npos);
}

TEST(SupervisorTest, ReapLeavesOtherChildrenOfTheProcessAlone) {
  Supervisor s;
  const pid_t other = fork();
  if (other == 0) _exit(7);
  const int id = s.Add("mine", Sh("exit 0"), TempLog("mine.log"));
  ASSERT_TRUE(s.Start(id).ok());
  auto exits = ReapN(s, 1);
  ASSERT_EQ(exits.size(), 1u);
  int status = 0;
  ASSERT_EQ(waitpid(other, &status, 0), other);  // still ours to reap
  EXPECT_EQ(ExitText(status), "exit code 7");
}

}  // namespace
}  // namespace flywheel::rl
