#include "flywheel/base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "absl/synchronization/blocking_counter.h"

namespace flywheel {
namespace {

TEST(ThreadPoolTest, RunsEveryScheduledTask) {
  std::atomic<int> sum{0};
  {
    ThreadPool pool(3);
    absl::BlockingCounter done(1000);
    for (int i = 0; i < 1000; ++i) {
      pool.Schedule([&, i] {
        sum += i;
        done.DecrementCount();
      });
    }
    done.Wait();
  }
  EXPECT_EQ(sum.load(), 999 * 1000 / 2);
}

TEST(ThreadPoolTest, DestructorDrainsQueue) {
  std::atomic<int> ran{0};
  {
    ThreadPool pool(1);
    for (int i = 0; i < 100; ++i) pool.Schedule([&] { ran++; });
  }
  EXPECT_EQ(ran.load(), 100);
}

TEST(ThreadPoolTest, ParallelForVisitsEachIndexOnce) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(10007);
  pool.ParallelFor(0, 10007, [&](int64_t i) { hits[i]++; });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  pool.ParallelFor(5, 5, [&](int64_t) { FAIL(); });
}

}  // namespace
}  // namespace flywheel
