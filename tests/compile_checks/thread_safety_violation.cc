// Must NOT pass the thread-safety check: a guarded member touched without
// its mutex (tests/compile_checks/thread_safety.py plants this file).
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

class Counter {
 public:
  void Add() { n_++; }  // the violation: mu_ is not held
  int Get() {
    absl::MutexLock lock(&mu_);
    return n_;
  }

 private:
  absl::Mutex mu_;
  int n_ ABSL_GUARDED_BY(mu_) = 0;
};

int Use() {
  Counter c;
  c.Add();
  return c.Get();
}
