// EnvPool: N environments stepped in parallel, with Gymnasium's vector-env
// semantics and EnvPool's (sail-sg/envpool) send/recv for asynchronous use.
// docs/envs.md specifies the behaviour; in short:
//
//   Sync mode (batch_size == num_envs): Step(actions) steps every env and
//     returns one row per env, in env order. The calling thread steps envs
//     itself while it waits, with num_threads - 1 worker threads.
//   Async mode (batch_size < num_envs): Send(actions, env_ids) queues steps
//     and returns at once; Recv() returns the first batch_size results to
//     come out (rows in the order envs were picked up, with their env ids).
//     num_threads worker threads step envs in the background.
//
// Autoreset: kNextStep (Gymnasium >= 1.0's default) or kSameStep (reset
// inside the terminal step; the terminal observation goes to final_obs).
// Truncation by max_episode_steps is reported apart from termination.
// Seeds: env i is seeded with seed + i, so in sync mode results do not
// depend on num_threads.
//
// Buffers: results are written by the stepping threads straight into
// pre-allocated batch buffers (a ring of num_buffers() buffers of
// batch_size rows, plus one of num_envs rows for Reset) and returned as
// views. The rows of a Recv()/Step() stay intact until the second
// Recv()/Step() after it returns (so the previous batch is still readable
// while you hold the current one); Reset() reuses every buffer; Reset()'s
// rows stay intact until the next Reset(). memory() keeps the buffers
// allocated beyond the pool's lifetime.
//
// Hand-offs cost no allocation, no mutex and no condition variable on the
// hot path: Send writes actions into per-env slots and publishes them with
// a release store. In sync mode each stepping thread owns a home range of
// envs (claimed in quarters with one fetch_add; idle threads help ranges
// whose thread is late or far behind), so an env stays on one core; in
// async mode env ids go into a ring
// whose chunks threads claim with one CAS (guided: a share of what is
// queued). Finished rows are counted per buffer with one atomic add per
// batch (sync) or chunk (async). Idle threads spin for options.spin, then
// sleep (internal/doorbell.h).
//
// Thread-safety: Reset/Send/Recv/Step/pending/Close must not be called
// concurrently (one driving thread at a time; the Python binding serialises
// them). The other accessors are safe from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "flywheel/base/status.h"
#include "flywheel/envs/env.h"
#include "flywheel/envs/space.h"

namespace flywheel::envs {

enum class AutoresetMode {
  // The step after a terminal or truncated step resets that env (its action
  // is ignored) and returns the first observation with reward 0,
  // terminated = truncated = false.
  kNextStep,
  // The terminal or truncated step itself resets the env: it returns the
  // new episode's first observation with that step's reward and flags, and
  // the terminal observation in final_obs (has_final_obs = true).
  kSameStep,
};

// "next_step" / "same_step" (Gymnasium's AutoresetMode values).
Result<AutoresetMode> ParseAutoresetMode(std::string_view name);
std::string_view AutoresetModeName(AutoresetMode mode);

struct EnvPoolOptions {
  // Number of envs; >= 1.
  int num_envs = 1;
  // Results per Recv(). 0 (default) or num_envs: sync mode. 1 .. num_envs-1:
  // async mode.
  int batch_size = 0;
  // Threads stepping envs, 1..1024. Sync mode: the calling thread plus
  // num_threads - 1 workers (num_threads = 1 steps everything inline). Async
  // mode: num_threads workers.
  int num_threads = 1;
  // Env i is seeded with seed + i (mod 2^64) until Reset() reseeds it.
  uint64_t seed = 0;
  AutoresetMode autoreset_mode = AutoresetMode::kNextStep;
  // Episode length limits (Gymnasium's TimeLimit): the step that makes an
  // episode this long reports truncated = true. Empty: the registered limit
  // (Make) or none (Create); one value: every env; num_envs values: one per
  // env. 0 = no limit. Each >= 0.
  std::vector<int64_t> max_episode_steps;
  // How long an idle thread (a worker without work, a caller waiting for
  // results) spins before it sleeps. Longer: lower latency when the next
  // batch comes soon, more CPU burnt. >= 0.
  absl::Duration spin = absl::Microseconds(20);

  // InvalidArgument naming the field.
  Status Validate() const;
  // batch_size with 0 resolved to num_envs.
  int resolved_batch_size() const { return batch_size == 0 ? num_envs : batch_size; }
};

// Rows of one buffer (see "Buffers" above).
struct BufferView {
  int rows = 0;
  void* obs = nullptr;  // rows x observation_space().row_bytes()
  double* reward = nullptr;
  bool* terminated = nullptr;
  bool* truncated = nullptr;
  int32_t* env_id = nullptr;
  // kSameStep only (else null): the terminal observation where
  // has_final_obs is true, zeros elsewhere.
  void* final_obs = nullptr;
  bool* has_final_obs = nullptr;
};

// A batch of results: `view` over buffer number `buffer` (num_buffers() for
// Reset's buffer).
struct Batch {
  int buffer = 0;
  BufferView view;
};

// Builds env `index` of a pool (Create); every env must have the same spaces.
using EnvFactory = std::function<Result<std::unique_ptr<Env>>(int index)>;

class EnvPool {
 public:
  // A pool of built-in envs (registry.h). `kwargs`: empty, one for every env,
  // or one per env (num_envs).
  static Result<std::unique_ptr<EnvPool>> Make(std::string_view env_id, EnvPoolOptions options,
                                               const std::vector<EnvKwargs>& kwargs = {});
  // A pool of envs built by `factory` (called num_envs times, in order, on
  // this thread).
  static Result<std::unique_ptr<EnvPool>> Create(const EnvFactory& factory, EnvPoolOptions options);

  virtual ~EnvPool() = default;

  virtual const Space& observation_space() const = 0;
  virtual const Space& action_space() const = 0;
  virtual int num_envs() const = 0;
  virtual int batch_size() const = 0;
  virtual int num_threads() const = 0;
  bool is_sync() const { return batch_size() == num_envs(); }
  virtual AutoresetMode autoreset_mode() const = 0;
  // The time limit of env `i` (0 = none).
  virtual int64_t max_episode_steps(int i) const = 0;
  // Doubles in one env's internal state (Env::state_size()).
  virtual int state_size() const = 0;

  // Buffers 0 .. num_buffers()-1 hold Recv()/Step() results; buffer
  // num_buffers() holds Reset()'s.
  virtual int num_buffers() const = 0;
  virtual BufferView buffer(int i) const = 0;
  // Owner of every buffer's memory.
  virtual std::shared_ptr<const void> memory() const = 0;

  // Resets every env and returns their first observations in env order
  // (buffer num_buffers(); reward 0, flags false). Steps still in flight are
  // waited for and their results dropped. `seeds`: empty (continue each
  // env's random stream), one (env i gets seeds[0] + i) or num_envs.
  // `states`: empty (draw initial states), state_size() values (every env
  // starts there) or num_envs * state_size() (one row per env).
  virtual Result<Batch> Reset(std::span<const uint64_t> seeds = {},
                              std::span<const double> states = {}) = 0;

  // Queues one step for each env in `env_ids` (empty = every env, in order)
  // with the matching row of `actions`: env_ids.size() rows of
  // action_space().row_bytes() bytes (int64 for Discrete). Returns at once;
  // nothing is queued on error. Errors: InvalidArgument for an id out of
  // range or repeated, a Discrete action out of range, or (sync mode) a send
  // that is not for every env; FailedPrecondition for an env whose previous
  // step has not been received, before the first Reset(), after Close().
  virtual Status Send(const void* actions, std::span<const int32_t> env_ids = {}) = 0;

  // The next batch_size results. FailedPrecondition (at once) when fewer
  // than batch_size steps are pending, so the wait could never end;
  // DeadlineExceeded when `timeout` passes first (nothing is lost: call
  // again). An env's failure is returned here, and the pool fails every
  // later call.
  virtual Result<Batch> Recv(absl::Duration timeout = absl::InfiniteDuration()) = 0;

  // Send(actions, env_ids) then Recv().
  virtual Result<Batch> Step(const void* actions, std::span<const int32_t> env_ids = {}) = 0;

  // Steps sent and not yet received.
  virtual int64_t pending() const = 0;

  // Stops and joins the worker threads; later calls fail with
  // FailedPrecondition. Idempotent; the destructor calls it.
  virtual void Close() = 0;
};

}  // namespace flywheel::envs
