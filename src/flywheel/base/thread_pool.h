// A fixed-size pool of worker threads.
//
// Tasks run in FIFO order on `num_threads` threads owned by the pool; the
// destructor finishes every task already scheduled and joins the threads.
// ParallelFor splits an index range across the pool and waits for it.
//
// Thread-safety: all methods may be called concurrently from any thread,
// including from tasks (except ParallelFor, which must not be called from a
// task of the same pool: it would wait on itself).
#pragma once

#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include <deque>

namespace flywheel {

class ThreadPool {
 public:
  // REQUIRES: num_threads >= 1.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Schedule(std::function<void()> task);

  // Runs fn(i) for i in [begin, end), in chunks, on the pool; returns when all
  // calls have returned.
  void ParallelFor(int64_t begin, int64_t end, const std::function<void(int64_t)>& fn);

  int num_threads() const { return static_cast<int>(threads_.size()); }

 private:
  void WorkerLoop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace flywheel
