// The run configuration of `flywheel run CONFIG.toml` (docs/rl.md, "Run
// configuration"): what the launcher, the replay/weight server and the C++
// actors read. The [learner] table belongs to the Python learner
// (python/flywheel/rl/learner.py), which checks it; here only its algorithm
// and batch size are read, to size the replay table.
//
//   FW_ASSIGN_OR_RETURN(rl::RunConfig c, rl::LoadRunConfig("examples/cartpole_ppo.toml"));
//
// Every error names file:line:column (base/toml.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/rl/mlp_policy.h"

namespace flywheel::rl {

struct RunConfig {
  std::string path;  // the config file

  // [run]
  std::string name;           // default: the file name without .toml
  std::string run_dir;        // default: runs/<name>
  uint64_t seed = 0;
  std::string host = "127.0.0.1";  // where the server listens (loopback by default)
  int port = 0;                    // 0: any free port (single machine only)
  int64_t progress_interval_ms = 5000;

  // [env]
  std::string env_id;
  int num_envs = 8;     // per actor
  int num_threads = 1;  // per actor's EnvPool
  int64_t max_episode_steps = -1;  // -1: the env's registered limit

  // [actor]
  int actors = 1;
  int64_t unroll_length = 128;
  // true: after each unroll an actor waits for weights newer than the ones
  // it acted with (PPO); false: it picks up new weights between unrolls
  // without waiting (IMPALA).
  bool on_policy = true;

  // [policy]
  std::vector<int64_t> hidden = {64, 64};
  Activation activation = Activation::kTanh;

  // [learner] (the parts the launcher needs)
  std::string algorithm;  // "ppo" or "impala"
  int64_t batch_unrolls = 1;

  // [replay]
  std::string table = "unrolls";
  int64_t queue_size = 0;  // 0: 2 * max(actors, batch_unrolls)

  int64_t resolved_queue_size() const;
  std::string resolved_run_dir() const;
};

// The model name actors fetch and the learner publishes.
inline constexpr const char* kPolicyModel = "policy";

Result<RunConfig> ParseRunConfig(std::string_view text, const std::string& source);
Result<RunConfig> LoadRunConfig(const std::string& path);

}  // namespace flywheel::rl
