// Doorbell: "wait until a condition holds" for EnvPool's hand-offs, cheap
// on both sides when nobody sleeps. The waiter re-checks the condition for
// a bounded spin, then sleeps on a condition variable; the ringer pays a
// fence and one load unless a waiter sleeps, and only then takes the lock.
//
// The condition is any predicate over atomics that other threads make true
// with a store followed by Ring(). A seq_cst fence on each side (after the
// waiter announces itself, after the ringer's store) guarantees that either
// the waiter sees the store or the ringer sees the waiter.
//
// Thread-safety: any number of waiters and ringers.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace flywheel::internal_envs {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

class Doorbell {
 public:
  // Returns true once pred() holds, false if `deadline` passed first. Spins
  // (re-checking pred) for up to `spin` before sleeping: with pauses only for
  // the first kPureSpin, which catches quick hand-offs, then yielding the
  // CPU every few dozen pauses. On a machine with fewer free cores than
  // runnable threads (a shared 2-vCPU VM) the thread we wait for may need
  // this CPU: with the other core busy, spinning without yields made async
  // CartPole 3-4x slower there (bench/envs_bench.cc); a yield costs ~1.6 us
  // in that VM, too long to pay from the start.
  template <typename Pred>
  bool Wait(Pred pred, absl::Duration spin, absl::Time deadline) {
    if (pred()) return true;
    if (spin > absl::ZeroDuration()) {
      using Clock = std::chrono::steady_clock;
      const auto start = Clock::now();
      const auto spin_until = start + absl::ToChronoNanoseconds(spin);
      const auto yield_from = start + kPureSpin;
      for (unsigned i = 1;; ++i) {
        for (int k = 0; k < 4; ++k) CpuRelax();
        if (pred()) return true;
        if (i % 8 == 0) {
          const auto now = Clock::now();
          if (now >= spin_until) break;
          if (now >= yield_from) std::this_thread::yield();
        }
      }
    }
    absl::MutexLock lock(&mu_);
    sleepers_.fetch_add(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    bool ok = pred();
    while (!ok) {
      const bool timed_out = cv_.WaitWithDeadline(&mu_, deadline);
      ok = pred();
      if (timed_out) break;
    }
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    return ok;
  }

  // Wakes the waiters. Call after the store that makes their condition true.
  void Ring() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_relaxed) > 0) {
      absl::MutexLock lock(&mu_);
      cv_.SignalAll();
    }
  }

 private:
  static constexpr std::chrono::nanoseconds kPureSpin{3000};

  std::atomic<int> sleepers_{0};
  absl::Mutex mu_;
  absl::CondVar cv_;
};

}  // namespace flywheel::internal_envs
