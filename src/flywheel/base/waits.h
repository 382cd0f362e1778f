// Hang diagnosis: who waits on what. A call that is about to block
// registers a BlockedWait (what it waits for, and why in plain words, taken
// when it started waiting); `DumpWaits()` lists every wait in progress with
// its age. InstallHangDiagnostics() makes SIGUSR1 write that dump to stderr
// (and to FLYWHEEL_HANG_DUMP=path when set), and starts a watchdog that
// writes it once when waits exist and no progress (NoteProgress) was made for
// `watchdog_seconds`. docs/observability.md, "Hangs".
//
// Thread-safety: everything here is thread-safe; BlockedWait only takes a
// leaf lock, so it may be created while holding any other lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace flywheel::obs {

class BlockedWait {
 public:
  // `kind`: "replay", "loader", "actor", ...; `what`: the call ("sample from
  // table 'x'"); `why`: the explanation at the start of the wait.
  BlockedWait(const char* kind, std::string what, std::string why);
  ~BlockedWait();
  BlockedWait(const BlockedWait&) = delete;
  BlockedWait& operator=(const BlockedWait&) = delete;

 private:
  int64_t id_;
};

// Every wait in progress, oldest first, as text:
//   "flywheel: 2 waits in progress (pid 123)\n[replay] sample from table 'x' (thread 456, 12.3 s)\n  <why>\n..."
std::string DumpWaits();
int64_t WaitsInProgress();

// Progress heartbeat: subsystems call it when work completes (a batch
// handed out, an item inserted or sampled, an env step).
void NoteProgress();
int64_t ProgressCount();

struct HangDiagnosticsOptions {
  // Dump when waits exist and nothing progressed for this long; 0 = no
  // watchdog. Default: FLYWHEEL_WATCHDOG_SECONDS, else 300.
  double watchdog_seconds = -1;
};
// Idempotent. SIGUSR1 → dump (the handler only writes to a pipe; a helper
// thread formats and writes the dump).
void InstallHangDiagnostics(const HangDiagnosticsOptions& options = {});

}  // namespace flywheel::obs
