// The C++ actor of `flywheel run` (docs/rl.md, "Actors"): steps an EnvPool
// with an MLP policy fetched from the weight store and streams unrolls into
// a replay table, never waiting on Python.
//
// One replay item per unroll of T steps over the pool's E envs; every
// column has T steps:
//   obs          float32[E, obs_dim]  the observation acted on
//   action       int64[E] (Discrete, 0-based) or float32[E, act_dim] (Box,
//                the unclipped sample; the env gets it clipped to its bounds)
//   logprob      float32[E]           behaviour log pi(action | obs)
//   reward       float32[E]
//   terminated   bool[E], truncated bool[E]
//   next_obs     float32[E, obs_dim]  the observation the step led to: the
//                                     terminal one where the episode ended
//                                     (for bootstrapping a truncation)
//   episode_return float32[E]         the finished episode's return where it
//                                     ended at this step, else NaN
//   version      int64                the policy version acted with
// The pool autoresets in the same step (kSameStep): after a step that ends
// an episode, the next step's obs is the next episode's first observation.
// Unrolls of one actor follow each other: item k+1's first obs is item k's
// last next_obs unless that step ended an episode.
//
// On-policy mode (PPO): after each unroll the actor flushes it and waits
// for weights newer than the ones it acted with. Async mode (IMPALA): it
// takes newer weights between unrolls without waiting.
//
// Thread-safety: RunActor runs on the calling thread; `stop` may be set
// from any thread (a signal handler included) and is checked every step and
// every wait slice.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/time/time.h"
#include "flywheel/base/status.h"
#include "flywheel/rl/mlp_policy.h"

namespace flywheel::rl {

struct ActorOptions {
  std::string address;  // replay + weight server
  std::string table = "unrolls";
  std::string model = "policy";
  std::string env_id;
  int num_envs = 8;
  int num_threads = 1;
  int64_t max_episode_steps = -1;  // -1: the env's registered limit
  uint64_t env_seed = 0;           // env j gets env_seed + j
  uint64_t policy_seed = 0;        // action sampling
  int64_t unroll_length = 128;
  Activation activation = Activation::kTanh;
  bool on_policy = true;
  int64_t max_unrolls = 0;  // 0: until stopped or the table closes
  // How long to keep retrying while the server is not reachable (at start,
  // or while it restarts) before giving up.
  absl::Duration connect_timeout = absl::Seconds(120);
  // Called every `stats_interval` and at the end with the current stats.
  absl::Duration stats_interval = absl::Seconds(2);
};

struct ActorStats {
  int64_t env_steps = 0;
  int64_t unrolls = 0;
  int64_t episodes = 0;
  double last_return = 0;   // of the latest finished episode
  int64_t policy_version = 0;
  int64_t weight_updates = 0;
  // Where the time went, seconds.
  double step_s = 0;     // EnvPool steps
  double act_s = 0;      // policy inference
  double write_s = 0;    // appending steps, sending items (incl. replay back-pressure)
  double wait_weights_s = 0;  // waiting for first or newer weights
  double elapsed_s = 0;
};

// Runs until `stop` is set, `max_unrolls` are sent, or the table is closed
// (all three return OK). Errors: bad options or env, weights that do not
// fit the env's spaces (naming both), a server unreachable for
// `connect_timeout`, a replay or weight error.
Status RunActor(const ActorOptions& options, const std::atomic<bool>& stop,
                const std::function<void(const ActorStats&)>& on_stats = nullptr);

}  // namespace flywheel::rl
