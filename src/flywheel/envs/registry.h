// The built-in environments by Gymnasium id ("CartPole-v1", ...), with the
// time limit Gymnasium registers for each (its TimeLimit wrapper's
// max_episode_steps), for EnvPool::Make and flywheel.envs.make.
//
// Thread-safety: the registry is immutable after its first use.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "flywheel/base/status.h"
#include "flywheel/envs/env.h"

namespace flywheel::envs {

struct EnvSpec {
  std::string id;                 // e.g. "CartPole-v1"
  int64_t max_episode_steps = 0;  // Gymnasium's registered limit; 0 = none
  std::string kwargs;             // constructor arguments with defaults, for docs and errors
  std::function<Result<std::unique_ptr<Env>>(const EnvKwargs&)> make;
};

// Every built-in environment, in a fixed order.
const std::vector<EnvSpec>& RegisteredEnvs();

// The spec of `id`; InvalidArgument listing the known ids when unknown.
Result<const EnvSpec*> FindEnv(std::string_view id);

// One env of type `id` with `kwargs` (errors as FindEnv and the env's
// constructor).
Result<std::unique_ptr<Env>> MakeEnv(std::string_view id, const EnvKwargs& kwargs = {});

}  // namespace flywheel::envs
