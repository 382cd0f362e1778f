// Hang diagnosis on a deliberately blocked replay sampler: SIGUSR1 and the
// watchdog both write who waits on what, with the rate limiter's words.
#include "flywheel/base/waits.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "flywheel/replay/table.h"

namespace flywheel::obs {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Polls `path` until it holds `needle` (5 s at most).
bool Eventually(const std::string& path, const std::string& needle, int times = 1) {
  for (int i = 0; i < 500; ++i) {
    const std::string text = ReadAll(path);
    size_t n = 0, pos = 0;
    while ((pos = text.find(needle, pos)) != std::string::npos) {
      ++n;
      ++pos;
    }
    if (static_cast<int>(n) >= times) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(HangDiagnosisTest, ABlockedSamplerIsDumpedOnSigusr1AndByTheWatchdog) {
  const std::string dump = std::string(::testing::TempDir()) + "/hang_dump.txt";
  std::remove(dump.c_str());
  ::setenv("FLYWHEEL_HANG_DUMP", dump.c_str(), 1);
  InstallHangDiagnostics(HangDiagnosticsOptions{.watchdog_seconds = 1.0});

  replay::ReplayTableOptions o;
  o.name = "blocked_table";
  o.rate_limiter = replay::RateLimiterOptions::MinSize(3);
  auto table = replay::ReplayTable::Create(std::move(o));
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(WaitsInProgress(), 0);
  std::thread sampler([&] { (void)(*table)->Sample(absl::Seconds(20)); });
  for (int i = 0; i < 500 && WaitsInProgress() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(WaitsInProgress(), 1);

  const std::string direct = DumpWaits();
  EXPECT_NE(direct.find("[replay] sample from table 'blocked_table'"), std::string::npos) << direct;

  ::raise(SIGUSR1);
  ASSERT_TRUE(Eventually(dump, "SIGUSR1: who waits on what")) << ReadAll(dump);
  const std::string text = ReadAll(dump);
  EXPECT_NE(text.find("[replay] sample from table 'blocked_table'"), std::string::npos) << text;
  // The rate limiter's explanation of why the sampler waits is in the dump.
  EXPECT_NE(text.find((*table)->Explain().substr(0, 20)), std::string::npos) << text;
  // No progress for a second while a call waits: the watchdog reports once.
  ASSERT_TRUE(Eventually(dump, "watchdog: no progress")) << ReadAll(dump);

  (*table)->Close();
  sampler.join();
  EXPECT_EQ(WaitsInProgress(), 0);
  EXPECT_NE(DumpWaits().find("0 wait(s) in progress"), std::string::npos);
  ::unsetenv("FLYWHEEL_HANG_DUMP");
}

}  // namespace
}  // namespace flywheel::obs
