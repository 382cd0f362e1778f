#include "flywheel/base/thread_pool.h"

#include <algorithm>
#include <atomic>

#include "absl/synchronization/blocking_counter.h"

namespace flywheel {

ThreadPool::ThreadPool(int num_threads) {
  threads_.reserve(std::max(1, num_threads));
  for (int i = 0; i < std::max(1, num_threads); ++i) {
    threads_.emplace_back([this] { WorkerLoop(); });
  }
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (auto& t : threads_) t.join();
}

void ThreadPool::Schedule(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
}

void ThreadPool::WorkerLoop() {
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

void ThreadPool::ParallelFor(int64_t begin, int64_t end,
                             const std::function<void(int64_t)>& fn) {
  if (end <= begin) return;
  const int64_t n = end - begin;
  const int64_t chunks = std::min<int64_t>(n, static_cast<int64_t>(threads_.size()) * 4);
  absl::BlockingCounter done(static_cast<int>(chunks));
  std::atomic<int64_t> next{begin};
  const int64_t step = (n + chunks - 1) / chunks;
  for (int64_t c = 0; c < chunks; ++c) {
    Schedule([&] {
      for (;;) {
        const int64_t lo = next.fetch_add(step);
        if (lo >= end) break;
        const int64_t hi = std::min(end, lo + step);
        for (int64_t i = lo; i < hi; ++i) fn(i);
      }
      done.DecrementCount();
    });
  }
  done.Wait();
}

}  // namespace flywheel
